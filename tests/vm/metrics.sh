# Reading the gateway's /metrics from the guest scripts (sourced, not run).
#
# Bash and awk only: in the rig's guest (TCG, no KVM on this class of machine) each
# `python3` start costs seconds, and the stages read the metrics dozens of times.
#
#   metrics_get ADDR              the body of GET http://ADDR/metrics (ADDR = host:port)
#   metric_sum ADDR TRANSPORT Q…  for each query Q (`name` or `name:result`), the integer
#                                 sum of the metric's series (only result="result" ones
#                                 when given); where a series has a transport label, only
#                                 TRANSPORT's count ("" counts every transport)

metrics_get() {
  local host=${1%:*} port=${1##*:} fd
  exec {fd}<>"/dev/tcp/$host/$port" || return 1
  printf 'GET /metrics HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$1" >&"$fd"
  # The endpoint answers with Connection: close, so the body ends at EOF.
  timeout 10 cat <&"$fd" | tr -d '\r' | sed '1,/^$/d'
  exec {fd}>&-
}

metric_sum() {
  local addr=$1 transport=$2 text
  shift 2
  text=$(metrics_get "$addr") || return 1
  [ -n "$text" ] || { echo "stats endpoint $addr: empty answer" >&2; return 1; }
  awk -v tr="$transport" -v qs="$*" '
    BEGIN { n = split(qs, q, " "); for (i = 1; i <= n; i++) sum[i] = 0 }
    /^#/ || NF < 2 { next }
    {
      name = $1; labels = ""
      b = index($1, "{")
      if (b > 0) { name = substr($1, 1, b - 1); labels = substr($0, b, index($0, "}") - b + 1) }
      if (tr != "" && index(labels, "transport=\"") && !index(labels, "transport=\"" tr "\"")) next
      for (i = 1; i <= n; i++) {
        c = index(q[i], ":")
        want = c ? substr(q[i], 1, c - 1) : q[i]
        res = c ? substr(q[i], c + 1) : ""
        if (name == want && (res == "" || index(labels, "result=\"" res "\""))) sum[i] += $NF
      }
    }
    END { for (i = 1; i <= n; i++) printf "%s%.0f", (i > 1 ? " " : ""), sum[i]; print "" }
  ' <<<"$text"
}

# metric_with ADDR NAME [LABEL=VALUE…]: the integer sum of NAME's series that carry
# every one of those labels.
metric_with() {
  local addr=$1 name=$2 text
  shift 2
  text=$(metrics_get "$addr") || return 1
  [ -n "$text" ] || { echo "stats endpoint $addr: empty answer" >&2; return 1; }
  awk -v want="$name" -v ls="$*" '
    BEGIN { n = split(ls, l, " "); total = 0 }
    /^#/ || NF < 2 { next }
    {
      name = $1; labels = "{}"
      b = index($1, "{")
      if (b > 0) { name = substr($1, 1, b - 1); labels = substr($0, b, index($0, "}") - b + 1) }
      if (name != want) next
      for (i = 1; i <= n; i++) {
        e = index(l[i], "=")
        kv = substr(l[i], 1, e) "\"" substr(l[i], e + 1) "\""
        if (!index(labels, "{" kv) && !index(labels, "," kv)) next
      }
      total += $NF
    }
    END { printf "%.0f\n", total }
  ' <<<"$text"
}
