//! Server-side copies of objects too large for one CopyObject.
//!
//! A rename copies the object to its new key, a metadata change (SETATTR: chmod,
//! chown, times) copies it onto itself with new metadata. CopyObject refuses sources
//! over 5 GiB, and one CopyObject must finish within one request's time (`timeout_s`,
//! `failover::Pool::write_copy`), so objects larger than `multipart_copy_over_mib` (256 MiB by default) are
//! copied as a multipart upload instead: CreateMultipartUpload with the copy's metadata, one
//! UploadPartCopy per byte range (a few at a time, each retried through
//! `Pool::write_copy`: a part copy is idempotent), CompleteMultipartUpload. Every part names
//! the source's ETag (`x-amz-copy-source-if-match`), so a source rewritten during the
//! copy fails it instead of producing a mix of two versions. Any failure aborts the
//! upload; an abort that fails is logged (the bucket's lifecycle rule for incomplete
//! uploads is then the only cleanup), never silent.

use super::super::{BResult, BackendError, UserMeta};
use super::Core;
use std::sync::Arc;

/// S3's limits: at most 10,000 parts of 5 MiB to 5 GiB (the last may be smaller), at
/// most 5 TiB per object.
pub(super) const MAX_PARTS: u64 = 10_000;
pub(super) const MIN_PART: u64 = 5 << 20;
pub(super) const MAX_PART: u64 = 5 << 30;
pub(super) const MAX_OBJECT: u64 = 5 << 40;

/// Part copies of one object in flight at once: enough to overlap the store's
/// per-request latency, few enough not to crowd out other clients' requests (each
/// also holds one of the backend's `max_concurrency` permits).
const IN_FLIGHT: usize = 4;

/// How an object of `size` bytes is cut into parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    pub size: u64,
    pub part: u64,
    pub count: u64,
}

impl Plan {
    /// Parts of `want` bytes (clamped to S3's part sizes), grown in whole MiB when
    /// 10,000 of them would not cover `size`. Sizes over 5 TiB (S3's object limit, and
    /// any hostile size near 2^64) are refused, so nothing below can overflow.
    pub fn new(size: u64, want: u64) -> BResult<Plan> {
        if size > MAX_OBJECT {
            return Err(BackendError::Permanent(format!(
                "copy of {size} bytes: over S3's 5 TiB object limit"
            )));
        }
        let need = size.div_ceil(MAX_PARTS).next_multiple_of(1 << 20);
        let part = want.clamp(MIN_PART, MAX_PART).max(need);
        // size 0: one part copying the whole (empty) source without a range.
        let count = size.div_ceil(part).max(1);
        Ok(Plan { size, part, count })
    }

    /// The inclusive byte range of part `i` (0-based), `None` for an empty source
    /// (a range of no bytes cannot be written).
    pub fn range(&self, i: u64) -> Option<(u64, u64)> {
        if self.size == 0 || i >= self.count {
            return None;
        }
        let first = i * self.part;
        Some((first, (first + self.part).min(self.size) - 1))
    }
}

/// Whether `e` is CopyObject refusing a source over its limit (AWS: InvalidRequest
/// "The specified copy source is larger than the maximum allowable size for a copy
/// source"; others say EntityTooLarge). The attribute cache may have had an old,
/// smaller size: the copy is then redone part by part.
pub(super) fn too_large(e: &BackendError) -> bool {
    matches!(e, BackendError::Permanent(m)
        if m.contains("maximum allowable size for a copy source") || m.contains("EntityTooLarge"))
}

/// What to copy: store keys (prefix included), the object key for errors and logs,
/// the source as a fresh HEAD saw it, and the metadata of the copy. `base` and `size`
/// are the source's bytes to copy (all of it for a rename; a range for an NFSv4.2
/// COPY into a new object, `range.rs`).
pub(super) struct Job {
    pub from: String,
    pub to: String,
    pub key: String,
    pub base: u64,
    pub size: u64,
    pub etag: String,
    pub meta: UserMeta,
}

/// Runs one request on the runtime within the backend's in-flight limit.
async fn bounded<T>(c: &Core, f: impl std::future::Future<Output = BResult<T>>) -> BResult<T> {
    let _permit = c.inflight.acquire().await;
    f.await
}

