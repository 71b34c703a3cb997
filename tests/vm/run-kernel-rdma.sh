#!/usr/bin/env bash
# The real Linux kernel NFS client over RPC-over-RDMA (Soft-RoCE) against the gateway's
# `verbs` provider, in a QEMU guest (tools/vm/vm.sh with VM_RXE=1): tests/vm/kernel-nfs-rdma.sh
# (256 MiB byte-exact over proto=rdma, fio verify jobs, a 10,000-entry directory,
# rename/symlink/chmod/remove, remounts, the same over proto=tcp, a client killed
# mid-transfer, `bench --provider verbs` verified runs, connections spread over two
# reactors), then NFSv4.1 over RDMA (tests/vm/kernel-nfs41-rdma.sh) and a short comparison
# with the guest's kernel nfsd (ratios printed). About 9 minutes under TCG on an idle
# 2-core host (519 s measured), ~19 minutes with a load average of 8.
#
#   tests/vm/run-kernel-rdma.sh        (root; Debian 12; needs libibverbs-dev,
#                                       librdmacm-dev, libclang-dev: tests/setup.sh;
#                                       fio is apt-installed here when missing)
#
# One stage of tests/vm/run-vm-stages.sh, alone in its boot (tests/run-all.sh runs all VM
# stages in one boot). Builds gateway and bench with their `rdma` features
# (tests/vm/build-rdma.sh) unless GATEWAY_BIN (and BENCH_BIN) are given. The knobs of the
# guest script pass through (tests/README.md). Output in target/vm-kernel-rdma.log. Last
# line: "1 passed, 0 failed" or "0 passed, 1 failed". KERNEL_RDMA_TIMEOUT [1500 s] bounds
# the stage.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -n "${GATEWAY_BIN:-}" ] && export RDMA_GATEWAY_BIN=$GATEWAY_BIN
[ -n "${BENCH_BIN:-}" ] && export RDMA_BENCH_BIN=$BENCH_BIN
VM_STAGES=kernel-rdma exec bash tests/vm/run-vm-stages.sh
