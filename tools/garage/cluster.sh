#!/usr/bin/env bash
# A three-node Garage cluster on loopback (replication factor 3, lmdb metadata) for the
# tests and benchmarks: the config, layout, an access key and a bucket are made by this
# script with the binary printed by tools/garage/install.sh.
#
#   tools/garage/cluster.sh start DIR        # configure once, start the 3 nodes, wait healthy
#   tools/garage/cluster.sh env DIR          # shell exports: GARAGE_S3_ENDPOINTS, keys, bucket
#   tools/garage/cluster.sh stop DIR         # stop every node (data kept; start again later)
#   tools/garage/cluster.sh kill DIR N       # SIGKILL node N (1..3)
#   tools/garage/cluster.sh restart DIR N    # start node N again (after kill), wait until healthy
#   tools/garage/cluster.sh heal DIR         # resume and start every node, wait healthy
#   tools/garage/cluster.sh pause DIR N|all  # SIGSTOP node N / all nodes
#   tools/garage/cluster.sh resume DIR N|all # SIGCONT
#   tools/garage/cluster.sh cli DIR ARGS...  # the garage CLI through the first live node
#
# DIR holds node1..3/{garage.toml,meta,data,garage.log,pid} and `env`. Ports are chosen
# free at first start and kept in the configs, so a stopped cluster restarts on the same
# endpoints. With NFSGW_GARAGE_OWNER_PID set, a watchdog stops the nodes when that process
# dies (a test session killed without teardown leaves no servers behind).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N=3
BUCKET=${GARAGE_BUCKET:-nfsgw}
REGION=garage

die() { echo "cluster.sh: $*" >&2; exit 1; }

garage_bin() {
    if [[ -n "${GARAGE_BIN:-}" ]]; then echo "$GARAGE_BIN"; return; fi
    local cached="${NFSGW_CACHE:-$HOME/.cache/nfsgw}/garage-${GARAGE_VERSION:-2.5.0}/bin/garage"
    # Never trigger a 25-minute build from here: install.sh is an explicit step.
    [[ -x "$cached" ]] || die "no garage binary at $cached: run tools/garage/install.sh first (or set GARAGE_BIN)"
    echo "$cached"
}

free_ports() { # free_ports COUNT: distinct free TCP ports on 127.0.0.1, one a line
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
for s in socks:
    print(s.getsockname()[1])
EOF
}

hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }

