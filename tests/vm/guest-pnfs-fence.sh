#!/usr/bin/env bash
# Runs INSIDE a Linux guest (the "pnfs" stage of tests/vm/guest-stages.sh, after the TCP
# and S3 parts, and again after the RDMA part): the kernel's pNFS flexfiles client FENCED
# (RFC 8435 §2.2) at a data server. One metadata server and three NFSv3 data servers on
# a shared `fs` store, as in guest-pnfs.sh; the metadata server listens over TCP on
# 0.0.0.0:2049 so that two clients of the one guest reach it by two addresses.
#
# PROTO tcp: the client to be fenced mounts 127.0.0.1, its data servers are
# 127.0.0.1:2050..2052 (netid "tcp"). PROTO rdma (a gateway built with --features rdma,
# Soft-RoCE rxe0 on eth0: VM_RXE=1): the data servers listen over RPC-over-RDMA on eth0's
# address ADDR (10.0.2.15:20050..20052, netid "rdma", probed at their TCP listeners
# ADDR:2050..2052, as in guest-pnfs.sh), so the client's data-server I/O - the writes the
# fence must refuse - goes over xprtrdma; the client mounts the metadata server over
# TCP at ADDR:2049. Why the metadata server over TCP: the cut must silence the client's
# metadata-server traffic and nothing else, and RoCEv2 carries every queue pair on one
# address over UDP 4791 (the data servers' RDMA traffic and an RDMA mount's alike), so
# a filter cannot pick the metadata server's RDMA connection out; a TCP port it can.
# What must be shown over RDMA is the data server's refusal, and it is: every NFSv3
# call other than NULL the data servers receive then comes over rdma
# (nfsgw_ops_total{transport="rdma"}; over tcp only the probes' NULLs, checked).
#
# - The client to be fenced: `mount -o vers=4.1,proto=tcp` of CADDR (127.0.0.1; over
#   rdma ADDR); a writer holds the file open O_DIRECT and writes 64 KiB chunks (each
#   stamped with its number) through the data server its layout names, logging when
#   each write(2) starts and returns.
# - The cut: tc (iproute2; no nft/iptables in the guest's userland) drops every TCP
#   segment to CADDR:2049 and from it: the client can neither renew its lease nor
#   answer CB_LAYOUTRECALL (its back channel rides that connection, RFC 8881 §2.10.3.1),
#   while its data servers stay reachable.
# - A second client, NFSv3 through 127.0.0.2 (not cut), truncates the file: the metadata
#   server recalls the layout, answers NFS3ERR_JUKEBOX, and a lease (15 s) after the
#   recall revokes the layout and moves the file's fence epoch on in the store before
#   the truncate proceeds (README "Fencing").
# The first revocation's log line is the fence's time (a race can revoke the layout
# twice, a second epoch bump a moment later: the first is what fenced its credentials).
# Checks: the writer went on writing through the data server across the cut (the kernel
# does not stop data-server I/O while its lease renewal hangs); the truncate returns;
# the metadata server counted the revocation (nfsgw_pnfs_layouts_total{event="revoked"})
# and logged the file fenced; a data server answered the client's old credentials
# NFS3ERR_ACCES (nfsgw_nfs_errors_total{prog="nfs3",status="NFS3ERR_ACCES"}) within
# fence::WINDOW (2 s) plus the writer's pace; after that refusal the data servers took
# no WRITE of it (every WRITE they received while the cut lasted was refused) and the
# refused chunk is not in the file (read through the second client); the bytes below
# the truncate's size are the writer's, and nothing landed after the truncate (it
# waits the fencing window out before it proceeds). Then the cut is lifted: the writer is
# told to stop and either finishes (the client recovered: a new layout, new credentials)
# or is killed; shown, not judged.
# Usage: guest-pnfs-fence.sh GATEWAY_BINARY [PROTO]   (PROTO tcp [default] or rdma)
# Last line: "KERNEL PNFS/FENCE: PASS" (tcp), "KERNEL PNFS/FENCE/RDMA: PASS" (rdma).
set -euo pipefail
GW=${1:?gateway binary}
PROTO=${2:-tcp}
# The host's PATH comes into the guest (tools/vm/vm.sh); a pyenv shim first on it made
# every python3 start a bash script costing a TCG guest ~12 s: the system's first.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
case "$PROTO" in
  # CADDR: where the client to be fenced mounts the metadata server (the cut's target);
  # ADDR: where the data servers listen.
  tcp) CADDR=127.0.0.1 ADDR=127.0.0.1 TAG=pnfs/fence PASS="KERNEL PNFS/FENCE: PASS" ;;
  rdma) ADDR=${RDMA_ADDR:-10.0.2.15} TAG=pnfs/fence/rdma PASS="KERNEL PNFS/FENCE/RDMA: PASS" # eth0, rxe0 on it
        CADDR=$ADDR ;;
  *) echo "usage: guest-pnfs-fence.sh GATEWAY_BINARY [tcp|rdma]"; exit 2 ;;
