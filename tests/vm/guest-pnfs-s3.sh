#!/usr/bin/env bash
# Runs INSIDE a Linux guest (the "pnfs" stage of tests/vm/guest-stages.sh, after
# guest-pnfs.sh's TCP part): the kernel's pNFS flexfiles client (RFC 8435) against one
# gateway as metadata server and three gateways as its NFSv3 data servers, all four on
# ONE S3 BUCKET — the setting of "Scaling out with pNFS" (guest-pnfs.sh shows the same
# client against data servers on a shared `fs` directory).
#
# The store: Garage (tools/garage/install.sh's binary, run from the host's root through
# the guest's 9p share), one node on the guest's loopback (`garage server --single-node
# --default-bucket` makes its layout, an access key and the bucket at start: no CLI
# round trips under the software CPU). A real distributed S3 store, not a mock; the
# slirp network of the rig (restrict=on) would not reach a store on the host anyway.
#
# Mount: `vers=4.2,proto=tcp` (the client's default; guest-pnfs.sh's fs parts cover
# 4.1). Checks:
# - files written through the mount (cp, then sync), caches dropped, read back byte-exact;
# - /proc/self/mountstats: the flexfiles driver and GETDEVICEINFO calls; the metadata
#   server granted a layout per file (Linux 6.1 asks for layouts inside OPEN, so the
#   mountstats LAYOUTGET line counts only those sent alone: shown, not judged);
# - the data servers' nfsgw_bytes_{in,out}_total carry the file bytes, the metadata
#   server's under a tenth of them, every data server at least one file (placement
#   hashes the file id, which derives from the name: f.1..f.12 land 9/1/2 on the three
#   data servers every run, as in guest-pnfs.sh; f.1..f.8 alone would leave one out);
# - the objects are in the bucket: a signed ListObjectsV2 names every file with its
#   size, and a GET of one returns the source's bytes (the store's own view, curl
#   --aws-sigv4, not the gateway's);
# - close-to-open across data servers (RFC 8881 §10.3.1; each s3 data server stages a
#   file's writes and uploads it whole on COMMIT, README "Scaling out with pNFS"): a
#   file written through the 4.2 mount and closed (no sync: close flushes and commits)
#   is in the bucket at once, and another client's NFSv3 mount of a DIFFERENT data
#   server (one that never saw the file) reads exactly its bytes;
# - another client's truncate (a vers=4.1 mount of the metadata server) recalls the 4.2
#   client's layout (nfsgw_pnfs_layouts_total{event="recalled"}), the 4.2 mount then
#   sees the new size and the bytes before it.
# Usage: guest-pnfs-s3.sh GATEWAY_BINARY GARAGE_BINARY
# Last line: "KERNEL PNFS/S3: PASS". Knobs: PNFS_S3_FILES [12] files of
# PNFS_S3_FILE_KIB [256] KiB each.
set -euo pipefail
GW=${1:?gateway binary}
GARAGE=${2:?garage binary}
TAG=pnfs/s3
ADDR=127.0.0.1
W=$(mktemp -d)
M=/mntpnfss3
V3DS=/mntpnfss3ds
M41=/mntpnfss3v41
FILES=${PNFS_S3_FILES:-12}
KIB=${PNFS_S3_FILE_KIB:-256}
MDS_STATS=127.0.0.1:9120
S3=127.0.0.1:3900
BUCKET=nfsgw-pnfs
hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }
KEY_ID=GK$(hex 12)
SECRET=$(hex 32)
PIDS=()

