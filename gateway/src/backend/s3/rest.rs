//! Signed S3 REST calls the `object_store` API cannot express, sent through
//! `object_store`'s own HTTP client and SigV4 signer.
//!
//! Why not all through `object_store::ObjectStore`: its `Path` cannot name a key that
//! ends in '/', and the mapping (docs/architecture.md §7) needs `dir/` marker objects; its listing
//! has no start-after paging with a delimiter; its copy cannot replace user metadata
//! nor copy part by part. So HEAD, PUT, DELETE, CopyObject, ListObjectsV2 and the
//! calls of a multipart copy (create, UploadPartCopy, complete, abort: `copy.rs`) are
//! issued here, and the data plane (ranged GETs, multipart uploads of written data)
//! goes through `ObjectStore` (see `mod.rs`).
//!
//! Every call is sent once: what S3 says is worth retrying (5xx, 429, timeouts,
//! connection errors) becomes `BackendError::Retryable`, which `failover.rs` retries
//! (on this or another endpoint) within the retry budget; what is left at the end is
//! NFS3ERR_JUKEBOX. Other statuses map to `NotFound` (404), `AlreadyExists` (412 on a
//! conditional put) or `Permanent`.

use super::super::{BResult, BackendError, ObjectMeta, UserMeta};
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use object_store::aws::{AwsAuthorizer, AwsCredentialProvider};
use object_store::client::{HttpClient, HttpRequest, HttpRequestBody};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::time::Duration;

/// RFC 3986 unreserved characters stay; '/' stays in paths (S3 canonical URI).
const KEY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');
const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// User metadata travels as `x-amz-meta-<name>` headers.
const META: &str = "x-amz-meta-";

pub(super) struct Rest {
    pub http: HttpClient,
    pub creds: AwsCredentialProvider,
    pub region: String,
    /// "https://host/bucket" (path style) or "https://bucket.host".
    pub base: String,
    pub timeout: Duration,
    /// The backend's request counts (shared by its endpoints).
    pub tally: std::sync::Arc<super::requests::Tally>,
}