esac
W=$(mktemp -d)
M=/mntfence
M3=/mntfence3
MDS_STATS=127.0.0.1:9130
DS_PORTS="2050 2051 2052"
CHUNK=65536
SLOTS=16 # the writer's chunks go round 16 slots of 64 KiB
KEEP=4   # slots below the truncate's size
PIDS=()
WRITER=""
CUT=0

TSTART=$(date +%s.%N)
T0=$TSTART
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" -v g="$TAG" 'BEGIN {printf "ok   %s %s (%.1fs)\n", g, d, b - a}'; T0=$t
  else echo "FAIL $TAG $d"; exit 1; fi
}
uncut() { [ "$CUT" = 1 ] && tc qdisc del dev lo clsact 2>/dev/null; CUT=0; return 0; }
# unmount DIR: while the gateways are still up, so that the client can finish or fail
# what it has in flight and let its nfs_client go; forced (the client's calls to the
# metadata server killed: both mounts are over TCP, the RDMA data-server clients are
# not touched by -f) if it does not return within 15 s, lazily as a last resort. A
# client left behind lazily would be shared by the next stage's mount of the same
# address and port, with its stuck state (the check on /proc/fs/nfsfs/servers below).
unmount() {
  mountpoint -q "$1" 2>/dev/null || return 0
  timeout -k 5 15 umount "$1" 2>/dev/null && return 0
  timeout -k 5 15 umount -f "$1" 2>/dev/null && return 0
  echo "$TAG: $1 did not unmount (forced) within 15 s: lazily"
  umount -l "$1" 2>/dev/null || true
  return 1
}
# stop_writer: the writer killed (an NFS wait is killable) and waited for, bounded: a
# process still inside the client holds the mount.
stop_writer() {
  [ -n "$WRITER" ] || return 0
  kill -9 "$WRITER" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$WRITER" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$WRITER" 2>/dev/null && echo "$TAG: the writer (pid $WRITER) did not exit within 10 s of SIGKILL"
  WRITER=""
}
# no_clients: the kernel holds no NFS client of this part's servers any more (ports 2049,
# 2050-2052 and 20050-20052; /proc/fs/nfsfs/servers lists them in hex), waited for a
# while: the data servers' clients go when the last layout's device is released.
no_clients() {
  for _ in $(seq 1 100); do
    awk 'NR > 1 && $3 ~ /^(801|802|803|804|4e52|4e53|4e54)$/ {n++} END {exit n > 0}' /proc/fs/nfsfs/servers && return 0
    sleep 0.2
  done
  cat /proc/fs/nfsfs/servers
  return 1
}
on_exit() {
  local rc=$? p n
  uncut
  stop_writer
  unmount $M3 || true
  unmount $M || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  mountpoint -q "$W/disk" 2>/dev/null && umount -l "$W/disk"
  if [ $rc -ne 0 ]; then
    echo "KERNEL ${TAG^^}: FAILED (rc=$rc)"
    for n in mds ds0 ds1 ds2; do echo "--- $n log tail:"; tail -n 15 "$W/$n.log" 2>/dev/null || true; done
    echo "--- writer:"; tail -n 5 "$W/progress" 2>/dev/null || true; cat "$W/writer.err" 2>/dev/null || true
    dmesg | grep -i -E 'nfs|layout|flexfile' | tail -n 15 || true
  fi
}
trap on_exit EXIT

modprobe loop 2>/dev/null || true
modprobe ext4 2>/dev/null || true
modprobe nfs_layout_flexfiles 2>/dev/null || true
if [ "$PROTO" = rdma ]; then
  check "rxe0 present" sh -c 'rdma link show | grep -q rxe0'
  modprobe rpcrdma 2>/dev/null || true
fi
truncate -s 128M "$W/disk.img"
mkfs.ext4 -q -F "$W/disk.img"
mkdir -p "$W/disk"
mount -o loop "$W/disk.img" "$W/disk"
mkdir -p "$W/disk/data"

