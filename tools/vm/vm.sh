#!/usr/bin/env bash
# vm.sh - run a script inside a throwaway QEMU guest with Debian's stock kernel, to test
# the gateway against REAL kernel clients (the NFS client today, Soft-RoCE later) on
# hosts (CI containers, dev boxes) whose own kernel has neither.
#
#   tools/vm/vm.sh setup                   install Debian packages, build the initramfs
#                                          (idempotent; a fast no-op when done)
#   tools/vm/vm.sh run-script FILE [ARGS]  boot, run `bash FILE ARGS` in the guest in the
#                                          caller's working directory, stream its output,
#                                          power off, exit with the script's exit code
#   tools/vm/vm.sh run 'CMD...'            same for a one-line command (debugging)
#
# How: the guest boots /boot/vmlinuz-* (package linux-image-amd64) with a tiny busybox
# initramfs (tools/vm/initramfs-init) that mounts the host's "/" read-only over virtio-9p
# under a tmpfs overlay. So everything built on the host (target/release/gateway, tools
# from apt) is visible at the same path and runs unchanged, and nothing the guest writes
# reaches the host - except the per-run directory (/vmrun in the guest) that carries the
# script's arguments, its output and its exit code back. See tools/vm/README.md.
#
# Exit codes besides the script's own: 124 = wall-clock timeout, 125 = the guest never
# reported an exit code (boot failure, kernel panic; the console tail is printed).
#
# Knobs (environment, defaults in brackets):
#   VM_DIR        cache + run directories [/var/tmp/gateway-vm]
#   VM_TIMEOUT    wall-clock limit for one boot-run-poweroff, seconds [600]
#   VM_POWEROFF_WAIT  seconds a guest that reported its exit code gets to power off
#                 before QEMU is stopped [60]
#   VM_MEM        guest RAM, MiB [2048]                 VM_CPUS   vCPUs [2]
#   VM_ACCEL      auto|kvm|tcg [auto: kvm only if /dev/kvm is usable for a stock kernel]
#   VM_ENV        extra variable names to pass into the guest [] (PATH HOME USER LANG
#                 RUST_LOG RUST_BACKTRACE always pass)
#   VM_RXE        1 = install rdma-core and create Soft-RoCE rxe0 on eth0 in the guest [0]
#                 (for the RDMA transport tests; verbs/rdma_cm only work inside the guest)
#   VM_VERBOSE    1 = also stream the guest's serial console (kernel, init) to stderr [0]
#   VM_NO_INSTALL 1 = never run apt-get; fail if a package is missing [0]
#   VM_APPEND     extra kernel command-line arguments []
#   VM_INIT       custom|systemd [custom]: systemd = the host's systemd is PID 1 and runs
#                 the script as a service (guest-systemd.sh); slower to boot, for tests
#                 of systemd units (tests/vm/guest-package.sh); net.ifnames=0 keeps eth0
# Guest network: QEMU user-mode (slirp) with restrict=on - the guest cannot reach the
# host's network or the Internet; eth0 is 10.0.2.15/24. Tests use loopback.
set -euo pipefail
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)

VM_DIR=${VM_DIR:-/var/tmp/gateway-vm}
VM_TIMEOUT=${VM_TIMEOUT:-600}
VM_POWEROFF_WAIT=${VM_POWEROFF_WAIT:-60}
VM_MEM=${VM_MEM:-2048}
VM_CPUS=${VM_CPUS:-2}
VM_ACCEL=${VM_ACCEL:-auto}
VM_ENV=${VM_ENV:-}
VM_RXE=${VM_RXE:-0}
VM_VERBOSE=${VM_VERBOSE:-0}
VM_NO_INSTALL=${VM_NO_INSTALL:-0}
VM_APPEND=${VM_APPEND:-}
VM_INIT=${VM_INIT:-custom}
case "$VM_INIT" in custom) ;; systemd) VM_APPEND="$VM_APPEND vm.systemd=1 net.ifnames=0" ;; *) echo "[vm] VM_INIT=$VM_INIT: custom or systemd" >&2; exit 2 ;; esac

