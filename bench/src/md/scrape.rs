//! `md --stats-url`: the gateway's store requests behind each phase, read from its
//! Prometheus endpoint (`nfsgw_s3_requests_total{kind=...}`, docs/stats.md) before and
//! after the phase. The counters are gateway-wide: anything else the gateway does
//! meanwhile (another client, background flushes) is counted too.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The metric read.
const METRIC: &str = "nfsgw_s3_requests_total";
/// Largest exposition accepted.
const MAX_BODY: u64 = 16 << 20;
const TIMEOUT: Duration = Duration::from_secs(10);

/// Store requests by kind.
pub type Counts = BTreeMap<String, u64>;

/// `http://HOST:PORT/PATH` split into the address and the path.
fn split_url(url: &str) -> anyhow::Result<(&str, &str)> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        anyhow::anyhow!("--stats-url must be http://HOST:PORT/metrics, not {url}")
    })?;
    Ok(match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    })
}

/// GET of the endpoint: the body of a 200 answer.
pub fn fetch(url: &str) -> anyhow::Result<String> {
    let (addr, path) = split_url(url)?;
    let mut s = TcpStream::connect(addr).map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    s.set_read_timeout(Some(TIMEOUT))?;
    s.set_write_timeout(Some(TIMEOUT))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.take(MAX_BODY).read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("{url}: not an HTTP answer"))?;
    let status = head.lines().next().unwrap_or_default();
    anyhow::ensure!(status.contains(" 200 "), "{url}: {status}");
    Ok(body.to_string())
}

/// The `nfsgw_s3_requests_total` samples of an exposition, by `kind`; other lines and
/// malformed samples are ignored.
pub fn store_requests(text: &str) -> Counts {
    let mut out = Counts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(METRIC) else {
            continue;
        };
        let Some(rest) = rest.strip_prefix("{kind=\"") else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once("\"}") else {
            continue;
        };
        if let Ok(v) = rest.trim().parse::<u64>() {
            out.insert(kind.to_string(), v);
        }
    }
    out
}

/// What the counters moved by from `before` to `after` (a counter that went back, a
/// gateway restarted, counts from zero).
pub fn delta(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, &v)| {
            let b = before.get(k).copied().unwrap_or(0);
            (k.clone(), if v >= b { v - b } else { v })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_by_kind_and_differenced() {
        let t = "# HELP nfsgw_s3_requests_total x\n# TYPE nfsgw_s3_requests_total counter\n\
                 nfsgw_s3_requests_total{kind=\"head\"} 7\n\
                 nfsgw_s3_requests_total{kind=\"put\"} 12\n\
                 nfsgw_s3_requests_total_other{kind=\"x\"} 1\n\
                 nfsgw_s3_requests_total{kind=\"list\"} nope\n\
                 nfsgw_reactors 1\n";
        let a = store_requests(t);
        assert_eq!(a.len(), 2);
        assert_eq!((a["head"], a["put"]), (7, 12));
        let b = store_requests(&t.replace("} 12", "} 20").replace("} 7", "} 3"));
        let d = delta(&a, &b);
        assert_eq!((d["put"], d["head"]), (8, 3));
    }

    #[test]
    fn urls_split_into_address_and_path() {
        assert_eq!(
            split_url("http://127.0.0.1:9108/metrics").unwrap(),
            ("127.0.0.1:9108", "/metrics")
        );
        assert_eq!(split_url("http://h:1").unwrap(), ("h:1", "/metrics"));
        assert!(split_url("https://h:1/metrics").is_err());
    }
}
