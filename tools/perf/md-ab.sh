#!/usr/bin/env bash
# md-ab.sh - bench md phases A/B: two gateway builds (fs backend, md-compare.sh's configuration:
# one reactor on core 0 unless CORES says more, WORKERS [32] workers, idle adaptive) side by side on their own directories, runs
# interleaved (order alternating by round); prints per NFS version and tree the median ops/s
# and p99 of the phase of each build and their ratios (B/A). docs/performance.md "Listing,
# fourth pass".
# Env (defaults): A=, B= (gateway binaries), BENCH= (bench binary), PHASE=readdir (bench md's
#   --phases; a list such as mkdir,create,remove,rmdir reports each phase) ROUNDS=3 CONNS=4
#   QD=8 FILES=1000 (per connection) TREES="easy hard" VERSIONS="3 4.1" CORES="0" (the reactors'
#   cores: "0, 1" gives two, whose connections the kernel spreads) OUT=/var/tmp/perf-md-ab/<time>
# Only 127.0.0.1 is used (ports 20061 and 20071).
set -u
ROUNDS=${ROUNDS:-3}; CONNS=${CONNS:-4}; FILES=${FILES:-1000}; QD=${QD:-8}
TREES=${TREES:-"easy hard"}; VERSIONS=${VERSIONS:-"3 4.1"}; PHASE=${PHASE:-readdir}
OUT=${OUT:-/var/tmp/perf-md-ab/$(date +%Y%m%d-%H%M%S)}; mkdir -p "$OUT"
declare -A PORT=([A]=20061 [B]=20071) BIN=([A]=$A [B]=$B) PIDS=()
for s in A B; do
  W=$OUT/$s; rm -rf "$W"; mkdir -p "$W/export" "$W/state"
  cat > "$W/g.toml" <<TOML
[engine]
cores = [${CORES:-0}]
idle = "adaptive"
[tcp]
listen = "127.0.0.1:${PORT[$s]}"
[rdma]
provider = "off"
[backend]
kind = "fs"
root = "$W/export"
workers = ${WORKERS:-32}
[state]
dir = "$W/state"
[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
access = "rw"
squash = "none"
TOML
  "${BIN[$s]}" --config "$W/g.toml" > "$W/log" 2>&1 < /dev/null &
  PIDS[$s]=$!
done
trap 'for s in A B; do kill ${PIDS[$s]} 2>/dev/null; done; wait' EXIT
sleep 3
printf "side\tnfs\ttree\tround\tops_per_s\twall_s\tp50\tp99\tload\n" | tee "$OUT/res.tsv"
for r in $(seq 1 "$ROUNDS"); do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"
  for v in $VERSIONS; do for t in $TREES; do for s in $order; do
    j=$OUT/$s.$v.$t.$r.json
    timeout 600 "$BENCH" md --target tcp://127.0.0.1:${PORT[$s]} --export / --nfs $v --tree $t --conns $CONNS --qd $QD \
      --files-per-conn $FILES --write-size 3901 --phases "$PHASE" --verify --json > "$j" 2> "$j.err"
    python3 - "$j" "$s" "$v" "$t" "$r" "$(cut -d' ' -f1 /proc/loadavg)" "$PHASE" <<'PY' | tee -a "$OUT/res.tsv"
import json,sys
j,s,v,t,r,l,ph=sys.argv[1:]
for p in ph.split(','):
  try:
    d=json.load(open(j))['phases'][p]
    lat=d.get('latency_us',{})
    print(f"{s}\t{v}\t{t}\t{r}\t{d['ops_per_s']:.0f}\t{d['wall_s']:.3f}\t{lat.get('p50')}\t{lat.get('p99')}\t{l}" + (f"\t{p}" if ',' in ph else ""))
  except Exception as e:
    print(f"{s}\t{v}\t{t}\t{r}\tERR {e}")
PY
  done; done; done
done
python3 - "$OUT/res.tsv" <<'PY'
import sys,statistics as st,collections
rows=[l.rstrip('\n').split('\t') for l in open(sys.argv[1])][1:]
g=collections.defaultdict(list)
for r in rows:
  # the phase (a tenth column when PHASE lists several) is part of the cell
  if len(r)>5 and not r[4].startswith('ERR'): g[(r[1],r[2]+(' '+r[9] if len(r)>9 else ''),r[0])].append((float(r[4]),float(r[5]),float(r[7] or 0)))
for (v,t) in sorted({(k[0],k[1]) for k in g}):
  a=g.get((v,t,'A'),[]); b=g.get((v,t,'B'),[])
  if a and b:
    ma=st.median(x[0] for x in a); mb=st.median(x[0] for x in b)
    pa=st.median(x[2] for x in a); pb=st.median(x[2] for x in b)
    print(f"v{v} {t}: A {ma:.0f}/s p99 {pa:.0f}us | B {mb:.0f}/s p99 {pb:.0f}us | B/A {mb/ma:.2f}x p99 {pb/pa if pa else 0:.2f}x (n={len(a)},{len(b)})")
PY
