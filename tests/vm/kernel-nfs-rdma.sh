#!/usr/bin/env bash
# Runs INSIDE a Linux guest with Soft-RoCE rxe0 on eth0 (VM_RXE=1 tools/vm/vm.sh
# run-script): starts the gateway (built with `--features rdma`) with
# rdma.provider = "verbs" on the guest's eth0 address (TCP on 2049, RPC-over-RDMA on
# 20049) with two reactors (engine.cores = [0, 1]: one completion queue each, connections
# spread by the listener) and drives it with the kernel's NFSv3 client and `bench`:
#   1. proto=rdma: a 256 MiB file written and read back byte-exact (sha256 after dropping
#      the page cache); fio write+verify jobs (1 MiB sequential, 4 KiB random at QD 16,
#      O_DIRECT, crc32c); a directory of 10,000 entries (9,000 directories, 1,000 files)
#      created and listed back exactly; `bench --provider verbs` (built with --features
#      rdma) beside the kernel mount: 4 KiB random reads verified and 1 MiB
#      sequential writes read back and verified, and the gateway's log must show the
#      concurrent RDMA connections assigned to both reactors;
#      rename, symlink (readlink), chmod, remove; unmount (the gateway must see the
#      connection drained), remount, and the metadata checked again from the server;
#   2. proto=tcp against the same gateway: the big file and the metadata written over
#      RDMA read back over TCP, then the same checks with smaller sizes;
#   3. a client killed in the middle of a transfer (dd killed with SIGKILL, forced lazy
#      unmount): a new mount must work, data must read back, the gateway must be alive
#      and its log free of panics; then a clean stop (per-reactor counters printed);
#   4. NFSv4.1 over RDMA (tests/vm/kernel-nfs41-rdma.sh, its own gateway with a stats
#      endpoint): mount -o vers=4.1,proto=rdma,port=20049; the same data and namespace
#      checks as part 1, flock/fcntl conflicts, a delegation recalled over the RDMA back
#      channel (counted in the stats), a client killed mid-transfer;
#   0. (first) NFSv4.2 over RDMA: tests/vm/kernel-nfs42.sh with KERNEL_V42_PROTO=rdma,
#      its own gateway at its defaults: a mount with no version is vers=4.2 over
#      proto=rdma; COPY, CLONE, ALLOCATE/DEALLOCATE, SEEK, user xattrs, and read and
#      write delegations with CB_GETATTR and CB_RECALL on the RDMA back channel;
#   5. the same fio jobs against the gateway and the guest's kernel nfsd, both over RDMA,
#      NFSv3 and NFSv4.1, a few seconds each (tests/vm/kernel-rdma-compare.sh, short
#      settings): the ratios are printed, not asserted (TCG + Soft-RoCE figures are
#      noisy; the full run for docs/perf-vm-rdma.md is tools/perf/vm-rdma-compare.sh).
# Every check prints "ok <what> (<secs since the previous check>)" or "FAIL <what>" and
# aborts; the last line "KERNEL NFS/RDMA: PASS" is printed only when every check passed.
# Usage: kernel-nfs-rdma.sh GATEWAY_BINARY [BENCH_BINARY (default: beside the gateway)]
# Sizes (environment): RDMA_FILE_MIB [256], RDMA_FIO_MIB [64], RDMA_DIR_ENTRIES [10000],
# TCP_FILE_MIB [32], TCP_DIR_ENTRIES [1000]; GW_CORES ["0, 1"]; V41 [1] (0 skips part
# 4), V42R [1] (0 skips part 0), V41R_FILE_MIB [RDMA_FILE_MIB], V41R_FIO_MIB [64], V41R_DIR_ENTRIES [RDMA_DIR_ENTRIES]
# and the other V41R_* knobs of kernel-nfs41-rdma.sh; COMPARE [1] (0 skips part 5),
# COMPARE_VERS ["3 4.1"], COMPARE_RUNTIME [3] seconds per job, COMPARE_MIB [16].
set -euo pipefail
GW=${1:?gateway binary (built with --features rdma)}
BENCH=${2:-$(dirname "$GW")/bench}
GW_CORES=${GW_CORES:-0, 1}
ADDR=${RDMA_ADDR:-10.0.2.15}   # eth0 in the guest (tools/vm/guest-init.sh); rxe0 sits on it
PORT=20049
MIB=${RDMA_FILE_MIB:-256}
FIO_MIB=${RDMA_FIO_MIB:-64}
NDIR=${RDMA_DIR_ENTRIES:-10000}
TCP_MIB=${TCP_FILE_MIB:-32}
TCP_NDIR=${TCP_DIR_ENTRIES:-1000}
W=$(mktemp -d)
cat > "$W/gw.toml" <<TOML
[engine]
cores = [$GW_CORES]
idle = "adaptive"
[tcp]
listen = "$ADDR:2049"
[rdma]
provider = "verbs"
listen = "$ADDR:$PORT"
[backend]
kind = "memory"
[state]
dir = "$W/state"
[[exports]]
path = "/"
clients = ["0.0.0.0/0"]
squash = "none"
TOML
umount_bounded() { # ARGS...: umount in the background, given up on (not killed) after 20 s
  umount "$@" 2>/dev/null & local p=$! i
  for i in $(seq 1 100); do kill -0 "$p" 2>/dev/null || { wait "$p"; return; }; sleep 0.2; done
  return 1
}
on_exit() {
  local rc=$?
  [ -n "${DDPID:-}" ] && kill -9 "$DDPID" 2>/dev/null || true
  # Bounded: after a client oops (part 3) an unmount can block for ever in the kernel,
  # unkillable (D state), so it is never waited for more than 20 s.
  umount_bounded -f /mnt || umount_bounded -f -l /mnt || true
  [ -n "${GWPID:-}" ] && kill "$GWPID" 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "KERNEL NFS/RDMA: FAILED (rc=$rc)"
    echo "--- gateway log tail"; grep -v ' DEBUG ' "$W/gw.log" | tail -n 30 || true
    echo "--- gateway debug tail"; tail -n 15 "$W/gw.log" || true
    echo "--- dmesg tail"; dmesg | tail -n 30 || true
  fi
}
trap on_exit EXIT
# check DESCRIPTION CMD...: run CMD, print the result, abort on failure. The time since
# the previous check is shown (it includes the unchecked set-up in between): the guest
# runs under a software CPU. Note: `set -e` is off inside CMD (an `if` context), so
# helper functions below return their failures explicitly.
T0=$(date +%s.%N)
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" 'BEGIN {printf "ok   %s (%.1fs)\n", d, b - a}'; T0=$t
  else echo "FAIL $d"; exit 1; fi
}
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

