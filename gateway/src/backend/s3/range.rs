//! The NFSv4.2 operations the `s3` store can do (docs/nfs42.md).
//!
//! COPY and CLONE (RFC 7862 §15.2, §15.13) stay inside the store: no file byte passes
//! through the gateway (`nfsgw_s3_requests_total` shows CopyObject/UploadPartCopy,
//! no GET or PUT of the data). An object is written whole, so the one shape S3 can
//! do is a copy that makes the whole target: target offset 0 and a target no longer
//! than what is copied. The whole source is one CopyObject (part by part over
//! `multipart_copy_over_mib` or S3's 5 GiB, `copy.rs`); a range of it is a multipart
//! upload of UploadPartCopy parts of that range. Either way the target keeps its own
//! metadata (mode, owner, extended attributes). Anything else (into the middle of an
//! object, or over a longer one) would need the target's other bytes rewritten
//! around the copy: `Unsupported`, and the client copies through READ and WRITE.
//!
//! Extended attributes (RFC 8276) are object user metadata (`meta_xattr`) within
//! [`XATTR_BUDGET`], so the gateway's own metadata still fits S3's 2 KiB; each change
//! is a copy of the object onto itself with the new metadata, as SETATTR is, and a
//! read-modify-write: two gateways setting attributes of one object at once may lose
//! one. S3 has no holes and reserves no space: SEEK answers "all data" (the trait's
//! default), ALLOCATE and DEALLOCATE are `Unsupported`.

use super::*;
use crate::backend::meta_xattr;

/// Bytes of extended attributes per object (names and encoded values): S3 allows 2 KiB
/// of user metadata in all, and the gateway's own entries take up to about 300.
pub(super) const XATTR_BUDGET: usize = 1536;

impl S3Backend {
    /// Copies `count` bytes of `src` at `s` over all of `dst` (see the module comment).
    pub(super) fn copy_range_impl(
        &self,
        src: &str,
        s: u64,
        dst: &str,
        d: u64,
        count: u64,
    ) -> BResult<u64> {
        check_key(src)?;
        check_key(dst)?;
        self.wb.settle(src)?;
        self.wb.settle(dst)?;
        let from = fresh_head(&self.core, src)?;
        let to = fresh_head(&self.core, dst)?;
        let n = count.min(from.size.saturating_sub(s));
        if d != 0 || to.size > n {
            return Err(BackendError::Unsupported);
        }
        if n == 0 {
            return Ok(0);
        }
        if s == 0 && n == from.size {
            self.copy_object(src, dst, Some(&to.user), from.size)?;
        } else {
            let job = copy::Job {
                from: self.core.skey(src),
                to: self.core.skey(dst),
                key: dst.to_string(),
                base: s,
                size: n,
                etag: from.etag,
                meta: to.user,
            };
            let r = self.core.block_free(copy::run(self.core.clone(), job));
            self.core.ra.invalidate(dst);
            r?;
        }
        self.wb.discard(dst);
        self.core.ra.invalidate(dst);
        Ok(n)
    }

    pub(super) fn xattr_set_impl(
        &self,
        key: &str,
        name: &[u8],
        val: &[u8],
        how: XattrSet,
    ) -> BResult<bool> {
        let mut user = Backend::head(self, key)?.user;
        if !meta_xattr::set(&mut user, name, val, how, XATTR_BUDGET)? {
            return Ok(false);
        }
        Backend::set_meta(self, key, &user)?;
        Ok(true)
    }

    pub(super) fn xattr_remove_impl(&self, key: &str, name: &[u8]) -> BResult<bool> {
        let mut user = Backend::head(self, key)?.user;
        if !meta_xattr::remove(&mut user, name) {
            return Ok(false);
        }
        Backend::set_meta(self, key, &user)?;
        Ok(true)
    }
}
