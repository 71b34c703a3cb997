#!/usr/bin/env bash
# The real Linux kernel NFS client against the gateway, in a QEMU guest (tools/vm/vm.sh),
# because the kernels of CI containers have no NFS client. Host side of
# tests/vm/kernel-nfs-smoke.sh.
#
#   tests/vm/run-kernel-client.sh        (root; Debian 12; the first run installs packages)
#
# Expects target/release/gateway (or GATEWAY_BIN). The guest's output streams through and
# is kept in target/vm-kernel-client.log. Passes only if the guest script exited 0 AND
# printed its PASS line. The last line is "1 passed, 0 failed" or "0 passed, 1 failed".
# VM_TIMEOUT (seconds, default 1500 here) bounds the boot-run-poweroff; a TCG run on a
# 2-core machine takes about 75 s for the NFSv3 part; the NFSv4.1 part
# (tests/vm/kernel-nfs41.sh, on by default) adds 5-12 min, most of it the 10,000-entry
# directory (V41_ENTRIES; pass it with VM_ENV); KVM much less.
set -uo pipefail
cd "$(dirname "$0")/../.."
GATEWAY_BIN=${GATEWAY_BIN:-$PWD/target/release/gateway}
export VM_TIMEOUT=${VM_TIMEOUT:-1500}
# KERNEL_V41=0 skips the NFSv4.1 part; KERNEL_V41_SERVER=knfsd runs it against the
# guest kernel's nfsd instead of the gateway (a reference run of the same checks).
export VM_ENV="${VM_ENV:-} KERNEL_V41 KERNEL_V41_SERVER V41_PARTS V41_ENTRIES"
LOG=target/vm-kernel-client.log
PASS_LINE="KERNEL CLIENT SMOKE: PASS"

fail() { echo "run-kernel-client.sh: FAILED: $*" >&2; echo "0 passed, 1 failed"; exit 1; }

[ -x "$GATEWAY_BIN" ] || fail "gateway binary not found at $GATEWAY_BIN (cargo build --release -p gateway)"
bash tools/vm/vm.sh setup || fail "tools/vm/vm.sh setup"

mkdir -p target
start=$(date +%s)
bash tools/vm/vm.sh run-script tests/vm/kernel-nfs-smoke.sh "$GATEWAY_BIN" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
echo "run-kernel-client.sh: guest exit code $rc after $(( $(date +%s) - start ))s (log: $LOG)"

[ "$rc" -eq 0 ] || fail "guest script exited $rc (124 = VM_TIMEOUT, 125 = guest did not boot or report)"
grep -qxF "$PASS_LINE" "$LOG" || fail "the guest never printed '$PASS_LINE'"
echo "1 passed, 0 failed"
