#!/usr/bin/env bash
# Runs INSIDE the guest (tools/vm/vm.sh run-script, VM_RXE=1 when an RDMA stage is on):
# the guest scripts of the VM stages one after another in ONE boot, each bounded by its
# own timeout, each between two marker lines that tests/vm/run-vm-stages.sh splits the
# output by and judges each stage by:
#
#   @@@ vm-stage begin NAME
#   @@@ vm-stage end NAME rc=N secs=S
#
# Usage: guest-stages.sh GATEWAY RDMA_GATEWAY RDMA_BENCH   (VM_STAGES picks the stages)
#
# Order: the package stage runs first when asked for here (tests/vm/run-vm-stages.sh
# boots it alone, with systemd as PID 1; it leaves port 2049 free: it removes the
# package, which stops the service). The NFS/RDMA stage runs last, because Debian 6.1's NFS/RDMA client can oops in a
# forced unmount and leave later kernel mounts hanging (tests/README.md).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
GW=${1:?gateway binary}
RGW=${2:-}
RBENCH=${3:-}
STAGES=${VM_STAGES:-package kernel-client pnfs ha rdma-send-timeout kernel-rdma}
# The host's PATH comes into the guest (tools/vm/vm.sh), and a pyenv shim first on it
# makes every `python3` start a bash script that costs the TCG guest 12-20 s: the
# system's own programs first, for every stage.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

# bounded SECS CMD...: runs CMD and waits for it SECS seconds at most. A process the
# kernel holds in uninterruptible sleep (a task wedged in an NFS client bug) outlives
# every signal, and `timeout`, which waits for its child, would wait with it for the
# rest of the boot: the stages after it would never run and the boot's log would end
# without a word of why (CI's stop 47: the pnfs stage's end line never came). Returns
# CMD's status, or 125 with the wedged tasks' kernel stacks and the kernel log's tail.
bounded() {
  local secs=$1 pid end
  shift
  "$@" </dev/null &
  pid=$!
  end=$(($(date +%s) + secs))
  while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "guest-stages.sh: '$*' still running ${secs}s on: left behind, wedged tasks below"
    wedged
    return 125
  fi
  wait "$pid"
}

# The tasks in uninterruptible sleep (state D), each with its kernel stack, then the
# kernel log's tail: what a wedged stage leaves for whoever reads the CI log.
wedged() {
  local p st
  for p in /proc/[0-9]*; do
    st=$(awk '/^State:/ {print $2}' "$p/status" 2>/dev/null) || continue
    [ "$st" = D ] || continue
    echo "--- task ${p#/proc/} ($(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-160)), wchan $(cat "$p/wchan" 2>/dev/null)"
    sed 's/^/    /' "$p/stack" 2>/dev/null | head -30
  done
  echo "--- dmesg (tail)"
  dmesg 2>/dev/null | tail -60
  echo "---"
}

# Ends what a stage may have left behind that the next one would trip over: gateways and
# bench peers still running (ports 2049/20049), NFS mounts. A mount wedged by a client
# bug is detached (-l), never waited on for long.
settle() {
  local p exe n
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "$exe" in "$GW" | "$RGW" | "$RBENCH") kill -9 "${p#/proc/}" 2>/dev/null ;; esac
  done
  bounded 30 timeout 20 umount -a -f -l -t nfs,nfs4 2>/dev/null || true
  for n in $(seq 1 50); do
    pidof gateway bench >/dev/null || break
    sleep 0.2
  done
}

failed=0
for s in $STAGES; do
  case "$s" in
    package) cmd=(bash "$HERE/guest-package.sh" "${NFSGW_DEB:-}" "${NFSGW_DEB2:-}"); to=${PACKAGE_TIMEOUT:-900} ;;
    kernel-client) cmd=(bash "$HERE/kernel-nfs-smoke.sh" "$GW"); to=${KERNEL_CLIENT_TIMEOUT:-1500} ;;
    # pnfs: over TCP, then (PNFS_GARAGE: a Garage binary) three data servers on one S3
    # bucket (guest-pnfs-s3.sh), then (PNFS_FENCE=1, the default) a client cut off from
    # its metadata server fenced at a data server (guest-pnfs-fence.sh), then
    # (PNFS_RDMA=1, the RDMA build given) over proto=rdma, and fenced again with its
    # data servers reached over rdma; each part prints its own PASS line and time, the
    # stage needs them all.
    pnfs) pr=""; [ "${PNFS_RDMA:-0}" = 1 ] && pr=$RGW
          cmd=(bash -c 'bash "$1/guest-pnfs.sh" "$2" tcp || exit
                        [ -z "$4" ] || bash "$1/guest-pnfs-s3.sh" "$2" "$4" || exit
                        [ "$5" != 1 ] || bash "$1/guest-pnfs-fence.sh" "$2" tcp || exit
                        [ -z "$3" ] || bash "$1/guest-pnfs.sh" "$3" rdma || exit
                        [ -z "$3" ] || [ "$5" != 1 ] || bash "$1/guest-pnfs-fence.sh" "$3" rdma' \
               pnfs "$HERE" "$GW" "$pr" "${PNFS_GARAGE:-}" "${PNFS_FENCE:-1}"); to=${PNFS_TIMEOUT:-1500} ;;
    ha) hr=""; [ "${HA_RDMA:-1}" = 1 ] && hr=$RGW   # HA_RDMA=0: the TCP part alone
        cmd=(bash "$HERE/guest-ha.sh" "$GW" "$hr"); to=${HA_TIMEOUT:-600} ;;
    rdma-send-timeout) cmd=(bash "$HERE/rdma-send-timeout.sh" "$RGW" "$RBENCH"); to=${RDMA_SEND_TIMEOUT_TIMEOUT:-900} ;;
    kernel-rdma) cmd=(bash "$HERE/kernel-nfs-rdma.sh" "$RGW" "$RBENCH"); to=${KERNEL_RDMA_TIMEOUT:-1500} ;;
    *) echo "guest-stages.sh: unknown stage $s"; failed=$((failed + 1)); continue ;;
  esac
  # Each stage's scratch files (mktemp) in a directory of its own, removed afterwards:
  # the guest's /tmp is RAM (the overlay's tmpfs).
  tmp=$(mktemp -d /tmp/vm-stage.XXXXXX)
  echo "@@@ vm-stage begin $s"
  t0=$(date +%s)
  # Its timeout, and a minute for timeout's KILL to be reaped (`bounded`).
  TMPDIR=$tmp bounded $((to + 60)) timeout -k 15 "$to" "${cmd[@]}"
  rc=$?
  [ "$rc" = 124 ] && echo "guest-stages.sh: $s timed out after ${to}s"
  [ "$rc" = 125 ] && echo "guest-stages.sh: $s wedged: a task outlived its timeout's KILL (above); the next stages run"
  echo "@@@ vm-stage end $s rc=$rc secs=$(($(date +%s) - t0))"
  settle
  bounded 30 rm -rf "$tmp"
  [ "$rc" = 0 ] || failed=$((failed + 1))
done
exit $((failed > 0))
