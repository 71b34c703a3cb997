#!/usr/bin/env bash
# Run the gateway end-to-end suites against the release binary.
#
#   tests/run-e2e.sh [pytest args...]      e.g. tests/run-e2e.sh -k hostile -x
#
# Expects $CARGO_TARGET_DIR/release/gateway (target dir default <repo>/target; run-all.sh
# uses ~/.cache/nfsgw/target) to be built already, or GATEWAY_BIN to point at a binary;
# bench and nfsgw-tools are taken from beside it unless BENCH_BIN / TOOLS_BIN are set.
# Runs tests/setup.sh first (a fast no-op once everything is installed).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

"$HERE/setup.sh"

export GATEWAY_BIN="${GATEWAY_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/gateway}"
export BENCH_BIN="${BENCH_BIN:-$(dirname "$GATEWAY_BIN")/bench}"
export TOOLS_BIN="${TOOLS_BIN:-$(dirname "$GATEWAY_BIN")/nfsgw-tools}"
if [[ ! -x "$GATEWAY_BIN" ]]; then
    echo "run-e2e.sh: gateway binary not found at $GATEWAY_BIN (cargo build --release -p gateway)" >&2
    exit 1
fi

export PYTHONDONTWRITEBYTECODE=1
cd "$HERE/e2e"
exec "$HERE/.venv/bin/python" -m pytest -ra --durations=15 -p no:cacheprovider "$@" .
