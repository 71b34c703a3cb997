#!/usr/bin/env bash
# Run the gateway end-to-end suites against the release binary.
#
#   tests/run-e2e.sh [pytest args...]      e.g. tests/run-e2e.sh -k hostile -x
#
# Expects target/release/gateway to be built already (or GATEWAY_BIN to point at a binary).
# Runs tests/setup.sh first (a fast no-op once everything is installed).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

"$HERE/setup.sh"

export GATEWAY_BIN="${GATEWAY_BIN:-$REPO/target/release/gateway}"
if [[ ! -x "$GATEWAY_BIN" ]]; then
    echo "run-e2e.sh: gateway binary not found at $GATEWAY_BIN (cargo build --release -p gateway)" >&2
    exit 1
fi

export PYTHONDONTWRITEBYTECODE=1
cd "$HERE/e2e"
exec "$HERE/.venv/bin/python" -m pytest -ra --durations=15 -p no:cacheprovider "$@" .
