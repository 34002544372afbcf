#!/usr/bin/env python3
"""Drives the web console in a real browser (Debian's chromium + chromedriver, Selenium).

Run by tests/browser/run.sh, which starts `lambdafusion serve` and sets:

  CONSOLE_URL          the page (e.g. http://127.0.0.1:PORT/); the API is under the same base
  CONSOLE_DATA_DIR     the server's working directory: the test writes its CSV tables there
  CONSOLE_OUT          where screenshots go (default target/browser)
  CONSOLE_TOKEN_URL    optional: the page of a second server started with --token ...
  CONSOLE_TOKEN        ... and that token
  CONSOLE_SCREENSHOT_DOCS=1   also write docs/console.png (the README shows it)

What it checks, through the page only (the API is called directly only to learn what the
page must show):
  1. tables are created by typing CREATE EXTERNAL TABLE and pressing Ctrl+Enter, and the
     catalog lists them with their columns (a click inserts a name into the editor);
  2. a bad query shows exactly the API's error message;
  3. a long query shows live progress (a running stage box) and is cancelled with the
     Cancel button; the page shows the cancelled state;
  4. a GROUP BY / ORDER BY over a join runs with the Run button: the stage graph has a box
     per stage (at least 2) with the API's task counts, the result table's cells are
     exactly the expected rows, the download links give CSV, Parquet and Arrow;
  5. the history lists the queries newest first, and a click loads a query back (or, on a
     server without GET /v1/queries, the panel says history is unavailable);
  6. with a token server: the page asks for the token on 401, then runs a query and
     downloads a result through the Authorization header;
  7. screenshots of the finished query.
"""

import csv
import io
import json
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

ROOT = pathlib.Path(__file__).resolve().parents[2]
URL = os.environ["CONSOLE_URL"]
if not URL.endswith("/"):
    URL += "/"
DATA_DIR = pathlib.Path(os.environ["CONSOLE_DATA_DIR"]).resolve()
OUT = pathlib.Path(os.environ.get("CONSOLE_OUT", ROOT / "target" / "browser"))
TOKEN_URL = os.environ.get("CONSOLE_TOKEN_URL")
TOKEN = os.environ.get("CONSOLE_TOKEN")
TIMEOUT = float(os.environ.get("CONSOLE_TIMEOUT", "30"))

CITIES = {"Paris": "North", "Lille": "North", "Brest": "West", "Lyon": "South", "Nice": "South", "Metz": "East"}
SLOW_SQL = "SELECT sum(a.value * b.value) AS s FROM generate_series(1, 100) a, generate_series(1, 1000000000) b"
BAD_SQL = "SELECT nope FROM sales"
MAIN_SQL = (
    "SELECT c.region, count(*) AS orders, sum(s.amount) AS total\n"
    "FROM sales s JOIN cities c ON s.city = c.city\n"
    "GROUP BY c.region\n"
    "ORDER BY c.region"
)


def step(text):
    print(f"[{time.monotonic() - START:6.1f}s] {text}", flush=True)


START = time.monotonic()


# ------------------------------------------------------------------ data and API


