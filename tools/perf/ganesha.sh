#!/usr/bin/env bash
# ganesha.sh - run nfs-ganesha (FSAL_VFS) as an NFSv3 (and, with GANESHA_PROTOCOLS="3, 4",
# NFSv4.1) peer on 127.0.0.1 for benchmarks. NFSv4 clients reach DIR at the pseudo path
# /perf (bench --nfs 4.1 --export /perf).
#
#   ganesha.sh start DIR PORT   export DIR over NFSv3/TCP: NFS on PORT, MOUNT on PORT+1;
#                               prints the libnfs URL of DIR on stdout
#   ganesha.sh stop PORT        stop the ganesha (and rpcbind, if this script started it)
#                               started for PORT
#   ganesha.sh status PORT
#
# Installs nfs-ganesha, nfs-ganesha-vfs and rpcbind with apt-get if missing.
# Ganesha will not start without rpcbind on port 111; if nothing listens there, a
# 'rpcbind -f' is started (NB: 'rpcbind -h 127.0.0.1' crashes in Debian 12's rpcbind).
# The config, logs and pid files live in a fresh temp dir, recorded in
# ${TMPDIR:-/tmp}/perf-ganesha.PORT so that 'stop' only kills what 'start' started.
# Needs root.
set -euo pipefail
STATE_PTR() { echo "${TMPDIR:-/tmp}/perf-ganesha.$1"; }
log() { echo "[ganesha.sh] $*" >&2; }
port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

install_if_missing() {
  local need="" p
  for p in nfs-ganesha nfs-ganesha-vfs rpcbind; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need="$need $p"
  done
  [ -z "$need" ] && return 0
  log "installing:$need"
  apt-get update -qq || log "apt-get update reported errors (continuing)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >&2
}

stop_pid() { # name pid
  local i
  kill -0 "$2" 2>/dev/null || return 0
  log "stopping $1 (pid $2)"
  kill -TERM "$2" 2>/dev/null || true
  for i in $(seq 1 100); do kill -0 "$2" 2>/dev/null || return 0; sleep 0.1; done
  log "$1 (pid $2) ignored TERM; KILL"
  kill -KILL "$2" 2>/dev/null || true
}

cmd_start() {
  local dir=$1 port=$2 mport=$(($2 + 1)) run ptr i
  [ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
  dir=$(realpath -m "$dir"); mkdir -p "$dir"
  ptr=$(STATE_PTR "$port")
  if [ -f "$ptr" ]; then log "already started for port $port (state $(cat "$ptr")); stop it first"; exit 1; fi
  for p in "$port" "$mport"; do port_open "$p" && { log "port $p is already in use"; exit 1; }; done
  install_if_missing
  run=$(mktemp -d "${TMPDIR:-/tmp}/perf-ganesha-$port.XXXXXX")
  echo "$run" > "$ptr"
  if ! port_open 111; then
    setsid rpcbind -f >"$run/rpcbind.log" 2>&1 < /dev/null &
    echo $! > "$run/rpcbind.pid"
    for i in $(seq 1 100); do port_open 111 && break; sleep 0.1; done
    port_open 111 || { log "rpcbind did not come up"; cat "$run/rpcbind.log" >&2; cmd_stop "$port"; exit 1; }
    log "started rpcbind (pid $(cat "$run/rpcbind.pid"))"
  fi
  mkdir -p "$run/recov"
  cat > "$run/ganesha.conf" <<CONF
NFS_CORE_PARAM {
    Bind_addr = 127.0.0.1;
    NFS_Port = $port;
    MNT_Port = $mport;
    NLM_Port = $((port + 2));
    Rquota_Port = $((port + 3));
    Protocols = ${GANESHA_PROTOCOLS:-3};
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
}
NFSv4 { Graceless = true; RecoveryRoot = "$run/recov"; }
NFS_KRB5 { Active_krb5 = false; }
EXPORT {
    Export_Id = 1;
    Path = "$dir";
    Pseudo = "/perf";
    Protocols = ${GANESHA_PROTOCOLS:-3};
    Transports = TCP;
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
CONF
  setsid ganesha.nfsd -F -f "$run/ganesha.conf" -L "$run/ganesha.log" -p "$run/ganesha.pidfile" -N NIV_EVENT \
      >"$run/ganesha.out" 2>&1 < /dev/null &
  echo $! > "$run/ganesha.pid"
  for i in $(seq 1 300); do
    port_open "$port" && port_open "$mport" && break
    kill -0 "$(cat "$run/ganesha.pid")" 2>/dev/null || break
    sleep 0.1
  done
  if ! port_open "$port"; then
    log "ganesha did not open port $port; last log lines:"; tail -20 "$run/ganesha.log" "$run/ganesha.out" >&2 || true
    cmd_stop "$port"; exit 1
  fi
  log "ganesha pid $(cat "$run/ganesha.pid") exports $dir on 127.0.0.1: nfs $port, mount $mport (state $run)"
  echo "nfs://127.0.0.1$dir?version=3&nfsport=$port&mountport=$mport"
}

cmd_stop() {
  local port=$1 ptr run
  ptr=$(STATE_PTR "$port")
  [ -f "$ptr" ] || { log "nothing started for port $port"; return 0; }
  run=$(cat "$ptr")
  # ganesha first, rpcbind last (ganesha unregisters on the way out)
  [ -f "$run/ganesha.pid" ] && stop_pid ganesha "$(cat "$run/ganesha.pid")"
  [ -f "$run/rpcbind.pid" ] && stop_pid rpcbind "$(cat "$run/rpcbind.pid")"
  rm -f "$ptr" "$run"/*.pid
  log "stopped (logs kept in $run)"
}

cmd_status() {
  local ptr run; ptr=$(STATE_PTR "$1")
  [ -f "$ptr" ] || { echo "not started"; return 1; }
  run=$(cat "$ptr")
  for n in ganesha rpcbind; do
    [ -f "$run/$n.pid" ] && { kill -0 "$(cat "$run/$n.pid")" 2>/dev/null && echo "$n: running pid $(cat "$run/$n.pid")" || echo "$n: dead"; }
  done
  return 0
}

case "${1:-}" in
  start)  [ $# -eq 3 ] || { echo "usage: $0 start DIR PORT" >&2; exit 2; }; cmd_start "$2" "$3";;
  stop)   [ $# -ge 2 ] || { echo "usage: $0 stop PORT" >&2; exit 2; }; cmd_stop "${@: -1}";;
  status) [ $# -ge 2 ] || { echo "usage: $0 status PORT" >&2; exit 2; }; cmd_status "${@: -1}";;
  *) echo "usage: $0 start DIR PORT | stop PORT | status PORT" >&2; exit 2;;
esac