# Host packages; through the shared root they are also the guest's userland.
#   qemu-system-x86: the VM; linux-image-amd64: a kernel with nfs/9p/overlay modules;
#   busybox-static + cpio + gzip + kmod: build the initramfs (kmod resolves module deps);
#   iproute2: `ip` in the guest; nfs-common: mount.nfs for `mount -t nfs` in the guest;
#   netbase: /etc/protocols, without which mount.nfs fails ("Failed to find 'tcp'
#   protocol") on minimal images such as debian:bookworm-slim.
PKGS="qemu-system-x86 linux-image-amd64 busybox-static cpio gzip kmod iproute2 nfs-common netbase"
# With VM_RXE=1 also the kernel NFS server's userland (exportfs, rpc.mountd, rpc.nfsd:
# nfs-kernel-server), for the in-guest nfsd comparison of tests/vm/kernel-rdma-compare.sh.
[ "$VM_RXE" = 1 ] && PKGS="$PKGS rdma-core ibverbs-providers ibverbs-utils rdmacm-utils nfs-kernel-server"
# Modules the initramfs needs to reach the 9p root (their dependencies are added).
INITRD_MODS="virtio_pci 9pnet_virtio 9p overlay"

log() { printf '[vm] %s\n' "$*" >&2; }
die() { printf '[vm] ERROR: %s\n' "$*" >&2; exit 125; }

QPID=""; TMPF=""; PRC=""   # things to undo on exit: qemu, a temp file, our policy-rc.d
cleanup() {
  [ -n "$QPID" ] && kill "$QPID" 2>/dev/null
  [ -n "$TMPF" ] && rm -f "$TMPF"
  [ -n "$PRC" ] && rm -f "$PRC"
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ------------------------------------------------------------------ packages
install_pkgs() {
  local installed missing="" p
  # One dpkg-query for all packages keeps the no-op path fast. It exits non-zero when
  # some are unknown to dpkg (a fresh machine): hence the `|| true` under pipefail.
  installed=" $({ dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' $PKGS 2>/dev/null || true; } \
               | awk '$1 == "ii" {printf "%s ", $2}')"
  for p in $PKGS; do case "$installed" in *" $p "*) ;; *) missing="$missing$p ";; esac; done
  [ -z "$missing" ] && return 0
  [ "$VM_NO_INSTALL" = 1 ] && die "missing packages: $missing(VM_NO_INSTALL=1)"
  [ "$(id -u)" = 0 ] || die "need root to apt-get install: $missing"
  log "installing: $missing(log: $VM_DIR/apt.log)"
  # Package scripts must not start host services (rpcbind from nfs-common): a
  # policy-rc.d that says "no" for the duration of the install, unless one exists.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    PRC=/usr/sbin/policy-rc.d; printf '#!/bin/sh\nexit 101\n' > $PRC; chmod +x $PRC
  fi
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -o DPkg::Lock::Timeout=600 -y --no-install-recommends)
  # Try without `update` first (fast when the lists are fresh); a fresh container has
  # no lists at all, then update and retry.
  local ok=0
  "${apt[@]}" install $missing >"$VM_DIR/apt.log" 2>&1 && ok=1
  if [ $ok = 0 ]; then
    "${apt[@]}" update >>"$VM_DIR/apt.log" 2>&1 || true
    "${apt[@]}" install $missing >>"$VM_DIR/apt.log" 2>&1 && ok=1
  fi
  [ -n "$PRC" ] && rm -f "$PRC"; PRC=""
  [ $ok = 1 ] || { tail -20 "$VM_DIR/apt.log" >&2; die "apt-get install failed"; }
}

# ------------------------------------------------------------------ kernel, accelerator
detect_kver() {  # newest kernel that has both an image and modules
  local v best=""
  for v in $(ls -1 /lib/modules 2>/dev/null | sort -V); do
    [ -f "/boot/vmlinuz-$v" ] && [ -e "/lib/modules/$v/modules.dep" ] && best=$v
  done
  [ -n "$best" ] || die "no kernel (need /boot/vmlinuz-V and /lib/modules/V: apt-get install linux-image-amd64)"
  echo "$best"
}

