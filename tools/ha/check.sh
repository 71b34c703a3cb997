#!/bin/sh
# keepalived track script (docs/ha.md): succeeds while the local gateway holds its
# [ha] identity (nfsgw_ha_identity_held 1 on its /metrics endpoint).
#   check.sh [METRICS_URL]     default http://127.0.0.1:9108/metrics
set -eu
url="${1:-http://127.0.0.1:9108/metrics}"
held=$(curl -fsS --max-time 2 "$url" | awk '$1 == "nfsgw_ha_identity_held" { print $2 }')
[ "${held:-0}" = "1" ]
