#!/usr/bin/env bash
# The gateway against the Linux kernel NFS server (nfsd), both over RPC-over-RDMA on
# Soft-RoCE (and over TCP), with the same kernel NFSv3 client and the same fio jobs,
# inside one QEMU guest (tools/vm/vm.sh, VM_RXE=1). Host side of
# tests/vm/kernel-rdma-compare.sh. Not part of CI (~5 minutes per round under TCG;
# the default 3 rounds take ~15 minutes).
#
#   tools/perf/vm-rdma-compare.sh            (root; Debian 12)
#
# Knobs (environment): RUNTIME [10] seconds per fio job, ROUNDS [3], PROTOS ["rdma tcp"],
# VERS ["3"; "3 4.1" adds the NFSv4.1 mounts of both servers],
# SIZE_MIB [128], JOBS, NFSD_THREADS [4], NFSD_MAX_BLOCK [1048576], GW_IDLE [adaptive],
# GW_IDLE_SPINS [2000]; GATEWAY_BIN to skip the build.
# Output: the guest log in target/vm-rdma-compare.log, the table in
# target/vm-rdma-compare.md. Under TCG + Soft-RoCE the figures are valid only as ratios
# (see docs/perf-vm-rdma.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
export VM_TIMEOUT=${VM_TIMEOUT:-1800}
LOG=target/vm-rdma-compare.log
OUT=target/vm-rdma-compare.md
die() { echo "vm-rdma-compare.sh: $*" >&2; exit 1; }

if [ -z "${GATEWAY_BIN:-}" ]; then
  CARGO_TARGET_DIR=$PWD/target/rdma cargo build --release --features rdma -p gateway \
    || die "cargo build --release --features rdma"
  GATEWAY_BIN=$PWD/target/rdma/release/gateway
fi
[ -x "$GATEWAY_BIN" ] || die "gateway binary not found at $GATEWAY_BIN"
VM_RXE=1 bash tools/vm/vm.sh setup || die "tools/vm/vm.sh setup"

# The guest runs the host's binaries: nfsd's user space, rpcbind and fio must be here.
# policy-rc.d keeps the package scripts from starting host services.
missing=""
for p in nfs-kernel-server rpcbind fio python3; do
  dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "$(id -u)" = 0 ] || die "need root to apt-get install$missing"
  prc=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    prc=/usr/sbin/policy-rc.d; printf '#!/bin/sh\nexit 101\n' > $prc; chmod +x $prc
  fi
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends install $missing \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends install $missing; }
  ok=$?
  [ -n "$prc" ] && rm -f "$prc"
  [ $ok = 0 ] || die "apt-get install$missing failed"
fi

export VM_ENV="${VM_ENV:-} RUNTIME ROUNDS PROTOS VERS SIZE_MIB JOBS NFSD_THREADS NFSD_MAX_BLOCK GW_IDLE GW_IDLE_SPINS"
mkdir -p target
start=$(date +%s)
VM_RXE=1 bash tools/vm/vm.sh run-script tests/vm/kernel-rdma-compare.sh "$GATEWAY_BIN" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
echo "vm-rdma-compare.sh: guest exit code $rc after $(( $(date +%s) - start ))s (log: $LOG)"
[ "$rc" -eq 0 ] && grep -qxF "KERNEL RDMA COMPARE: DONE" "$LOG" || die "the comparison did not complete"
{
  echo "$(date -u +%Y-%m-%d) · commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
       "· host $(nproc) cores, $(grep -o 'accel=[a-z]*' "$LOG" | tail -n 1)"
  echo
  grep -E '^\|' "$LOG"
  echo
  grep -E '^\(RUNTIME=' "$LOG"
} > "$OUT"
echo "table: $OUT"
