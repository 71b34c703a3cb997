#!/usr/bin/env bash
# The VM stages in as few QEMU boots as they allow (tools/vm/vm.sh; a boot under the
# software CPU costs a minute or more, so the stages share it): the package stage in a
# boot of its own with systemd as PID 1 (VM_INIT=systemd: it tests the systemd unit), the
# others in ONE boot with the fast custom init. Each stage passes or fails on its own:
#
#   package            the Debian package installed, started, mounted, upgraded,
#                      removed and purged (guest-package.sh; .deb from
#                      tools/package/build-deb.sh unless NFSGW_DEB and NFSGW_DEB2 are given)
#   kernel-client      the kernel's NFSv3 + NFSv4.1 clients over TCP (kernel-nfs-smoke.sh,
#                      kernel-nfs41.sh), default-feature gateway
#   pnfs               the kernel's pNFS flexfiles client: one metadata server, three
#                      data servers on one shared fs store (guest-pnfs.sh), over TCP,
#                      then the three on one S3 bucket of a one-node Garage in the
#                      guest (guest-pnfs-s3.sh; PNFS_S3=1, the default when a Garage
#                      binary is found: GARAGE_BIN, else tools/garage/install.sh's
#                      cache; PNFS_S3=0 leaves it out), then a client cut off from
#                      its metadata server fenced at a data server (guest-pnfs-fence.sh;
#                      PNFS_FENCE=0 leaves it out), then over proto=rdma with
#                      netid "rdma" data servers when
#                      PNFS_RDMA=1 (the default when RDMA_GATEWAY_BIN is given; needs
#                      the RDMA build), fio verify and the fence too; in each, a data
#                      server killed mid-write and one mid-read
#   ha                 [ha] takeover under the kernel's NFSv4.1 client: two gateways in
#                      network namespaces, the service address moved as keepalived would, kill -9
#                      of the active while an application holds a lock and writes (guest-ha.sh);
#                      then over proto=rdma, two gateways on one address (guest-ha-rdma.sh;
#                      the RDMA build; HA_RDMA=0 leaves this part out); a second client's
#                      conflicting fcntl lock refused before, during and after the takeover
#   rdma-send-timeout  rdma.send_timeout_s and rdma.stall_reclaim_ms on real verbs
#                      (rdma-send-timeout.sh)
#   kernel-rdma        the kernel's NFS/RDMA client on Soft-RoCE (kernel-nfs-rdma.sh,
#                      kernel-nfs41-rdma.sh, kernel-rdma-compare.sh)
#
#   tests/vm/run-vm-stages.sh                      (root; Debian 12; all four)
#   VM_STAGES=kernel-client tests/vm/run-vm-stages.sh
#
# Binaries: GATEWAY_BIN [$CARGO_TARGET_DIR/release/gateway, target dir default
# <repo>/target]; RDMA_GATEWAY_BIN and RDMA_BENCH_BIN (built with --features rdma) are
# built by tests/vm/build-rdma.sh when not given and an RDMA stage is on.
# A stage passes only if its guest script exited 0 AND printed its PASS line. Its output
# is kept in target/vm-NAME.log (the whole boot in target/vm-stages.log); one line per
# stage in target/vm-stages.txt (result, time, name) for tests/run-all.sh's table. Last
# line: "N passed, M failed". Per-stage guest timeouts (seconds): PACKAGE_TIMEOUT [900],
# KERNEL_CLIENT_TIMEOUT [1500], PNFS_TIMEOUT [1500], HA_TIMEOUT [600], RDMA_SEND_TIMEOUT_TIMEOUT [900],
# KERNEL_RDMA_TIMEOUT [1500]; VM_TIMEOUT bounds each boot [the sum of its stages' + 300];
# VM_DEADLINE_S bounds all boots together [none; CI: 2700].
# The knobs of the guest scripts pass through
# (tests/README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
TGT=${CARGO_TARGET_DIR:-$PWD/target}
STAGES=${VM_STAGES:-package kernel-client pnfs ha rdma-send-timeout kernel-rdma}
GATEWAY_BIN=${GATEWAY_BIN:-$TGT/release/gateway}
mkdir -p target
SUMMARY=target/vm-stages.txt
LOG=target/vm-stages.log
: >"$SUMMARY"

