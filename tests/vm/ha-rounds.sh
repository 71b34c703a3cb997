# Sourced by tests/vm/guest-ha.sh and guest-ha-rdma.sh (HA_ROUNDS > 1): the
# distribution of one column of their per-round table.
#
# spread FILE COLUMN: min / median / max of COLUMN over FILE's lines, in seconds ("-"
# entries, a time a log did not have, left out; "-" when none is left).
spread() {
  awk -v c="$2" '$c != "-" {print $c}' "$1" | sort -n | awk '{v[NR] = $1}
    END {if (!NR) {print "-"; exit}
         m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
         printf "%.1f / %.1f / %.1f s (%d rounds)\n", v[1], m, v[NR], NR}'
}
