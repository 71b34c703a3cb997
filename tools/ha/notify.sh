#!/bin/sh
# keepalived notify script (docs/ha.md): logs each transition of the service address.
# keepalived calls it as: notify.sh TYPE NAME STATE PRIORITY
# The gateway needs no action here: it takes or gives up its identity through the
# store on its own; this only leaves a trace next to the gateway's own log lines
# ("ha: took the identity", "ha: cannot renew the identity lease").
set -eu
type="${1:-}" name="${2:-}" state="${3:-}"
logger -t nfsgw-ha "address of $type $name: $state"
case "$state" in
    MASTER) logger -t nfsgw-ha "this host now carries the NFSv4.1 service address" ;;
    BACKUP|FAULT) logger -t nfsgw-ha "this host no longer carries the service address" ;;
esac
