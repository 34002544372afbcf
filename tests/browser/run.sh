#!/usr/bin/env bash
# The web console's browser test: drives the page in headless Chromium against
# `lambdafusion serve` (see test_console.py for what it checks). scripts/test.sh calls it.
#
#   tests/browser/run.sh                   # against the binary's own page (GET /)
#   CONSOLE_DEV=1 tests/browser/run.sh     # the page from api/src/console/ on disk,
#                                          # through tests/browser/devserver.py (no rebuild)
#   CONSOLE_DEV=1 CONSOLE_PREFIX=/prod ... # ... served under a path prefix, as behind an
#                                          # API Gateway stage
#   CONSOLE_SCREENSHOT_DOCS=1 ...          # also writes docs/console.png
#   tests/browser/run.sh --install-only    # installs the tools below, runs nothing
#
# Environment: LAMBDAFUSION_BIN (default target/debug/lambdafusion), CONSOLE_OUT (default
# target/browser: console.png, server logs, failure.png on failure), VENV (default .venv).
# It installs what it needs if missing: Debian's chromium and chromium-driver (apt, as root
# or through sudo -n) and the pinned selenium (tests/browser/requirements.txt, into VENV).
# It starts two servers on free 127.0.0.1 ports, each in a temporary directory (its cwd,
# where the test writes its CSV tables, and its --data-dir): one open, one with --token.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/tests/browser"
VENV="${VENV:-$ROOT/.venv}"
BIN="${LAMBDAFUSION_BIN:-$ROOT/target/debug/lambdafusion}"
OUT="${CONSOLE_OUT:-$ROOT/target/browser}"
DEV="${CONSOLE_DEV:-0}"
PREFIX="${CONSOLE_PREFIX:-}"
BUDGET="${CONSOLE_BUDGET_SECS:-100}"  # the test itself takes about 10 s

log() { printf 'browser: %s\n' "$*"; }
die() { printf 'browser: error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- tools
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  log "installing chromium and chromium-driver (apt)"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null \
    || { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null; } \
    || die "cannot install chromium and chromium-driver (needs root or passwordless sudo)"
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
want="$(sed -n 's/^selenium==//p' "$HERE/requirements.txt")"
have="$("$VENV/bin/python" -c 'import selenium; print(selenium.__version__)' 2>/dev/null || true)"
if [ "$have" != "$want" ]; then
  log "installing selenium==$want into $VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
fi
# `--install-only`: the tools above, nothing else (scripts/test.sh installs them beside
# the build).
if [ "${1:-}" = "--install-only" ]; then
  exit 0
fi
[ -x "$BIN" ] || die "no lambdafusion binary at $BIN (build it, or set LAMBDAFUSION_BIN)"

# ---------------------------------------------------------------- servers
WORK="$(mktemp -d "${TMPDIR:-/tmp}/lf-browser.XXXXXX")"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  mkdir -p "$OUT"
  cp "$WORK"/*.log "$OUT"/ 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until something answers HTTP at $1 (any status: the token server answers 401).
wait_http() {
  python3 - "$1" <<'PY' || die "nothing answers at $1 (see $OUT/*.log)"
import sys, time, urllib.error, urllib.request
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen(sys.argv[1], timeout=2)
        sys.exit(0)
    except urllib.error.HTTPError:
        sys.exit(0)
    except Exception:
        time.sleep(0.1)
sys.exit(1)
PY
}

# start_server NAME [serve flags...]: sets URL to the base URL the browser should use.
start_server() {
  local name="$1"; shift
  local dir="$WORK/$name" port
  mkdir -p "$dir"
  port="$(free_port)"
  # Small leaf tasks: the test's few-KiB tables still make several tasks per stage.
  (cd "$dir" && exec "$BIN" serve --bind "127.0.0.1:$port" --data-dir "$dir/data" \
      --allow-path "$dir" --bytes-per-task 2048 --slots 4 "$@") >"$WORK/$name.log" 2>&1 &
  PIDS+=("$!")
  wait_http "http://127.0.0.1:$port/health"
  local url="http://127.0.0.1:$port"
  if [ "$DEV" = 1 ]; then
    local proxy
    proxy="$(free_port)"
    "$VENV/bin/python" "$HERE/devserver.py" --upstream "$url" --port "$proxy" --prefix "$PREFIX" \
      >"$WORK/$name-devserver.log" 2>&1 &
    PIDS+=("$!")
    url="http://127.0.0.1:$proxy$PREFIX"
    wait_http "$url/"
  fi
  URL="$url/"
}

START=$SECONDS
mkdir -p "$OUT"
rm -f "$OUT/failure.png" "$OUT/console.png"
start_server main
MAIN_URL="$URL"
TOKEN="browser-test-$RANDOM$RANDOM-$RANDOM$RANDOM"
start_server token --token "$TOKEN"
TOKEN_URL="$URL"
log "servers up in $((SECONDS - START)) s: $MAIN_URL and (with --token) $TOKEN_URL"

# The page under test must be the one in the tree: what GET / and its assets serve must be
# byte for byte api/src/console/ (a binary built before the last edit embeds an older one).
"$VENV/bin/python" - "$MAIN_URL" "$ROOT/api/src/console" <<'PY' || die "the server does not serve the console of this tree (rebuild the binary; CONSOLE_DEV=1 serves the files from api/src/console/ instead)"
import pathlib, sys, urllib.error, urllib.request
base, src = sys.argv[1], pathlib.Path(sys.argv[2])
for path, name, ctype in (("", "index.html", "text/html"), ("console.js", "console.js", "text/javascript"),
                          ("console.css", "console.css", "text/css")):
    try:
        with urllib.request.urlopen(base + path, timeout=10) as r:
            body, got = r.read(), r.headers.get_content_type()
    except urllib.error.HTTPError as e:
        sys.exit(f"GET {base}{path}: {e.code} {e.read()[:200]!r}")
    if got != ctype:
        sys.exit(f"GET {base}{path}: content type {got}, expected {ctype}")
    if body != (src / name).read_bytes():
        sys.exit(f"GET {base}{path} differs from {src / name}")
PY

status=0
CONSOLE_URL="$MAIN_URL" CONSOLE_DATA_DIR="$WORK/main" CONSOLE_OUT="$OUT" \
  CONSOLE_TOKEN_URL="$TOKEN_URL" CONSOLE_TOKEN="$TOKEN" \
  timeout "$BUDGET" "$VENV/bin/python" "$HERE/test_console.py" || status=$?
log "finished in $((SECONDS - START)) s (exit $status); output in $OUT"
exit "$status"