/// The multipart copy described in the module comment. Runs on the runtime without
/// an in-flight permit of its own (each request takes one), so copies cannot starve
/// each other of permits however small `max_concurrency` is.
pub(super) async fn run(c: Arc<Core>, job: Job) -> BResult<()> {
    let plan = Plan::new(job.size, c.copy_part)?;
    let job = Arc::new(job);
    let id = bounded(
        &c,
        c.pool
            .write(|ep| ep.rest.mp_create(&job.to, &job.key, &job.meta)),
    )
    .await?;
    let id: Arc<str> = id.into();
    let r = match copy_parts(&c, &job, &id, plan).await {
        Ok(etags) => match bounded(
            &c,
            c.pool
                .write_copy(|ep| ep.rest.mp_complete(&job.to, &job.key, &id, &etags)),
        )
        .await
        {
            // The upload is gone: a Complete retried after its reply was lost (the
            // first attempt did complete it) gets NoSuchUpload.
            Err(BackendError::NotFound) => completed_before(&c, &job, &etags).await,
            r => r,
        },
        Err(e) => Err(e),
    };
    if r.is_err() {
        // A failed Complete may still have left the upload: abort it too.
        let a = bounded(
            &c,
            c.pool.run(|ep| ep.rest.mp_abort(&job.to, &job.key, &id)),
        )
        .await;
        if let Err(e) = a {
            tracing::warn!(key = job.key, upload = %id, error = %e, "s3: abort of a multipart copy failed (the bucket's lifecycle rule cleans it up)");
        }
    }
    r
}

/// After a Complete answered NoSuchUpload: whether the target is exactly what this
/// upload completed, i.e. its ETag is the one S3 gives an object assembled from these
/// parts (`multipart_etag`). Only then is the copy done; anything else (another object
/// at the target, a store with another ETag rule) stays the error, so a rename never
/// deletes its source on a guess.
async fn completed_before(c: &Core, job: &Job, etags: &[String]) -> BResult<()> {
    if multipart_etag(etags).is_none() {
        return Err(BackendError::NotFound);
    }
    let got = bounded(c, c.pool.run(|ep| ep.rest.head(&job.to, &job.key))).await?;
    if got.size == job.size && assembled_from(&got.etag, etags) {
        tracing::info!(key = job.key, "s3: a multipart copy's Complete answer was lost; the object is complete (its ETag matches the parts)");
        Ok(())
    } else {
        Err(BackendError::NotFound)
    }
}

/// Whether `etag` is the one S3 gives an object assembled from `parts`: the test
/// that a Complete whose answer was lost did complete (copies and written data).
pub(super) fn assembled_from(etag: &str, parts: &[String]) -> bool {
    multipart_etag(parts).is_some_and(|want| etag.trim_matches('"') == want)
}

/// The ETag of an object completed from parts with ETags `parts` (hex MD5s): the MD5
/// of their binary MD5s, "-", their count — AWS's rule, which moto and Garage follow.
/// `None` when a part's ETag is not a hex MD5 (then nothing can be concluded).
pub(super) fn multipart_etag(parts: &[String]) -> Option<String> {
    use md5::{Digest, Md5};
    let mut h = Md5::new();
    for p in parts {
        let p = p.trim_matches('"');
        if p.len() != 32 {
            return None;
        }
        for i in (0..32).step_by(2) {
            h.update([u8::from_str_radix(p.get(i..i + 2)?, 16).ok()?]);
        }
    }
    let d = h.finalize();
    let mut hex = String::with_capacity(40);
    for b in d {
        hex.push_str(&format!("{b:02x}"));
    }
    Some(format!("{hex}-{}", parts.len()))
}