# Times from bash's clock (EPOCHREALTIME, no process: under the software CPU each
# fork and exec costs the guest a few tenths of a second).
TSTART=${EPOCHREALTIME/./}
T0=$TSTART
# secs FROM: seconds since FROM (microseconds), one decimal, into $SECS
secs() { local d=$((${EPOCHREALTIME/./} - $1)); printf -v SECS '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000)); }
check() {
  local d=$1; shift
  if "$@"; then secs "$T0"; echo "ok   $TAG $d (${SECS}s)"; T0=${EPOCHREALTIME/./}
  else echo "FAIL $TAG $d"; exit 1; fi
}
unmount() { # bounded; lazily as a last resort
  mountpoint -q "$1" 2>/dev/null || return 0
  timeout 20 umount -f "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
}
on_exit() {
  local rc=$? p n
  unmount $V3DS
  unmount $M41
  unmount $M
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ $rc -ne 0 ]; then
    echo "KERNEL PNFS/S3: FAILED (rc=$rc)"
    for n in garage mds ds0 ds1 ds2; do echo "--- $n log tail:"; tail -n 15 "$W/$n.log" 2>/dev/null || true; done
    dmesg | grep -i -E 'nfs|layout|flexfile' | tail -n 15 || true
  fi
}
trap on_exit EXIT
modprobe nfs_layout_flexfiles 2>/dev/null || true

# ---- the store -------------------------------------------------------------------------
# fsync off, as in tools/garage/cluster.sh: a throw-away store in the guest's RAM.
cat > "$W/garage.toml" <<TOML
metadata_dir = "$W/garage/meta"
data_dir = "$W/garage/data"
db_engine = "lmdb"
lmdb_map_size = "256M"
replication_factor = 1
metadata_fsync = false
data_fsync = false
rpc_bind_addr = "127.0.0.1:3901"
rpc_public_addr = "127.0.0.1:3901"
rpc_secret = "$(hex 32)"
[s3_api]
s3_region = "garage"
api_bind_addr = "$S3"
root_domain = ".s3.garage.localhost"
TOML
GARAGE_DEFAULT_ACCESS_KEY=$KEY_ID GARAGE_DEFAULT_SECRET_KEY=$SECRET GARAGE_DEFAULT_BUCKET=$BUCKET \
  RUST_LOG=garage=warn "$GARAGE" -c "$W/garage.toml" server --single-node --default-bucket \
  > "$W/garage.log" 2>&1 &
PIDS+=($!)
# s3 ARGS...: curl signing with the store's key (SigV4, curl's --aws-sigv4; Garage
# wants the payload hash header, which curl does not add by itself).
s3() {
  curl -sf --max-time 20 --aws-sigv4 "aws:amz:garage:s3" --user "$KEY_ID:$SECRET" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}
store_up() {
  local end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do
    s3 -o /dev/null "http://$S3/$BUCKET?list-type=2&max-keys=1" 2>/dev/null && return 0
    kill -0 "${PIDS[0]}" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}
# The files to write, made while Garage starts.
TOTAL=$((FILES * KIB * 1024))
for i in $(seq 1 "$FILES"); do head -c $((KIB * 1024)) /dev/urandom > "$W/src.$i"; done
check "Garage (one node) serves bucket $BUCKET" store_up

