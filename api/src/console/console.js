// The lambdafusion web console: an SQL editor, the live stage graph of the running query,
// its result, the query history and the catalog, over the HTTP API the page is served
// with (`GET /` of the same router). Plain JavaScript, no dependencies, no build step.
// Every API URL is relative ("v1/queries"), so the page works behind a path prefix.
"use strict";

(() => {
  /** Rows of a result shown in the table (the downloads carry every row). */
  const MAX_ROWS = 1000;
  /** Seconds a status request waits for the end of the query (live progress cadence). */
  const POLL_WAIT_SECS = 1;
  /** Queries per history page. */
  const HISTORY_PAGE = 25;
  /** sessionStorage key of the bearer token. */
  const TOKEN_KEY = "lambdafusion.token";

  const $ = (id) => document.getElementById(id);
  const ui = {
    sql: $("sql"), run: $("run"), cancel: $("cancel"),
    state: $("state"), elapsed: $("elapsed"), tasks: $("tasks"), cost: $("cost"), queryId: $("query-id"),
    error: $("error"), errorTitle: $("error-title"), errorMessage: $("error-message"),
    graph: $("graph"), result: $("result"), resultCount: $("result-count"), downloads: $("downloads"),
    catalog: $("catalog"), catalogRefresh: $("catalog-refresh"),
    history: $("history"), historyNote: $("history-note"), historyMore: $("history-more"),
    historyRefresh: $("history-refresh"),
    auth: $("auth"), token: $("token"), signout: $("signout"), endpoint: $("endpoint"),
  };

  // ---------------------------------------------------------------- API access

  /** An error answered by the API (or the network): its HTTP status and its message. */
  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // `lambdafusion console` opens the page as .../#token=SECRET: keep the token for this
  // tab and take it out of the address bar.
  (function tokenFromFragment() {
    const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (!match) return;
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  })();

  const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

  function headers(extra) {
    const h = Object.assign({}, extra);
    if (token()) h.Authorization = "Bearer " + token();
    return h;
  }

  /** The message of an error response, worded as the API words it. */
  async function errorOf(response) {
    const text = await response.text().catch(() => "");
    let message = text;
    try {
      const body = JSON.parse(text);
      // The API: {"error": {"status", "message"}}; API Gateway / Lambda URLs: {"message"}.
      message = (body && body.error && body.error.message) || body.message || body.Message || text;
    } catch (_) { /* not JSON: the text itself */ }
    if (!message) message = response.statusText || "request failed";
    if (response.status === 401) showAuth(true);
    return new ApiError(response.status, message);
  }

  /** Sends a request to the API; answers the Response, or throws an ApiError. */
  async function request(method, path, { body, signal } = {}) {
    const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }), signal };
    if (body !== undefined) init.body = JSON.stringify(body);
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new ApiError(0, "cannot reach the API: " + e.message);
    }
    if (!response.ok) throw await errorOf(response);
    return response;
  }

  const getJson = async (path, opts) => (await request("GET", path, opts)).json();

  // ---------------------------------------------------------------- formatting

  const nf = new Intl.NumberFormat("en-US");
  const fmtInt = (n) => (n === undefined || n === null ? "–" : nf.format(n));

  function fmtBytes(n) {
    if (!n) return "0 B";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
  }

  function fmtMs(ms) {
    if (ms === undefined || ms === null) return "–";
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
    const m = Math.floor(ms / 60000);
    return m + " min " + Math.round((ms % 60000) / 1000) + " s";
  }

  function fmtCost(usd) {
    if (usd === undefined || usd === null) return "–";
    if (usd === 0) return "$0";
    return "$" + (usd < 0.01 ? usd.toPrecision(2) : usd.toFixed(4));
  }

  function fmtWhen(ms) {
    const d = new Date(ms);
    const today = new Date();
    const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
    return d.toDateString() === today.toDateString() ? time : d.toLocaleDateString() + " " + time;
  }

  /** Creates an element with attributes and children (strings become text). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) node.setAttribute(k, v);
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  // ---------------------------------------------------------------- errors

  function showError(e, title) {
    if (e && e.name === "AbortError") return;
    const status = e instanceof ApiError ? e.status : undefined;
    ui.error.hidden = false;
    ui.error.dataset.kind = "error";
    ui.errorTitle.textContent = title || (status ? "Error " + status : "Error");
    ui.errorMessage.textContent = e && e.message !== undefined ? e.message : String(e);
  }

  function showNotice(title, message) {
    ui.error.hidden = false;
    ui.error.dataset.kind = "notice";
    ui.errorTitle.textContent = title;
    ui.errorMessage.textContent = message;
  }

  function clearError() {
    ui.error.hidden = true;
    ui.errorTitle.textContent = "";
    ui.errorMessage.textContent = "";
  }

  // ---------------------------------------------------------------- auth

  function showAuth(needed) {
    ui.auth.hidden = !needed;
    ui.signout.hidden = needed || !token();
    if (needed) ui.token.focus();
  }

  ui.auth.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, ui.token.value.trim());
    ui.token.value = "";
    showAuth(false);
    clearError();
    loadCatalog();
    loadHistory();
  });

  ui.signout.addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    ui.signout.hidden = true;
    loadCatalog();
    loadHistory();
  });

  // ---------------------------------------------------------------- the current query

  /**
   * What the page shows: one query. `generation` changes whenever another query is
   * shown, which ends the polling of the previous one.
   */
  const view = { id: null, status: null, generation: 0, receivedAt: 0, controller: null, timer: null };

  function resetView(id) {
    view.generation++;
    if (view.controller) view.controller.abort();
    view.controller = new AbortController();
    view.id = id;
    view.status = null;
    clearInterval(view.timer);
    view.timer = null;
    clearError();
    ui.graph.replaceChildren(el("p", { class: "muted" }, id ? "Waiting for the stage graph…" : "Run a query to see its stage graph."));
    ui.graph.dataset.stages = "0";
    ui.result.replaceChildren(el("p", { class: "muted" }, "No result yet."));
    ui.result.dataset.state = "empty";
    ui.resultCount.textContent = "";
    ui.downloads.hidden = true;
    ui.queryId.textContent = id || "–";
    ui.queryId.title = id || "";
    ui.elapsed.textContent = "–";
    ui.tasks.textContent = "–";
    ui.cost.textContent = "–";
    markActiveHistory();
    return view.generation;
  }

  function setState(state) {
    ui.state.textContent = state;
    ui.state.dataset.state = state;
    const running = state === "running" || state === "submitting";
    ui.cancel.disabled = !(running && view.id);
  }

  /** The SQL to run: the selection if there is one, else the whole editor. */
  function sqlToRun() {
    const { selectionStart: a, selectionEnd: b, value } = ui.sql;
    const selected = a !== b ? value.slice(a, b) : "";
    return (selected.trim() ? selected : value).trim();
  }

  async function run() {
    const sql = sqlToRun();
    if (!sql) {
      ui.sql.focus();
      return;
    }
    const generation = resetView(null);
    setState("submitting");
    let submission;
    try {
      const response = await request("POST", "v1/queries", { body: { sql }, signal: view.controller.signal });
      submission = await response.json();
    } catch (e) {
      if (generation !== view.generation) return;
      setState("error");
      showError(e);
      return;
    }
    if (generation !== view.generation) return;
    view.id = submission.id;
    ui.queryId.textContent = submission.id;
    ui.queryId.title = submission.id;
    setState(submission.state);
    follow(submission.id, generation);
    loadHistory();
  }

  /** Shows a query (from the history): its SQL, status, graph and result. */
  function openQuery(id, sql) {
    const generation = resetView(id);
    if (sql !== undefined) ui.sql.value = sql;
    setState("loading");
    follow(id, generation);
  }

  /** Polls the status of query `id` until it ends, drawing its progress. */
  async function follow(id, generation) {
    view.timer = setInterval(tick, 100);
    let wait = 0, failures = 0;
    for (;;) {
      let status;
      try {
        status = await getJson(`v1/queries/${encodeURIComponent(id)}?wait=${wait}`, { signal: view.controller.signal });
        failures = 0;
      } catch (e) {
        if (generation !== view.generation) return;
        if (e instanceof ApiError && (e.status === 503 || e.status === 0) && ++failures <= 10) {
          // Overloaded or a network blip: try again shortly (the query runs on regardless).
          await new Promise((r) => setTimeout(r, 1000));
          if (generation !== view.generation) return;
          continue;
        }
        clearInterval(view.timer);
        setState("error");
        showError(e);
        return;
      }
      if (generation !== view.generation) return;
      view.status = status;
      view.receivedAt = performance.now();
      renderStatus(status);
      if (status.state !== "running") break;
      wait = POLL_WAIT_SECS;
    }
    clearInterval(view.timer);
    const status = view.status;
    if (status.state === "succeeded") {
      if (status.kind === "statement") loadCatalog();
      await loadResult(id, status, generation);
    } else if (status.state === "failed") {
      showError(new ApiError(undefined, status.error || "the query failed"), "Query failed");
    } else if (status.state === "cancelled") {
      showNotice("Query cancelled", status.error || "cancelled");
    }
    if (generation === view.generation) loadHistory();
  }

  /** Keeps the elapsed time moving between two status answers. */
  function tick() {
    const s = view.status;
    if (!s || s.state !== "running") return;
    ui.elapsed.textContent = fmtMs(s.elapsed_ms + (performance.now() - view.receivedAt));
  }

  function renderStatus(s) {
    setState(s.state);
    ui.elapsed.textContent = fmtMs(s.elapsed_ms);
    ui.tasks.textContent = `${fmtInt(s.tasks_done)} / ${fmtInt(s.tasks)}`;
    ui.cost.textContent = fmtCost(s.estimated_cost_usd);
    ui.queryId.textContent = s.id;
    ui.queryId.title = s.id;
    drawGraph(s);
  }

  ui.cancel.addEventListener("click", async () => {
    const id = view.id;
    if (!id) return;
    ui.cancel.disabled = true;
    try {
      await request("DELETE", `v1/queries/${encodeURIComponent(id)}`);
    } catch (e) {
      if (id === view.id) showError(e);
      ui.cancel.disabled = false;
    }
    // The polling loop sees the cancelled state and shows it.
  });

  ui.run.addEventListener("click", run);
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey) && !ev.target.closest("#auth")) {
      ev.preventDefault();
      run();
    }
  });

  // ---------------------------------------------------------------- stage graph

  const BOX_W = 236, BOX_H = 122, GAP_X = 76, GAP_Y = 22, PAD = 14;

  /** "hash shuffle from stage 0" -> {kind: "hash shuffle", from: 0}. */
  function parseInput(text) {
    const m = /^(.*) from stage (\d+)$/.exec(text);
    return m ? { kind: m[1], from: Number(m[2]) } : { kind: text, from: null };
  }

  /** The state a stage box shows: the stage's own, or how the query ended for it. */
  function stageState(stage, job) {
    if (stage.state === "complete") return "complete";
    if (job.state === "failed") return "failed";
    if (job.state === "cancelled") return "cancelled";
    return stage.state;
  }

  function truncate(text, max) {
    return text.length <= max ? text : text.slice(0, max - 1) + "…";
  }

  /** Places stages in columns by depth (inputs to the left of their consumers). */
  function layout(stages) {
    const byId = new Map(stages.map((s) => [s.stage, s]));
    const depth = new Map();
    const depthOf = (s, seen = new Set()) => {
      if (depth.has(s.stage)) return depth.get(s.stage);
      if (seen.has(s.stage)) return 0;
      seen.add(s.stage);
      let d = 0;
      for (const i of s.inputs.map(parseInput)) {
        const from = byId.get(i.from);
        if (from) d = Math.max(d, depthOf(from, seen) + 1);
      }
      depth.set(s.stage, d);
      return d;
    };
    stages.forEach((s) => depthOf(s));
    const columns = [];
    for (const s of stages) (columns[depth.get(s.stage)] ||= []).push(s);
    // Order each column by where its inputs sit (fewer crossings), then by id.
    const row = new Map();
    columns.forEach((col, c) => {
      if (c > 0) {
        const key = (s) => {
          const rows = s.inputs.map(parseInput).map((i) => row.get(i.from)).filter((r) => r !== undefined);
          return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : Infinity;
        };
        col.sort((a, b) => key(a) - key(b) || a.stage - b.stage);
      }
      col.forEach((s, r) => row.set(s.stage, r));
    });
    const tallest = Math.max(...columns.map((c) => c.length));
    const height = PAD * 2 + tallest * BOX_H + (tallest - 1) * GAP_Y;
    const pos = new Map();
    columns.forEach((col, c) => {
      const colHeight = col.length * BOX_H + (col.length - 1) * GAP_Y;
      const top = (height - colHeight) / 2;
      col.forEach((s, r) => pos.set(s.stage, { x: PAD + c * (BOX_W + GAP_X), y: top + r * (BOX_H + GAP_Y) }));
    });
    const width = PAD * 2 + columns.length * BOX_W + (columns.length - 1) * GAP_X;
    return { pos, width, height };
  }

  function drawGraph(job) {
    const stages = job.stages || [];
    ui.graph.dataset.stages = String(stages.length);
    if (!stages.length) {
      ui.graph.replaceChildren(el("p", { class: "muted" }, "No stages."));
      return;
    }
    const { pos, width, height } = layout(stages);
    const root = svg("svg", {
      id: "graph-svg", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": `Stage graph of query ${job.id}: ${stages.length} stage(s)`,
    });
    root.append(svg("defs", {},
      svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
        svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))));

    // Edges first, under the boxes.
    for (const s of stages) {
      const inputs = s.inputs.map(parseInput).filter((i) => pos.has(i.from));
      inputs.forEach((input, k) => {
        const a = pos.get(input.from), b = pos.get(s.stage);
        const x1 = a.x + BOX_W, y1 = a.y + BOX_H / 2;
        const x2 = b.x - 2, y2 = b.y + (BOX_H * (k + 1)) / (inputs.length + 1);
        const mx = (x1 + x2) / 2;
        const from = stages.find((t) => t.stage === input.from);
        const live = from && from.state === "complete" ? "done" : "waiting";
        root.append(svg("g", { class: `edge edge-${live}`, "data-from": input.from, "data-to": s.stage },
          svg("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }),
          svg("text", { x: x1 + 5, y: y1 - 5, class: "edge-label" }, input.kind)));
      });
    }

    for (const s of stages) {
      const p = pos.get(s.stage);
      const state = stageState(s, job);
      const g = svg("g", {
        class: `stage stage-${state}`, transform: `translate(${p.x},${p.y})`,
        "data-stage": s.stage, "data-state": state,
      });
      const time = s.elapsed_ms !== undefined ? fmtMs(s.elapsed_ms) : state === "running" ? "running" : "–";
      const tooltip = [
        `Stage ${s.stage} (${state})`, s.summary,
        s.inputs.length ? "inputs: " + s.inputs.join(", ") : "reads tables",
        `tasks ${s.tasks_done}/${s.tasks}, ${s.failed_attempts} failed attempt(s)`,
        ...(s.speculative_attempts
          ? [`stragglers: ${s.speculative_attempts} speculative attempt(s), ${s.speculative_wins} won, ${fmtMs(s.wasted_ms)} of losing attempts`]
          : []),
        `rows ${fmtInt(s.rows)}, ${fmtBytes(s.bytes)} in ${fmtInt(s.objects)} object(s)`,
        `wall ${time}, task time ${fmtMs(s.task_ms)}` + (s.handoff_ms !== undefined ? `, hand-off ${fmtMs(s.handoff_ms)}` : ""),
        s.decision_note ? `adaptive: ${s.decision_note}` : "adaptive: decided when its inputs complete",
      ].join("\n");
      g.append(svg("title", {}, tooltip));
      g.append(svg("rect", { class: "box", width: BOX_W, height: BOX_H, rx: 6 }));
      g.append(svg("rect", { class: "box-band", width: BOX_W, height: 24, rx: 6 }));
      g.append(svg("rect", { class: "box-band", y: 12, width: BOX_W, height: 12 }));
      g.append(svg("text", { x: 10, y: 16, class: "box-title" }, `Stage ${s.stage}`));
      g.append(svg("text", { x: BOX_W - 10, y: 16, "text-anchor": "end", class: "box-state" }, state));
      g.append(svg("text", { x: 10, y: 42, class: "box-summary" }, truncate(s.summary, 30)));
      // Task progress bar.
      const frac = s.tasks ? Math.min(1, s.tasks_done / s.tasks) : 0;
      g.append(svg("rect", { x: 10, y: 52, width: BOX_W - 20, height: 6, rx: 3, class: "bar-bg" }));
      g.append(svg("rect", { x: 10, y: 52, width: (BOX_W - 20) * frac, height: 6, rx: 3, class: "bar" }));
      g.append(svg("text", { x: 10, y: 76, class: "box-line" },
        svg("tspan", { class: "k" }, "tasks "), svg("tspan", { class: "stage-tasks" }, `${s.tasks_done}/${s.tasks}`),
        svg("tspan", { class: "k", dx: 10 }, "time "), svg("tspan", {}, time)));
      g.append(svg("text", { x: 10, y: 94, class: "box-line" },
        svg("tspan", { class: "k" }, "rows "), svg("tspan", { class: "stage-rows" }, fmtInt(s.rows)),
        svg("tspan", { class: "k", dx: 10 }, "out "), svg("tspan", {}, fmtBytes(s.bytes))));
      const retries = s.failed_attempts
        ? svg("tspan", { class: "retries" }, `${s.failed_attempts} failed attempt${s.failed_attempts === 1 ? "" : "s"}, retried`)
        : svg("tspan", { class: "k" }, "no retries");
      const handoff = s.handoff_ms !== undefined ? svg("tspan", { class: "k", dx: 10 }, `hand-off ${fmtMs(s.handoff_ms)}`) : null;
      g.append(svg("text", { x: 10, y: 112, class: "box-line" }, retries, handoff));
      root.append(g);
    }
    ui.graph.replaceChildren(root);
  }

  // ---------------------------------------------------------------- result

  /** Parses one JSON row, keeping numbers exactly as the server wrote them. */
  const parseRow = typeof JSON.rawJSON === "function"
    ? (line) => JSON.parse(line, (k, v, ctx) => (typeof v === "number" && ctx && ctx.source ? JSON.rawJSON(ctx.source) : v))
    : (line) => JSON.parse(line);
  const isRaw = (v) => typeof JSON.isRawJSON === "function" && JSON.isRawJSON(v);

  /** The top-level keys of a JSON object text, in order (JS objects reorder numeric keys). */
  function keysInOrder(text) {
    const keys = [];
    let depth = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (c === "{" || c === "[") depth++;
      else if (c === "}" || c === "]") depth--;
      else if (c === '"') {
        let j = i + 1;
        while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
        if (depth === 1) {
          let k = j + 1;
          while (text[k] === " ") k++;
          if (text[k] === ":") keys.push(JSON.parse(text.slice(i, j + 1)));
        }
        i = j;
      }
    }
    return keys;
  }

  /** The column names of a CSV header line. */
  function csvHeader(line) {
    const out = [];
    let cur = "", quoted = false;
    for (let i = 0; i < line.length; i++) {
      const c = line[i];
      if (quoted) {
        if (c === '"' && line[i + 1] === '"') { cur += '"'; i++; }
        else if (c === '"') quoted = false;
        else cur += c;
      } else if (c === '"') quoted = true;
      else if (c === ",") { out.push(cur); cur = ""; }
      else cur += c;
    }
    out.push(cur);
    return out;
  }

  /** Reads up to `max` NDJSON rows from a response, then stops reading. */
  async function readRows(response, max) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const rows = [];
    let columns = null, buffered = "", done = false;
    const take = (line) => {
      if (!line.trim() || rows.length >= max) return;
      if (!columns) columns = keysInOrder(line);
      rows.push(parseRow(line));
    };
    while (!done && rows.length < max) {
      const chunk = await reader.read();
      done = chunk.done;
      buffered += done ? decoder.decode() : decoder.decode(chunk.value, { stream: true });
      const lines = buffered.split("\n");
      buffered = done ? "" : lines.pop();
      lines.forEach(take);
    }
    if (!done) reader.cancel().catch(() => {});
    return { columns: columns || [], rows };
  }

  function cell(value) {
    if (value === null || value === undefined) return el("td", { class: "null" }, "NULL");
    if (isRaw(value)) return el("td", { class: "num" }, value.rawJSON);
    if (typeof value === "number") return el("td", { class: "num" }, String(value));
    if (typeof value === "boolean") return el("td", { class: "bool" }, String(value));
    if (typeof value === "object") return el("td", { class: "nested" }, JSON.stringify(value));
    return el("td", {}, value);
  }

  async function loadResult(id, status, generation) {
    const base = `v1/queries/${encodeURIComponent(id)}/result`;
    ui.result.dataset.state = "loading";
    ui.result.replaceChildren(el("p", { class: "muted" }, "Loading the result…"));
    setDownloads(base, id);
    let table;
    try {
      const response = await request("GET", `${base}?format=ndjson`, { signal: view.controller.signal });
      table = await readRows(response, MAX_ROWS);
      if (!table.rows.length) {
        // No row to name the columns: the CSV header does.
        const csv = await (await request("GET", `${base}?format=csv`, { signal: view.controller.signal })).text();
        const header = csv.split(/\r?\n/)[0];
        table.columns = header ? csvHeader(header) : [];
      }
    } catch (e) {
      if (generation !== view.generation) return;
      ui.result.dataset.state = "error";
      if (e instanceof ApiError && e.status === 413) {
        // Larger than one API response may carry (a deployment's 6 MB Lambda limit):
        // the rows are in S3, as Arrow IPC pieces behind presigned URLs, which a page
        // cannot read without CORS on the bucket; the CLI and the Python client can.
        ui.downloads.hidden = true;
        ui.result.replaceChildren(el("p", { class: "muted" },
          "The result is larger than one API response may carry. Fetch it from Python with " +
          `lambdafusion.connect(URL, aws=True).query("${id}").result(), or run the query with ` +
          "lambdafusion query --endpoint URL --format parquet -o result.parquet."));
        showNotice("Result too large for the page", e.message);
        return;
      }
      ui.result.replaceChildren(el("p", { class: "muted" }, "The result could not be shown."));
      showError(e);
      return;
    }
    if (generation !== view.generation) return;
    const total = status.result_rows !== undefined ? status.result_rows : table.rows.length;
    ui.resultCount.textContent = total > table.rows.length
      ? `first ${fmtInt(table.rows.length)} of ${fmtInt(total)} rows`
      : `${fmtInt(total)} row${total === 1 ? "" : "s"}`;
    ui.resultCount.dataset.rows = String(total);
    // A column whose first non-null value is a number is right-aligned, header included.
    const numeric = (c) => {
      const v = table.rows.map((r) => r[c]).find((x) => x !== null && x !== undefined);
      return isRaw(v) || typeof v === "number";
    };
    // A last, empty column takes the spare width (the others keep their natural width).
    const thead = el("thead", {}, el("tr", {}, el("th", { class: "rownum" }, "#"),
      table.columns.map((c) => el("th", { scope: "col", class: numeric(c) ? "num" : null }, c)),
      el("th", { class: "fill", "aria-hidden": "true" })));
    const tbody = el("tbody", {}, table.rows.map((r, i) =>
      el("tr", {}, el("td", { class: "rownum" }, String(i + 1)), table.columns.map((c) => cell(r[c])),
        el("td", { class: "fill", "aria-hidden": "true" }))));
    ui.result.replaceChildren(el("table", { id: "result-table", class: "grid" }, thead, tbody));
    ui.result.dataset.state = "loaded";
  }

  function setDownloads(base, id) {
    for (const a of ui.downloads.querySelectorAll("a[data-format]")) {
      const format = a.dataset.format;
      const ext = format === "arrow" ? "arrow" : format;
      a.href = `${base}?format=${format}`;
      a.setAttribute("download", `${id}.${ext}`);
    }
    ui.downloads.hidden = false;
  }

  // With a token, a plain link cannot carry the header: fetch and save a blob instead.
  ui.downloads.addEventListener("click", async (ev) => {
    const a = ev.target.closest("a[data-format]");
    if (!a || !token()) return;
    ev.preventDefault();
    try {
      const blob = await (await request("GET", a.getAttribute("href"))).blob();
      const url = URL.createObjectURL(blob);
      const tmp = el("a", { href: url, download: a.getAttribute("download") });
      document.body.append(tmp);
      tmp.click();
      tmp.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (e) {
      showError(e);
    }
  });

  // ---------------------------------------------------------------- catalog

  /** Inserts text at the editor's cursor (replacing the selection). */
  function insert(text) {
    ui.sql.focus();
    ui.sql.setRangeText(text, ui.sql.selectionStart, ui.sql.selectionEnd, "end");
  }

  let catalogOpen = new Set();

  async function loadCatalog() {
    ui.catalog.dataset.state = "loading";
    let body;
    try {
      body = await getJson("v1/tables");
    } catch (e) {
      ui.catalog.dataset.state = "error";
      ui.catalog.replaceChildren(el("p", { class: "muted small", title: e.message },
        e.status === 401 ? "Sign in with the bearer token (top right) to see the catalog." : "Catalog unavailable: " + e.message));
      return;
    }
    const tables = (body.tables || []).slice().sort((a, b) => a.name.localeCompare(b.name));
    if (!tables.length) {
      ui.catalog.replaceChildren(el("p", { class: "muted small" }, "No tables yet. Create one with CREATE EXTERNAL TABLE."));
    } else {
      ui.catalog.replaceChildren(...tables.map((t) => {
        const details = el("details", { class: "table", "data-table": t.name, open: catalogOpen.has(t.name) });
        details.addEventListener("toggle", () => (details.open ? catalogOpen.add(t.name) : catalogOpen.delete(t.name)));
        const where = (t.locations || []).join(", ");
        details.append(
          el("summary", { title: `${t.format || ""} ${where}`.trim() },
            el("button", { type: "button", class: "name", title: "Insert the table name", onclick: (ev) => { ev.preventDefault(); insert(t.name); } }, t.name),
            el("span", { class: "tag" }, (t.format || "").toLowerCase())),
          el("ul", { class: "columns" }, (t.columns || []).map((c) =>
            el("li", {},
              el("button", { type: "button", class: "name", "data-column": c.name, title: "Insert the column name", onclick: () => insert(c.name) }, c.name),
              el("span", { class: "type" }, c.type)))));
        return details;
      }));
    }
    ui.catalog.dataset.state = "loaded";
  }

  ui.catalogRefresh.addEventListener("click", loadCatalog);

  // ---------------------------------------------------------------- history

  const history = { next: null, loading: false, again: false };

  function historyItem(q) {
    const meta = [fmtWhen(q.created_ms)];
    if (q.elapsed_ms !== undefined && q.elapsed_ms !== null) meta.push(fmtMs(q.elapsed_ms));
    if (q.result_rows !== undefined && q.result_rows !== null) meta.push(`${fmtInt(q.result_rows)} row${q.result_rows === 1 ? "" : "s"}`);
    const sql = (q.sql || "").replace(/\s+/g, " ").trim();
    const title = `${q.sql || ""}\n\n${q.state}` + (q.error ? ": " + q.error : "");
    return el("li", { "data-id": q.id, "data-state": q.state },
      el("button", { type: "button", class: "history-item", title, onclick: () => openQuery(q.id, q.sql) },
        el("span", { class: "history-top" },
          el("span", { class: "dot", "data-state": q.state, "aria-label": q.state }),
          el("span", { class: "history-sql" }, sql)),
        el("span", { class: "history-meta" },
          el("span", {}, meta.join(" · ")),
          el("span", { class: "history-cost", title: "Estimated cost" }, fmtCost(q.estimated_cost_usd)))));
  }

  function markActiveHistory() {
    for (const li of ui.history.children) li.classList.toggle("active", li.dataset.id === view.id);
  }

  async function loadHistory(more) {
    if (history.loading) {
      // A reload asked for while one runs (a query just ended): run it after.
      if (!more) history.again = true;
      return;
    }
    history.loading = true;
    ui.history.dataset.state = "loading";
    const query = `v1/queries?limit=${HISTORY_PAGE}` + (more && history.next ? `&next=${encodeURIComponent(history.next)}` : "");
    try {
      const body = await getJson(query);
      const items = (body.queries || []).map(historyItem);
      if (more) ui.history.append(...items);
      else ui.history.replaceChildren(...items);
      history.next = body.next || null;
      ui.historyMore.hidden = !history.next;
      ui.historyNote.hidden = ui.history.children.length > 0;
      ui.historyNote.textContent = "No queries yet.";
      ui.history.dataset.state = "loaded";
      markActiveHistory();
    } catch (e) {
      const unsupported = e instanceof ApiError && (e.status === 404 || e.status === 405);
      ui.history.dataset.state = unsupported ? "unavailable" : "error";
      if (!more) ui.history.replaceChildren();
      ui.historyMore.hidden = true;
      ui.historyNote.hidden = false;
      ui.historyNote.title = e.message;
      ui.historyNote.textContent = unsupported
        ? "Query history is not available on this server."
        : e.status === 401 ? "Sign in with the bearer token (top right) to see your queries."
        : "History unavailable: " + e.message;
    } finally {
      history.loading = false;
    }
    if (history.again) {
      history.again = false;
      loadHistory(false);
    }
  }

  ui.historyRefresh.addEventListener("click", () => loadHistory(false));
  ui.historyMore.addEventListener("click", () => loadHistory(true));

  // ---------------------------------------------------------------- start

  ui.endpoint.textContent = new URL(".", location.href).href;
  showAuth(false);
  setState("idle");
  loadCatalog();
  loadHistory();
  ui.sql.focus();
})();