/// Copies every part, `IN_FLIGHT` at a time; the first failure stops the rest. Parts
/// already in flight are waited for, not cancelled: a request cut off here may still
/// run on the store, and one landing after the abort would leave a part behind.
async fn copy_parts(
    c: &Arc<Core>,
    job: &Arc<Job>,
    id: &Arc<str>,
    plan: Plan,
) -> BResult<Vec<String>> {
    let mut etags: Vec<Option<String>> = vec![None; plan.count as usize];
    let mut set = tokio::task::JoinSet::new();
    let mut next = 0u64;
    let mut failed: Option<BackendError> = None;
    loop {
        while failed.is_none() && next < plan.count && set.len() < IN_FLIGHT {
            let (c2, job2, id2, i) = (c.clone(), job.clone(), id.clone(), next);
            set.spawn(async move {
                let range = plan.range(i).map(|(a, b)| (a + job2.base, b + job2.base));
                let r = bounded(
                    &c2,
                    c2.pool.write_copy(|ep| {
                        ep.rest.part_copy(
                            &job2.from,
                            &job2.to,
                            &job2.key,
                            &id2,
                            i + 1,
                            range,
                            &job2.etag,
                        )
                    }),
                )
                .await;
                (i, r)
            });
            next += 1;
        }
        let Some(done) = set.join_next().await else {
            break;
        };
        let err = match done {
            Ok((i, Ok(Some(etag)))) => {
                etags[i as usize] = Some(etag);
                continue;
            }
            // The source changed since the HEAD: the client retries (JUKEBOX), and the
            // next attempt starts from a fresh HEAD.
            Ok((_, Ok(None))) => BackendError::Retryable(format!(
                "copy {}: the source changed during the copy",
                job.key
            )),
            Ok((_, Err(e))) => e,
            Err(e) => BackendError::Permanent(format!("copy {}: part task failed: {e}", job.key)),
        };
        if failed.is_none() {
            failed = Some(err);
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    etags
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| BackendError::Permanent(format!("copy {}: a part is missing", job.key)))
}

#[cfg(test)]
mod tests {

    /// AWS's multipart ETag rule, checked against a value computed independently
    /// (Python: md5(bytes.fromhex(md5("hello")) + bytes.fromhex(md5("world")))).
    #[test]
    fn multipart_etag_follows_the_s3_rule() {
        const EXPECTED_HELLO_WORLD: &str = "065947336a2f2a95ba8899f3675c3be6-2";
        let parts = [
            "5d41402abc4b2a76b9719d911017c592".to_string(),
            "\"7d793037a0760186574b0282f2f435e7\"".to_string(),
        ];
        assert_eq!(
            multipart_etag(&parts).as_deref(),
            Some(EXPECTED_HELLO_WORLD)
        );
        assert_eq!(multipart_etag(&["xyz".to_string()]), None);
        assert_eq!(multipart_etag(&["zz".repeat(16)]), None);
    }
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Every byte in exactly one part, parts in order, S3's size rules kept.
    fn check(p: &Plan) {
        assert!(p.count >= 1 && p.count <= MAX_PARTS, "{p:?}");
        assert!(p.part >= MIN_PART && p.part <= MAX_PART, "{p:?}");
        if p.size == 0 {
            assert_eq!((p.count, p.range(0)), (1, None));
            return;
        }
        let mut at = 0;
        for i in 0..p.count {
            let (a, b) = p.range(i).unwrap();
            assert_eq!(a, at, "{p:?} part {i}");
            assert!(b >= a && b < p.size);
            if i + 1 < p.count {
                assert_eq!(b - a + 1, p.part, "only the last part may be short");
            }
            at = b + 1;
        }
        assert_eq!(at, p.size, "{p:?} does not cover the object");
        assert_eq!(p.range(p.count), None);
    }

    #[test]
    fn plans_cover_every_byte_within_s3_limits() {
        let part = 256 * MIB;
        let threshold = 5 << 30;
        for size in [
            0,
            1,
            MIB,
            part - 1,
            part,
            part + 1,
            threshold,
            threshold + 1,
            MAX_PARTS * part,
            MAX_PARTS * part + 1,
            MAX_OBJECT - 1,
            MAX_OBJECT,
        ] {
            let p = Plan::new(size, part).unwrap();
            assert_eq!(p.size, size);
            if size <= MAX_PARTS * part {
                assert_eq!(p.part, part, "{size}: the configured part size is kept");
            }
            check(&p);
        }
        let p = Plan::new(threshold + 1, part).unwrap();
        assert_eq!(p.count, 21);
        assert_eq!(p.range(20), Some((threshold, threshold)));
        // 5 TiB in parts of 256 MiB would be 20,480 parts: parts grow (in MiB) instead.
        let p = Plan::new(MAX_OBJECT, part).unwrap();
        assert!(p.count <= MAX_PARTS && p.part.is_multiple_of(MIB), "{p:?}");
        // Tiny or huge requested part sizes are clamped to S3's.
        assert_eq!(Plan::new(12 * MIB, 1).unwrap().part, MIN_PART);
        assert_eq!(Plan::new(12 * MIB, u64::MAX).unwrap().part, MAX_PART);
        check(&Plan::new(12 * MIB, 0).unwrap());
    }

    #[test]
    fn hostile_sizes_are_refused_without_overflow() {
        for size in [MAX_OBJECT + 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            for want in [0, MIN_PART, u64::MAX] {
                assert!(
                    matches!(Plan::new(size, want), Err(BackendError::Permanent(_))),
                    "{size} accepted"
                );
            }
        }
    }

    #[test]
    fn copy_object_refusals_are_recognised() {
        let aws = BackendError::Permanent(
            "k: HTTP 400 Bad Request: <Error><Code>InvalidRequest</Code><Message>The specified copy source is larger than the maximum allowable size for a copy source: 5368709120</Message></Error>".into(),
        );
        assert!(too_large(&aws));
        assert!(too_large(&BackendError::Permanent(
            "k: HTTP 400: <Code>EntityTooLarge</Code>".into()
        )));
        assert!(!too_large(&BackendError::Permanent("k: HTTP 403".into())));
        assert!(!too_large(&BackendError::Retryable(
            "EntityTooLarge".into()
        )));
        assert!(!too_large(&BackendError::NotFound));
    }
}
