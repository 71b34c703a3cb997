//! `[ha] etcd`: the identity's fencing objects (lease, recovery record, layout key,
//! probe) in etcd v3 instead of the object store, for stores without linearizable
//! conditional writes (Garage ignores `If-None-Match`; docs/ha.md "Fencing").
//!
//! etcd gives what `backend::Cas` needs: every Range is linearizable by default (it
//! goes through the leader's read index), and a Txn's compares and its Put are applied
//! atomically at one revision of the Raft log. So:
//!
//! - `cas_get`: Range of the key → its value and its `mod_revision` (the version);
//! - `cas_put` create: Txn `create_revision == 0` (absent) → Put;
//! - `cas_put` replace: Txn `mod_revision == expect` → Put; an `expect` that is not a
//!   positive number is a failed condition (the absent key's mod_revision is 0);
//! - a failed compare changes nothing and is `AlreadyExists`; the new version is the
//!   Txn response header's revision (the Put's, so the key's new `mod_revision`).
//!
//! The client speaks etcd's JSON gateway (`POST /v3/kv/range`, `/v3/kv/txn`, keys and
//! values in base64; in etcd since 3.3, `/v3/` since 3.4) over plain HTTP/1.1 on
//! std's TcpStream, one connection per call: a handful of calls a second, no gRPC
//! stack (tonic, prost, protoc) for them. Every call has one deadline (`timeout`, below
//! `ha.lease_s / 4`: `HaConfig::validate`) for connect, send and answer over all the
//! endpoints it tries; an endpoint that refuses or times out the *connection* is
//! skipped for the next one (the request was not sent), and so is one that fails a
//! read; a Txn that was sent is not sent again in the same call (`Retryable`): one
//! whose answer was lost may have landed, which `ha::put_checked` tells from a lost
//! race by reading the key back. The next call starts at the next endpoint.

use crate::backend::{BResult, BackendError, Cas};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Most bytes of one answer (etcd's own request limit is 1.5 MiB by default).
const MAX_ANSWER: usize = 8 << 20;

/// One etcd endpoint: its URL as configured and its addresses (resolved at start,
/// so a call never waits on DNS).
struct Endpoint {
    url: String,
    host: String,
    addrs: Vec<SocketAddr>,
}

/// `Cas` on an etcd cluster.
pub struct EtcdCas {
    endpoints: Vec<Endpoint>,
    /// Prepended to every name (`ha/<identity>/lease` → `<prefix>ha/<identity>/lease`).
    prefix: String,
    timeout: Duration,
    /// The endpoint that answered last: calls start there.
    next: AtomicUsize,
    /// The cluster every answer must come from (`header.cluster_id`), learnt at start
    /// (`learn_cluster`): endpoints that span two clusters, or an etcd wiped and made
    /// again, would show the identity's lease absent and let it be taken at once.
    cluster: OnceLock<u64>,
}

/// `http://host:port` (an optional trailing '/') → (host:port, host). Only plain HTTP:
/// the client has no TLS.
pub fn parse_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?}: must start with http:// (no TLS)"))?;
    let hostport = rest.strip_suffix('/').unwrap_or(rest);
    if hostport.is_empty() || hostport.contains('/') || hostport.contains('@') {
        return Err(format!("{url:?}: must be http://host:port"));
    }
    let (host, port) = hostport
        .rsplit_once(':')
        .ok_or_else(|| format!("{url:?}: no port (etcd's client port is usually 2379)"))?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(format!("{url:?}: bad port {port:?}")),
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.is_empty()
        || !bare
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:".contains(&b))
    {
        return Err(format!("{url:?}: bad host {host:?}"));
    }
    Ok((hostport.to_string(), host.to_string()))
}

