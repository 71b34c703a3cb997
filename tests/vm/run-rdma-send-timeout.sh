#!/usr/bin/env bash
# `rdma.send_timeout_s` and `rdma.stall_reclaim_ms` on real verbs (Soft-RoCE) in a QEMU
# guest (tools/vm/vm.sh with VM_RXE=1): tests/vm/rdma-send-timeout.sh (a peer that posts
# no Receive and asks for rnr_retry_count 7 is disconnected after the timeout, counted,
# and a well-behaved client is served afterwards; then, with the 120 s send timeout, two
# such peers sending 1 MiB READs hold every large buffer until a good client's READ
# starves and the reclaim closes them). 40 s under TCG on an idle 2-core host for the
# first phase; on a host at load average 7 the first phase took 150 s and the second
# 175-205 s.
#
#   tests/vm/run-rdma-send-timeout.sh   (root; Debian 12; libibverbs-dev, librdmacm-dev,
#                                        libclang-dev: tests/setup.sh)
#
# One stage of tests/vm/run-vm-stages.sh, alone in its boot (tests/run-all.sh runs all VM
# stages in one boot). Builds gateway and bench with their `rdma` features
# (tests/vm/build-rdma.sh) unless GATEWAY_BIN (and BENCH_BIN) are given. SEND_TIMEOUT_S
# [3], STALL_WAIT_S and STALL_RECLAIM_MS [1000] pass through. Output in
# target/vm-rdma-send-timeout.log. Last line: "1 passed, 0 failed" or "0 passed, 1
# failed". RDMA_SEND_TIMEOUT_TIMEOUT [900 s] bounds the stage.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -n "${GATEWAY_BIN:-}" ] && export RDMA_GATEWAY_BIN=$GATEWAY_BIN
[ -n "${BENCH_BIN:-}" ] && export RDMA_BENCH_BIN=$BENCH_BIN
VM_STAGES=rdma-send-timeout exec bash tests/vm/run-vm-stages.sh