def write_data():
    """Four CSV files of sales (several tasks per stage) and one of cities; the expected
    result of MAIN_SQL computed here, independently of the engine."""
    sales = DATA_DIR / "sales"
    sales.mkdir(parents=True, exist_ok=True)
    names = sorted(CITIES) + ["Atlantis"]  # Atlantis has no region: dropped by the join
    totals = {}
    for f in range(4):
        with open(sales / f"part-{f}.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["order_id", "city", "amount"])
            for i in range(150):
                order = f * 1000 + i
                city = names[(order * 7 + i) % len(names)]
                amount = (order * 37) % 101
                w.writerow([order, city, amount])
                if city in CITIES:
                    region = CITIES[city]
                    n, t = totals.get(region, (0, 0))
                    totals[region] = (n + 1, t + amount)
    with open(DATA_DIR / "cities.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["city", "region"])
        for city, region in CITIES.items():
            w.writerow([city, region])
    return [[region, str(n), str(t)] for region, (n, t) in sorted(totals.items())]


def api(method, path, body=None, base=URL, token=None):
    """Calls the API directly: (status, parsed JSON or raw bytes)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(urllib.parse.urljoin(base, path), data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


# ------------------------------------------------------------------ browser


def browser(download_dir, profile_dir):
    options = Options()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--window-size=1600,1100", "--force-device-scale-factor=1",
        f"--user-data-dir={profile_dir}",
    ):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {
        "download.default_directory": str(download_dir),
        "download.prompt_for_download": False,
    })
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(TIMEOUT)
    return driver


class Page:
    """The console in one browser tab."""

    def __init__(self, driver, url):
        self.d = driver
        self.url = url

    def load(self):
        self.d.get(self.url)
        self.wait(lambda: self.attr("catalog", "data-state") in ("loaded", "error"), "the catalog to load")

    def el(self, id_):
        return self.d.find_element(By.ID, id_)

    def attr(self, id_, name):
        return self.el(id_).get_attribute(name)

    def text(self, id_):
        """The exact text content of an element (whitespace and newlines kept)."""
        return self.d.execute_script(
            "const e = document.getElementById(arguments[0]); return e ? e.textContent : null", id_)

    def wait(self, predicate, what, timeout=TIMEOUT):
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.05).until(lambda _d: predicate())
        except TimeoutException:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; state={self.text('state')!r}, "
                                 f"error={self.text('error-message')!r}") from None

    def type_sql(self, sql):
        box = self.el("sql")
        box.click()
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.DELETE)
        box.send_keys(sql)
        assert box.get_property("value") == sql, box.get_property("value")

    def state(self):
        return self.text("state")

    def wait_state(self, *states, timeout=TIMEOUT):
        self.wait(lambda: self.state() in states, f"state in {states}", timeout)
        return self.state()

    def run_with_button(self, sql):
        self.type_sql(sql)
        self.el("run").click()

    def run_with_keys(self, sql):
        self.type_sql(sql)
        self.el("sql").send_keys(Keys.CONTROL, Keys.ENTER)

    def query_id(self):
        return self.text("query-id")

    def result_cells(self):
        return self.d.execute_script("""
            const t = document.getElementById('result-table');
            if (!t) return null;
            // Leave out the row numbers and the empty filler column.
            const data = (row) => [...row.cells].filter(c => !c.matches('.rownum, .fill')).map(c => c.textContent);
            const head = data(t.tHead.rows[0]);
            const rows = [...t.tBodies[0].rows].map(data);
            return {head, rows};
        """)

    def stage_boxes(self):
        return self.d.execute_script("""
            return [...document.querySelectorAll('#graph svg g.stage')].map(g => ({
                stage: Number(g.dataset.stage), state: g.dataset.state,
                tasks: g.querySelector('.stage-tasks').textContent,
                rows: g.querySelector('.stage-rows').textContent,
            }));
        """)

    def edges(self):
        return self.d.execute_script("""
            return [...document.querySelectorAll('#graph svg g.edge')].map(g =>
                [Number(g.dataset.from), Number(g.dataset.to)]);
        """)


def screenshot(driver, name):
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    driver.save_screenshot(str(path))
    return path


# ------------------------------------------------------------------ the test


def create_tables(page):
    step("create tables (typed, Ctrl+Enter)")
    page.run_with_keys(
        f"CREATE EXTERNAL TABLE sales STORED AS CSV LOCATION '{DATA_DIR / 'sales'}/' "
        "OPTIONS ('format.has_header' 'true')")
    page.wait_state("succeeded")
    page.run_with_keys(
        f"CREATE EXTERNAL TABLE cities STORED AS CSV LOCATION '{DATA_DIR / 'cities.csv'}' "
        "OPTIONS ('format.has_header' 'true')")
    page.wait_state("succeeded")
    assert page.el("error").get_attribute("hidden") is not None, page.text("error-message")

    step("the catalog lists them with their columns")
    catalog = lambda: page.d.execute_script("""
        return Object.fromEntries([...document.querySelectorAll('#catalog details')].map(d =>
            [d.dataset.table, [...d.querySelectorAll('[data-column]')].map(b => b.dataset.column)]));
    """)
    page.wait(lambda: {"sales", "cities"} <= set(catalog()), "sales and cities in the catalog")
    cat = catalog()
    assert cat["sales"] == ["order_id", "city", "amount"], cat
    assert cat["cities"] == ["city", "region"], cat
    status, tables = api("GET", "v1/tables")
    assert status == 200 and {t["name"] for t in tables["tables"]} == set(cat), tables

    # A click on a name inserts it at the cursor.
    page.type_sql("SELECT * FROM ")
    page.d.find_element(By.CSS_SELECTOR, '#catalog details[data-table="sales"] summary .name').click()
    assert page.el("sql").get_property("value") == "SELECT * FROM sales", page.el("sql").get_property("value")


def sql_error(page):
    step("a bad query shows the API's message")
    status, body = api("POST", "v1/queries", {"sql": BAD_SQL})
    assert status == 400, (status, body)
    expected = body["error"]["message"]
    page.run_with_button(BAD_SQL)
    page.wait(lambda: page.el("error").is_displayed(), "the error box")
    assert page.text("error-message") == expected, (page.text("error-message"), expected)
    assert page.text("error-title") == "Error 400", page.text("error-title")
    assert page.state() == "error", page.state()


def cancel_long_query(page):
    step("a long query shows live progress, then Cancel")
    page.run_with_button(SLOW_SQL)
    page.wait(lambda: any(b["state"] == "running" for b in page.stage_boxes()), "a running stage box")
    assert page.state() == "running", page.state()
    cancel = page.el("cancel")
    assert cancel.is_enabled()
    qid = page.query_id()
    # Progress is live: the elapsed time moves while it runs.
    first = page.text("elapsed")
    page.wait(lambda: page.text("elapsed") != first, "the elapsed time to move", 5)
    cancel.click()
    page.wait_state("cancelled", timeout=20)
    status, body = api("GET", f"v1/queries/{qid}")
    assert status == 200 and body["state"] == "cancelled", body
    assert page.text("error-message") == body["error"], (page.text("error-message"), body["error"])
    assert all(b["state"] in ("cancelled", "complete") for b in page.stage_boxes()), page.stage_boxes()
    assert not page.el("cancel").is_enabled()
    return qid


def main_query(page, expected):
    step("a GROUP BY / ORDER BY over a join, with the Run button")
    page.run_with_button(MAIN_SQL)
    page.wait_state("succeeded")
    page.wait(lambda: page.attr("result", "data-state") == "loaded", "the result table")
    qid = page.query_id()

    cells = page.result_cells()
    assert cells["head"] == ["region", "orders", "total"], cells
    assert cells["rows"] == expected, (cells["rows"], expected)
    assert page.text("result-count") == f"{len(expected)} rows", page.text("result-count")

    step("the stage graph matches the API's status")
    status, job = api("GET", f"v1/queries/{qid}")
    assert status == 200 and job["state"] == "succeeded", job
    boxes = page.stage_boxes()
    assert len(boxes) >= 2, f"expected at least 2 stages, got {boxes}"
    assert len(boxes) == len(job["stages"]), (boxes, job["stages"])
    for box, stage in zip(sorted(boxes, key=lambda b: b["stage"]), job["stages"]):
        assert box["stage"] == stage["stage"] and box["state"] == "complete", (box, stage)
        assert box["tasks"] == f"{stage['tasks_done']}/{stage['tasks']}", (box, stage)
        assert box["rows"] == f"{stage['rows']:,}", (box, stage)
    want_edges = sorted([int(i.rsplit(" ", 1)[1]), s["stage"]] for s in job["stages"] for i in s["inputs"])
    assert sorted(page.edges()) == want_edges, (page.edges(), want_edges)
    assert page.text("tasks") == f"{job['tasks_done']} / {job['tasks']}", page.text("tasks")
    assert page.text("cost").startswith("$"), page.text("cost")

    step("downloads: CSV, Parquet, Arrow")
    csv_url = page.el("download-csv").get_property("href")
    assert csv_url.endswith(f"v1/queries/{qid}/result?format=csv"), csv_url
    with urllib.request.urlopen(csv_url, timeout=30) as r:
        rows = list(csv.reader(io.StringIO(r.read().decode())))
    assert rows == [["region", "orders", "total"]] + expected, rows
    with urllib.request.urlopen(page.el("download-parquet").get_property("href"), timeout=30) as r:
        body = r.read()
    assert body[:4] == b"PAR1" and body[-4:] == b"PAR1", body[:16]
    with urllib.request.urlopen(page.el("download-arrow").get_property("href"), timeout=30) as r:
        body = r.read()
    assert body[:4] == b"\xff\xff\xff\xff", body[:16]  # IPC stream: continuation marker
    return qid


def history(page, main_id, cancelled_id):
    status, body = api("GET", "v1/queries?limit=5")
    if status in (404, 405):
        step("history: this server has no GET /v1/queries; the panel must say so")
        page.wait(lambda: page.attr("history", "data-state") == "unavailable", "the history to be unavailable")
        assert "not available" in page.text("history-note"), page.text("history-note")
        return False
    step("history: newest first, a click loads a query back")
    assert status == 200, (status, body)
    page.wait(lambda: page.d.execute_script(
        "const li = document.querySelector('#history li'); return li && li.dataset.id") == main_id,
        "the last query at the top of the history")
    ids = page.d.execute_script("return [...document.querySelectorAll('#history li')].map(li => li.dataset.id)")
    assert ids[: len(body["queries"])] == [q["id"] for q in body["queries"]], (ids, body)
    page.d.find_element(By.CSS_SELECTOR, f'#history li[data-id="{cancelled_id}"] button').click()
    page.wait_state("cancelled")
    assert page.el("sql").get_property("value") == SLOW_SQL
    page.d.find_element(By.CSS_SELECTOR, f'#history li[data-id="{main_id}"] button').click()
    page.wait_state("succeeded")
    page.wait(lambda: page.attr("result", "data-state") == "loaded", "the result of the history entry")
    assert page.el("sql").get_property("value") == MAIN_SQL
    return True


def with_token(driver, download_dir):
    step("token server: the page loads without the token, asks for it, then works with it")
    # The page and its assets hold no data: they must load without the token (a browser
    # cannot send a header when it opens a URL); every API call then carries it.
    for asset in ("", "console.js", "console.css"):
        status, body = api("GET", asset, base=TOKEN_URL)
        assert status == 200, (f"GET {TOKEN_URL}{asset} without the token answered {status}: the console's "
                               f"page and assets must be served without it (only the API needs it): {body!r:.200}")
    status, body = api("GET", "v1/tables", base=TOKEN_URL)
    assert status == 401, (status, body)
    page = Page(driver, TOKEN_URL)
    page.load()
    page.wait(lambda: page.el("auth").is_displayed(), "the token form")
    assert page.attr("catalog", "data-state") == "error"
    page.el("token").send_keys(TOKEN)
    page.el("token-save").click()
    page.wait(lambda: page.attr("catalog", "data-state") == "loaded", "the catalog with the token")
    assert not page.el("auth").is_displayed()
    page.run_with_button("SELECT 41 + 1 AS answer, 'ok' AS word")
    page.wait_state("succeeded")
    page.wait(lambda: page.attr("result", "data-state") == "loaded", "the result with the token")
    cells = page.result_cells()
    assert cells == {"head": ["answer", "word"], "rows": [["42", "ok"]]}, cells
    # A plain link cannot carry the header: the page fetches with it and saves a blob.
    qid = page.query_id()
    page.el("download-csv").click()
    target = download_dir / f"{qid}.csv"
    page.wait(lambda: target.exists() and target.read_text() == "answer,word\n42,ok\n", f"the download {target}", 15)
    sessionStorage = driver.execute_script("return sessionStorage.getItem('lambdafusion.token')")
    assert sessionStorage == TOKEN


def main():
    # run.sh's time limit sends SIGTERM: end through `finally`, which quits the browser.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("browser test: stopped (time limit)"))
    expected = write_data()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="lf-browser-test-"))
    downloads = scratch / "downloads"
    downloads.mkdir()
    driver = browser(downloads, scratch / "profile")
    ok = False
    try:
        step(f"open {URL}")
        page = Page(driver, URL)
        page.load()
        if page.attr("catalog", "data-state") != "loaded":
            raise AssertionError("the catalog did not load: " + page.text("catalog"))
        create_tables(page)
        sql_error(page)
        cancelled = cancel_long_query(page)
        main_id = main_query(page, expected)
        has_history = history(page, main_id, cancelled)
        step("screenshot")
        page.d.execute_script(
            "document.activeElement.blur();"
            "document.querySelector('#catalog details[data-table=\"sales\"]').open = true;")
        shot = screenshot(driver, "console.png")
        if os.environ.get("CONSOLE_SCREENSHOT_DOCS") == "1":
            docs = ROOT / "docs" / "console.png"
            docs.parent.mkdir(exist_ok=True)
            shutil.copyfile(shot, docs)
            step(f"wrote {docs}")
        if TOKEN_URL:
            with_token(driver, downloads)
        js_errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"
                     and "Failed to load resource" not in e["message"]]
        assert not js_errors, js_errors
        ok = True
        step(f"ok{'' if has_history else ' (history endpoint missing on this server)'}; screenshot {shot}")
    finally:
        if not ok:
            try:
                print("failure screenshot:", screenshot(driver, "failure.png"), file=sys.stderr)
            except Exception as e:  # the browser itself may be gone
                print("no failure screenshot:", e, file=sys.stderr)
        driver.quit()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
