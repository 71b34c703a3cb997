#!/usr/bin/env bash
# Trees through the Linux kernel NFS client: the gateway (fs backend) against the
# guest's own kernel NFS server (nfsd), in one QEMU guest (tools/vm/vm.sh), both serving
# the same kind of file system, both mounted with the same client options. For each server in turn: untar a
# tree of more than 10,000 files from a Debian package (Documentation/ and fs/ of
# linux-source-6.1: 10,947 files, 727 directories, 93 MB), `ls -lR` it, `rm -rf` it,
# each phase on a fresh mount (no client cache carried over). Backing store: an ext4
# image in the guest's RAM for each. Prints seconds per phase
# and the gateway/knfsd ratios. A benchmark, not a CI stage; under QEMU's software CPU
# (TCG) only the ratios mean anything (docs/performance.md "Big directories and trees").
#
#   tools/perf/vm-md-compare.sh                (host; root; Debian 12)
#
# Knobs (environment): GATEWAY_BIN [$CARGO_TARGET_DIR or target/release/gateway],
# VERS ["3"; "3 4.1" adds NFSv4.1 mounts], ROUNDS [1], NFSD_THREADS [4],
# TREE_TAR [/var/tmp/nfsgw-md/tree.tar: made here from `apt-get download
# linux-source-6.1` when missing]. The guest sees the host's / read-only, so the tar
# travels through the rig's 9p root share. Output: target/vm-md-compare.log.
#
# Inside the guest the same file runs with --guest GATEWAY TAR.
set -uo pipefail

guest() {
  set -euo pipefail
  local GW=$1 TAR=$2 ADDR=10.0.2.15 GW_TCP=2049 KN_TCP=2050
  local VERS=${VERS:-3} ROUNDS=${ROUNDS:-1} NFSD_THREADS=${NFSD_THREADS:-4}
  local W; W=$(mktemp -d)
  mkdir -p /srv /export
  # The same kind of backing store for both: an ext4 image each, in the guest's RAM
  # (6.1's tmpfs has no user xattrs, where the gateway keeps object metadata).
  modprobe loop 2>/dev/null || true
  local d
  for d in /srv /export; do
    truncate -s 1G "$d.img"
    mkfs.ext4 -q -F "$d.img"
    mount -o loop "$d.img" "$d"
  done
  mkdir -p /srv/data /srv/state
  cat > "$W/gw.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
[tcp]
listen = "$ADDR:$GW_TCP"
[backend]
kind = "fs"
root = "/srv/data"
[state]
dir = "/srv/state"
[[exports]]
path = "/"
clients = ["0.0.0.0/0"]
squash = "none"
TOML
  trap 'for m in /mnt/gw /mnt/kn; do umount -f $m 2>/dev/null || true; done; [ -n "${GWPID:-}" ] && kill $GWPID 2>/dev/null; rpc.nfsd 0 2>/dev/null || true' EXIT
  "$GW" --config "$W/gw.toml" > "$W/gw.log" 2>&1 &
  GWPID=$!
  for _ in $(seq 1 300); do
    (exec 3<>/dev/tcp/$ADDR/$GW_TCP) 2>/dev/null && break
    kill -0 $GWPID 2>/dev/null || { echo "gateway exited at startup"; cat "$W/gw.log"; exit 1; }
    sleep 0.1
  done
  modprobe nfsd
  mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
  mkdir -p /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery /run/rpcbind
  mountpoint -q /var/lib/nfs/rpc_pipefs || mount -t rpc_pipefs rpc_pipefs /var/lib/nfs/rpc_pipefs 2>/dev/null || true
  echo "/export *(rw,no_root_squash,insecure,no_subtree_check,fsid=0)" > /etc/exports
  echo 10 > /proc/fs/nfsd/nfsv4leasetime; echo 10 > /proc/fs/nfsd/nfsv4gracetime
  rpcbind -w
  exportfs -ra
  rpc.mountd
  rpc.nfsd -p "$KN_TCP" "$NFSD_THREADS"
  echo "kernel $(uname -r); $(nproc) vCPUs; knfsd threads $(cat /proc/fs/nfsd/threads)"

  mnt() { # server version mountpoint
    local port=$GW_TCP path=/ opts
    [ "$1" = kn ] && port=$KN_TCP
    [ "$1" = kn ] && [ "$2" = 3 ] && path=/export
    mkdir -p "$3"
    if [ "$2" = 3 ]; then
      opts="vers=3,proto=tcp,port=$port,mountproto=tcp,nolock,retry=0"
      [ "$1" = gw ] && opts="$opts,mountport=$GW_TCP"
    else
      opts="vers=$2,proto=tcp,port=$port,retry=0"
    fi
    mount -t nfs -o "$opts" "$ADDR:$path" "$3"
  }
  # One phase on a fresh mount: prints its seconds.
  phase() { # server version what
    local m=/mnt/$1 t0 t1
    mnt "$1" "$2" $m
    echo "[md] $1 v$2 $3" >&2
    t0=$(date +%s.%N)
    case $3 in
      untar) tar -xf "$TAR" -C $m 2> "$W/tar.$1" || { echo "tar on $1 failed:" >&2; head "$W/tar.$1" >&2; } ;;
      ls) ls -lR $m > "$W/ls.$1" ;;
      rm) rm -rf "$m/linux-source-6.1" ;;
    esac
    t1=$(date +%s.%N)
    umount $m
    echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}'
  }
  local want; want=$(tar -tvf "$TAR" | grep -c '^-')
  echo "tree: $want files from $(basename "$TAR")"
  echo "| NFS | phase | gateway s | knfsd s | gateway/knfsd time |"
  echo "|---|---|---:|---:|---:|"
  for v in $VERS; do
    for r in $(seq 1 "$ROUNDS"); do
      for p in untar ls rm; do
        local g k
        g=$(phase gw "$v" $p); k=$(phase kn "$v" $p)
        if [ $p = ls ]; then
          # Both servers must list the same files (names and sizes), as many as the tar
          # holds regular files give or take what tar itself skips.
          local n; n=$(grep -c '^-' "$W/ls.gw")
          diff <(grep '^-' "$W/ls.gw" | awk '{print $5, $NF}' | sort) \
               <(grep '^-' "$W/ls.kn" | awk '{print $5, $NF}' | sort) \
            || { echo "ls -lR: the gateway's listing differs from knfsd's (above)"; exit 1; }
          echo "ls -lR: $n files on both (the tar lists $want)"
        fi
        echo "RESULT v$v round$r $p gateway $g knfsd $k"
        echo "| v$v | $p | $g | $k | $(echo "$g $k" | awk '{printf "%.2f", $1 / $2}') |"
      done
    done
  done
  # The gateway's own temporaries (`.nfsgw-tmp.*`, never listed: backend/fs/flush.rs's
  # log-force marker among them) are not the tree.
  local left; left=$(ls -A /srv/data | grep -v '^\.nfsgw-tmp\.' || true)
  [ -z "$left" ] || { echo "gateway tree not removed: $left"; exit 1; }
  echo "VM MD COMPARE: DONE"
}

