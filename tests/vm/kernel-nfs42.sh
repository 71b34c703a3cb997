#!/usr/bin/env bash
# Runs INSIDE a Linux guest (called by kernel-nfs-smoke.sh after the NFSv4.1 part): the
# kernel's NFSv4.2 client against the gateway on the fs backend (ext4 on a loop device),
# one line per check, exit 1 at the first failure.
#
#   kernel-nfs42.sh GATEWAY_BINARY
#   KERNEL_V42_PROTO=rdma kernel-nfs42.sh RDMA_GATEWAY_BINARY   (Soft-RoCE rxe0 on eth0:
#       VM_RXE=1; the binary built with --features rdma, tests/vm/build-rdma.sh)
#
# KERNEL_V42_PROTO [tcp]: the 4.2 mount's transport; rdma mounts proto=rdma,port=20049
# on RDMA_ADDR [10.0.2.15] (the gateway's verbs listener), so every check below, the
# callbacks included, runs over RPC-over-RDMA and its back channel (RFC 8167); the
# NFSv3 second client stays on TCP.
#
# Checks (RFC 7862, RFC 8276): `mount -t nfs 127.0.0.1:/ /mnt42` with no options
# negotiates 4.2 (/proc/mounts); `cp` of a 16 MiB file is a server-side COPY (the
# gateway's nfsgw_bytes_in_total moves by less than 1 MiB while it runs) and byte-exact
# after dropping caches; `cp --reflink=always` (CLONE) gives the same bytes; `fallocate
# -p` punches zeros and keeps the size; SEEK_HOLE/SEEK_DATA find the punched hole;
# `fallocate -l` extends; user extended attributes set, read, listed and removed;
# delegations (RFC 8881 §10.4, the gateway at its defaults: write delegations on): a
# reader and then a writer on the 4.2 mount each get one (nfsgw_delegations is not 0
# after the open), a stat on a second (NFSv3, noac) mount in the same guest sees the
# write delegation holder's size through CB_GETATTR without recalling it (CB_GETATTR is
# sent for a write delegation only), an NFSv3 writer there recalls it (CB_RECALL sent
# and answered) and the file then holds exactly both writers' bytes. KERNEL_V42_DELEG=0
# skips the delegation part (it first passed on 2026-11-29 with Linux 6.1, over TCP and
# RDMA: docs/nfs42.md).
# Last line: "KERNEL NFSV4.2: PASS" ("KERNEL NFSV4.2/RDMA: PASS" over RDMA).
set -euo pipefail
GW=${1:?gateway binary}
W=$(mktemp -d)
M=/mnt42
STATS=127.0.0.1:9108
SRVPID=""
DELEG=${KERNEL_V42_DELEG:-1}
PROTO=${KERNEL_V42_PROTO:-tcp}
ADDR=${RDMA_ADDR:-10.0.2.15}
case "$PROTO" in
  tcp) TAG=v4.2; SERVER=127.0.0.1; MOUNT_OPTS=""; RDMA_TOML="" ;;
  rdma) TAG=v4.2/rdma; SERVER=$ADDR; MOUNT_OPTS="-o proto=rdma,port=20049"
        RDMA_TOML=$(printf '[rdma]\nprovider = "verbs"\nlisten = "%s:20049"' "$ADDR") ;;
  *) echo "FAIL KERNEL_V42_PROTO=$PROTO: tcp or rdma"; exit 1 ;;
esac
T0=$(date +%s.%N)
# shellcheck source=tests/vm/metrics.sh
. "$(dirname "$0")/metrics.sh"
say() { echo "$TAG: $*"; }
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" -v g="$TAG" 'BEGIN {printf "ok   %s %s (%.1fs)\n", g, d, b - a}'; T0=$t
  else echo "FAIL $TAG $d"; tail -n 30 "$W/gw.log"; exit 1; fi
}
on_exit() {
  umount -f -l /mnt42v3 2>/dev/null || true
  umount -f -l $M 2>/dev/null || true
  [ -n "$SRVPID" ] && kill $SRVPID 2>/dev/null; wait $SRVPID 2>/dev/null || true
  mountpoint -q "$W/disk" 2>/dev/null && umount -l "$W/disk"
  rm -rf "$W"
}
trap on_exit EXIT