# gw_conf NAME LISTEN STATS RDMA_LISTEN [EXTRA]: a gateway on the shared store (as
# guest-pnfs.sh); RDMA_LISTEN (empty: none) its rdma.listen.
gw_conf() {
  local rdma=""
  [ -n "$4" ] && rdma="[rdma]
provider = \"verbs\"
listen = \"$4\""
  mkdir -p "$W/$1.state"
  cat > "$W/$1.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
hugepages = "off"
[pools]
small = 512
medium = 32
large = 16
[cache]
size_mib = 16
[tcp]
listen = "$2"
$rdma
[backend]
kind = "fs"
root = "$W/disk/data"
shared = true
[state]
dir = "$W/$1.state"
[stats]
listen = "$3"
[[exports]]
path = "/"
clients = ["127.0.0.0/8", "$ADDR/32"]
squash = "none"
${5:-}
TOML
}
# gw_launch NAME: starts it; gw_wait NAME HOST PORT [RDMA]: waits until it listens there
# (and over RPC-over-RDMA when RDMA is 1). The data servers start together: each start
# costs a TCG guest a second or more.
declare -A PID_OF
gw_launch() {
  "$GW" --config "$W/$1.toml" > "$W/$1.log" 2>&1 &
  PID_OF[$1]=$!
  PIDS+=("$!")
}
gw_wait() {
  local pid=${PID_OF[$1]}
  for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/$2/$3") 2>/dev/null; then
      [ "${4:-0}" = 1 ] || return 0
      grep -q 'over RPC-over-RDMA' "$W/$1.log" && return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "gateway $1 exited at startup"; tail -n 20 "$W/$1.log"; return 1; }
    sleep 0.1
  done
  return 1
}
pnfs="[pnfs]
enabled = true
stripe_unit = 1048576"
k=0
for p in $DS_PORTS; do
  if [ "$PROTO" = rdma ]; then
    # Reached over RDMA, probed at its TCP listener (pnfs.data_servers.probe_address).
    gw_conf "ds$k" "$ADDR:$p" "127.0.0.1:$((9131 + k))" "$ADDR:$((20050 + k))"
    pnfs="$pnfs
[[pnfs.data_servers]]
address = \"$ADDR:$((20050 + k))\"
netid = \"rdma\"
probe_address = \"$ADDR:$p\""
  else
    gw_conf "ds$k" "$ADDR:$p" "127.0.0.1:$((9131 + k))" ""
    pnfs="$pnfs
[[pnfs.data_servers]]
address = \"$ADDR:$p\""
  fi
  k=$((k + 1))
done
# The stage's 15 s lease (guest-pnfs.sh): the recall goes unanswered for one lease.
gw_conf mds 0.0.0.0:2049 "$MDS_STATS" "" "$pnfs
[nfs4]
lease_time_s = 15"
# The metadata server first: the first gateway on the directory makes the shared handle
# key, the others read it.
gw_launch mds
check "metadata server up on 0.0.0.0:2049 (pNFS on, 15 s lease)" gw_wait mds 127.0.0.1 2049
for k in 0 1 2; do gw_launch "ds$k"; done
k=0
for p in $DS_PORTS; do
  r=0; [ "$PROTO" = rdma ] && r=1
  check "data server ds$k up on port $p$([ $r = 1 ] && echo " (rdma $((20050 + k)))")" gw_wait "ds$k" "$ADDR" "$p" $r
  k=$((k + 1))
done
all_up() {
  local n
  for _ in $(seq 1 300); do
    n=$(curl -sf "http://$MDS_STATS/metrics" | grep -c '^nfsgw_pnfs_data_server_up{.*} 1$' || true)
    [ "$n" = 3 ] && return 0
    sleep 0.1
  done
  return 1
}
check "the metadata server sees its three data servers up" all_up

