//! `Cas` on a bucket (docs/ha.md "Fencing"): `PUT` with `If-None-Match: *` to create
//! and `If-Match: <ETag>` to replace; 412 (or 409 for a concurrent conditional write)
//! is a failed condition. The version is the object's ETag: the caller makes every
//! write's bytes differ (a sequence number), so versions do too. Objects live under
//! `TEMP_PREFIX` (never listed, never a client's key) and bypass the read-ahead and
//! attribute caches: every read is a fresh GET.
//!
//! Whether the store honours both headers is not assumed: `ha::probe` checks it at
//! start and refuses `[ha]` where it does not (Garage ignores `If-None-Match`).

use super::rest::Rest;
use super::*;
use http::{Method, StatusCode};

/// Largest object read back (the recovery record of `ha::record::MAX_OWNERS` owners).
const MAX_GET: usize = 64 << 20;

impl Rest {
    /// GET of a whole object with its ETag; `None` on 404.
    async fn get_versioned(&self, sk: &str, key: &str) -> BResult<Option<(Vec<u8>, String)>> {
        let r = self
            .send(Method::GET, &self.url(sk), &[], Bytes::new(), key)
            .await?;
        if r.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !r.status.is_success() {
            return Err(BackendError::Permanent(format!(
                "GET {key}: HTTP {}",
                r.status
            )));
        }
        if r.body.len() > MAX_GET {
            return Err(BackendError::Permanent(format!(
                "{key}: larger than {MAX_GET} bytes"
            )));
        }
        Ok(Some((r.body.to_vec(), etag_of(&r.headers, key)?)))
    }

    /// Conditional PUT; the new ETag.
    async fn put_versioned(
        &self,
        sk: &str,
        key: &str,
        data: Bytes,
        expect: Option<&str>,
    ) -> BResult<String> {
        let cond = match expect {
            None => ("if-none-match", "*".to_string()),
            Some(e) => ("if-match", format!("\"{e}\"")),
        };
        let h = [cond, ("content-length", data.len().to_string())];
        let r = self.send(Method::PUT, &self.url(sk), &h, data, key).await?;
        match r.status {
            s if s.is_success() => etag_of(&r.headers, key),
            // 404: If-Match on a missing object (moto); a failed condition all the same.
            StatusCode::PRECONDITION_FAILED | StatusCode::CONFLICT | StatusCode::NOT_FOUND => {
                Err(BackendError::AlreadyExists)
            }
            s => Err(BackendError::Permanent(format!("PUT {key}: HTTP {s}"))),
        }
    }
}

fn etag_of(h: &http::HeaderMap, key: &str) -> BResult<String> {
    h.get("etag")
        .and_then(|v| v.to_str().ok())
        .map(|e| e.trim_matches('"').to_string())
        .filter(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_graphic() && b != b'"'))
        .ok_or_else(|| BackendError::Permanent(format!("{key}: the store sent no usable ETag")))
}

// `block_free`: no in-flight permit. The lease's renewals must not queue behind data
// requests a hung store holds (each request still has its own timeout); a renewal
// is one request at a time, far from the limit.
impl Cas for S3Backend {
    fn cas_get(&self, name: &str) -> BResult<Option<(Vec<u8>, String)>> {
        let c = self.core.clone();
        let key = format!("{TEMP_PREFIX}{name}");
        let sk = c.skey(&key);
        self.core
            .block_free(async move { c.pool.run(|ep| ep.rest.get_versioned(&sk, &key)).await })
    }

    fn cas_put(&self, name: &str, data: &[u8], expect: Option<&str>) -> BResult<String> {
        let c = self.core.clone();
        let key = format!("{TEMP_PREFIX}{name}");
        let sk = c.skey(&key);
        let (data, expect) = (Bytes::copy_from_slice(data), expect.map(str::to_string));
        self.core.block_free(async move {
            c.pool
                .run(|ep| {
                    ep.rest
                        .put_versioned(&sk, &key, data.clone(), expect.as_deref())
                })
                .await
        })
    }
}
