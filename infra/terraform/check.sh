#!/usr/bin/env bash
# Static checks of the Terraform (the offline init/validate/plan with the locked provider is
# tests/tests/end_to_end/terraform_plan.rs):
#   1. terraform fmt -check -recursive infra/terraform   (skipped if terraform is missing)
#   2. checkov on infra/terraform, from the venv in $VENV (default <repo>/.venv)
# The third check, the contract test, is Rust:
#   cargo test --workspace --test end_to_end terraform_contract::
#
# Usage: infra/terraform/check.sh        (from anywhere; VENV=/path/to/venv to override)
set -euo pipefail

CHECKOV_VERSION="3.3.30"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
cd "$ROOT"

status=0

echo "==> terraform fmt -check -recursive infra/terraform"
if command -v terraform >/dev/null 2>&1; then
  if terraform fmt -check -recursive -diff infra/terraform; then
    echo "    ok"
  else
    echo "    FAILED: run 'terraform fmt -recursive infra/terraform'"
    status=1
  fi
else
  echo "    SKIPPED: terraform is not installed (https://developer.hashicorp.com/terraform/install)"
fi

echo "==> checkov (infra/terraform)"
if [ -x "$VENV/bin/checkov" ]; then
  installed="$("$VENV/bin/checkov" --version 2>/dev/null || echo unknown)"
  if [ "$installed" != "$CHECKOV_VERSION" ]; then
    echo "    note: checkov $installed in $VENV, the checks were tuned with $CHECKOV_VERSION"
  fi
  start=$(date +%s)
  # --skip-download: offline, no Prisma Cloud metadata; the update check would reach PyPI.
  if CKV_SKIP_PACKAGE_UPDATE_CHECK=true "$VENV/bin/checkov" \
    --directory infra/terraform \
    --framework terraform \
    --skip-download \
    --quiet \
    --compact; then
    echo "    ok ($(($(date +%s) - start)) s)"
  else
    echo "    FAILED: fix the finding, or skip it in the resource with '#checkov:skip=CKV_...:<reason>'"
    status=1
  fi
else
  echo "    checkov is not installed in $VENV. Install it with:"
  echo "      python3 -m venv \"$VENV\" && \"$VENV/bin/pip\" install checkov==$CHECKOV_VERSION"
  exit 2
fi

exit "$status"