# The fs backend keeps its metadata in user xattrs: ext4 on a loop device, as
# kernel-nfs41.sh (the guest's overlay refuses them).
modprobe loop 2>/dev/null || true
modprobe ext4 2>/dev/null || true
truncate -s 512M "$W/disk.img"
mkfs.ext4 -q -F "$W/disk.img"
mkdir -p "$W/disk" $M
mount -o loop "$W/disk.img" "$W/disk"
mkdir -p "$W/disk/data" "$W/disk/state"
cat > "$W/gw.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
[tcp]
listen = "127.0.0.1:2049"
$RDMA_TOML
[backend]
kind = "fs"
root = "$W/disk/data"
[state]
dir = "$W/disk/state"
[stats]
listen = "$STATS"
[[exports]]
path = "/"
clients = ["127.0.0.0/8", "$ADDR/32"]
squash = "none"
TOML
"$GW" --config "$W/gw.toml" > "$W/gw.log" 2>&1 &
SRVPID=$!
up() {
  for _ in $(seq 1 200); do
    (exec 3<>/dev/tcp/127.0.0.1/2049) 2>/dev/null && return 0
    kill -0 $SRVPID 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
check "gateway up" up

# shellcheck disable=SC2086 # MOUNT_OPTS is two words or none
check "mount -t nfs${MOUNT_OPTS:+ $MOUNT_OPTS} $SERVER:/ $M (no version)" timeout -s KILL 120 mount -t nfs $MOUNT_OPTS $SERVER:/ $M
opts=$(awk -v m=$M '$2 == m {print $4}' /proc/mounts)
say "mount options: $opts"
check "/proc/mounts shows vers=4.2" grep -q 'vers=4\.2' <<<"$opts"
check "/proc/mounts shows proto=$PROTO" grep -qE "(^|,)proto=$PROTO(,|$)" <<<"$opts"

# ---- COPY: cp uses copy_file_range, the client sends COPY ----------------------------------
bytes_in() { metric_sum "$STATS" "" nfsgw_bytes_in_total; }
dd if=/dev/urandom of="$W/src" bs=1M count=16 status=none
cp "$W/src" $M/a; sync
echo 3 > /proc/sys/vm/drop_caches
# Callbacks the client answered: when the client asks for an asynchronous COPY, its
# result comes back as a CB_OFFLOAD (RFC 7862 §16.1) on the back channel.
cb_replied() { metric_sum "$STATS" "" nfsgw_callbacks_total:replied; }
before=$(bytes_in)
cb_before=$(cb_replied)
check "cp of a 16 MiB file on the mount (copy_file_range: COPY)" timeout 300 cp $M/a $M/b
after=$(bytes_in)
cb_after=$(cb_replied)
say "bytes into the gateway during cp: $((after - before)); callbacks answered: $((cb_after - cb_before))"
check "the copy moved no file bytes through the client (< 1 MiB in)" test $((after - before)) -lt 1048576
# Reported, not asserted: Linux 6.1 answered 0 callbacks here in the 2026-11-29 run (the
# asynchronous path and its CB_OFFLOAD are checked over TCP and RDMA by
# gateway/tests/nfs42_tcp.rs and nfs4_rdma.rs; docs/nfs42.md).
echo 3 > /proc/sys/vm/drop_caches
check "the copy is byte-exact" cmp "$W/src" $M/b
check "cp --reflink=always (CLONE) is byte-exact" \
  bash -c "cp --reflink=always $M/a $M/c && cmp $W/src $M/c"

# ---- ALLOCATE, DEALLOCATE, SEEK ----------------------------------------------------------------
check "fallocate -p punches 1 MiB at 4 MiB" fallocate -p -o 4M -l 1M $M/b
check "the size stays" test "$(stat -c %s $M/b)" = $((16 << 20))
echo 3 > /proc/sys/vm/drop_caches
check "the punched range reads as zeros" \
  cmp <(head -c 1M /dev/zero) <(dd if=$M/b bs=1M skip=4 count=1 status=none)
check "the rest is intact" \
  cmp <(dd if="$W/src" bs=1M count=4 status=none) <(dd if=$M/b bs=1M count=4 status=none)
# xfs_io's lseek (SEEK_HOLE from 0, SEEK_DATA from the hole), not python3: its start
# costs seconds in the rig's TCG guest.
seek_hole_data() {
  local hd
  hd=$(xfs_io -r -c "seek -h 0" -c "seek -d $((4 << 20))" "$1" \
    | awk '$1 == "HOLE" {h = $2} $1 == "DATA" {d = $2} END {print h, d}')
  say "first hole and data after it: $hd"
  [ "$hd" = "$((4 << 20)) $((5 << 20))" ]
}
check "SEEK_HOLE finds the hole, SEEK_DATA its end" seek_hole_data $M/b
check "fallocate -l extends a file" bash -c "fallocate -l 3M $M/new && test \$(stat -c %s $M/new) = $((3 << 20))"

# ---- extended attributes (RFC 8276) -----------------------------------------------------------
# attr's setfattr/getfattr (not python3, for the guest's sake as above)
user_xattrs() {
  local p=$1 names err
  setfattr -n user.colour -v blue "$p" && setfattr -n user.empty "$p" || { say "setfattr failed"; return 1; }
  [ "$(getfattr --absolute-names --only-values -n user.colour "$p")" = blue ] || { say "user.colour is not blue"; return 1; }
  names=$(getfattr --absolute-names -d -m '^user\.' "$p" | awk -F= '/^user\./ {print $1}' | sort | xargs)
  say "user xattrs listed: $names"
  [ "$names" = "user.colour user.empty" ] || return 1
  setfattr -x user.colour "$p" || { say "setfattr -x failed"; return 1; }
  # removed: getxattr fails with ENODATA ("No such attribute" in attr's words)
  if err=$(getfattr --absolute-names -n user.colour "$p" 2>&1); then
    say "user.colour still readable after its removal: $err"; return 1
  fi
  say "after removal: $err"
  grep -qiE "no such attribute|no data available" <<<"$err"
}
check "user xattrs: set, get, list, remove" user_xattrs "$M/a"

rm -f $M/a $M/b $M/c $M/new

# ---- delegations recalled by an NFSv3 writer (RFC 8881 §10.4, §20.2) ------------------------
if [ "$DELEG" = 1 ]; then
# The sum of every series of each named metric, ``name:result`` picks result="...";
# series labelled with a transport count only that of the mount (the callbacks of a
# proto=rdma mount must go over the RDMA back channel, RFC 8167).
metric() { metric_sum "$STATS" "$PROTO" "$@"; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(b > a)}'; }
gt2() { gt "$1" "$2" && gt "$3" "$4"; }
M3=/mnt42v3
mkdir -p $M3
check "mount -o vers=3 127.0.0.1:/ $M3 (second client)" timeout -s KILL 60 \
  mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock,noac 127.0.0.1:/ $M3
# One delegation: the file made in the backing directory (so no earlier OPEN of this
# client holds one on it, and no NFSv3 access made it "recently conflicted"), opened
# on the 4.2 mount as fd 7 (`<` a reader, `<>` a writer), then the v3 writer writes.
recalled_by_v3() {  # label open-redirection
  local label=$1 dg0 dg rs0 ra0 rs ra
  sync; sleep 1   # returns of earlier files' delegations are done
  dg0=$(metric nfsgw_delegations)
  eval "exec 7$2 $M/deleg-$label"
  if [ "$label" = write ]; then printf 'holder\n' >&7; else cat <&7 > /dev/null; fi
  dg=$(metric nfsgw_delegations)
  say "nfsgw_delegations ($label): $dg0 -> $dg"
  # Not "went up": Linux may return an earlier file's unused delegation as it opens
  # this one (the reader's, re-granted to its `cat` once the v3 writer's 30 s had
  # passed, was returned in the same moment in a 2026-11-29 run: 1 -> 1). Whose it
  # is, the callbacks below show: CB_GETATTR for the writer, CB_RECALL for both.
  check "the 4.2 $label opener holds a delegation (nfsgw_delegations not 0)" test "$dg" -ge 1
  read -r rs0 ra0 <<<"$(metric nfsgw_delegation_recalls_total:sent nfsgw_delegation_recalls_total:answered)"
  if [ "$label" = write ]; then
    # CB_GETATTR (RFC 8881 §10.4.3): a GETATTR on the noac NFSv3 mount asks the holder,
    # whose 7 bytes are still in its page cache, and recalls nothing.
    local cb0 cb sz
    cb0=$(metric nfsgw_callbacks_total:replied)
    sz=$(timeout -s KILL 60 stat -c %s $M3/deleg-$label)
    read -r cb rs <<<"$(metric nfsgw_callbacks_total:replied nfsgw_delegation_recalls_total:sent)"
    say "NFSv3 stat: size $sz; callbacks replied $cb0 -> $cb; recalls sent $rs0 -> $rs"
    check "an NFSv3 stat sees the holder's unflushed size by CB_GETATTR, no recall" \
      sh -c "[ '$sz' = 7 ] && [ '$rs' = '$rs0' ] && [ $cb -gt $cb0 ]"
  fi
  # At offset 7, after the first writer's 7 bytes: not an append, whose offset the v3
  # client may take from LOOKUP's attributes (not recalled for, as knfsd).
  check "an NFSv3 writer writes at 7 (the gateway recalls the $label delegation first)" \
    timeout -s KILL 60 sh -c "printf 'v3\n' | dd of=$M3/deleg-$label bs=1 seek=7 conv=notrunc status=none"
  read -r rs ra <<<"$(metric nfsgw_delegation_recalls_total:sent nfsgw_delegation_recalls_total:answered)"
  say "recalls sent $rs0 -> $rs, answered $ra0 -> $ra"
  check "CB_RECALL sent and answered ($label)" gt2 "$rs0" "$rs" "$ra0" "$ra"
  exec 7>&-
}
printf 'reader\n' > "$W/disk/data/deleg-read"
: > "$W/disk/data/deleg-write"
recalled_by_v3 read "<"
check "the 4.2 reader sees both writers' bytes" test "$(cat $M/deleg-read)" = "$(printf 'reader\nv3')"
recalled_by_v3 write "<>"
echo 3 > /proc/sys/vm/drop_caches
check "the holder's write then the v3 write, byte-exact on both mounts" sh -c \
  "test \"\$(cat $M/deleg-write)\" = \"\$(printf 'holder\nv3')\" && test \"\$(cat $M3/deleg-write)\" = \"\$(printf 'holder\nv3')\""
rm -f $M/deleg-read $M/deleg-write
check "unmount the NFSv3 mount" umount $M3
fi
check "unmount" umount $M
if grep -q panicked "$W/gw.log"; then echo "FAIL $TAG the gateway panicked"; tail -n 30 "$W/gw.log"; exit 1; fi
if [ "$PROTO" = rdma ]; then echo "KERNEL NFSV4.2/RDMA: PASS"; else echo "KERNEL NFSV4.2: PASS"; fi
