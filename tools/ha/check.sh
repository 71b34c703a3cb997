#!/bin/sh
# keepalived track script (docs/ha.md "Moving the address"): succeeds while the local
# gateway holds its [ha] identity (nfsgw_ha_identity_held 1), or expects to take it
# over soon (nfsgw_ha_takeover_imminent 1: the holder's lease has not been renewed for
# longer than a live holder's renewal takes). The address then reaches the standby
# seconds before it serves: clients' reconnections find it, and their requests wait
# there (parked, never answered by a gateway that does not serve) until it does.
# Never two gateways serving: the store fences the identity; keepalived's nopreempt
# keeps the address on a holder whose check still passes.
#   check.sh [METRICS_URL]     default http://127.0.0.1:9108/metrics
set -eu
url="${1:-http://127.0.0.1:9108/metrics}"
curl -fsS --max-time 2 "$url" | awk '
  ($1 == "nfsgw_ha_identity_held" || $1 == "nfsgw_ha_takeover_imminent") && $2 == "1" { ok = 1 }
  END { exit !ok }'