node_dir() { echo "$DIR/node$1"; }
cfg() { echo "$(node_dir "$1")/garage.toml"; }
cli() { # the CLI through the first live node (node 1 may be the one a test killed)
    local i
    for i in $(seq 1 $N); do
        if node_alive "$i"; then "$GARAGE" -c "$(cfg "$i")" "$@"; return; fi
    done
    "$GARAGE" -c "$(cfg 1)" "$@"
}
node_pid() { cat "$(node_dir "$1")/pid" 2>/dev/null || true; }
node_alive() { local p; p=$(node_pid "$1"); [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null; }
s3_port() { cat "$(node_dir "$1")/s3_port"; }

configure() {
    mkdir -p "$DIR"
    local secret admin ports
    secret=$(hex 32)
    admin=$(hex 16)
    mapfile -t ports < <(free_ports $((3 * N)))
    for i in $(seq 1 $N); do
        local d rpc s3 adm
        d=$(node_dir "$i")
        rpc=${ports[$(( (i - 1) * 3 ))]}
        s3=${ports[$(( (i - 1) * 3 + 1 ))]}
        adm=${ports[$(( (i - 1) * 3 + 2 ))]}
        mkdir -p "$d/meta" "$d/data"
        echo "$s3" >"$d/s3_port"
        # fsync off: these are throw-away test clusters; replication is what is exercised.
        cat >"$d/garage.toml" <<EOF
metadata_dir = "$d/meta"
data_dir = "$d/data"
db_engine = "lmdb"
lmdb_map_size = "1G"
replication_factor = 3
consistency_mode = "consistent"
metadata_fsync = false
data_fsync = false
rpc_bind_addr = "127.0.0.1:$rpc"
rpc_public_addr = "127.0.0.1:$rpc"
rpc_secret = "$secret"
bootstrap_peers = []

[s3_api]
s3_region = "$REGION"
api_bind_addr = "127.0.0.1:$s3"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:$adm"
admin_token = "$admin"
EOF
        chmod 600 "$d/garage.toml"
    done
}

start_node() {
    local i=$1 d
    d=$(node_dir "$i")
    if node_alive "$i"; then return; fi
    # setsid: signals sent to the caller's process group (Ctrl-C in a test run) do not
    # reach the nodes; stop/kill here are the only way they go.
    RUST_LOG=${GARAGE_LOG:-garage=warn,netapp=warn} setsid "$GARAGE" -c "$d/garage.toml" server \
        >>"$d/garage.log" 2>&1 </dev/null &
    echo $! >"$d/pid"
}

wait_rpc() { # wait until node I answers the CLI
    local i=$1 deadline=$((SECONDS + 30))
    # `node id` reads the key from disk and succeeds before the daemon listens: ask it
    until "$GARAGE" -c "$(cfg "$i")" status >/dev/null 2>&1; do
        node_alive "$i" || die "node $i exited; log: $(tail -n 20 "$(node_dir "$i")/garage.log")"
        [[ $SECONDS -lt $deadline ]] || die "node $i not answering after 30 s"
        sleep 0.1
    done
}

wait_healthy() { # every node up and connected (all partitions fully healthy), S3 answering
    local deadline=$((SECONDS + ${1:-60}))
    until cli health 2>/dev/null | grep -q 'Cluster health: *HEALTHY' && s3_ready; do
        [[ $SECONDS -lt $deadline ]] || die "cluster not healthy after ${1:-60} s: $(cli health 2>&1 | tail -n 8)"
        sleep 0.2
    done
}

connect_all() { # (re)connect node I to every other node; idempotent
    local i=$1
    [[ -f "$DIR/peers" ]] || return 0
    while read -r peer; do
        "$GARAGE" -c "$(cfg "$i")" node connect "$peer" >/dev/null 2>&1 || true
    done <"$DIR/peers"
}

s3_ready() { # every live node's S3 port accepts connections
    for i in $(seq 1 $N); do
        node_alive "$i" || continue
        (exec 3<>"/dev/tcp/127.0.0.1/$(s3_port "$i")") 2>/dev/null || return 1
    done
}

bootstrap() { # once per DIR: connect, layout, key, bucket
    local ids=() id
    for i in $(seq 1 $N); do ids+=("$("$GARAGE" -c "$(cfg "$i")" node id -q)"); done
    for i in $(seq 2 $N); do cli node connect "${ids[$((i - 1))]}" >/dev/null; done
    # Later starts (one node restarted, or the whole cluster after `stop`) find the
    # others through bootstrap_peers and `connect_all`: the stored peer list alone
    # reconnected nothing within minutes in Garage 2.5.0.
    printf '%s\n' "${ids[@]}" >"$DIR/peers"
    local list
    list=$(printf '"%s", ' "${ids[@]}")
    for i in $(seq 1 $N); do
        sed -i "s/^bootstrap_peers = .*/bootstrap_peers = [${list%, }]/" "$(cfg "$i")"
    done
    for i in $(seq 1 $N); do
        id=${ids[$((i - 1))]%@*}
        # one zone per node: rf=3 puts a copy on each
        cli layout assign -z "z$i" -c 1G "${id:0:16}" >/dev/null
    done
    cli layout apply --version 1 >/dev/null
    local key_id secret_key
    key_id="GK$(hex 12)"
    secret_key=$(hex 32)
    cli key import --yes -n nfsgw "$key_id" "$secret_key" >/dev/null
    cli bucket create "$BUCKET" >/dev/null
    cli bucket allow --read --write --owner "$BUCKET" --key nfsgw >/dev/null
    local eps=()
    for i in $(seq 1 $N); do eps+=("http://127.0.0.1:$(s3_port "$i")"); done
    cat >"$DIR/env" <<EOF
export GARAGE_BIN='$GARAGE'
export GARAGE_DIR='$DIR'
export GARAGE_S3_ENDPOINTS='${eps[*]}'
export GARAGE_S3_ENDPOINT='${eps[0]}'
export GARAGE_REGION='$REGION'
export GARAGE_ACCESS_KEY='$key_id'
export GARAGE_SECRET_KEY='$secret_key'
export GARAGE_BUCKET='$BUCKET'
EOF
    chmod 600 "$DIR/env"
}

watchdog() { # stop the nodes when $NFSGW_GARAGE_OWNER_PID goes away
    local owner=$1
    (
        trap '' HUP
        while kill -0 "$owner" 2>/dev/null && [[ -f "$DIR/running" ]]; do sleep 1; done
        [[ -f "$DIR/running" ]] && "$HERE/cluster.sh" stop "$DIR" >/dev/null 2>&1
    ) </dev/null >/dev/null 2>&1 &
    disown
}

stop_node() { # SIGTERM, then SIGKILL after 10 s
    local i=$1 p t=0
    p=$(node_pid "$i")
    [[ -n "$p" ]] || return 0
    kill -CONT "$p" 2>/dev/null || true
    kill -TERM "$p" 2>/dev/null || true
    while kill -0 "$p" 2>/dev/null; do
        t=$((t + 1))
        if [[ $t -ge 100 ]]; then kill -KILL "$p" 2>/dev/null || true; fi
        sleep 0.1
    done
    rm -f "$(node_dir "$i")/pid"
}

node_arg() {
    [[ "${1:-}" =~ ^[1-3]$ ]] || die "node must be 1, 2 or 3 (got '${1:-}')"
}

cmd=${1:-}
[[ -n "$cmd" && -n "${2:-}" ]] || die "usage: cluster.sh start|stop|env|kill|restart|heal|pause|resume|cli DIR [N|ARGS]"
DIR=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
case "$cmd" in
start)
    GARAGE=$(garage_bin)
    fresh=0
    [[ -f "$(cfg 1)" ]] || { configure; fresh=1; }
    for i in $(seq 1 $N); do start_node "$i"; done
    for i in $(seq 1 $N); do wait_rpc "$i"; done
    if [[ $fresh = 1 || ! -f "$DIR/env" ]]; then bootstrap; else connect_all 1; fi
    touch "$DIR/running"
    if [[ -n "${NFSGW_GARAGE_OWNER_PID:-}" ]]; then watchdog "$NFSGW_GARAGE_OWNER_PID"; fi
    wait_healthy
    cat "$DIR/env"
    ;;