# ds_counts: DS_W DS_A DS_X: WRITES ACCES OTHER over the three data servers, one curl (each process
# costs the TCG guest half a second or more): the NFSv3 WRITEs received over PROTO
# (nfsgw_ops_total), the NFSv3 answers NFS3ERR_ACCES (nfsgw_nfs_errors_total, any
# procedure: WRITE or COMMIT; the metric has no transport label) and the NFSv3 calls
# other than NULL received over another transport (over rdma: 0 shows every ACCES
# went over RDMA; the probes' NULLs come over tcp).
# A scrape that fails (a data server down or not answering) fails the caller: zeros
# would read as "no WRITE accepted".
ds_counts() {
  local k urls=() r
  for k in 0 1 2; do urls+=("http://127.0.0.1:$((9131 + k))/metrics" -o "$W/ds$k.prom"); done
  rm -f "$W"/ds?.prom
  if ! curl -sf "${urls[@]}" || [ "$(cat "$W"/ds?.prom 2>/dev/null | grep -c '^nfsgw_ops_total{')" = 0 ]; then
    echo "$TAG: scraping the data servers' metrics failed" >&2
    return 1
  fi
  r=$(cat "$W"/ds?.prom | awk -v t="transport=\"$PROTO\"" '
    index($0, "nfsgw_ops_total{") == 1 && /prog="nfs3"/ && !index($0, t) && !/proc="NULL"/ {x += $NF}
    index($0, "nfsgw_ops_total{") == 1 && /prog="nfs3"/ && /proc="WRITE"/ && index($0, t) {w += $NF}
    index($0, "nfsgw_nfs_errors_total{") == 1 && /prog="nfs3"/ && /status="NFS3ERR_ACCES"/ {a += $NF}
    END {printf "%.0f %.0f %.0f\n", w, a, x}')
  read -r DS_W DS_A DS_X <<<"$r"
}
ds_acces_by_proc() {
  cat "$W"/ds?.prom 2>/dev/null | grep '^nfsgw_nfs_errors_total{.*NFS3ERR_ACCES' | sed -E 's/.*proc="([A-Z]+)".* ([0-9]+)$/\1 \2/' | xargs
}
layouts() {
  curl -sf "http://$MDS_STATS/metrics" | awk -v s="nfsgw_pnfs_layouts_total{event=\"$1\"}" \
    'index($0, s " ") == 1 {print $NF; found = 1} END {if (!found) print 0}'
}

mkdir -p $M $M3
check "the client to be fenced: mount -o vers=4.1,proto=tcp $CADDR:/ $M" timeout -s KILL 120 mount -t nfs -o vers=4.1,proto=tcp "$CADDR:/" $M
# The second client: NFSv3 (no NFSv4 trunking detection to merge it with the first)
# through the address the cut leaves open.
check "second client: mount -o vers=3 127.0.0.2:/ $M3" mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock,actimeo=0 127.0.0.2:/ $M3

# The writer: O_DIRECT (each write(2) goes to the data server at once; no fsync, which
# would LAYOUTCOMMIT at the metadata server), chunk i into slot i % SLOTS (64 KiB each:
# the file stays 1 MiB however long the wait), its first 8 bytes i, the rest i's byte;
# "o t" once the file is open, "s i t" before each write(2), "d i t" after; stops at the
# file $W/stop.
ds_counts; w0=$DS_W
T_OPEN=$(date +%s.%N)
python3 -S - "$M/fenced" "$W/progress" "$W/stop" "$SLOTS" > "$W/writer.err" 2>&1 <<'PY' &
import mmap, os, sys, time
path, progress, stop, slots = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
log = open(progress, "w", buffering=1)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
log.write("o %.3f\n" % time.time())
buf = mmap.mmap(-1, 65536)  # page-aligned, as O_DIRECT wants
i = 0
while not os.path.exists(stop):
    buf[:] = bytes([i % 251 + 1]) * 65536
    buf[:8] = i.to_bytes(8, "big")
    log.write("s %d %.3f\n" % (i, time.time()))
    n = os.pwrite(fd, buf, (i % slots) * 65536)
    if n != 65536:
        sys.exit("chunk %d: write(2) returned %d of 65536 bytes" % (i, n))
    log.write("d %d %.3f\n" % (i, time.time()))
    i += 1
    time.sleep(0.2)
os.close(fd)
PY
WRITER=$!
done_n() { awk '$1 == "d" {n = $2 + 1} END {print n + 0}' "$W/progress" 2>/dev/null || echo 0; }
started_at() { awk -v k="$1" -v i="${2:-}" '$1 == k && (k == "o" || $2 == i) {print $NF; exit}' "$W/progress"; }
wrote() { # N: the writer has N chunks done
  local end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do
    [ "$(done_n)" -ge "$1" ] && return 0
    kill -0 $WRITER 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
check "the writer wrote 4 chunks (O_DIRECT)" wrote 4
n_done=$(done_n)
ds_counts; w1=$DS_W acces0=$DS_A
awk -v g="$TAG" -v a="$T_OPEN" -v o="$(started_at o)" -v d="$(started_at d 0)" \
  'BEGIN {printf "%s: the writer'"'"'s open(2) returned %.1f s after its start, its first chunk %.1f s\n", g, o - a, d - a}'
echo "$TAG: WRITEs at the data servers: $((w1 - w0)) for the $n_done chunks done before the scrape"
# (one chunk may have gone through the metadata server, as guest-pnfs.sh allows)
check "the writer's chunks went through the data servers over $PROTO" test $((w1 - w0)) -ge $((n_done - 1))

# ---- the cut ------------------------------------------------------------------------------
cut() {
  tc qdisc add dev lo clsact || return 1
  CUT=1
  tc filter add dev lo egress protocol ip prio 1 u32 match ip dst "$CADDR/32" match ip protocol 6 0xff match ip dport 2049 0xffff action drop \
    && tc filter add dev lo egress protocol ip prio 2 u32 match ip src "$CADDR/32" match ip protocol 6 0xff match ip sport 2049 0xffff action drop
}
revoked0=$(layouts revoked)
check "cut the first client from the metadata server (tc drops TCP $CADDR:2049 both ways; data servers open)" cut
TCUT=$(date +%s.%N)
n_cut=$(done_n)
check "the writer goes on through the data server across the cut" wrote $((n_cut + 2))

# ---- the conflicting truncate ---------------------------------------------------------------
TSIZE=$((KEEP * CHUNK))
check "second client: truncate -s $TSIZE (recall unanswered; revoked and fenced a lease on)" timeout 120 truncate -s $TSIZE "$M3/fenced"
TTRUNC=$(date +%s.%N)
awk -v g="$TAG" -v a="$TCUT" -v b="$TTRUNC" 'BEGIN {printf "%s: the truncate returned %.1f s after the cut\n", g, b - a}'
grep -E 'pNFS' "$W/mds.log" | grep -vE 'fencing on' | tail -n 4 | sed "s|^|$TAG: mds: |" || true
revoked1=$(layouts revoked)
echo "$TAG: layouts revoked $revoked0 -> $revoked1, recalled $(layouts recalled)"
check "the metadata server revoked the layout (nfsgw_pnfs_layouts_total{event=\"revoked\"})" test "$revoked1" -gt "$revoked0"
check "the metadata server fenced the file at the data servers (its log)" grep -q 'file fenced at the data servers' "$W/mds.log"
# When the epoch moved on in the store (the log line follows the bump): the guest's
# clock, as the writer's.
TFENCE=$(date -d "$(grep -m 1 'file fenced at the data servers' "$W/mds.log" | awk '{print $1}')" +%s.%N)
awk -v g="$TAG" -v c="$TCUT" -v f="$TFENCE" -v t="$TTRUNC" 'BEGIN {printf "%s: fenced %.1f s after the cut; the truncate returned %.1f s after the fence\n", g, f - c, t - f}'

# ---- the data server refuses the old credentials --------------------------------------------
refused() {
  local end=$((SECONDS + 20))
  while [ $SECONDS -lt $end ]; do
    ds_counts || return 1
    [ "$DS_A" -gt "$acces0" ] && return 0
    sleep 0.2
  done
  return 1
}
check "a data server refused the fenced client's credentials (NFS3ERR_ACCES) over $PROTO" refused
ds_counts; wr0=$DS_W ac0=$DS_A
echo "$TAG: NFS3ERR_ACCES at the data servers by procedure: $(ds_acces_by_proc)"
sleep 3
ds_counts; wr1=$DS_W ac1=$DS_A other=$DS_X
echo "$TAG: in the 3 s after: WRITEs at the data servers $((wr1 - wr0)), refused (ACCES, any procedure) $((ac1 - ac0)); writer's last line: $(tail -n 1 "$W/progress")"
check "no WRITE accepted at the data servers after the refusal (every one refused)" test $((wr1 - wr0)) -le $((ac1 - ac0))
if [ "$PROTO" = rdma ]; then
  # nfsgw_nfs_errors_total has no transport label: the refusals went over RDMA because
  # nothing but the probes' NULLs reached the data servers over tcp.
  echo "$TAG: NFSv3 calls other than NULL at the data servers over a transport other than rdma: $other"
  check "every NFSv3 call the data servers answered (the refusal too) came over rdma" test "$other" = 0
fi
# The stuck chunk: started, never returned (the client went back to the metadata
# server for the I/O or a new layout, and it is cut off).
stuck=$(awk '$1 == "s" {s = $2} $1 == "d" {d = $2} END {if (s != d) print s}' "$W/progress")
check "the writer is stuck on a refused chunk (${stuck:-none})" test -n "$stuck"

# ---- what the file holds (through the second client) -------------------------------------
echo 3 > /proc/sys/vm/drop_caches
cp "$M3/fenced" "$W/seen"
echo "$TAG: the file's size through the second client: $(stat -c %s "$W/seen") (truncated to $((KEEP * CHUNK)))"
# Every 64 KiB slot of the file must hold a chunk the writer wrote there and saw
# accepted (its write(2) returned), or zeros (above the truncate's size: the truncate
# zeroed it and nothing landed since); not the refused chunk. And no chunk landed after
# the truncate (one whose slot is above the truncate's size, or which was started after
# the truncate returned): a data server checks a call against an epoch it read at most
# fence::WINDOW (2 s) before, and the truncate waits the window out after the fence
# before it proceeds (README "Fencing"), so from then on nothing with the old
# credentials is accepted. (A chunk started within the window and landed after the
# truncate would also be past the window's promise if it started after fence + 2 s.)
judge() {
  python3 -S - "$W/seen" "$W/progress" "$KEEP" "$stuck" "$SLOTS" "$TFENCE" "$TTRUNC" <<'PY'
import sys
seen, progress = sys.argv[1], sys.argv[2]
keep, stuck, slots = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tfence, ttrunc = float(sys.argv[6]), float(sys.argv[7])
data = open(seen, "rb").read()
started, done = {}, set()
for l in open(progress):
    if l.startswith("o "):
        continue
    k, i, t = l.split()
    if k == "s":
        started[int(i)] = float(t)
    else:
        done.add(int(i))
C = 65536
late = []
for s in range((len(data) + C - 1) // C):
    c = data[s * C:(s + 1) * C]
    if c.count(0) == len(c) and s >= keep:
        continue
    i = int.from_bytes(c[:8], "big")
    b = bytearray(bytes([i % 251 + 1]) * C); b[:8] = c[:8]
    if c != bytes(b) or i % slots != s or i not in started:
        sys.exit("slot %d holds bytes the writer did not write there" % s)
    if i == stuck:
        sys.exit("the refused chunk %d is in the file (slot %d)" % (i, s))
    if i not in done:
        sys.exit("chunk %d is in the file, its write(2) never returned" % i)
    if s >= keep or started[i] > ttrunc:
        late.append(i)
        if started[i] > tfence + 2.0:
            sys.exit("chunk %d landed, started %.2f s after the fence: past the window" % (i, started[i] - tfence))
if late:
    sys.exit("chunks landed after the truncate: %s (the last started %.2f s after the fence)"
             % (late, started[max(late)] - tfence))
last = max(late) if late else None
print("pnfs/fence: file size %d (truncated to %d); chunks landed after the truncate: %s%s; the refused chunk %d started %.2f s after the fence"
      % (len(data), keep * C, late or "none",
         "" if last is None else " (the last started %.2f s after the fence)" % (started[last] - tfence),
         stuck, started[stuck] - tfence))
PY
}
check "the file: every slot holds a chunk the writer saw accepted (or the truncate's zeros), not the refused one, none landed after the truncate" judge

# ---- the cut lifted ------------------------------------------------------------------------
check "lift the cut" uncut
touch "$W/stop"
recovered() {
  local end=$((SECONDS + 40))
  while [ $SECONDS -lt $end ]; do kill -0 $WRITER 2>/dev/null || return 0; sleep 0.2; done
  return 1
}
if recovered; then
  rc=0; wait $WRITER || rc=$?
  echo "$TAG: after the cut was lifted the writer finished (exit $rc$([ -s "$W/writer.err" ] && echo ": $(tail -n 1 "$W/writer.err")")); last: $(tail -n 1 "$W/progress")"
else
  echo "$TAG: the writer did not finish within 40 s of the cut lifted: killed"
  stop_writer
fi
WRITER=""
echo "$TAG: layouts granted $(layouts granted), returned $(layouts returned), revoked $(layouts revoked)"
# Both clients go while the gateways are still up (on_exit stops them afterwards).
unmount_both() { unmount $M3 && unmount $M; }
check "both clients unmounted (bounded; forced or lazily only if they hang)" unmount_both
check "the kernel holds no client of these servers any more (/proc/fs/nfsfs/servers)" no_clients
awk -v g="$TAG" -v a="$TSTART" -v b="$(date +%s.%N)" 'BEGIN {printf "%s: this part took %.0f s\n", g, b - a}'
echo "$PASS"