detect_accel() {
  case "$VM_ACCEL" in kvm|tcg) echo "$VM_ACCEL"; return;; esac
  # Some cloud machines expose a /dev/kvm that is PVM (module kvm_pvm, no vmx/svm in
  # cpuinfo): it only runs PVM-enlightened guests and a stock kernel crawls, so those
  # and machines without usable KVM get TCG (software CPU: slower, but works anywhere).
  if [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo \
     && [ ! -d /sys/module/kvm_pvm ]; then echo kvm; else echo tcg; fi
}

# ------------------------------------------------------------------ initramfs
# Rebuilt only when its inputs change: kernel, module list, busybox, the init script.
build_initrd() {
  local kver=$1 out="$VM_DIR/initramfs-$1.cpio.gz" stamp
  stamp=$({ echo "$kver $INITRD_MODS"; cat "$HERE/initramfs-init"; cat /bin/busybox; } | sha256sum | cut -c1-16)
  [ -f "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ] && return 0
  log "building initramfs for kernel $kver"
  { LC_ALL=C ldd /bin/busybox 2>&1 || true; } | grep -q 'not a dynamic' \
    || die "/bin/busybox is not static (apt-get install busybox-static)"
  local t; t=$(mktemp -d "$VM_DIR/initrd.XXXXXX")
  mkdir -p "$t"/{bin,mods,proc,sys,dev,lower,rw,newroot}
  cp /bin/busybox "$t/bin/"
  local a; for a in sh mount insmod mkdir grep cat echo sleep switch_root; do ln -s busybox "$t/bin/$a"; done
  # modprobe prints the insmod lines in load order; copy each module once, uncompressed.
  local m f seen=" "
  : > "$t/mods/order"
  for m in $INITRD_MODS; do
    for f in $(modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'); do
      case "$seen" in *" $f "*) continue;; esac
      seen="$seen$f "
      local name; name=$(basename "${f%.ko*}")
      case "$f" in
        *.ko) cp "$f" "$t/mods/$name.ko";;
        *.ko.xz) xz -dc "$f" > "$t/mods/$name.ko";;
        *.ko.zst) zstd -qdc "$f" > "$t/mods/$name.ko";;
        *.ko.gz) gzip -dc "$f" > "$t/mods/$name.ko";;
        *) die "unexpected module file $f";;
      esac
      echo "$name" >> "$t/mods/order"
    done
  done
  [ -s "$t/mods/order" ] || die "modprobe found no modules for: $INITRD_MODS"
  install -m 755 "$HERE/initramfs-init" "$t/init"
  (cd "$t" && find . | cpio -o -H newc --quiet | gzip -1) > "$out.tmp"
  mv "$out.tmp" "$out"; echo "$stamp" > "$out.stamp"
  rm -rf "$t"
}

prepare() {
  mkdir -p "$VM_DIR/runs"
  install_pkgs
  KVER=$(detect_kver)
  ACCEL=$(detect_accel)
  build_initrd "$KVER"
}

# ------------------------------------------------------------------ one run
new_run() {  # new_run FILE [ARGS...]: make the run directory, print its path
  local run v; run=$(mktemp -d "$VM_DIR/runs/run.XXXXXX")
  chmod 755 "$run"
  cp "$HERE/guest-init.sh" "$HERE/guest-systemd.sh" "$run/"
  : > "$run/output.log"
  {
    for v in PATH HOME USER LANG RUST_LOG RUST_BACKTRACE $VM_ENV; do
      [ -n "${!v+x}" ] && printf 'export %s=%q\n' "$v" "${!v}"
    done
    printf 'VM_CWD=%q\nVM_SCRIPT=%q\nVM_RXE=%q\n' "$PWD" "$(readlink -f "$1")" "$VM_RXE"
    shift
    printf 'VM_ARGS=('; for v in "$@"; do printf '%q ' "$v"; done; printf ')\n'
  } > "$run/env"
  # keep the last 10 runs for post-mortems
  ls -1dt "$VM_DIR"/runs/run.* 2>/dev/null | tail -n +11 | xargs -r rm -rf
  echo "$run"
}