impl EtcdCas {
    /// The client for `urls` (checked by `parse_url`; names resolved now).
    pub fn new(urls: &[String], prefix: &str, timeout: Duration) -> anyhow::Result<EtcdCas> {
        let mut endpoints = Vec::new();
        for url in urls {
            let (hostport, host) = parse_url(url).map_err(|e| anyhow::anyhow!("ha.etcd: {e}"))?;
            let addrs: Vec<SocketAddr> = hostport
                .to_socket_addrs()
                .map_err(|e| anyhow::anyhow!("ha.etcd: {url:?}: cannot resolve: {e}"))?
                .collect();
            if addrs.is_empty() {
                anyhow::bail!("ha.etcd: {url:?}: resolves to no address");
            }
            endpoints.push(Endpoint {
                url: url.clone(),
                host,
                addrs,
            });
        }
        if endpoints.is_empty() {
            anyhow::bail!("ha.etcd: no endpoint");
        }
        Ok(EtcdCas {
            endpoints,
            prefix: prefix.to_string(),
            timeout,
            next: AtomicUsize::new(0),
            cluster: OnceLock::new(),
        })
    }

    /// Learns the cluster id from every endpoint that answers now (at least one must);
    /// two different ids refuse the start. Every later answer must carry the same
    /// (`check_header`).
    pub fn learn_cluster(&self) -> anyhow::Result<u64> {
        let body = json!({ "key": self.key("ha/cluster"), "count_only": true }).to_string();
        let mut seen: Vec<(u64, &str)> = Vec::new();
        let mut failed = Vec::new();
        for ep in &self.endpoints {
            let deadline = Instant::now() + self.timeout;
            let got = connect(ep, deadline)
                .ok_or_else(|| "no connection".to_string())
                .and_then(|mut s| exchange(&mut s, ep, "/v3/kv/range", &body, deadline))
                .and_then(|v| header_of(&v));
            match got {
                Ok((id, _)) => seen.push((id, &ep.url)),
                Err(e) => failed.push(format!("{}: {e}", ep.url)),
            }
        }
        let Some(&(id, _)) = seen.first() else {
            anyhow::bail!("ha.etcd: no endpoint answered ({})", failed.join("; "));
        };
        if let Some((other, url)) = seen.iter().find(|(c, _)| *c != id) {
            anyhow::bail!(
                "ha.etcd: the endpoints are not one cluster: {} is cluster {id:x}, {url} is cluster {other:x}",
                seen[0].1
            );
        }
        if !failed.is_empty() {
            tracing::warn!(cluster = %format!("{id:x}"), unanswered = %failed.join("; "), "ha: etcd endpoints that did not answer at start: their answers must later come from the same cluster");
        }
        let _ = self.cluster.set(id);
        Ok(*self.cluster.get().unwrap_or(&id))
    }

