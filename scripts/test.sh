#!/usr/bin/env bash
# The whole test suite — what CI runs (.ci/run) and what you run:
#   1. installs the pinned Python tools (moto, checkov, duckdb) into .venv and the browser
#      test's tools, beside the build,
#   2. checks the Terraform (fmt, checkov; the contract test runs with the Rust tests),
#   3. builds everything with clippy's lints (warnings are errors) and checks formatting,
#   4. runs every Rust test: unit, embedded end to end, TPC-H against DataFusion, the end-to-end
#      tests against the local AWS stack, the chaos soak's short run and the store's soak
#      (those two in cargo invocations of their own, beside the others),
#   5. tests the patched moto_server against plain moto (local/localstack/test_moto_server.py),
#      the Python client against `lambdafusion serve` and the local stack
#      (clients/python/test.sh) and the web console in Debian's Chromium
#      (tests/browser/run.sh, which installs chromium and chromium-driver if missing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VENV="${VENV:-$ROOT/.venv}"

step() { printf '\n==> %s\n' "$*"; }

# Clippy lints inside the build: clippy-driver wraps rustc for the workspace's own crates,
# as `cargo clippy` has it wrap `cargo check`, with its arguments in CLIPPY_ARGS (cargo
# clippy's own way of passing `-- -D warnings`). One compilation then both builds and
# lints our crates; a separate `cargo clippy` compiled every dependency a second time
# (about 7 minutes of CPU on a clean clone, a fifth of CI). Every cargo command below
# runs with the same wrapper, so none rebuilds; a plain `cargo test` afterwards
# recompiles the workspace's crates (not the dependencies) without it.
export RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

LOGS="$(mktemp -d)"
# Waits for a job started beside the others; if it failed, shows its log and stops.
collect() { # pid log what
  if ! wait "$1"; then
    cat "$2"
    echo "$3 failed" >&2
    exit 1
  fi
}

step "tools, in the background beside the build: .venv (local/requirements.txt), the browser"
# Their downloads (the browser's apt packages on a fresh machine) wait on the network
# beside the build; pip's own work is CPU the build wants too, so on a warm cache this
# saves nothing (measured). Collected before the first step that needs them.
(
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r local/requirements.txt
  "$VENV/bin/pip" freeze --quiet | grep -i -E '^(moto|checkov|duckdb)==' | sed 's/^/    /'
  tests/browser/run.sh --install-only
) >"$LOGS/tools.log" 2>&1 &
TOOLS_PID=$!

step "build and lint everything, tests included (the local AWS stack runs the function binaries)"
# The same targets as `cargo test --workspace`, so both share one set of dependency features
# and nothing is compiled twice; clippy's lints run in it (see above), warnings are errors.
cargo build --workspace --all-targets --locked

step "tools installed"
collect "$TOOLS_PID" "$LOGS/tools.log" "installing the tools"
cat "$LOGS/tools.log"

step "terraform checks"
infra/terraform/check.sh

step "rustfmt"
cargo fmt --all --check

step "moto_server patches (local/localstack/test_moto_server.py), beside the Rust tests"
"$VENV/bin/python" -m unittest local/localstack/test_moto_server.py >"$LOGS/moto.log" 2>&1 &
MOTO_PID=$!

step "cargo test --workspace (the long local-stack suites run beside the rest)"
# Each suite on the local AWS stack starts its own stack on free ports (tests/src/stack.rs),
# so the longest ones, which mostly wait on moto, run as cargo invocations of their own.
# (end_to_end beside them too saved minutes, but with everything at once
# the store soak's stack twice never finished its 1,000-task job: the CPU is already busy.)
# `--workspace` on every invocation keeps one set of features: nothing is rebuilt.
BESIDE=(chaos store_on_the_stack)
declare -A BESIDE_PID
for t in "${BESIDE[@]}"; do
  cargo test --workspace --locked --test "$t" "$@" >"$LOGS/$t.log" 2>&1 &
  BESIDE_PID[$t]=$!
done
# Every other target: libraries, binaries and test files, from cargo's own list.
mapfile -t OTHERS < <(cargo metadata --no-deps --format-version 1 --locked |
  python3 -c '
import json, sys
beside = set(sys.argv[1:])
for package in json.load(sys.stdin)["packages"]:
    for target in package["targets"]:
        if "test" in target["kind"] and target["name"] not in beside:
            print("--test")
            print(target["name"])
' "${BESIDE[@]}")
cargo test --workspace --locked --lib --bins "${OTHERS[@]}" "$@"
cargo test --workspace --locked --doc "$@"
for t in "${BESIDE[@]}"; do
  collect "${BESIDE_PID[$t]}" "$LOGS/$t.log" "cargo test --test $t"
  echo "--- $t:"
  grep -E '^(test .* \.\.\. |test result:)' "$LOGS/$t.log" || true
done

step "moto_server patches (local/localstack/test_moto_server.py)"
collect "$MOTO_PID" "$LOGS/moto.log" "local/localstack/test_moto_server.py"
tail -n 3 "$LOGS/moto.log"

step "python client (clients/python/test.sh)"
# The stack half (SigV4, presigned pieces through moto) must run here, never skip.
LAMBDAFUSION_PY_STACK=1 clients/python/test.sh

step "web console in a real browser (tests/browser/run.sh)"
tests/browser/run.sh
