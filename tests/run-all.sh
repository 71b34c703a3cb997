#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine or a developer's: installs what the
# tests need, builds the release binaries once, runs formatting and lint checks, every
# unit test, then the end-to-end suites against the real gateway binary and the kernel
# clients in one VM boot. Prints each stage's duration, and a table of all stages at the
# end (also when a stage fails).
#
#   tests/run-all.sh            # everything
#   SKIP_LINT=1 tests/run-all.sh
#   NFSGW_GARAGE=0 / SKIP_VM=1  # without the Garage stages / the VM stage
#
# Build cache: compiled artifacts live OUTSIDE the checkout, in
# ${NFSGW_CACHE:-$HOME/.cache/nfsgw}/target (unless CARGO_TARGET_DIR is set), so a fresh
# clone reuses every compiled dependency; only the workspace crates recompile. Logs stay
# in the checkout's target/.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${NFSGW_CACHE:-$HOME/.cache/nfsgw}/target}"
TGT=$CARGO_TARGET_DIR
LOGS=$PWD/target
mkdir -p "$LOGS" "$TGT"
# The default-feature binaries (unit and end-to-end tests, the TCP kernel client) and the
# `rdma`-feature ones (verbs provider: the VM's RDMA stages), both from one target dir.
BIN=$TGT/release
RDMA_BIN=$TGT/rdma-bin
# Features that turn on the verbs provider in every package that has one (the same set
# lints the `rdma` cfg and builds the VM's binaries: tests/vm/build-rdma.sh).
RDMA_FEATURES=engine/rdma,gateway/rdma,bench/rdma

# ---- stage clock -----------------------------------------------------------------------
RUN_T0=$(date +%s)
STAGE=""; STAGE_T0=0; ROWS=()
S3_PID=""; GDIR=""; VM_RAN=""
fmt_s() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
end_stage() {  # end_stage RESULT: close the running stage with RESULT (ok|FAILED)
  [ -n "$STAGE" ] || return 0
  local d=$(($(date +%s) - STAGE_T0))
  printf '=== %s: %s in %s ===\n' "$STAGE" "$1" "$(fmt_s "$d")"
  ROWS+=("$(printf '%-7s %8s  %s' "$1" "$(fmt_s "$d")" "$STAGE")")
  STAGE=""
}
step() { end_stage ok; STAGE="$*"; STAGE_T0=$(date +%s); printf '\n=== %s ===\n' "$*"; }
skip() { end_stage ok; ROWS+=("$(printf '%-7s %8s  %s' skipped - "$*")"); }
on_exit() {
  local rc=$?
  [ -n "$S3_PID" ] && kill "$S3_PID" 2>/dev/null
  [ -n "$GDIR" ] && { bash tools/garage/cluster.sh stop "$GDIR" >/dev/null 2>&1; rm -rf "$GDIR"; }
  if [ "$rc" -eq 0 ]; then end_stage ok; else end_stage FAILED; fi
  # the VM's stages, each with its own result and time (tests/vm/run-vm-stages.sh)
  [ -n "$VM_RAN" ] && [ -f "$LOGS/vm-stages.txt" ] && while IFS= read -r l; do ROWS+=("$l"); done <"$LOGS/vm-stages.txt"
  printf '\n=== stages ===\n'
  printf '%s\n' "${ROWS[@]}"
  printf '%-7s %8s  %s\n' "$([ "$rc" -eq 0 ] && echo ok || echo FAILED)" \
    "$(fmt_s $(($(date +%s) - RUN_T0)))" "total wall time (exit code $rc)"
  exit "$rc"
}
trap on_exit EXIT

step "setup (system packages, python venv)"
bash tests/setup.sh
# The io_uring suites need the ring; say so first rather than in a dozen failures later
# (test_uring.py switches the sysctl off for one serial test and restores it).
if [ "$(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo 0)" != 0 ]; then
  echo "run-all.sh: kernel.io_uring_disabled = $(cat /proc/sys/kernel/io_uring_disabled):" \
    "the io_uring tests will fail (sysctl -w kernel.io_uring_disabled=0)" >&2
fi