    /// An answer is interpreted only with its header: a revision, and the cluster id
    /// learnt at start (a `{}` from a proxy is not "absent" nor "condition failed").
    fn check_header(&self, v: &Value) -> Result<(), String> {
        let (id, _) = header_of(v)?;
        match self.cluster.get() {
            Some(&c) if c == id => Ok(()),
            Some(&c) => {
                let e = format!("an answer from etcd cluster {id:x}, not {c:x} (learnt at start): another cluster, or this one wiped and made again");
                tracing::error!(error = %e, "ha: etcd answer refused");
                Err(e)
            }
            None => Err("the cluster id was not learnt (EtcdCas::learn_cluster)".into()),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn urls(&self) -> Vec<&str> {
        self.endpoints.iter().map(|e| e.url.as_str()).collect()
    }

    fn key(&self, name: &str) -> String {
        b64(format!("{}{name}", self.prefix).as_bytes())
    }

    /// POSTs `body` to `path` at the first endpoint that takes the connection, within
    /// one deadline; the answer's JSON. `idempotent` (a read): an endpoint that took
    /// the connection but failed the call is followed by the next while time is left;
    /// a Txn is not sent twice in one call (`ha::put_checked` reads back a write whose
    /// answer was lost). Either way the next call starts at the next endpoint: a member
    /// cut off from its cluster's majority, which takes connections but cannot answer
    /// a linearizable request, is not asked again and again.
    fn call(&self, path: &str, body: &Value, idempotent: bool) -> BResult<Value> {
        let deadline = Instant::now() + self.timeout;
        let body = body.to_string();
        let n = self.endpoints.len();
        // A black-holed endpoint (SYNs dropped) must leave time for the others.
        let per_connect = (self.timeout / n as u32).max(Duration::from_millis(100));
        let first = self.next.load(Ordering::Relaxed) % n;
        let mut failed = Vec::new();
        for i in 0..n {
            let at = (first + i) % n;
            let ep = &self.endpoints[at];
            let Some(mut s) = connect(ep, deadline.min(Instant::now() + per_connect)) else {
                failed.push(format!("{}: no connection", ep.url));
                continue;
            };
            let got = exchange(&mut s, ep, path, &body, deadline);
            match got.and_then(|v| self.check_header(&v).map(|()| v)) {
                Ok(v) => {
                    self.next.store(at, Ordering::Relaxed);
                    return Ok(v);
                }
                // etcd's own check, or gRPC's (past the limit plus its overhead).
                Err(e) if e.contains("request is too large") || e.contains("larger than max") => {
                    return Err(too_large(&e, body.len()))
                }
                Err(e) => {
                    self.next.store(at + 1, Ordering::Relaxed);
                    failed.push(format!("{}: {e}", ep.url));
                    if !idempotent {
                        break;
                    }
                }
            }
        }
        Err(BackendError::Retryable(format!(
            "etcd: no endpoint answered within {} ms ({})",
            self.timeout.as_millis(),
            failed.join("; ")
        )))
    }
}

/// etcd refuses a request over its `--max-request-bytes` (1.5 MiB by default): no
/// retry will pass, so a permanent error, logged once (a recovery record of too many
/// owners: docs/ha.md "Fencing: etcd" says how many fit).
fn too_large(e: &str, bytes: usize) -> BackendError {
    static LOGGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let msg = format!(
        "etcd refuses a request of {bytes} bytes as too large (its --max-request-bytes): {e}"
    );
    if !LOGGED.swap(true, Ordering::Relaxed) {
        tracing::error!(error = %msg, "ha: a write to etcd over its request limit (raise etcd's --max-request-bytes, or fewer clients)");
    }
    BackendError::Permanent(msg)
}

/// A connection to one of `ep`'s addresses before `deadline`, `None` if none takes it.
fn connect(ep: &Endpoint, deadline: Instant) -> Option<TcpStream> {
    for a in &ep.addrs {
        let left = deadline.checked_duration_since(Instant::now())?;
        if left.is_zero() {
            return None;
        }
        if let Ok(s) = TcpStream::connect_timeout(a, left) {
            let _ = s.set_nodelay(true);
            return Some(s);
        }
    }
    None
}

/// An answer's (cluster id, revision): both must be there (proto3 JSON writes the
/// uint64/int64s as strings; a live cluster's revision is at least 1).
fn header_of(v: &Value) -> Result<(u64, i64), String> {
    let h = &v["header"];
    let id = match &h["cluster_id"] {
        Value::String(s) => s.parse::<u64>().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
    .filter(|c| *c != 0)
    .ok_or("an answer without header.cluster_id")?;
    let rev = int(&h["revision"])
        .filter(|r| *r > 0)
        .ok_or("an answer without header.revision")?;
    Ok((id, rev))
}

/// Writes all of `data`, each write bounded by what is left of `deadline`
/// (SO_SNDTIMEO bounds one syscall, not the whole of a long record to a slow peer).
fn send_all(s: &mut TcpStream, mut data: &[u8], deadline: Instant) -> Result<(), String> {
    while !data.is_empty() {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or("send: timed out")?;
        s.set_write_timeout(Some(left)).map_err(|e| e.to_string())?;
        match s.write(data) {
            Ok(0) => return Err("send: connection closed".into()),
            Ok(k) => data = &data[k..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("send: {e}")),
        }
    }
    Ok(())
}

/// Sends one request and reads its whole answer (the server closes: `Connection:
/// close`), every read and write bounded by what is left of `deadline`.
fn exchange(
    s: &mut TcpStream,
    ep: &Endpoint,
    path: &str,
    body: &str,
    deadline: Instant,
) -> Result<Value, String> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| "timed out".to_string())
    };
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        ep.host,
        body.len()
    );
    send_all(s, req.as_bytes(), deadline)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        s.set_read_timeout(Some(left()?))
            .map_err(|e| e.to_string())?;
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("answer: {e}")),
        }
        if buf.len() > MAX_ANSWER {
            return Err("answer too long".into());
        }
    }
    parse_answer(&buf)
}

