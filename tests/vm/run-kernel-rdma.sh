#!/usr/bin/env bash
# The real Linux kernel NFS client over RPC-over-RDMA (Soft-RoCE) against the gateway's
# `verbs` provider, in a QEMU guest (tools/vm/vm.sh with VM_RXE=1). Host side of
# tests/vm/kernel-nfs-rdma.sh.
#
#   tests/vm/run-kernel-rdma.sh        (root; Debian 12; needs libibverbs-dev,
#                                       librdmacm-dev, libclang-dev: tests/setup.sh)
#
# Builds the gateway with `--features rdma` into target/rdma (the default release
# binaries stay untouched) unless GATEWAY_BIN is given. The guest's output is kept in
# target/vm-kernel-rdma.log. Last line: "1 passed, 0 failed" or "0 passed, 1 failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
export VM_TIMEOUT=${VM_TIMEOUT:-420}
LOG=target/vm-kernel-rdma.log
PASS_LINE="KERNEL NFS/RDMA: PASS"

fail() { echo "run-kernel-rdma.sh: FAILED: $*" >&2; echo "0 passed, 1 failed"; exit 1; }

if [ -z "${GATEWAY_BIN:-}" ]; then
  CARGO_TARGET_DIR=$PWD/target/rdma cargo build --release --features rdma -p gateway -p bench \
    || fail "cargo build --release --features rdma"
  GATEWAY_BIN=$PWD/target/rdma/release/gateway
fi
[ -x "$GATEWAY_BIN" ] || fail "gateway binary not found at $GATEWAY_BIN"
VM_RXE=1 bash tools/vm/vm.sh setup || fail "tools/vm/vm.sh setup"

mkdir -p target
start=$(date +%s)
VM_RXE=1 bash tools/vm/vm.sh run-script tests/vm/kernel-nfs-rdma.sh "$GATEWAY_BIN" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
echo "run-kernel-rdma.sh: guest exit code $rc after $(( $(date +%s) - start ))s (log: $LOG)"

[ "$rc" -eq 0 ] || fail "guest script exited $rc (124 = VM_TIMEOUT, 125 = guest did not boot or report)"
grep -qxF "$PASS_LINE" "$LOG" || fail "the guest never printed '$PASS_LINE'"
echo "1 passed, 0 failed"