pub(super) struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Rest {
    pub fn url(&self, key: &str) -> String {
        format!("{}/{}", self.base, utf8_percent_encode(key, KEY))
    }

    /// Sends one signed request, once: a retryable failure (5xx, 429, 408, transport
    /// error, timeout) is `Retryable`, retried by the caller (`failover::Pool::run`,
    /// possibly on another endpoint). `key` names the object for errors.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Bytes,
        key: &str,
    ) -> BResult<Response> {
        self.tally.count(kind_of(&method, url, headers));
        match self.once(&method, url, headers, body).await {
            Ok(r) if retryable_status(r.status) => Err(BackendError::Retryable(format!(
                "{method} {key}: HTTP {}",
                r.status
            ))),
            Ok(r) => Ok(r),
            Err(e) => Err(BackendError::Retryable(format!("{method} {key}: {e}"))),
        }
    }

    async fn once(
        &self,
        method: &Method,
        url: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Response, String> {
        let cred = self
            .creds
            .get_credential()
            .await
            .map_err(|e| format!("credentials: {e}"))?;
        let mut b = http::Request::builder().method(method.clone()).uri(url);
        for (k, v) in headers {
            b = b.header(*k, v.as_str());
        }
        let mut req: HttpRequest = b
            .body(HttpRequestBody::from(body))
            .map_err(|e| format!("request: {e}"))?;
        AwsAuthorizer::new(&cred, "s3", &self.region).authorize(&mut req, None);
        let fut = async {
            let resp = self.http.execute(req).await.map_err(|e| e.to_string())?;
            let (parts, body) = resp.into_parts();
            let body = body.bytes().await.map_err(|e| e.to_string())?;
            Ok(Response {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(format!("timed out after {:?}", self.timeout)),
        }
    }

    /// HEAD: size, time, ETag and user metadata.
    pub async fn head(&self, store_key: &str, key: &str) -> BResult<ObjectMeta> {
        let r = self
            .send(Method::HEAD, &self.url(store_key), &[], Bytes::new(), key)
            .await?;
        check(&r, key)?;
        Ok(meta_from_headers(key, &r.headers))
    }

    /// PUT of a whole object; `if_absent` sends `If-None-Match: *` (412 = exists).
    pub async fn put(
        &self,
        store_key: &str,
        key: &str,
        data: Bytes,
        meta: &UserMeta,
        if_absent: bool,
    ) -> BResult<Response> {
        let names = meta_headers(meta);
        let mut h = borrowed(&names);
        if if_absent {
            h.push(("if-none-match", "*".to_string()));
        }
        h.push(("content-length", data.len().to_string()));
        let r = self
            .send(Method::PUT, &self.url(store_key), &h, data, key)
            .await?;
        check(&r, key)?;
        Ok(r)
    }

    pub async fn delete(&self, store_key: &str, key: &str) -> BResult<()> {
        let r = self
            .send(Method::DELETE, &self.url(store_key), &[], Bytes::new(), key)
            .await?;
        check(&r, key)
    }

    /// CopyObject; with `meta`, the copy's user metadata is replaced (REPLACE
    /// directive), which is also how metadata of an object is changed in place.
    pub async fn copy(
        &self,
        from_store_key: &str,
        to_store_key: &str,
        key: &str,
        meta: Option<&UserMeta>,
    ) -> BResult<()> {
        let names = meta.map(meta_headers).unwrap_or_default();
        let mut h = vec![("x-amz-copy-source", self.copy_source(from_store_key))];
        if meta.is_some() {
            h.push(("x-amz-metadata-directive", "REPLACE".to_string()));
            h.extend(borrowed(&names));
        }
        let r = self
            .send(Method::PUT, &self.url(to_store_key), &h, Bytes::new(), key)
            .await?;
        check(&r, key)?;
        // A 200 can still carry an error document (S3 reports late copy failures so).
        if r.body.windows(7).any(|w| w == b"<Error>") {
            return Err(BackendError::Retryable(format!(
                "copy {key}: {}",
                text(&r.body)
            )));
        }
        Ok(())
    }

    /// CreateMultipartUpload with the object's user metadata; returns the upload id.
    pub async fn mp_create(&self, store_key: &str, key: &str, meta: &UserMeta) -> BResult<String> {
        let url = format!("{}?uploads", self.url(store_key));
        let r = self
            .send(
                Method::POST,
                &url,
                &borrowed(&meta_headers(meta)),
                Bytes::new(),
                key,
            )
            .await?;
        check(&r, key)?;
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Initiated {
            upload_id: String,
        }
        let s = std::str::from_utf8(&r.body).unwrap_or("");
        quick_xml::de::from_str::<Initiated>(s)
            .map(|i| i.upload_id)
            .map_err(|e| {
                BackendError::Permanent(format!("{key}: bad CreateMultipartUpload reply: {e}"))
            })
    }

    /// UploadPartCopy: bytes `range` (inclusive; `None` = the whole, empty, source) of
    /// `from_store_key` as part `part` (1-based) of upload `id` of `to_store_key`, only
    /// while the source's ETag is still `if_match` (a copy assembled from parts of two
    /// versions would be neither). Returns the part's ETag, or `None` when the source
    /// changed (412) and the copy must start over from a fresh HEAD.
    #[allow(clippy::too_many_arguments)]
    pub async fn part_copy(
        &self,
        from_store_key: &str,
        to_store_key: &str,
        key: &str,
        id: &str,
        part: u64,
        range: Option<(u64, u64)>,
        if_match: &str,
    ) -> BResult<Option<String>> {
        let url = format!(
            "{}?partNumber={part}&uploadId={}",
            self.url(to_store_key),
            utf8_percent_encode(id, QUERY)
        );
        let mut h = vec![("x-amz-copy-source", self.copy_source(from_store_key))];
        if let Some((a, b)) = range {
            h.push(("x-amz-copy-source-range", format!("bytes={a}-{b}")));
        }
        if !if_match.is_empty() && valid_etag(if_match) {
            h.push(("x-amz-copy-source-if-match", format!("\"{if_match}\"")));
        }
        let r = self.send(Method::PUT, &url, &h, Bytes::new(), key).await?;
        if r.status == StatusCode::PRECONDITION_FAILED {
            return Ok(None);
        }
        check(&r, key)?;
        parse_copy_part(&r.body, key).map(Some)
    }

    /// CompleteMultipartUpload of `etags` (part 1 first).
    pub async fn mp_complete(
        &self,
        store_key: &str,
        key: &str,
        id: &str,
        etags: &[String],
    ) -> BResult<()> {
        let url = format!(
            "{}?uploadId={}",
            self.url(store_key),
            utf8_percent_encode(id, QUERY)
        );
        let body = Bytes::from(complete_body(etags));
        let h = [("content-length", body.len().to_string())];
        let r = self.send(Method::POST, &url, &h, body, key).await?;
        check(&r, key)?;
        // As with CopyObject, S3 may answer 200 and report the failure in the body.
        if r.body.windows(7).any(|w| w == b"<Error>") {
            return Err(BackendError::Retryable(format!(
                "complete {key}: {}",
                text(&r.body)
            )));
        }
        Ok(())
    }

    /// AbortMultipartUpload (its parts are freed; 404 = already gone).
    pub async fn mp_abort(&self, store_key: &str, key: &str, id: &str) -> BResult<()> {
        let url = format!(
            "{}?uploadId={}",
            self.url(store_key),
            utf8_percent_encode(id, QUERY)
        );
        let r = self
            .send(Method::DELETE, &url, &[], Bytes::new(), key)
            .await?;
        match check(&r, key) {
            Err(BackendError::NotFound) => Ok(()),
            other => other,
        }
    }

    /// The `x-amz-copy-source` value naming `store_key` in this bucket.
    fn copy_source(&self, store_key: &str) -> String {
        format!(
            "{}/{}",
            self.copy_source_bucket(),
            utf8_percent_encode(store_key, KEY)
        )
    }

    /// GET of `len` bytes at `offset` (416 past the end = no bytes).
    pub async fn get_range(
        &self,
        store_key: &str,
        key: &str,
        offset: u64,
        len: u64,
    ) -> BResult<Bytes> {
        let range = format!("bytes={offset}-{}", offset + len.max(1) - 1);
        let r = self
            .send(
                Method::GET,
                &self.url(store_key),
                &[("range", range)],
                Bytes::new(),
                key,
            )
            .await?;
        if r.status == StatusCode::RANGE_NOT_SATISFIABLE {
            return Ok(Bytes::new());
        }
        check(&r, key)?;
        Ok(r.body)
    }

    fn copy_source_bucket(&self) -> String {
        // The bucket name is the last path segment (path style) or the first label.
        let rest = self.base.split_once("://").map_or("", |x| x.1);
        match rest.split_once('/') {
            Some((_, bucket)) => bucket.to_string(),
            None => rest.split('.').next().unwrap_or("").to_string(),
        }
    }

    /// ListObjectsV2: one page of at most `max` keys and common prefixes.
    pub async fn list(
        &self,
        store_prefix: &str,
        delimiter: Option<char>,
        start_after: Option<&str>,
        max: usize,
    ) -> BResult<ListedPage> {
        let mut q = format!(
            "list-type=2&max-keys={}&prefix={}",
            max.clamp(1, 1000),
            utf8_percent_encode(store_prefix, QUERY)
        );
        if let Some(d) = delimiter {
            q.push_str(&format!(
                "&delimiter={}",
                utf8_percent_encode(d.encode_utf8(&mut [0; 4]), QUERY)
            ));
        }
        if let Some(s) = start_after {
            q.push_str(&format!("&start-after={}", utf8_percent_encode(s, QUERY)));
        }
        let url = format!("{}/?{q}", self.base);
        let r = self
            .send(Method::GET, &url, &[], Bytes::new(), store_prefix)
            .await?;
        check(&r, store_prefix)?;
        let mut page = parse_list(&r.body)?;
        page.date_ns = date_ns(&r.headers);
        Ok(page)
    }
}

/// The store's clock when it answered (its `Date` header), when it sent one.
pub(super) fn date_ns(h: &HeaderMap) -> Option<u64> {
    h.get("date")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| chrono::DateTime::parse_from_rfc2822(s).ok())
        .and_then(|t| t.timestamp_nanos_opt())
        .map(|n| n.max(0) as u64)
}

/// An ETag as S3 writes them (hex digits, a `-N` part count); anything else from a
/// hostile or broken store is not echoed into headers or XML.
fn valid_etag(e: &str) -> bool {
    !e.is_empty() && e.len() <= 128 && e.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The ETag of an UploadPartCopy answer (`<CopyPartResult><ETag>`). A 200 may carry an
/// `<Error>` document instead (a late failure, worth retrying).
pub(super) fn parse_copy_part(body: &[u8], key: &str) -> BResult<String> {
    if body.windows(7).any(|w| w == b"<Error>") {
        return Err(BackendError::Retryable(format!(
            "part copy {key}: {}",
            text(body)
        )));
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct CopyPartResult {
        e_tag: String,
    }
    let s = std::str::from_utf8(body).unwrap_or("");
    let etag = quick_xml::de::from_str::<CopyPartResult>(s)
        .map(|r| r.e_tag.trim_matches('"').to_string())
        .map_err(|e| BackendError::Permanent(format!("{key}: bad UploadPartCopy reply: {e}")))?;
    if !valid_etag(&etag) {
        return Err(BackendError::Permanent(format!(
            "{key}: bad UploadPartCopy ETag {:?}",
            text(etag.as_bytes())
        )));
    }
    Ok(etag)
}

/// The CompleteMultipartUpload document; `etags` were checked by `parse_copy_part`.
pub(super) fn complete_body(etags: &[String]) -> String {
    let mut s = String::from("<CompleteMultipartUpload>");
    for (i, e) in etags.iter().enumerate() {
        s.push_str(&format!(
            "<Part><PartNumber>{}</PartNumber><ETag>\"{e}\"</ETag></Part>",
            i + 1
        ));
    }
    s.push_str("</CompleteMultipartUpload>");
    s
}

/// What a request does at the store, from its method, URL and headers (the counts of
/// `nfsgw_s3_requests_total`).
fn kind_of(method: &Method, url: &str, headers: &[(&str, String)]) -> super::requests::Req {
    use super::requests::Req;
    let copy = headers.iter().any(|(k, _)| *k == "x-amz-copy-source");
    let upload = url.contains("uploadId=") || url.ends_with("?uploads");
    match *method {
        Method::HEAD => Req::Head,
        Method::GET if url.contains("list-type=2") => Req::List,
        Method::GET => Req::Get,
        Method::PUT if copy => Req::Copy,
        Method::PUT => Req::Put,
        Method::DELETE if upload => Req::Multipart,
        Method::DELETE => Req::Delete,
        _ => Req::Multipart, // POST: create and complete of multipart uploads
    }
}

fn retryable_status(s: StatusCode) -> bool {
    s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::REQUEST_TIMEOUT
}

/// Full-jitter exponential backoff: uniform in [0, min(5 s, 100 ms * 2^attempt)].
pub(super) fn backoff(attempt: usize) -> Duration {
    let cap = (100u64 << attempt.min(6)).min(5000);
    Duration::from_millis(rand::random::<u64>() % (cap + 1))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned()
}

/// Maps a final (non-retried) response to the backend's error kinds.
fn check(r: &Response, key: &str) -> BResult<()> {
    match r.status {
        s if s.is_success() => Ok(()),
        StatusCode::NOT_FOUND => Err(BackendError::NotFound),
        StatusCode::PRECONDITION_FAILED | StatusCode::CONFLICT => Err(BackendError::AlreadyExists),
        s if retryable_status(s) => Err(BackendError::Retryable(format!("{key}: HTTP {s}"))),
        s => Err(BackendError::Permanent(format!(
            "{key}: HTTP {s}: {}",
            text(&r.body)
        ))),
    }
}

fn meta_headers(meta: &UserMeta) -> Vec<(String, String)> {
    // Owned names: metadata names can come from the store (a rename copies the
    // source's), so they are not a fixed set; nothing is leaked or interned.
    meta.iter()
        .filter(|(k, v)| valid_meta(k, v))
        .map(|(k, v)| (format!("{META}{k}"), v.clone()))
        .collect()
}

/// Headers for `send`, borrowing the owned names of `meta_headers`.
fn borrowed(h: &[(String, String)]) -> Vec<(&str, String)> {
    h.iter().map(|(k, v)| (k.as_str(), v.clone())).collect()
}

/// Only names and values that survive an HTTP header unchanged are stored.
fn valid_meta(k: &str, v: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && v.bytes().all(|b| (0x20..0x7f).contains(&b))
}

pub(super) fn meta_from_headers(key: &str, h: &HeaderMap) -> ObjectMeta {
    let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok());
    let mut user = UserMeta::new();
    for (name, v) in h {
        if let (Some(n), Ok(v)) = (name.as_str().strip_prefix(META), v.to_str()) {
            user.insert(n.to_string(), v.to_string());
        }
    }
    ObjectMeta {
        key: key.to_string(),
        size: get("content-length")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        mtime_ns: get("last-modified")
            .and_then(|s| chrono::DateTime::parse_from_rfc2822(s).ok())
            .and_then(|t| t.timestamp_nanos_opt())
            .map_or(0, |n| n.max(0) as u64),
        etag: get("etag").unwrap_or("").trim_matches('"').to_string(),
        user,
    }
}

/// A ListObjectsV2 page with store keys (the caller strips the bucket prefix).
#[derive(Debug, Default)]
pub(super) struct ListedPage {
    pub objects: Vec<ObjectMeta>,
    pub prefixes: Vec<String>,
    pub truncated: bool,
    /// The store's clock when it answered (its `Date` header), when it sent one.
    pub date_ns: Option<u64>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListBucketResult {
    #[serde(default)]
    is_truncated: bool,
    #[serde(default)]
    contents: Vec<Contents>,
    #[serde(default)]
    common_prefixes: Vec<CommonPrefix>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Contents {
    key: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    last_modified: String,
    #[serde(default)]
    e_tag: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CommonPrefix {
    prefix: String,
}

/// Parses a ListObjectsV2 result; hostile XML is a `Permanent` error, never a panic.
pub(super) fn parse_list(body: &[u8]) -> BResult<ListedPage> {
    let s = std::str::from_utf8(body)
        .map_err(|_| BackendError::Permanent("list: response is not UTF-8".into()))?;
    let r: ListBucketResult = quick_xml::de::from_str(s)
        .map_err(|e| BackendError::Permanent(format!("list: bad XML: {e}")))?;
    Ok(ListedPage {
        objects: r
            .contents
            .into_iter()
            .map(|c| ObjectMeta {
                key: c.key,
                size: c.size,
                mtime_ns: chrono::DateTime::parse_from_rfc3339(&c.last_modified)
                    .ok()
                    .and_then(|t| t.timestamp_nanos_opt())
                    .map_or(0, |n| n.max(0) as u64),
                etag: c.e_tag.trim_matches('"').to_string(),
                user: UserMeta::new(),
            })
            .collect(),
        prefixes: r.common_prefixes.into_iter().map(|p| p.prefix).collect(),
        truncated: r.is_truncated,
        date_ns: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_listing_and_rejects_garbage() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
<Name>b</Name><Prefix>d/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>
<Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>
<Contents><Key>d/a b</Key><LastModified>2024-01-02T03:04:05.000Z</LastModified>
<ETag>&quot;abc&quot;</ETag><Size>11</Size><StorageClass>STANDARD</StorageClass></Contents>
<CommonPrefixes><Prefix>d/sub/</Prefix></CommonPrefixes>
</ListBucketResult>"#;
        let p = parse_list(xml).unwrap();
        assert!(p.truncated);
        assert_eq!(p.objects.len(), 1);
        assert_eq!(p.objects[0].key, "d/a b");
        assert_eq!(p.objects[0].size, 11);
        assert_eq!(p.objects[0].etag, "abc");
        assert_eq!(p.objects[0].mtime_ns, 1_704_164_645_000_000_000);
        assert_eq!(p.prefixes, vec!["d/sub/"]);
        for bad in [
            &b"<ListBucketResult><Contents>"[..],
            b"\xff\xfe",
            b"<x>",
            b"",
        ] {
            assert!(matches!(parse_list(bad), Err(BackendError::Permanent(_))));
        }
    }

    #[test]
    fn requests_are_counted_by_what_they_do() {
        use super::super::requests::Req;
        let cp = [("x-amz-copy-source", "b/k".to_string())];
        let cases = [
            (Method::HEAD, "http://s/b/k", &[][..], Req::Head),
            (Method::GET, "http://s/b/k", &[], Req::Get),
            (
                Method::GET,
                "http://s/b/?list-type=2&prefix=a",
                &[],
                Req::List,
            ),
            (Method::PUT, "http://s/b/k", &[], Req::Put),
            (Method::PUT, "http://s/b/k", &cp, Req::Copy),
            (
                Method::PUT,
                "http://s/b/k?partNumber=1&uploadId=u",
                &cp,
                Req::Copy,
            ),
            (Method::DELETE, "http://s/b/k", &[], Req::Delete),
            (
                Method::DELETE,
                "http://s/b/k?uploadId=u",
                &[],
                Req::Multipart,
            ),
            (Method::POST, "http://s/b/k?uploads", &[], Req::Multipart),
        ];
        for (m, url, h, want) in cases {
            assert_eq!(kind_of(&m, url, h), want, "{m} {url}");
        }
    }

    #[test]
    fn keys_are_encoded_for_the_canonical_uri() {
        assert_eq!(
            utf8_percent_encode("a b/c+d/é~_.-", KEY).to_string(),
            "a%20b/c%2Bd/%C3%A9~_.-"
        );
        assert_eq!(utf8_percent_encode("a/b", QUERY).to_string(), "a%2Fb");
    }

    #[test]
    fn part_copy_answers_are_parsed_and_hostile_ones_refused() {
        let ok = br#"<?xml version="1.0" encoding="UTF-8"?>
<CopyPartResult><LastModified>2024-01-02T03:04:05.000Z</LastModified>
<ETag>&quot;0123abcd&quot;</ETag></CopyPartResult>"#;
        assert_eq!(parse_copy_part(ok, "k").unwrap(), "0123abcd");
        let late = b"<?xml version=\"1.0\"?><Error><Code>InternalError</Code></Error>";
        assert!(matches!(
            parse_copy_part(late, "k"),
            Err(BackendError::Retryable(_))
        ));
        for bad in [
            &b""[..],
            b"\xff",
            b"<CopyPartResult></CopyPartResult>",
            b"<CopyPartResult><ETag>\"a\"/><x</ETag></CopyPartResult>",
            b"<CopyPartResult><ETag>&lt;/ETag&gt;</ETag></CopyPartResult>",
        ] {
            assert!(
                matches!(parse_copy_part(bad, "k"), Err(BackendError::Permanent(_))),
                "{bad:?}"
            );
        }
        assert_eq!(
            complete_body(&["e1".into(), "e2-3".into()]),
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"e1\"</ETag></Part>\
             <Part><PartNumber>2</PartNumber><ETag>\"e2-3\"</ETag></Part></CompleteMultipartUpload>"
        );
    }

    #[test]
    fn backoff_is_bounded_and_jittered() {
        for a in 0..40 {
            assert!(backoff(a) <= Duration::from_millis(5000));
        }
        let spread: std::collections::HashSet<_> = (0..50).map(|_| backoff(6)).collect();
        assert!(spread.len() > 1);
    }

    #[test]
    fn metadata_headers_round_trip_and_filter_hostile_values() {
        let mut m = UserMeta::new();
        m.insert("mode".into(), "100644".into());
        m.insert("Bad Name".into(), "x".into());
        m.insert("uid".into(), "1\r\nx-evil: 1".into());
        let h = meta_headers(&m);
        assert_eq!(
            h,
            vec![("x-amz-meta-mode".to_string(), "100644".to_string())]
        );
        // Names are not interned: many distinct ones (an object store can hold any)
        // neither panic nor grow a table (this asserted past 4,096 names before).
        for i in 0..5000 {
            let mut many = UserMeta::new();
            many.insert(format!("n{i}"), "v".into());
            assert_eq!(meta_headers(&many)[0].0, format!("x-amz-meta-n{i}"));
        }
        let mut hm = HeaderMap::new();
        hm.insert("x-amz-meta-mode", "100644".parse().unwrap());
        hm.insert("content-length", "5".parse().unwrap());
        hm.insert("etag", "\"e1\"".parse().unwrap());
        hm.insert(
            "last-modified",
            "Tue, 02 Jan 2024 03:04:05 GMT".parse().unwrap(),
        );
        let o = meta_from_headers("k", &hm);
        assert_eq!(o.size, 5);
        assert_eq!(o.etag, "e1");
        assert_eq!(o.user.get("mode").map(String::as_str), Some("100644"));
        assert_eq!(o.mtime_ns, 1_704_164_645_000_000_000);
    }
}