# The verbs build first: its uplifted target/release binaries are then replaced by the
# default build's (build-rdma.sh also restores them itself). Both share every dependency.
step "build with --features $RDMA_FEATURES (verbs; the VM's RDMA stages)"
bash tests/vm/build-rdma.sh >/dev/null

# --all-targets: the unit tests' binaries too, and dev-dependencies (tempfile) take part in
# the feature unification as they do under `cargo test`, so the unit test step compiles
# nothing and release/gateway is the very binary `cargo test` would build (without it,
# `cargo test` recompiled a dozen dependencies and every workspace crate once more).
step "build (release, default features, all targets; shared by every later step)"
cargo build --release --workspace --all-targets --locked 2>&1 | tail -n 3

if [ -z "${SKIP_LINT:-}" ]; then
  step "cargo fmt --check"
  cargo fmt --all -- --check
  step "layering rules (tests/arch/check.py: docs/architecture.md §2)"
  python3 tests/arch/check.py
  # Both cfgs of the `rdma` feature (code under #[cfg(not(feature = "rdma"))] too), in the
  # same target dir: the dependencies are checked once for both.
  step "cargo clippy -D warnings (default features)"
  cargo clippy --release --workspace --all-targets --locked -- -D warnings 2>&1 | tail -n 5
  step "cargo clippy -D warnings (--features $RDMA_FEATURES: the verbs provider)"
  cargo clippy --release --workspace --all-targets --locked --features "$RDMA_FEATURES" \
    -- -D warnings 2>&1 | tail -n 5
else
  skip "lint (SKIP_LINT)"
fi

# `cargo test --release --workspace --locked`'s binaries, three at a time (tests/run-unit.sh:
# they mostly wait; one after another they took 3m50). Prints each binary's result line;
# the whole output in target/unit-tests.log, a failed binary's tail on the terminal.
step "unit tests (the s3 backend's against a real S3 server on loopback: moto)"
eval "$(bash tests/s3/moto-server.sh start "$LOGS/moto-unit.log")"
set +e
NFSGW_S3_TEST_ENDPOINT="$S3_URL" bash tests/run-unit.sh "$LOGS/unit-tests.log"
rc=$?
set -e
kill "$S3_PID" 2>/dev/null || true
S3_PID=""
if [ "$rc" -ne 0 ]; then exit "$rc"; fi

# Garage (a distributed S3 store, AGPL, run as a separate server binary): built once per
# machine into ~/.cache/nfsgw (about 25 minutes on 2 cores the first time, cached after),
# then the s3 backend's conformance tests against a three-node rf=3 cluster on loopback.
# The e2e step below runs its [garage] tests on its own cluster. NFSGW_GARAGE=0 skips both.
if [ "${NFSGW_GARAGE:-1}" != 0 ]; then
  step "garage (build once, cached)"
  GARAGE_BIN=$(bash tools/garage/install.sh)
  export GARAGE_BIN
  step "s3 backend live tests against a 3-node Garage cluster"
  GDIR=$(mktemp -d "${TMPDIR:-/tmp}/nfsgw-garage.XXXXXX")
  NFSGW_GARAGE_OWNER_PID=$$ bash tools/garage/cluster.sh start "$GDIR" >/dev/null
  eval "$(bash tools/garage/cluster.sh env "$GDIR")"
  # The same cargo flags as the unit test step (--workspace: the same feature
  # unification), narrowed to the library tests and a name filter: nothing recompiles.
  set +e
  NFSGW_S3_TEST_ENDPOINT="$GARAGE_S3_ENDPOINT" NFSGW_S3_TEST_BUCKET="$GARAGE_BUCKET" \
    NFSGW_S3_TEST_ACCESS_KEY="$GARAGE_ACCESS_KEY" NFSGW_S3_TEST_SECRET_KEY="$GARAGE_SECRET_KEY" \
    NFSGW_S3_TEST_REGION="$GARAGE_REGION" \
    cargo test --release --workspace --locked --lib backend::s3::live_tests >"$LOGS/garage-tests.log" 2>&1
  rc=$?
  set -e
  bash tools/garage/cluster.sh stop "$GDIR"
  rm -rf "$GDIR"
  GDIR=""
  grep -E '^test |^test result|panicked|Compiling' "$LOGS/garage-tests.log" || true
  if [ "$rc" -ne 0 ]; then tail -n 60 "$LOGS/garage-tests.log"; exit "$rc"; fi
