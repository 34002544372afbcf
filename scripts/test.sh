#!/usr/bin/env bash
# The whole test suite — what CI runs (.ci/run) and what you run:
#   1. installs the pinned Python tools (moto, checkov) into .venv,
#   2. checks the Terraform (fmt, checkov; the contract test runs with the Rust tests),
#   3. runs every Rust test: unit, embedded end to end, TPC-H against DataFusion, the
#      end-to-end tests against the local AWS stack and the chaos soak's short run,
#   4. checks formatting and, in the background, clippy lints, while it
#   5. tests the patched moto_server against plain moto (local/localstack/test_moto_server.py),
#      the Python client against `lambdafusion serve` and the local stack
#      (clients/python/test.sh) and the web console in Debian's Chromium
#      (tests/browser/run.sh, which installs chromium and chromium-driver if missing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VENV="${VENV:-$ROOT/.venv}"

step() { printf '\n==> %s\n' "$*"; }

step "python tools (.venv, local/requirements.txt)"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r local/requirements.txt
"$VENV/bin/pip" freeze --quiet | grep -i -E '^(moto|checkov)==' | sed 's/^/    /'

step "terraform checks"
infra/terraform/check.sh

step "build everything, tests included (the local AWS stack runs the function binaries)"
# The same targets as `cargo test --workspace`, so both share one set of dependency features
# and nothing is compiled twice.
cargo build --workspace --all-targets --locked

step "cargo test --workspace"
cargo test --workspace --locked "$@"

step "lints (rustfmt; clippy runs beside the Python and browser tests below)"
cargo fmt --all --check
# clippy checks every crate anew (about 6 minutes cold, all CPU) while the steps below
# mostly wait on servers: run it beside them and collect it at the end.
CLIPPY_LOG="$(mktemp)"
cargo clippy --workspace --all-targets --locked -- -D warnings >"$CLIPPY_LOG" 2>&1 &
CLIPPY_PID=$!

step "moto_server patches (local/localstack/test_moto_server.py)"
"$VENV/bin/python" -m unittest local/localstack/test_moto_server.py 2>&1 | tail -n 3

step "python client (clients/python/test.sh)"
# The stack half (SigV4, presigned pieces through moto) must run here, never skip.
LAMBDAFUSION_PY_STACK=1 clients/python/test.sh

step "web console in a real browser (tests/browser/run.sh)"
tests/browser/run.sh

step "clippy (cargo clippy --workspace --all-targets -- -D warnings)"
if wait "$CLIPPY_PID"; then
  tail -n 1 "$CLIPPY_LOG"
else
  cat "$CLIPPY_LOG"
  echo "clippy failed" >&2
  exit 1
fi