pass_line() {
  case "$1" in
    package) echo "PACKAGE: PASS" ;;
    kernel-client) echo "KERNEL CLIENT SMOKE: PASS" ;;
    pnfs) echo "KERNEL PNFS: PASS"; [ -n "$PNFS_GARAGE" ] && echo "KERNEL PNFS/S3: PASS"
          [ "${PNFS_FENCE:-1}" = 1 ] && echo "KERNEL PNFS/FENCE: PASS"
          [ "$PNFS_RDMA" = 1 ] && echo "KERNEL PNFS/RDMA: PASS"
          [ "$PNFS_RDMA" = 1 ] && [ "${PNFS_FENCE:-1}" = 1 ] && echo "KERNEL PNFS/FENCE/RDMA: PASS" ;;
    ha) echo "KERNEL HA: PASS" ;;
    rdma-send-timeout) echo "RDMA SEND TIMEOUT: PASS" ;;
    kernel-rdma) echo "KERNEL NFS/RDMA: PASS" ;;
  esac
}
fail_all() {
  local s
  echo "run-vm-stages.sh: FAILED: $*" >&2
  for s in $STAGES; do printf '%-7s %8s  vm: %s\n' FAILED - "$s" >>"$SUMMARY"; done
  echo "0 passed, $(echo $STAGES | wc -w) failed"
  exit 1
}

rdma=0 tcp=0 pkg=0 budget=0
# The pnfs stage's RDMA part: on by default when the RDMA build is given.
PNFS_RDMA=${PNFS_RDMA:-$([ -n "${RDMA_GATEWAY_BIN:-}" ] && echo 1 || echo 0)}
export PNFS_RDMA
# The pnfs stage's S3 part: Garage's binary (run in the guest through its view of the
# host's root); on by default when there is one, never built from here (25 minutes).
PNFS_GARAGE=""
if [ "${PNFS_S3:-1}" = 1 ] && [[ " $STAGES " == *" pnfs "* ]]; then
  g=${GARAGE_BIN:-${NFSGW_CACHE:-$HOME/.cache/nfsgw}/garage-${GARAGE_VERSION:-2.5.0}/bin/garage}
  if [ -x "$g" ]; then PNFS_GARAGE=$(readlink -f "$g")
  elif [ "${PNFS_S3:-}" = 1 ]; then fail_all "PNFS_S3=1 but no Garage binary at $g (tools/garage/install.sh)"
  else echo "run-vm-stages.sh: no Garage binary at $g (tools/garage/install.sh): the pnfs stage's S3 part is left out"
  fi
fi
export PNFS_GARAGE
VM_ENV="${VM_ENV:-} PNFS_RDMA PNFS_READ_KILL_MIB PNFS_GARAGE PNFS_S3_FILES PNFS_S3_FILE_KIB PNFS_FENCE"
for s in $STAGES; do
  case "$s" in
    package) pkg=1 ;;
    kernel-client) tcp=1; budget=$((budget + ${KERNEL_CLIENT_TIMEOUT:-1500})) ;;
    pnfs) tcp=1; if [ "$PNFS_RDMA" = 1 ]; then rdma=1; fi; budget=$((budget + ${PNFS_TIMEOUT:-1500})) ;;
    ha) tcp=1; if [ "${HA_RDMA:-1}" = 1 ]; then rdma=1; fi; budget=$((budget + ${HA_TIMEOUT:-600})) ;;
    rdma-send-timeout) rdma=1; budget=$((budget + ${RDMA_SEND_TIMEOUT_TIMEOUT:-900})) ;;
    kernel-rdma) rdma=1; budget=$((budget + ${KERNEL_RDMA_TIMEOUT:-1500})) ;;
    *) fail_all "unknown stage '$s' (VM_STAGES)" ;;
  esac
done
OTHERS=$(for s in $STAGES; do [ "$s" = package ] || echo "$s"; done | xargs)