/// An HTTP/1.1 answer → its JSON body; a status other than 200 is an error with
/// etcd's message.
fn parse_answer(buf: &[u8]) -> Result<Value, String> {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("an answer without a header")?;
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "a header not in UTF-8")?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("");
    let code = status.split(' ').nth(1).unwrap_or("");
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let raw = &buf[end + 4..];
    let body = if chunked { dechunk(raw)? } else { raw.to_vec() };
    let v: Value = serde_json::from_slice(&body).map_err(|e| {
        format!(
            "status {code}: not JSON ({e}): {:?}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )
    })?;
    if code != "200" {
        let msg = v
            .get("message")
            .or(v.get("error"))
            .cloned()
            .unwrap_or(Value::Null);
        return Err(format!("status {code}: {msg}"));
    }
    Ok(v)
}

/// A chunked body (RFC 9112 §7.1) → its bytes.
fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a torn chunk size")?;
        let size = std::str::from_utf8(&raw[..eol]).map_err(|_| "a bad chunk size")?;
        let size = size.split(';').next().unwrap_or("").trim();
        let n = usize::from_str_radix(size, 16).map_err(|_| "a bad chunk size")?;
        raw = &raw[eol + 2..];
        if n == 0 {
            return Ok(out);
        }
        // Bounded first: a hostile size must not overflow `n + 2`.
        if n > MAX_ANSWER || raw.len() < n + 2 {
            return Err("a torn chunk".into());
        }
        out.extend_from_slice(&raw[..n]);
        raw = &raw[n + 2..];
    }
}

/// etcd's JSON gateway writes int64s as strings (proto3 JSON), and leaves out zeros.
fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Null => Some(0),
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

fn bad(what: &str, v: &Value) -> BackendError {
    // Cut by characters: a hostile answer's multi-byte text must not split one.
    let s: String = v.to_string().chars().take(300).collect();
    BackendError::Retryable(format!("etcd: {what}: {s}"))
}

impl Cas for EtcdCas {
    fn cas_get(&self, name: &str) -> BResult<Option<(Vec<u8>, String)>> {
        // Linearizable (the default: `serializable` false): the answer is the value
        // of the latest committed write, never a lagging member's.
        let v = self.call("/v3/kv/range", &json!({ "key": self.key(name) }), true)?;
        let kvs = match &v["kvs"] {
            Value::Null => return Ok(None),
            Value::Array(a) if a.is_empty() => return Ok(None),
            Value::Array(a) if a.len() == 1 => &a[0],
            _ => return Err(bad("a range of one key answered", &v)),
        };
        let rev = int(&kvs["mod_revision"])
            .filter(|r| *r > 0)
            .ok_or_else(|| bad("a key without its mod_revision", &v))?;
        let value = match &kvs["value"] {
            Value::Null => Vec::new(),
            Value::String(s) => unb64(s).ok_or_else(|| bad("a value not in base64", &v))?,
            _ => return Err(bad("a value not in base64", &v)),
        };
        Ok(Some((value, rev.to_string())))
    }

    fn cas_put(&self, name: &str, data: &[u8], expect: Option<&str>) -> BResult<String> {
        let key = self.key(name);
        let compare = match expect {
            None => {
                json!({"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"})
            }
            Some(e) => match e.parse::<i64>() {
                // The version is a mod_revision: anything else cannot be current.
                Ok(r) if r > 0 && e == r.to_string() => {
                    json!({"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": e})
                }
                _ => return Err(BackendError::AlreadyExists),
            },
        };
        let txn = json!({
            "compare": [compare],
            "success": [{"request_put": {"key": key, "value": b64(data)}}],
        });
        let v = self.call("/v3/kv/txn", &txn, false)?;
        if v["succeeded"] != Value::Bool(true) {
            return Err(BackendError::AlreadyExists);
        }
        let rev = int(&v["header"]["revision"])
            .filter(|r| *r > 0)
            .ok_or_else(|| bad("a txn without its revision", &v))?;
        Ok(rev.to_string())
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (what proto3 JSON uses for bytes).
fn b64(data: &[u8]) -> String {
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                s.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Standard or URL-safe base64, padded or not; `None` if not base64.
fn unb64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for b in s.bytes() {
        let d = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = acc << 6 | d as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // Leftover bits must be padding zeros of fewer than 8.
    (bits < 6 && acc == 0).then_some(out)
}

#[cfg(test)]
#[path = "etcd_tests.rs"]
mod tests;
