#!/usr/bin/env bash
# Tests of the Python client (clients/python), for scripts/test.sh and CI.
#
#   clients/python/test.sh [unittest args...]     e.g. -v, or -k cancel
#
# Installs the client editable with its extras into the repository's venv (VENV, default
# <repo>/.venv; created if missing), pinned by test-constraints.txt, when it is not there
# yet or pyproject.toml or the constraints changed,
# then runs the tests with the standard library's unittest. They start their own
# `lambdafusion serve` (LAMBDAFUSION_BIN, default <repo>/target/debug/lambdafusion) and,
# when target/debug has scheduler-fn, executor-fn and lambdafusion-local and the venv has
# moto_server, a local AWS stack on private ports (LAMBDAFUSION_PY_STACK=1: required,
# =0: skipped). About 15 s; the first install adds about 20 s.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${VENV:-$root/.venv}"
export VENV="$venv"
export LAMBDAFUSION_BIN="${LAMBDAFUSION_BIN:-$root/target/debug/lambdafusion}"

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
marker="$venv/.lambdafusion-python-client"
stamp="$here $(cat "$here/pyproject.toml" "$here/test-constraints.txt" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$marker" 2>/dev/null)" != "$stamp" ] ||
  ! "$venv/bin/python" -c "import lambdafusion, pyarrow, pandas, botocore, sys; sys.exit(not lambdafusion.__file__.startswith('$here/'))" 2>/dev/null; then
  echo "clients/python: pip install -e 'clients/python[test,pandas,aws]' into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -c "$here/test-constraints.txt" \
    -e "$here[test,pandas,aws]"
  echo "$stamp" >"$marker"
fi
[ -x "$LAMBDAFUSION_BIN" ] || {
  echo "clients/python: $LAMBDAFUSION_BIN is missing: cargo build -p lambdafusion-cli (or set LAMBDAFUSION_BIN)" >&2
  exit 1
}

cd "$here"
exec "$venv/bin/python" -m unittest discover -s tests -t . "$@"