if [ "${1:-}" = --guest ]; then
  guest "$2" "$3"
  exit $?
fi

cd "$(dirname "$0")/../.."
die() { echo "vm-md-compare.sh: $*" >&2; exit 1; }
GATEWAY_BIN=${GATEWAY_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/gateway}
[ -x "$GATEWAY_BIN" ] || die "gateway binary not found at $GATEWAY_BIN (cargo build --release -p gateway)"
TREE_TAR=${TREE_TAR:-/var/tmp/nfsgw-md/tree.tar}
if [ ! -s "$TREE_TAR" ]; then
  d=$(dirname "$TREE_TAR")
  mkdir -p "$d/src"
  (cd "$d/src" && apt-get download linux-source-6.1) || die "apt-get download linux-source-6.1"
  dpkg-deb --fsys-tarfile "$d"/src/linux-source-6.1_*.deb | tar -x -C "$d/src" --wildcards '*.tar.xz' \
    || die "unpacking the .deb"
  xz -dc "$d"/src/usr/src/linux-source-6.1.tar.xz \
    | tar -x -C "$d/src" linux-source-6.1/Documentation linux-source-6.1/fs || die "unpacking the source"
  tar -cf "$TREE_TAR" -C "$d/src" linux-source-6.1 || die "making $TREE_TAR"
  rm -rf "$d/src"
fi
# nfsd's user space runs in the guest from the host's root: it must be installed here.
VM_RXE=1 bash tools/vm/vm.sh setup || die "tools/vm/vm.sh setup"
export VM_TIMEOUT=${VM_TIMEOUT:-3600} VM_MEM=${VM_MEM:-3072}
export VM_ENV="${VM_ENV:-} VERS ROUNDS NFSD_THREADS"
mkdir -p target
LOG=target/vm-md-compare.log
start=$(date +%s)
VM_RXE=1 bash tools/vm/vm.sh run-script tools/perf/vm-md-compare.sh --guest "$GATEWAY_BIN" "$TREE_TAR" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
echo "vm-md-compare.sh: guest exit code $rc after $(( $(date +%s) - start ))s (log: $LOG)"
[ "$rc" -eq 0 ] && grep -qxF "VM MD COMPARE: DONE" "$LOG" || die "the comparison did not complete"
