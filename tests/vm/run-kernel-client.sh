#!/usr/bin/env bash
# The real Linux kernel NFS client against the gateway, in a QEMU guest (tools/vm/vm.sh),
# because the kernels of CI containers have no NFS client: NFSv3 (tests/vm/kernel-nfs-smoke.sh)
# and NFSv4.1 (tests/vm/kernel-nfs41.sh; KERNEL_V41=0 skips it, KERNEL_V41_SERVER=knfsd
# runs it against the guest kernel's nfsd instead) over TCP.
#
#   tests/vm/run-kernel-client.sh        (root; Debian 12; the first run installs packages)
#
# One stage of tests/vm/run-vm-stages.sh, alone in its boot (tests/run-all.sh runs all VM
# stages in one boot). Expects $CARGO_TARGET_DIR/release/gateway (default target dir
# <repo>/target) or GATEWAY_BIN. Output in target/vm-kernel-client.log; the last line is
# "1 passed, 0 failed" or "0 passed, 1 failed". A TCG run on a 2-core machine takes about
# 75 s for the NFSv3 part; the NFSv4.1 part adds 5-12 min, most of it the 10,000-entry
# directory (V41_ENTRIES); KVM much less. KERNEL_CLIENT_TIMEOUT [1500 s] bounds the stage.
set -uo pipefail
cd "$(dirname "$0")/../.."
VM_STAGES=kernel-client exec bash tests/vm/run-vm-stages.sh