RDMA_OPTS=vers=3,proto=rdma,port=$PORT,mountport=2049,mountproto=tcp,nolock,retry=0
TCP_OPTS=vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock,retry=0
# MOUNT goes over TCP to the same address; retry=0: fail at once instead of retrying 2 min
nfs_mount() { # rdma|tcp
  local o=$RDMA_OPTS; [ "$1" = tcp ] && o=$TCP_OPTS
  mount -t nfs -o "$o" "$ADDR:/" /mnt && grep -q " /mnt nfs .*proto=$1[,\ ]" /proc/mounts
}
gw_alive() { kill -0 "$GWPID" 2>/dev/null; }
gw_healthy() { gw_alive && ! grep -qi panic "$W/gw.log"; }
# The provider reports a connection down only after the marker flushes came back.
n_down() { grep -c "verbs: connection down.*drained=true" "$W/gw.log" || true; }
wait_down() { # count before the unmount
  local i; for i in $(seq 1 75); do [ "$(n_down)" -gt "$1" ] && return 0; sleep 0.2; done; return 1
}

# write_file MIB PATH SUMFILE: random bytes through tee into sha256sum and onto NFS
# (dd conv=fsync: WRITEs + COMMIT); nothing of the file is kept locally.
write_file() {
  head -c "$(( $1 << 20 ))" /dev/urandom | tee >(sha256sum > "$3") \
    | dd of="$2" bs=1M iflag=fullblock conv=fsync status=none || return 1
  # the process substitution finishes asynchronously
  local i; for i in $(seq 1 100); do [ -s "$3" ] && return 0; sleep 0.1; done; return 1
}
same_sum() { [ "$(sha256sum < "$1")" = "$(cat "$2")" ]; }

# fio_verify NAME FILE SIZE RW BS QD: O_DIRECT write job that reads everything back and
# checks crc32c of every block (fio exits non-zero on a verify error: verify_fatal).
fio_verify() {
  if fio --name="$1" --filename="$2" --size="$3" --rw="$4" --bs="$5" --ioengine=libaio \
      --iodepth="$6" --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 \
      --output="$W/fio-$1.log" && grep -q "err= 0" "$W/fio-$1.log"; then
    grep -E '^ +(READ|WRITE):' "$W/fio-$1.log" | sed "s/^ */  fio $1 /; s/, [0-9.]*[kMG]*B\/s-.*//"
  else
    tail -n 25 "$W/fio-$1.log"; return 1
  fi
}

