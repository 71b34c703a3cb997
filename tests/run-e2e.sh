#!/usr/bin/env bash
# Run the gateway end-to-end suites against the release binary.
#
#   tests/run-e2e.sh [pytest args...]      e.g. tests/run-e2e.sh -k hostile -x
#
# Two passes (tests/README.md "Parallel runs"): first every test without the `serial`
# mark on E2E_WORKERS pytest-xdist workers (default 4: most of the suite's time is spent
# waiting, so more workers than the 2 cores of CI pay; e2e/conftest.py's scheduler keeps
# some groups of tests on one worker), then the `serial` ones (rates, time bounds) alone
# on a quiet machine. E2E_PASS=parallel or E2E_PASS=serial runs just that pass
# (tests/run-all.sh times them as separate stages); E2E_WORKERS=0 runs everything in one
# plain pytest process, in file order.
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
PYTEST=("$HERE/.venv/bin/python" -m pytest -ra --durations=15 -p no:cacheprovider)
WORKERS=${E2E_WORKERS:-4}
if [[ "$WORKERS" == 0 ]]; then
    exec env -u E2E_PASS "${PYTEST[@]}" "$@" .
fi

# one pass: 0 when it ran green or had nothing to run (pytest's 5: all deselected)
pass() {  # pass parallel|serial [pytest args...]
    local which=$1 rc=0 t0=$SECONDS
    shift
    echo "run-e2e.sh: $which pass"
    if [[ "$which" == parallel ]]; then
        E2E_PASS=parallel "${PYTEST[@]}" -n "$WORKERS" "$@" . || rc=$?
    else
        E2E_PASS=serial "${PYTEST[@]}" "$@" . || rc=$?
    fi
    echo "run-e2e.sh: $which pass: exit $rc in $((SECONDS - t0)) s"
    [[ $rc == 5 ]] && rc=0
    return "$rc"
}

case "${E2E_PASS:-both}" in
    parallel|serial) pass "$E2E_PASS" "$@" ;;
    both) rc=0; pass parallel "$@" || rc=$?; pass serial "$@" || rc=$?; exit "$rc" ;;
    *) echo "run-e2e.sh: E2E_PASS must be parallel, serial or unset" >&2; exit 2 ;;
esac