else
  skip "garage (NFSGW_GARAGE=0)"
fi

# Each suite in two passes (tests/run-e2e.sh): the tests without the `serial` mark on
# E2E_WORKERS pytest-xdist workers (mostly waiting: they overlap well on 2 cores), then
# the `serial` ones (rates, time bounds) alone on a quiet machine. One stage each.
W=${E2E_WORKERS:-4}
step "end-to-end, parallel ($W workers; real clients against $BIN/gateway)"
E2E_PASS=parallel E2E_WORKERS=$W GATEWAY_BIN="$BIN/gateway" bash tests/run-e2e.sh
step "end-to-end, serial (tests marked serial: rates and time bounds)"
E2E_PASS=serial GATEWAY_BIN="$BIN/gateway" bash tests/run-e2e.sh

# The core suites again with the fs backend's data I/O on the backend workers
# (backend.io = "workers"; the pass above ran them on the reactors' io_uring, the default
# where the kernel allows it). Only the fs cases: the setting does not touch the other
# backends.
IO_WORKERS_K="(test_ops or test_posix or test_restart or test_cache or test_uring) and not s3 and not memory"
step "end-to-end, fs data I/O on the backend workers (backend.io = \"workers\"), parallel"
NFSGW_E2E_IO=workers E2E_PASS=parallel E2E_WORKERS=$W GATEWAY_BIN="$BIN/gateway" \
  bash tests/run-e2e.sh -m "not garage" -k "$IO_WORKERS_K"
step "end-to-end, fs data I/O on the backend workers, serial"
NFSGW_E2E_IO=workers E2E_PASS=serial GATEWAY_BIN="$BIN/gateway" \
  bash tests/run-e2e.sh -m "not garage" -k "$IO_WORKERS_K"

# The real Linux kernel clients in ONE QEMU boot (software CPU when KVM is unusable):
# NFSv3+NFSv4.1 over TCP, rdma.send_timeout_s/stall_reclaim_ms on verbs, NFS over RDMA
# on Soft-RoCE. Each reports its own pass/fail (tests/vm/run-vm-stages.sh); SKIP_VM=1 skips.
if [ -z "${SKIP_VM:-}" ]; then
  rm -f "$LOGS/vm-stages.txt"; VM_RAN=1
  step "kernel clients in one VM (TCP v3/v4.1, RDMA send timeout, NFS/RDMA on Soft-RoCE)"
  # CI sizes (the guest scripts' defaults are the larger development sizes; every check
  # still runs). Under the software CPU most of the boot went to bulk: 10,000-entry
  # directories created and removed file by file (v4.1 over TCP alone: 6½ minutes) and
  # 256 MiB files moved four times. 2,000 entries still span many READDIR replies (and
  # RDMA reply chunks); a 100,000-entry directory is listed in tests/e2e/test_big_dirs.py.
  # The kernel-nfsd comparison (COMPARE) is a measurement, not a check: it is
  # tools/perf/vm-rdma-compare.sh's, not CI's.
  # The pnfs stage's S3 part runs on the Garage built above (PNFS_S3=1: a missing binary
  # fails the stage rather than leaving the part out); NFSGW_GARAGE=0 leaves it out.
  # VM_DEADLINE_S: the boots together get 45 minutes (quiet: 18), so a guest that hangs
  # fails its stages with its console tail instead of running CI past its 90 minutes.
  VM_DEADLINE_S=${VM_DEADLINE_S:-2700} \
  RDMA_FILE_MIB=${RDMA_FILE_MIB:-64} RDMA_DIR_ENTRIES=${RDMA_DIR_ENTRIES:-2000} \
  V41_ENTRIES=${V41_ENTRIES:-2000} COMPARE=${COMPARE:-0} \
  PNFS_S3=${PNFS_S3:-$([ "${NFSGW_GARAGE:-1}" = 0 ] && echo 0 || echo 1)} \
  GATEWAY_BIN="$BIN/gateway" RDMA_GATEWAY_BIN="$RDMA_BIN/gateway" RDMA_BENCH_BIN="$RDMA_BIN/bench" \
    bash tests/vm/run-vm-stages.sh
else
  skip "kernel clients in a VM (SKIP_VM)"
fi