# ---- four gateways on the bucket -----------------------------------------------------------
# One handle key for all (README "Many gateways, one bucket": handle_key_file).
# flush_idle_s = 0: a data server uploads a file's staged writes only at COMMIT (or a
# full write buffer, which these files never fill), so an object found in the bucket at
# close was uploaded by the COMMIT the client sent before close returned.
hex 32 > "$W/handle.key"
chmod 600 "$W/handle.key"
# gw_conf NAME PORT STATS [EXTRA]
declare -A PORT_OF
gw_conf() {
  PORT_OF[$1]=$2
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
listen = "$ADDR:$2"
[backend]
kind = "s3"
workers = 2
[backend.s3]
endpoint = "http://$S3"
region = "garage"
bucket = "$BUCKET"
path_style = true
allow_http = true
access_key_id = "$KEY_ID"
secret_access_key = "$SECRET"
handle_key_file = "$W/handle.key"
timeout_s = 10
retries = 3
runtime_threads = 1
flush_idle_s = 0
[state]
dir = "$W/$1.state"
[stats]
listen = "$3"
[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
squash = "none"
${4:-}
TOML
}
# gw_start NAME...: starts them together (with handle_key_file no start order matters),
# waits until each listens.
gw_start() {
  local n p pid
  declare -A pids
  for n in "$@"; do
    "$GW" --config "$W/$n.toml" > "$W/$n.log" 2>&1 &
    pids[$n]=$!
    PIDS+=($!)
  done
  for n in "$@"; do
    p=${PORT_OF[$n]}
    pid=${pids[$n]}
    for _ in $(seq 1 600); do
      (exec 3<>"/dev/tcp/$ADDR/$p") 2>/dev/null && continue 2
      kill -0 "$pid" 2>/dev/null || { echo "gateway $n exited at startup"; tail -n 20 "$W/$n.log"; return 1; }
      sleep 0.1
    done
    echo "gateway $n not listening on $p"; return 1
  done
}
pnfs="[pnfs]
enabled = true"
for k in 0 1 2; do
  gw_conf "ds$k" $((2050 + k)) "127.0.0.1:$((9121 + k))"
  pnfs="$pnfs
[[pnfs.data_servers]]
address = \"$ADDR:$((2050 + k))\""
done
gw_conf mds 2049 "$MDS_STATS" "$pnfs"
check "the metadata server (pNFS on) and data servers ds0..ds2 (ports 2050..2052) up on the bucket" gw_start mds ds0 ds1 ds2
all_up() { # the metadata server's probes see the three (one answered probe each)
  local n end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do
    n=$(curl -sf "http://$MDS_STATS/metrics" | grep -c '^nfsgw_pnfs_data_server_up{.*} 1$' || true)
    [ "$n" = 3 ] && return 0
    sleep 0.2
  done
  return 1
}
check "the metadata server sees its three data servers up" all_up

# scrape NAME: the four gateways' metrics in one curl (each process costs the TCG guest
# half a second), into $W/NAME.{mds,0,1,2}; counts NAME: "IN_MDS IN0 IN1 IN2 OUT_MDS
# OUT0 OUT1 OUT2 GRANTED RECALLED" (bytes summed over reactors and transports).
scrape() {
  local k urls=("http://$MDS_STATS/metrics" -o "$W/$1.mds")
  for k in 0 1 2; do urls+=("http://127.0.0.1:$((9121 + k))/metrics" -o "$W/$1.$k"); done
  curl -sf "${urls[@]}" || true
}
counts() {
  awk '
    FNR == 1 {f++}
    f == 1 && index($0, "nfsgw_pnfs_layouts_total{event=\"granted\"} ") == 1 {g = $NF}
    f == 1 && index($0, "nfsgw_pnfs_layouts_total{event=\"recalled\"} ") == 1 {r = $NF}
    index($0, "nfsgw_bytes_in_total") == 1 {i[f] += $NF}
    index($0, "nfsgw_bytes_out_total") == 1 {o[f] += $NF}
    END {printf "%.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f\n", i[1], i[2], i[3], i[4], o[1], o[2], o[3], o[4], g, r}
  ' "$W/$1.mds" "$W/$1.0" "$W/$1.1" "$W/$1.2"
}
# delta A B FROM: fields FROM..FROM+3 of counts B minus counts A ("mds ds0 ds1 ds2")
delta() {
  local -a a b
  local i out=""
  read -r -a a <<<"$1"
  read -r -a b <<<"$2"
  for ((i = $3 - 1; i < $3 + 3; i++)); do out+="$((b[i] - a[i])) "; done
  echo "$out"
}
# judge DELTAS: the data servers carried the file bytes, the metadata server under a
# tenth of them, and every data server a whole file at least (a file goes whole to the
# one data server its layout names).
judge() {
  awk -v t="$TOTAL" -v f=$((KIB * 1024)) '{
    ds = $2 + $3 + $4
    if (ds < t) { print "data servers carried " ds " < " t; exit 1 }
    if ($1 * 10 >= t) { print "metadata server carried " $1; exit 1 }
    for (k = 2; k <= 4; k++) if ($k < f) { print "data server ds" k - 2 " carried " $k; exit 1 }
  }' <<<"$1"
}

