#!/usr/bin/env bash
# The real Linux kernel NFS client over RPC-over-RDMA (Soft-RoCE) against the gateway's
# `verbs` provider, in a QEMU guest (tools/vm/vm.sh with VM_RXE=1). Host side of
# tests/vm/kernel-nfs-rdma.sh: 256 MiB byte-exact over proto=rdma, fio verify jobs, a
# 10,000-entry directory, rename/symlink/chmod/remove, remounts, the same over proto=tcp,
# a client killed mid-transfer, `bench --provider verbs` verified runs, connections spread
# over two reactors; then NFSv4.1 over RDMA (tests/vm/kernel-nfs41-rdma.sh: the same data
# and namespace checks, flock/fcntl, a delegation recalled over the RDMA back channel
# counted in the stats, a killed client); and a short comparison with the guest's kernel
# nfsd over RDMA, NFSv3 and NFSv4.1 (ratios printed). About 9 minutes under TCG on an
# idle 2-core host (519 s measured), ~19 minutes with a load average of 8.
#
#   tests/vm/run-kernel-rdma.sh        (root; Debian 12; needs libibverbs-dev,
#                                       librdmacm-dev, libclang-dev: tests/setup.sh;
#                                       fio is apt-installed here when missing)
#
# Builds the gateway and bench with their `rdma` features into target/rdma (the default
# release binaries stay untouched) unless GATEWAY_BIN (and BENCH_BIN) are given. The
# knobs of the guest script (RDMA_FILE_MIB, RDMA_FIO_MIB, RDMA_DIR_ENTRIES, TCP_FILE_MIB,
# TCP_DIR_ENTRIES, GW_CORES, V41, V41R_*, COMPARE, COMPARE_VERS, COMPARE_RUNTIME,
# COMPARE_MIB; tests/README.md) pass through. The guest's output is kept in target/vm-kernel-rdma.log. Last line: "1 passed, 0 failed" or "0 passed, 1 failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
# ~9 min when the host is otherwise idle; TCG slows down 2-4x when the host is busy
# (19 min measured with a load average of 8 on 2 cores, NFSv4.1 part included)
export VM_TIMEOUT=${VM_TIMEOUT:-1500}
# The gateway's memory backend holds the 256 MiB file and the fio files, and each bench
# RDMA connection registers ~128 credits x 1 MiB of buffers: 2 GiB runs out.
export VM_MEM=${VM_MEM:-3072}
LOG=target/vm-kernel-rdma.log
PASS_LINE="KERNEL NFS/RDMA: PASS"

fail() { echo "run-kernel-rdma.sh: FAILED: $*" >&2; echo "0 passed, 1 failed"; exit 1; }

if [ -z "${GATEWAY_BIN:-}" ]; then
  # each package's own `rdma` feature (bench's code checks bench's feature)
  CARGO_TARGET_DIR=$PWD/target/rdma cargo build --release --features gateway/rdma,bench/rdma \
      -p gateway -p bench || fail "cargo build --release --features gateway/rdma,bench/rdma"
  GATEWAY_BIN=$PWD/target/rdma/release/gateway
  BENCH_BIN=${BENCH_BIN:-$PWD/target/rdma/release/bench}
fi
BENCH_BIN=${BENCH_BIN:-$(dirname "$GATEWAY_BIN")/bench}
[ -x "$GATEWAY_BIN" ] || fail "gateway binary not found at $GATEWAY_BIN"
[ -x "$BENCH_BIN" ] || fail "bench binary not found at $BENCH_BIN"
VM_RXE=1 bash tools/vm/vm.sh setup || fail "tools/vm/vm.sh setup"
# fio (write + verify jobs in the guest) runs from the host's root filesystem.
if ! command -v fio >/dev/null; then
  [ "${VM_NO_INSTALL:-0}" = 1 ] && fail "fio is not installed (VM_NO_INSTALL=1)"
  [ "$(id -u)" = 0 ] || fail "need root to apt-get install fio"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends install fio \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends install fio; } \
    || fail "apt-get install fio"
fi
# Every command the guest scripts run comes from the host's root filesystem: check them
# here, before a boot, so a package no script installs fails in seconds with its name
# (not at the end of the stage, as exportfs once did on a fresh machine).
for c in fio mount.nfs rpcbind exportfs rpc.mountd rpc.nfsd rdma ibv_devices ip modprobe sha256sum; do
  command -v "$c" >/dev/null || fail "'$c' is not installed (tools/vm/vm.sh setup with VM_RXE=1 should have installed it)"
done
export VM_ENV="${VM_ENV:-} RDMA_FILE_MIB RDMA_FIO_MIB RDMA_DIR_ENTRIES TCP_FILE_MIB TCP_DIR_ENTRIES GW_CORES V41 V41R_FILE_MIB V41R_FIO_MIB V41R_DIR_ENTRIES V41R_PARTS V41R_V3_PROTO V41R_MOUNT_EXTRA V41R_KEEP_GOING V41R_OP_TIMEOUT COMPARE COMPARE_VERS COMPARE_RUNTIME COMPARE_MIB"

mkdir -p target
start=$(date +%s)
VM_RXE=1 bash tools/vm/vm.sh run-script tests/vm/kernel-nfs-rdma.sh "$GATEWAY_BIN" "$BENCH_BIN" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
echo "run-kernel-rdma.sh: guest exit code $rc after $(( $(date +%s) - start ))s (log: $LOG)"

[ "$rc" -eq 0 ] || fail "guest script exited $rc (124 = VM_TIMEOUT, 125 = guest did not boot or report)"
grep -qxF "$PASS_LINE" "$LOG" || fail "the guest never printed '$PASS_LINE'"
echo "1 passed, 0 failed"
