#!/usr/bin/env bash
# Builds gateway and bench with the `rdma` features (the verbs provider; needs
# libibverbs-dev, librdmacm-dev, libclang-dev: tests/setup.sh) and copies them to
# $CARGO_TARGET_DIR/rdma-bin/ (default target dir: <repo>/target). Prints that directory.
#
#   tests/vm/build-rdma.sh
#
# Why in the same target dir as the default build, with --workspace: the feature
# unification of every third-party crate is then the same as for the default build, so
# all dependencies are shared and only engine, gateway, bench and tools compile again.
# Cargo copies ("uplifts") a build's binaries to release/, so the default binaries found
# there beforehand are put back afterwards: release/gateway stays the default build.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
TGT=${CARGO_TARGET_DIR:-$REPO/target}
OUT=$TGT/rdma-bin
BINS="gateway bench nfsgw-tools"
mkdir -p "$OUT/.saved"
for b in $BINS; do
  rm -f "$OUT/.saved/$b"
  [ -e "$TGT/release/$b" ] && ln "$TGT/release/$b" "$OUT/.saved/$b"
done
restore() {
  local b
  for b in $BINS; do
    [ -e "$OUT/.saved/$b" ] && mv -f "$OUT/.saved/$b" "$TGT/release/$b"
  done
  return 0
}
trap restore EXIT
cargo build --release --workspace --locked --features engine/rdma,gateway/rdma,bench/rdma >&2
for b in gateway bench; do
  cp -f "$TGT/release/$b" "$OUT/$b.tmp"
  mv -f "$OUT/$b.tmp" "$OUT/$b"
done
echo "$OUT"