[ "$tcp" = 0 ] || [ -x "$GATEWAY_BIN" ] || fail_all "gateway binary not found at $GATEWAY_BIN (cargo build --release -p gateway)"
if [ "$rdma" = 1 ]; then
  if [ -z "${RDMA_GATEWAY_BIN:-}" ]; then
    d=$(bash tests/vm/build-rdma.sh) || fail_all "tests/vm/build-rdma.sh (cargo build --features rdma)"
    RDMA_GATEWAY_BIN=$d/gateway
  fi
  RDMA_BENCH_BIN=${RDMA_BENCH_BIN:-$(dirname "$RDMA_GATEWAY_BIN")/bench}
  [ -x "$RDMA_GATEWAY_BIN" ] || fail_all "rdma gateway binary not found at $RDMA_GATEWAY_BIN"
  [ -x "$RDMA_BENCH_BIN" ] || fail_all "rdma bench binary not found at $RDMA_BENCH_BIN"
fi
if [ "$pkg" = 1 ] && [ -z "${NFSGW_DEB:-}" ]; then
  # Two revisions of one build: the stage installs the first and upgrades to the second.
  # The binaries beside GATEWAY_BIN, packaged as they are (NO_BUILD=1); copied out of
  # target/debian/, where cargo-deb deletes the other revisions.
  ptgt=$(dirname "$(dirname "$GATEWAY_BIN")")
  rm -rf "$ptgt/vm-package" && mkdir -p "$ptgt/vm-package"
  for rev in 1 2; do
    d=$(NO_BUILD=1 DEB_REVISION=$rev CARGO_TARGET_DIR=$ptgt bash tools/package/build-deb.sh) \
      && cp "$d" "$ptgt/vm-package/" || fail_all "tools/package/build-deb.sh (revision $rev)"
  done
  NFSGW_DEB=$(ls "$ptgt"/vm-package/nfsgw_*-1_*.deb) NFSGW_DEB2=$(ls "$ptgt"/vm-package/nfsgw_*-2_*.deb)
fi
export NFSGW_DEB=${NFSGW_DEB:-} NFSGW_DEB2=${NFSGW_DEB2:-${NFSGW_DEB:-}}
VM_RXE=$rdma bash tools/vm/vm.sh setup || fail_all "tools/vm/vm.sh setup"
if [ "$rdma" = 1 ]; then
  # fio (write + verify jobs in the guest) runs from the host's root filesystem.
  if ! command -v fio >/dev/null; then
    [ "${VM_NO_INSTALL:-0}" = 1 ] && fail_all "fio is not installed (VM_NO_INSTALL=1)"
    [ "$(id -u)" = 0 ] || fail_all "need root to apt-get install fio"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends install fio \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends install fio; } \
      || fail_all "apt-get install fio"
  fi
  # Every command the guest scripts run comes from the host's root filesystem: check them
  # before the boot, so a package no script installs fails in seconds with its name.
  for c in fio mount.nfs rpcbind exportfs rpc.mountd rpc.nfsd rdma ibv_devices ip modprobe sha256sum python3; do
    command -v "$c" >/dev/null || fail_all "'$c' is not installed (tools/vm/vm.sh setup with VM_RXE=1 should have installed it)"
  done
fi
export VM_ENV="${VM_ENV:-} VM_STAGES NFSGW_DEB NFSGW_DEB2 PACKAGE_TIMEOUT KERNEL_CLIENT_TIMEOUT PNFS_TIMEOUT HA_TIMEOUT RDMA_SEND_TIMEOUT_TIMEOUT KERNEL_RDMA_TIMEOUT
  PNFS_FILES PNFS_FILE_KIB PNFS_KILL_MIB HA_LINES HA_RDMA HA_RDMA_LINES HA_ROUNDS HA_RDMA_ROUNDS HA_VIP_LINGER_S
  KERNEL_V41 KERNEL_V41_SERVER V41_PARTS V41_ENTRIES KERNEL_V42 KERNEL_V42_DELEG V42R
  SEND_TIMEOUT_S STALL_WAIT_S STALL_RECLAIM_MS
  RDMA_FILE_MIB RDMA_FIO_MIB RDMA_DIR_ENTRIES TCP_FILE_MIB TCP_DIR_ENTRIES GW_CORES V41 V41R_FILE_MIB
  V41R_FIO_MIB V41R_DIR_ENTRIES V41R_PARTS V41R_V3_PROTO V41R_MOUNT_EXTRA V41R_KEEP_GOING
  V41R_OP_TIMEOUT COMPARE COMPARE_VERS COMPARE_RUNTIME COMPARE_MIB"