mkdir -p $M $V3DS $M41
check "mount -t nfs -o vers=4.2,proto=tcp $ADDR:/ $M" timeout -s KILL 120 mount -t nfs -o vers=4.2,proto=tcp "$ADDR:/" $M

# ---- write, then read back after dropping caches ----------------------------------------
scrape a
seq 1 "$FILES" | xargs -P 4 -I{} cp "$W/src.{}" "$M/f.{}"
check "$FILES files of $KIB KiB written and synced" sync
scrape b
echo 3 > /proc/sys/vm/drop_caches
readback() { seq 1 "$FILES" | xargs -P 4 -I{} cmp "$W/src.{}" "$M/f.{}"; }
check "read back byte-exact after dropping caches" readback
scrape c
ca=$(counts a) cb=$(counts b) cc=$(counts c)
din=$(delta "$ca" "$cb" 1)
dout=$(delta "$cb" "$cc" 5)
echo "$TAG: file bytes $TOTAL; written in (mds ds0 ds1 ds2): $din; read out: $dout"
check "writes: the data servers carry the file bytes, the metadata server does not, all three used" judge "$din"
check "reads: the data servers carry the file bytes, the metadata server does not, all three used" judge "$dout"

# ---- layouts ------------------------------------------------------------------------------
read -r -a ms <<<"$(awk -v m="mounted on $M " '
  $1 == "device" {on = index($0, m) > 0; next}
  !on {next}
  match($0, /pnfs=[A-Z_]+/) {d = substr($0, RSTART + 5, RLENGTH - 5)}
  match($0, /[ ,]vers=[0-9.]+/) {v = substr($0, RSTART + 6, RLENGTH - 6)}
  $1 ~ /^(LAYOUTGET|GETDEVICEINFO|LAYOUTCOMMIT|LAYOUTRETURN|LAYOUTERROR):$/ {n[$1] = $2}
  END {printf "%s %d %d %d %d %d %s\n", d == "" ? "none" : d, n["LAYOUTGET:"], n["GETDEVICEINFO:"],
         n["LAYOUTCOMMIT:"], n["LAYOUTRETURN:"], n["LAYOUTERROR:"], v == "" ? "?" : v}' /proc/self/mountstats)"
granted=$(awk '{print $9}' <<<"$cc")
echo "$TAG: mountstats vers=${ms[6]}, pnfs=${ms[0]}, LAYOUTGET ${ms[1]} (alone; the rest inside OPEN), GETDEVICEINFO ${ms[2]}, LAYOUTCOMMIT ${ms[3]}, LAYOUTRETURN ${ms[4]}, LAYOUTERROR ${ms[5]}; metadata server granted $granted layouts"
check "/proc/self/mountstats: vers=4.2, the flexfiles layout driver" test "${ms[6]} ${ms[0]}" = "4.2 LAYOUT_FLEX_FILES"
check "/proc/self/mountstats: GETDEVICEINFO calls" test "${ms[2]}" -gt 0
check "the metadata server granted a layout per file at least" test "${granted:-0}" -ge "$FILES"

# ---- the objects in the bucket (the store's view) -----------------------------------------
# listed KEY: "KEY SIZE" lines of ListObjectsV2 (one page: a few dozen keys).
listed() {
  s3 "http://$S3/$BUCKET?list-type=2" | awk 'BEGIN {RS = "<Contents>"} NR > 1 {
    k = $0; sub(/.*<Key>/, "", k); sub(/<\/Key>.*/, "", k)
    s = $0; sub(/.*<Size>/, "", s); sub(/<\/Size>.*/, "", s)
    print k, s}'
}
listed > "$W/listing"
echo "$TAG: the bucket lists $(wc -l < "$W/listing") objects"
in_bucket() {
  awk -v n="$FILES" -v b=$((KIB * 1024)) '$1 ~ /^f\.[0-9]+$/ && $2 == b {ok[$1] = 1}
    END {for (i = 1; i <= n; i++) if (!ok["f." i]) {print "f." i ": absent or not " b " bytes"; bad = 1}; exit bad}' "$W/listing"
}
check "the bucket lists every file with its size" in_bucket
got_object() { s3 -o "$W/object.1" "http://$S3/$BUCKET/f.1" && cmp "$W/src.1" "$W/object.1"; }
check "a GET of f.1 from the store returns its bytes" got_object

