#!/usr/bin/env bash
# Starts a real S3-compatible server (moto's server mode, from PyPI, installed into
# tests/.venv by tests/setup.sh) on a free loopback port and prints its URL.
#
#   eval "$(tests/s3/moto-server.sh start target/moto.log)"   # sets S3_URL, S3_PID
#   kill "$S3_PID"
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/../.venv"
LOG="${2:-/dev/null}"
[[ "${1:-}" == start ]] || { echo "usage: $0 start [LOGFILE]" >&2; exit 2; }
[[ -x "$VENV/bin/moto_server" ]] || { echo "moto_server missing: run tests/setup.sh" >&2; exit 1; }
PORT=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT" >"$LOG" 2>&1 &
PID=$!
for _ in $(seq 1 100); do
    if "$VENV/bin/python" -c "import socket; socket.create_connection(('127.0.0.1',$PORT),0.2)" 2>/dev/null; then
        echo "S3_URL=http://127.0.0.1:$PORT S3_PID=$PID"
        exit 0
    fi
    kill -0 "$PID" 2>/dev/null || { echo "moto_server exited; see $LOG" >&2; exit 1; }
    sleep 0.1
done
kill "$PID"; echo "moto_server did not start within 10 s; see $LOG" >&2; exit 1