env)
    [[ -f "$DIR/env" ]] || die "no cluster in $DIR (start it first)"
    cat "$DIR/env"
    ;;
stop)
    rm -f "$DIR/running"
    # All nodes at once: each takes 2-4 s to shut down after SIGTERM, one after another
    # they took 6-11 s of each stop (every e2e session's teardown, run-all.sh's live
    # stage). Nothing waits on their order: the cluster is going away whole.
    for i in $(seq 1 $N); do stop_node "$i" & done
    wait
    ;;
kill)
    node_arg "${1:-}"
    p=$(node_pid "$1")
    if [[ -n "$p" ]]; then
        kill -KILL "$p" 2>/dev/null || true
        while kill -0 "$p" 2>/dev/null; do sleep 0.05; done
    fi
    rm -f "$(node_dir "$1")/pid"
    ;;
restart)
    node_arg "${1:-}"
    GARAGE=$(garage_bin)
    start_node "$1"
    wait_rpc "$1"
    connect_all "$1"
    wait_healthy "${2:-60}"
    ;;
heal)
    # every node resumed and running again (after any kill/pause), then full health
    GARAGE=$(garage_bin)
    for i in $(seq 1 $N); do p=$(node_pid "$i"); if [[ -n "$p" ]]; then kill -CONT "$p" 2>/dev/null || true; fi; done
    for i in $(seq 1 $N); do start_node "$i"; done
    for i in $(seq 1 $N); do wait_rpc "$i"; connect_all "$i"; done
    wait_healthy "${1:-60}"
    ;;
pause | resume)
    sig=STOP; [[ $cmd = resume ]] && sig=CONT
    if [[ "${1:-}" = all ]]; then nodes=$(seq 1 $N); else node_arg "${1:-}"; nodes=$1; fi
    for i in $nodes; do
        p=$(node_pid "$i")
        if [[ -n "$p" ]]; then kill -"$sig" "$p" 2>/dev/null || true; fi
    done
    ;;
cli)
    GARAGE=$(garage_bin)
    cli "$@"
    ;;
*) die "unknown command '$cmd'" ;;
esac
