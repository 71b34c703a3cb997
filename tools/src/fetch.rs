//! A minimal HTTP/1.1 GET over std::net, enough for the gateway's stats endpoint
//! (which always answers with Content-Length and closes).

use anyhow::{bail, Context};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Largest body accepted.
const MAX_BODY: u64 = 64 << 20;

/// `http://host:port/path` → (host:port, path).
fn split_url(url: &str) -> anyhow::Result<(String, String)> {
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("{url}: only http:// URLs are supported (e.g. http://127.0.0.1:9108/metrics)");
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if host.is_empty() {
        bail!("{url}: no host");
    }
    let host = if host.contains(':') && !host.ends_with(']') {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    Ok((host, path.to_string()))
}

/// GETs `url` and returns the body of a 200 answer.
pub fn get(url: &str, timeout: Duration) -> anyhow::Result<String> {
    let (host, path) = split_url(url)?;
    let addr = host
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr} (is [stats] listen set on the gateway?)"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.take(MAX_BODY).read_to_end(&mut raw)?;
    let text = String::from_utf8(raw).context("response is not UTF-8")?;
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("{url}: truncated HTTP response");
    };
    let status = head.lines().next().unwrap_or_default();
    if status.split(' ').nth(1) != Some("200") {
        bail!("{url}: {status}");
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            split_url("http://127.0.0.1:9108/metrics").unwrap(),
            ("127.0.0.1:9108".into(), "/metrics".into())
        );
        assert_eq!(
            split_url("http://localhost").unwrap(),
            ("localhost:80".into(), "/".into())
        );
        assert!(split_url("https://x/").is_err());
        assert!(split_url("http:///metrics").is_err());
    }
}