# make_entries DIR N: N entries in one directory: N/10 empty files f00001... (LOOKUP +
# CREATE each, one process: creates in one directory are serialised by the client
# anyway) and the rest directories d00001... (one MKDIR each, the client skips the
# LOOKUP for mkdir: half the round trips, which is what the count costs under TCG).
make_entries() {
  local e; e="$W/$(basename "$1").expected"
  local nf=$(( $2 / 10 )) nd=$(( $2 - $2 / 10 ))
  mkdir "$1" || return 1
  { seq -f 'd%05g' 1 "$nd"; seq -f 'f%05g' 1 "$nf"; } > "$e"
  (cd "$1" && seq -f 'd%05g' 1 "$nd" | xargs -n 2000 mkdir \
     && seq -f 'f%05g' 1 "$nf" | while read -r n; do : > "$n" || exit 1; done)
}
# list_entries DIR N: after dropping caches (READDIRPLUS from the server), the listing
# must be exactly the names created, N of them.
list_entries() {
  local e; e="$W/$(basename "$1")"
  drop_caches
  LC_ALL=C ls "$1" > "$e.listed" || return 1
  [ "$(wc -l < "$e.listed")" -eq "$2" ] && cmp -s "$e.expected" "$e.listed"
}

# Namespace operations in /mnt/ops-TAG; checked again after a remount by ops_after.
ops_checks() { # TAG
  local t=$1 d=/mnt/ops-$1
  mkdir "$d" && echo "hello $t" > "$d/a" && mkdir "$d/sub" && : > "$d/gone"
  mv "$d/a" "$d/b"
  check "$t: rename" test -f "$d/b" -a ! -e "$d/a"
  check "$t: renamed file keeps its content" test "$(cat "$d/b")" = "hello $t"
  ln -s b "$d/link"
  check "$t: symlink, readlink matches" test "$(readlink "$d/link")" = b
  check "$t: symlink followed" test "$(cat "$d/link")" = "hello $t"
  chmod 640 "$d/b"; chmod 751 "$d/sub"
  check "$t: chmod" test "$(stat -c %a "$d/b") $(stat -c %a "$d/sub")" = "640 751"
  rm "$d/gone"
  check "$t: remove (file)" test ! -e "$d/gone"
  drop_caches
  check "$t: after dropping caches: 640, readlink b, file removed" \
    test "$(stat -c %a "$d/b") $(readlink "$d/link") $(ls "$d" | tr '\n' ' ')" = "640 b b link sub "
}
ops_after() { # TAG PROTO-NOW: the state left by ops_checks TAG, as the server has it
  local t=$1 d=/mnt/ops-$1
  check "$t ops seen over $2: mode 640/751, readlink b, rename and remove kept" \
    test "$(stat -c %a "$d/b") $(stat -c %a "$d/sub") $(readlink "$d/link") $(cat "$d/link") $(ls "$d" | tr '\n' ' ')" \
      = "640 751 b hello $t b link sub "
}
ops_remove() { # TAG
  local d=/mnt/ops-$1
  rm "$d/link" "$d/b" && rmdir "$d/sub" "$d"
  check "$1: remove (symlink, file, directories)" test ! -e "$d"
}

check "rxe0 present" sh -c 'rdma link show | grep -q rxe0'
rdma link show
modprobe rpcrdma 2>/dev/null || true

# Part 0 runs first: part 3's forced unmount can oops this kernel's NFS/RDMA client and
# leave later mounts hanging (tests/README.md).
if [ "${V42R:-1}" = 1 ]; then
  echo "=== 0. NFSv4.2 over RDMA (tests/vm/kernel-nfs42.sh, KERNEL_V42_PROTO=rdma: own gateway)"
  check "NFSv4.2 over RDMA: every check of kernel-nfs42.sh passed" \
    env KERNEL_V42_PROTO=rdma bash "$(dirname "$0")/kernel-nfs42.sh" "$GW"
fi