# ---- close-to-open across data servers ------------------------------------------------------
# Written through the 4.2 mount and closed: the client COMMITs at the data server its
# layout names (which uploads the object whole) and LAYOUTCOMMITs before close returns.
CB=$((1 << 20))
head -c $CB /dev/urandom > "$W/src.c2o"
scrape d
check "a 1 MiB file written through the 4.2 mount and closed (no sync)" cp "$W/src.c2o" "$M/c2o"
scrape e
read -r -a dc <<<"$(delta "$(counts d)" "$(counts e)" 1)"
wrote=""
for k in 0 1 2; do [ "${dc[$((k + 1))]}" -ge $CB ] && wrote=$k; done
check "one data server carried it (ds${wrote:-?}; in: ${dc[*]})" test -n "$wrote"
head_size() { s3 -I "http://$S3/$BUCKET/$1" | tr -d '\r' | awk 'tolower($1) == "content-length:" {print $2}'; }
check "the object is in the bucket at close, whole" test "$(head_size c2o)" = $CB
other=$(((wrote + 1) % 3))
V3_OPTS="vers=3,proto=tcp,port=$((2050 + other)),mountport=$((2050 + other)),mountproto=tcp,nolock"
check "another client: NFSv3 mount of data server ds$other ($V3_OPTS)" mount -t nfs -o "$V3_OPTS" "$ADDR:/" $V3DS
check "it reads exactly the bytes written through ds$wrote" cmp "$W/src.c2o" "$V3DS/c2o"
check "unmount it" umount $V3DS

# ---- a second client's truncate recalls the layout ---------------------------------------
# The 4.2 client holds the read layouts it took; another client of the metadata server
# truncates f.1: CB_LAYOUTRECALL, the truncate answered NFS4ERR_DELAY until the layout is
# back (README "Recalls"). The other client is a vers=4.1 mount (its own nfs_client:
# Linux's client owner names the minor version), not NFSv3: the NFSv3 client waits a
# fixed 5 s before it retries a JUKEBOX (NFS_JUKEBOX_RETRY_TIME), the NFSv4 one retries
# a DELAY after 0.1 s and doubles (nfs4_delay).
check "another client: mount -o vers=4.1 of the metadata server" mount -t nfs -o vers=4.1,proto=tcp "$ADDR:/" $M41
# Layouts are return-on-close (README "Close-to-open across data servers"): the 4.2
# client keeps f.1 open (fd 8) and reads through it, so it holds a layout at the truncate.
exec 8<"$M/f.1"
echo 3 > /proc/sys/vm/drop_caches
check "the 4.2 client reads f.1 through a layout and keeps it open" sh -c 'head -c 262144 <&8 >/dev/null'
scrape f
check "its truncate of a file the 4.2 client holds a layout of" timeout 120 truncate -s 1000 "$M41/f.1"
scrape g
exec 8<&-
r0=$(awk '{print $10}' <<<"$(counts f)")
r1=$(awk '{print $10}' <<<"$(counts g)")
echo "$TAG: layouts recalled $r0 -> $r1"
check "the truncate recalled the 4.2 client's layout" test "${r1:-0}" -gt "${r0:-0}"
echo 3 > /proc/sys/vm/drop_caches
check "the 4.2 client sees the truncated size" test "$(stat -c %s "$M/f.1")" = 1000
check "and the bytes before it" cmp -n 1000 "$W/src.1" "$M/f.1"
check "unmount the 4.1 client" umount $M41

rm -f "$M"/f.* "$M/c2o"
check "files removed" test -z "$(ls -A $M)"
check "unmount" umount $M
secs "$TSTART"
echo "$TAG: this part took $SECS s"
echo "KERNEL PNFS/S3: PASS"