# boot INIT "STAGES" TIMEOUT RXE: one boot running those stages, output appended to $LOG.
boot() {
  local start rc s to=${VM_TIMEOUT:-$3}
  start=$(date +%s)
  # VM_DEADLINE_S: every boot together ends by then (CI's own budget; a hung boot fails
  # its stages instead of running the whole CI out of time)
  if [ -n "${VM_DEADLINE_S:-}" ]; then
    local left=$((VM_T0 + VM_DEADLINE_S - start))
    [ "$left" -lt 60 ] && left=60
    [ "$to" -gt "$left" ] && { to=$left; echo "run-vm-stages.sh: this boot gets ${to}s (VM_DEADLINE_S)"; }
  fi
  VM_INIT=$1 VM_STAGES=$2 VM_TIMEOUT=$to VM_RXE=$4 bash tools/vm/vm.sh run-script \
    tests/vm/guest-stages.sh "$GATEWAY_BIN" "${RDMA_GATEWAY_BIN:-}" "${RDMA_BENCH_BIN:-}" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  echo "run-vm-stages.sh: boot ($1 init: $2): guest exit code $rc after $(($(date +%s) - start))s (log: $LOG)"
  [ "$rc" = 124 ] && echo "run-vm-stages.sh: the boot hit VM_TIMEOUT"
  [ "$rc" = 125 ] && echo "run-vm-stages.sh: the guest did not boot or report (console tail above)"
  for s in $2; do BOOT_RC[$s]=$rc; done
}
declare -A BOOT_RC
VM_T0=$(date +%s)
: >"$LOG"
# The systemd boot needs neither Soft-RoCE nor the RDMA stages' memory.
[ "$pkg" = 1 ] && boot systemd package $((${PACKAGE_TIMEOUT:-900} + 300)) 0
if [ -n "$OTHERS" ]; then
  # The NFS/RDMA stage's memory backend holds the 256 MiB file and the fio files, and
  # each bench RDMA connection registers ~128 credits x 1 MiB of buffers: 2 GiB runs out.
  [ "$rdma" = 1 ] && export VM_MEM=${VM_MEM:-3072}
  boot custom "$OTHERS" $((budget + 300)) "$rdma"
fi

passed=0 failed=0
for s in $STAGES; do
  slog=target/vm-$s.log
  awk -v s="$s" '$0 == "@@@ vm-stage begin " s {on = 1; next}
                 on && index($0, "@@@ vm-stage end " s " ") == 1 {print; exit}
                 on {print}' "$LOG" >"$slog"
  end=$(grep -E "^@@@ vm-stage end $s rc=" "$slog" || true)
  secs=$(sed -n 's/.* secs=\([0-9]*\)$/\1/p' <<<"$end")
  srv=$(sed -n 's/.* rc=\([0-9]*\) .*/\1/p' <<<"$end")
  why=""
  if [ -z "$end" ]; then why="never finished in the guest (boot rc ${BOOT_RC[$s]:-})"
  elif [ "$srv" != 0 ]; then why="guest script exited $srv (124 = its timeout)"
  else
    # every PASS line the stage owes (pnfs: one per part)
    while IFS= read -r pl; do
      grep -qxF "$pl" "$slog" || { why="never printed '$pl'"; break; }
    done < <(pass_line "$s")
  fi
  t=-; [ -n "$secs" ] && t=$(printf '%dm%02ds' $((secs / 60)) $((secs % 60)))
  if [ -z "$why" ]; then
    passed=$((passed + 1)); echo "vm stage $s: 1 passed, 0 failed ($t; log: $slog)"
    printf '%-7s %8s  vm: %s\n' ok "$t" "$s" >>"$SUMMARY"
  else
    failed=$((failed + 1)); echo "vm stage $s: FAILED: $why; 0 passed, 1 failed ($t; log: $slog)"
    printf '%-7s %8s  vm: %s\n' FAILED "$t" "$s" >>"$SUMMARY"
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