RUST_LOG=${RUST_LOG:-info,engine=debug} "$GW" --config "$W/gw.toml" > "$W/gw.log" 2>&1 &
GWPID=$!
for _ in $(seq 1 200); do
  grep -q "verbs provider opened" "$W/gw.log" && (exec 3<>/dev/tcp/$ADDR/2049) 2>/dev/null && break
  kill -0 $GWPID 2>/dev/null || { echo "gateway exited at startup"; cat "$W/gw.log"; exit 1; }
  sleep 0.1
done
grep -m1 "verbs provider opened" "$W/gw.log" || true

echo "=== 1. NFSv3 over RDMA (proto=rdma, port $PORT)"
check "mount -t nfs -o $RDMA_OPTS $ADDR:/ /mnt" nfs_mount rdma
grep " /mnt " /proc/mounts

check "$MIB MiB written over RDMA (dd conv=fsync)" write_file "$MIB" /mnt/big "$W/big.sum"
drop_caches
check "$MIB MiB read back over RDMA, sha256 matches after dropping caches" same_sum /mnt/big "$W/big.sum"

check "fio: $FIO_MIB MiB 1 MiB sequential write QD 4, read back, crc32c verified (O_DIRECT)" \
  fio_verify seq /mnt/fio-seq "${FIO_MIB}m" write 1m 4
check "fio: 8 MiB 4 KiB random write QD 16, read back, crc32c verified (O_DIRECT)" \
  fio_verify rand /mnt/fio-rand 8m randwrite 4k 16

# bench over verbs while the kernel client's connection stays up.
# A connect that times out (5 s) is retried once: under TCG on a loaded host connection
# setup alone can take that long. Any other failure fails the check.
bench_run() { # NAME ARGS...: bench against the gateway over RDMA verbs; prints its table
  local n=$1 try; shift
  for try in 1 2; do
    if RUST_BACKTRACE=0 "$BENCH" --target "rdma://$ADDR:$PORT" --provider verbs "$@" > "$W/bench-$n.log" 2>&1; then
      sed "s/^/  bench $n: /" "$W/bench-$n.log" | tail -n 3
      return 0
    fi
    grep -v '^ *[0-9]*: \|^ *at ' "$W/bench-$n.log" | tail -n 10
    grep -q "connect to .*: timed out" "$W/bench-$n.log" || return 1
    echo "  (bench: RDMA connect timed out; retrying once)"
  done
  return 1
}
check "bench --provider verbs: 2000 x 4 KiB random reads, QD 8, every byte verified" \
  bench_run randread --workload randread --bs 4096 --qd 8 --ops 2000 --size-mib 16 --file bench-rr.dat --verify
check "bench --provider verbs: 16 x 1 MiB sequential writes (RDMA Read chunks), read back and verified" \
  bench_run seqwrite --workload seqwrite --bs 1048576 --qd 4 --ops 16 --size-mib 16 --file bench-sw.dat --verify
# Each connection request is logged by the acceptor with the reactor it goes to and the
# connections per reactor at that moment ("loads=[a, b]").
assigned() { grep "verbs: connection request assigned" "$W/gw.log" | sed 's/^.*assigned *//'; }
assigned | sed 's/^/  /'
check "RDMA connections assigned to both reactors (reactor=0 and reactor=1 in the log)" \
  sh -c "grep -q 'connection request assigned.*reactor=0' '$W/gw.log' && grep -q 'connection request assigned.*reactor=1' '$W/gw.log'"
check "two RDMA connections live at once on different reactors (loads=[n>0, m>0])" \
  grep -qE 'connection request assigned.*loads=\[[1-9][0-9]*, [1-9]' "$W/gw.log"

check "$NDIR entries (90 % directories, 10 % files) created in one directory over RDMA" make_entries /mnt/many "$NDIR"
check "$NDIR entries listed back after dropping caches: count and names exact" list_entries /mnt/many "$NDIR"

ops_checks rdma

before=$(n_down)
check "unmount" umount /mnt
check "disconnect seen by the gateway after all flushes (drained=true)" wait_down "$before"
check "mount again over RDMA (new connection after release)" nfs_mount rdma
ops_after rdma rdma
check "after remount: $NDIR entries listed exactly" list_entries /mnt/many "$NDIR"
before=$(n_down)
check "unmount" umount /mnt
check "disconnect seen by the gateway (drained=true)" wait_down "$before"

