#!/usr/bin/env bash
# `rdma.send_timeout_s` and `rdma.stall_reclaim_ms` on real verbs (Soft-RoCE) in a QEMU
# guest (tools/vm/vm.sh with VM_RXE=1): host side of tests/vm/rdma-send-timeout.sh (a
# peer that posts no Receive and asks for rnr_retry_count 7 is disconnected after the
# timeout, counted, and a well-behaved client is served afterwards; then, with the
# 120 s send timeout, two such peers sending 1 MiB READs hold every large buffer until
# a good client's READ starves and the reclaim closes them). One boot: 40 s under TCG on
# an idle 2-core host for the first phase; on a host at load average 7 the first phase
# took 150 s and the second 175-205 s (not yet measured idle).
#
#   tests/vm/run-rdma-send-timeout.sh   (root; Debian 12; libibverbs-dev, librdmacm-dev,
#                                        libclang-dev: tests/setup.sh)
#
# Builds the gateway and bench with their `rdma` features into target/rdma unless
# GATEWAY_BIN (and BENCH_BIN) are given. SEND_TIMEOUT_S [3], STALL_WAIT_S
# and STALL_RECLAIM_MS [1000] pass through. The guest's
# output is kept in target/vm-rdma-send-timeout.log. Last line: "1 passed, 0 failed" or
# "0 passed, 1 failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
export VM_TIMEOUT=${VM_TIMEOUT:-900}
LOG=target/vm-rdma-send-timeout.log
PASS_LINE="RDMA SEND TIMEOUT: PASS"

fail() { echo "run-rdma-send-timeout.sh: FAILED: $*" >&2; echo "0 passed, 1 failed"; exit 1; }

if [ -z "${GATEWAY_BIN:-}" ]; then
  CARGO_TARGET_DIR=$PWD/target/rdma cargo build --release --features gateway/rdma,bench/rdma \
      -p gateway -p bench || fail "cargo build --release --features gateway/rdma,bench/rdma"
  GATEWAY_BIN=$PWD/target/rdma/release/gateway
  BENCH_BIN=${BENCH_BIN:-$PWD/target/rdma/release/bench}
fi
BENCH_BIN=${BENCH_BIN:-$(dirname "$GATEWAY_BIN")/bench}
[ -x "$GATEWAY_BIN" ] || fail "gateway binary not found at $GATEWAY_BIN"
[ -x "$BENCH_BIN" ] || fail "bench binary not found at $BENCH_BIN"
VM_RXE=1 bash tools/vm/vm.sh setup || fail "tools/vm/vm.sh setup"
for c in rdma ibv_devices python3; do
  command -v "$c" >/dev/null || fail "'$c' is not installed (tools/vm/vm.sh setup with VM_RXE=1 should have installed it)"
done
export VM_ENV="${VM_ENV:-} SEND_TIMEOUT_S STALL_WAIT_S STALL_RECLAIM_MS"

mkdir -p target
start=$(date +%s)
VM_RXE=1 bash tools/vm/vm.sh run-script tests/vm/rdma-send-timeout.sh "$GATEWAY_BIN" "$BENCH_BIN" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
echo "run-rdma-send-timeout.sh: guest exit code $rc after $(( $(date +%s) - start ))s (log: $LOG)"

[ "$rc" -eq 0 ] || fail "guest script exited $rc (124 = VM_TIMEOUT, 125 = guest did not boot or report)"
grep -qxF "$PASS_LINE" "$LOG" || fail "the guest never printed '$PASS_LINE'"
echo "1 passed, 0 failed"