boot() {  # boot RUNDIR: run QEMU to completion, stream output.log; sets GUEST_RC
  local run=$1 q qrc=0 start tpid cpid=""
  q=(qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot -monitor none
     -M pc -m "$VM_MEM" -smp "$VM_CPUS"
     -kernel "/boot/vmlinuz-$KVER" -initrd "$VM_DIR/initramfs-$KVER.cpio.gz"
     -append "console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off tsc=reliable no_timer_check $VM_APPEND"
     # multidevs=remap: the host "/" spans several filesystems; keep inode numbers unique
     -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
     -virtfs "local,path=$run,mount_tag=vmrun,security_model=none,multidevs=remap"
     -netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0,romfile=
     -device virtio-rng-pci
     -serial "file:$run/console.log")
  if [ "$ACCEL" = kvm ]; then q+=(-accel kvm -cpu host)
  else q+=(-accel tcg,thread=multi,tb-size=512 -cpu max); fi
  echo "${q[*]}" > "$run/qemu-cmdline"
  : > "$run/console.log"
  start=$(date +%s)
  timeout -k 10 "$VM_TIMEOUT" "${q[@]}" </dev/null >"$run/qemu.log" 2>&1 & QPID=$!
  tail -n +1 -s 0.5 -f --pid=$QPID "$run/output.log" & tpid=$!
  if [ "$VM_VERBOSE" = 1 ]; then tail -n +1 -s 0.5 -f --pid=$QPID "$run/console.log" >&2 & cpid=$!; fi
  # The guest's exit code arrives before its poweroff; a guest that cannot power off (a
  # kernel that oopsed holding its NFS client's locks) is stopped VM_POWEROFF_WAIT s later.
  local rc_at=""
  while kill -0 "$QPID" 2>/dev/null; do
    if [ -z "$rc_at" ] && [ -f "$run/rc" ]; then rc_at=$(date +%s); fi
    if [ -n "$rc_at" ] && [ $(($(date +%s) - rc_at)) -ge "$VM_POWEROFF_WAIT" ]; then
      log "the guest reported exit code $(cat "$run/rc") but did not power off in ${VM_POWEROFF_WAIT}s; stopping QEMU"
      kill "$QPID" 2>/dev/null
      break
    fi
    sleep 1
  done
  wait $QPID || qrc=$?
  QPID=""
  wait $tpid 2>/dev/null || true; [ -n "$cpid" ] && { wait $cpid 2>/dev/null || true; }
  if [ -f "$run/rc" ]; then GUEST_RC=$(cat "$run/rc")
  elif [ $qrc = 124 ]; then GUEST_RC=124; log "TIMEOUT after ${VM_TIMEOUT}s (VM_TIMEOUT)"
  else GUEST_RC=125; [ $qrc != 0 ] && { log "qemu exited $qrc:"; cat "$run/qemu.log" >&2; }
  fi
  if [ "$GUEST_RC" = 124 ] || [ "$GUEST_RC" = 125 ]; then
    log "no exit code from the guest; last console lines:"; tail -n 30 "$run/console.log" >&2 || true
  fi
  log "rc=$GUEST_RC wall=$(( $(date +%s) - start ))s accel=$ACCEL kernel=$KVER mem=${VM_MEM}M cpus=$VM_CPUS run=$run"
}

run_script() {  # run_script FILE [ARGS...]
  [ -f "$1" ] || die "no such script: $1"
  prepare
  local run; run=$(new_run "$@")
  boot "$run"
  exit "$GUEST_RC"
}

# ------------------------------------------------------------------ main
[ "$(id -u)" = 0 ] || die "must run as root (9p export of /, apt-get)"
sub=${1:-}; shift || true
case "$sub" in
  setup)
    prepare
    log "ready: kernel $KVER, accel $ACCEL, initramfs $VM_DIR/initramfs-$KVER.cpio.gz";;
  run-script)
    [ $# -ge 1 ] || die "usage: $0 run-script FILE [ARGS...]"
    run_script "$@";;
  run)
    [ $# -ge 1 ] || die "usage: $0 run 'COMMAND...'"
    mkdir -p "$VM_DIR"; TMPF=$(mktemp "$VM_DIR/cmd.XXXXXX")
    printf '%s\n' "$*" > "$TMPF"
    run_script "$TMPF";;
  *)
    sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 2;;
esac