echo "=== 2. NFSv3 over TCP against the same gateway (proto=tcp, port 2049)"
check "mount -t nfs -o $TCP_OPTS $ADDR:/ /mnt" nfs_mount tcp
ops_after rdma tcp
check "$MIB MiB file written over RDMA read over TCP, sha256 matches" same_sum /mnt/big "$W/big.sum"
check "$TCP_MIB MiB written over TCP (dd conv=fsync)" write_file "$TCP_MIB" /mnt/tcp-file "$W/tcp.sum"
drop_caches
check "$TCP_MIB MiB read back over TCP, sha256 matches after dropping caches" same_sum /mnt/tcp-file "$W/tcp.sum"
check "fio over TCP: 16 MiB 1 MiB sequential write QD 4, crc32c verified" \
  fio_verify tcp-seq /mnt/fio-tcp-seq 16m write 1m 4
check "fio over TCP: 4 MiB 4 KiB random write QD 16, crc32c verified" \
  fio_verify tcp-rand /mnt/fio-tcp-rand 4m randwrite 4k 16
check "$TCP_NDIR entries (90 % directories, 10 % files) created in one directory over TCP" make_entries /mnt/many-tcp "$TCP_NDIR"
check "$TCP_NDIR entries listed back after dropping caches: count and names exact" \
  list_entries /mnt/many-tcp "$TCP_NDIR"
ops_checks tcp
check "unmount" umount /mnt
check "mount again over TCP" nfs_mount tcp
ops_after tcp tcp
check "after remount: $TCP_MIB MiB file intact" same_sum /mnt/tcp-file "$W/tcp.sum"
ops_remove tcp
check "unmount" umount /mnt
check "mount over RDMA: TCP-written data seen" nfs_mount rdma
check "$TCP_MIB MiB file written over TCP read over RDMA, sha256 matches" same_sum /mnt/tcp-file "$W/tcp.sum"
ops_remove rdma
rm -f /mnt/fio-*
check "unmount" umount /mnt

echo "=== 3. A client killed in the middle of a transfer"
check "mount over RDMA" nfs_mount rdma
dd if=/dev/zero of=/mnt/killed bs=1M count=512 status=none &
DDPID=$!
sleep 2
check "dd (512 MiB) still writing after 2 s" kill -0 "$DDPID"
kill -9 "$DDPID"
check "umount -f -l /mnt during the transfer" umount -f -l /mnt
dd_gone() { local i; for i in $(seq 1 150); do kill -0 "$DDPID" 2>/dev/null || return 0; sleep 0.2; done; return 1; }
# The guest's own NFS/RDMA client (Debian 6.1, rpcrdma over rxe) can oops tearing down a
# forced unmount mid-transfer (seen once: __list_add_valid BUG under frwr_unmap_sync in
# xprt_release); the killed dd then never exits and the guest's RDMA client is unusable.
# That is a client kernel bug, not the gateway's: say so loudly, and check what this part
# is about -- the gateway survives and keeps every byte -- over a TCP mount instead.
client_oopsed() { dmesg | grep -qE 'RIP: .*|BUG: |list_(add|del) corruption' && dmesg | grep -qE 'rpcrdma|frwr_|xprt_rdma'; }
RDMA_CLIENT_OK=1
if [ "${VM_ASSUME_CLIENT_OOPS:-}" = 3 ] || { ! dd_gone && client_oopsed; }; then
  echo "WARN the guest kernel's NFS/RDMA client oopsed during the forced unmount (client bug, see dmesg below); the gateway is checked with a userspace client (bench over TCP): a kworker that died in the oops can hold the kernel client's locks, so even a TCP mount may hang"
  dmesg | grep -E 'BUG: |RIP: |corruption' | head -n 5 || true
  RDMA_CLIENT_OK=
else
  check "killed dd exited" dd_gone
  wait "$DDPID" 2>/dev/null || true
fi
DDPID=
check "gateway still running" gw_alive
# The oops can also come later, in the next mount (kernel-nfs41-rdma.sh, 2026-11-30): a
# failed mount with the oops in dmesg takes the userspace path; without it, it fails.
if [ -n "$RDMA_CLIENT_OK" ]; then
  if nfs_mount rdma; then check "new mount over RDMA works" true
  elif client_oopsed; then
    echo "WARN the guest kernel's NFS/RDMA client oopsed after the forced unmount (client bug, see dmesg below); the new mount hung; the gateway is checked with a userspace client (bench over TCP)"
    dmesg | grep -E 'BUG: |RIP: |corruption' | head -n 5 || true
    RDMA_CLIENT_OK=
  else check "new mount over RDMA works" false
  fi
