#!/usr/bin/env bash
# Build Garage (an S3-compatible distributed object store, AGPL-3.0) once and
# cache the binary for the test suite. Garage runs as a separate server
# process; it is never linked into the gateway.
#
#   tools/garage/install.sh          # prints the path of the cached binary
#
# Cache: ${NFSGW_CACHE:-$HOME/.cache/nfsgw}/garage-$GARAGE_VERSION/bin/garage.
# A fresh machine builds it once (about 25 minutes on 2 cores); later runs
# reuse it. Features are trimmed to what the tests use (lmdb metadata, bundled
# libs): no sqlite, k2v or metrics.
set -euo pipefail
GARAGE_VERSION=${GARAGE_VERSION:-2.5.0}
CACHE=${NFSGW_CACHE:-$HOME/.cache/nfsgw}
ROOT="$CACHE/garage-$GARAGE_VERSION"
BIN="$ROOT/bin/garage"
if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
    echo "$BIN"
    exit 0
fi
mkdir -p "$ROOT"
echo "building garage $GARAGE_VERSION into $ROOT (once per machine)" >&2
nice -n 5 cargo install garage --locked --version "$GARAGE_VERSION" \
    --no-default-features --features bundled-libs,lmdb \
    --root "$ROOT" --target-dir "$CACHE/garage-build" >&2
rm -rf "$CACHE/garage-build"
"$BIN" --version >&2
echo "$BIN"