fi
if [ -n "$RDMA_CLIENT_OK" ]; then
  check "16 MiB written after the kill (dd conv=fsync)" write_file 16 /mnt/after-kill "$W/after.sum"
  drop_caches
  check "16 MiB read back, sha256 matches after dropping caches" same_sum /mnt/after-kill "$W/after.sum"
  check "$TCP_MIB MiB file written before the kill still intact" same_sum /mnt/tcp-file "$W/tcp.sum"
  check "$NDIR entries still listed exactly" list_entries /mnt/many "$NDIR"
  check "final unmount" umount /mnt
else
  # libnfs's tools cannot mount from inside this guest (its MOUNT call is reset; they
  # work on the host), so the fresh client is our own bench over TCP (user space).
  bench_tcp() { # 16 x 1 MiB written and read back, every byte verified
    RUST_BACKTRACE=0 timeout -s KILL 300 "$BENCH" --target "tcp://$ADDR:2049" --workload seqwrite \
      --bs 1048576 --qd 4 --ops 16 --size-mib 16 --file after-kill.dat --verify > "$W/bench-after.log" 2>&1 \
      && grep -q "0 failure(s)" "$W/bench-after.log"
  }
  check "a fresh userspace client over TCP: 16 MiB written after the kill, read back and verified (bench)" bench_tcp
fi
check "gateway still running, no panic in its log" gw_healthy
grep -E "verbs: connection down" "$W/gw.log" | sed 's/^[^ ]* //' || true
echo "gateway log: $(wc -l < "$W/gw.log") lines, $(grep -c ' WARN ' "$W/gw.log" || true) WARN, $(grep -c ' ERROR ' "$W/gw.log" || true) ERROR"
grep -E ' (WARN|ERROR) ' "$W/gw.log" | tail -n 10 || true
gw_stop() { # SIGTERM: clean shutdown (flush, per-reactor counters logged)
  kill -TERM "$GWPID" && local i && for i in $(seq 1 100); do gw_alive || return 0; sleep 0.2; done; return 1
}
check "gateway stopped cleanly (SIGTERM)" gw_stop
GWPID=
grep -E "reactor counters|read cache" "$W/gw.log" | sed 's/^[^ ]* *INFO *//; s/^/  /' || true

if [ "${V41:-1}" = 1 ] && [ -z "$RDMA_CLIENT_OK" ]; then
  echo "=== 4. skipped: the guest's NFS/RDMA client oopsed in part 3 (see the WARN above); NFSv4.1 over RDMA NOT tested in this boot"
elif [ "${V41:-1}" = 1 ]; then
  echo "=== 4. NFSv4.1 over RDMA (tests/vm/kernel-nfs41-rdma.sh: own gateway, same boot)"
  check "NFSv4.1 over RDMA: every check of kernel-nfs41-rdma.sh passed" \
    env V41R_FILE_MIB="${V41R_FILE_MIB:-$MIB}" V41R_DIR_ENTRIES="${V41R_DIR_ENTRIES:-$NDIR}" GW_CORES="$GW_CORES" \
      bash "$(dirname "$0")/kernel-nfs41-rdma.sh" "$GW"
  # the v4.1 part also kills a client mid-transfer: the same oops can happen there
  if client_oopsed; then
    echo "WARN the guest kernel's NFS/RDMA client oopsed in the NFSv4.1 part (client bug); part 5 skipped"
    RDMA_CLIENT_OK=
  fi
fi

if [ "${COMPARE:-1}" = 1 ] && [ -z "$RDMA_CLIENT_OK" ]; then
  echo "=== 5. skipped: the guest's NFS/RDMA client oopsed (see the WARN above)"
elif [ "${COMPARE:-1}" = 1 ]; then
  echo "=== 5. Beside the kernel's nfsd over RDMA, NFSv3 and NFSv4.1, same boot (short: ratios printed, not asserted)"
  check "kernel nfsd comparison ran (NFS versions ${COMPARE_VERS:-3 4.1}, RUNTIME=${COMPARE_RUNTIME:-3}s per job, 1 round, ${COMPARE_MIB:-16} MiB files)" \
    env RUNTIME="${COMPARE_RUNTIME:-3}" ROUNDS=1 PROTOS=rdma VERS="${COMPARE_VERS:-3 4.1}" SIZE_MIB="${COMPARE_MIB:-16}" GW_CORES=0 \
      bash "$(dirname "$0")/kernel-rdma-compare.sh" "$GW"
fi
echo "KERNEL NFS/RDMA: PASS"
