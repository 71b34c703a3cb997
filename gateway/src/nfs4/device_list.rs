//! GETDEVICELIST (RFC 8881 §18.41): the device ids of the data servers this metadata
//! server places layouts on, a page at a time, with a cursor as READDIR's.
//!
//! A flexfiles client does not need it (it asks GETDEVICEINFO for the ids its layouts
//! name), but NFSv4.1 defines it for every layout type and a client may enumerate the
//! devices up front. NFSv4.2 drops it: RFC 7862 §13 lists GETDEVICELIST as "MNI"
//! (must not implement), so a 4.2 COMPOUND gets NFS4ERR_NOTSUPP, as an operation the
//! server does not offer.
//!
//! The list is the ids of the data servers up now (`Layouts::listed_devices`: those
//! new layouts may name; a server the probes found down has had its id deleted). The
//! cookie is how many ids were already given; the cookie verifier a digest of the
//! whole list, so a list that changed under a client's cursor (a server went down or
//! came back) is NFS4ERR_NOT_SAME rather than a page that skips or repeats an id, and
//! a cookie past the list's end is NFS4ERR_BAD_COOKIE (both §18.41.3's errors, as
//! READDIR's cookies, §18.23.3).

use super::file_ops::{cur_file, ok_with};
use super::layout_ops::{devices, LAYOUT4_FLEX_FILES};
use super::status::*;
use super::{put_status, Compound, OpResult};
use engine::xdr::{XdrReader, XdrWriter};

/// The minor version that defines GETDEVICELIST (RFC 7862 §13: not in 4.2).
const ONLY_MINOR: u32 = 1;

/// The largest GETDEVICELIST4resok: cookie, verifier, every data server's id, eof.
const LIST_MAX: usize = 8 + 8 + 4 + 16 * crate::config::MAX_DATA_SERVERS + 4;
const _: () = assert!(LIST_MAX <= super::plan::PNFS_REPLY / 2);

/// GETDEVICELIST4args (§18.41.1).
struct Args {
    layout_type: u32,
    maxdevices: u32,
    cookie: u64,
    verf: [u8; 8],
}

fn args(r: &mut XdrReader) -> Option<Args> {
    let layout_type = r.u32().ok()?;
    let maxdevices = r.u32().ok()?;
    let cookie = r.u64().ok()?;
    let verf = r.opaque_fixed(8).ok()?.try_into().ok()?;
    Some(Args {
        layout_type,
        maxdevices,
        cookie,
        verf,
    })
}

/// The cookie verifier of a list: a digest of its ids in order.
pub(crate) fn verifier(ids: &[[u8; 16]]) -> [u8; 8] {
    let mut h = blake3::Hasher::new();
    h.update(b"nfsgw pnfs device list");
    for id in ids {
        h.update(id);
    }
    let mut v = [0u8; 8];
    v.copy_from_slice(&h.finalize().as_bytes()[..8]);
    v
}

/// One page of `ids` for the cursor (`cookie`, `verf`) and at most `max` ids: the
/// range to send, or the error (§18.41.3). Cookie 0 starts the list, whatever the
/// verifier (the client sends zeros then).
pub(crate) fn page(
    ids: &[[u8; 16]],
    max: u32,
    cookie: u64,
    verf: &[u8; 8],
) -> Result<std::ops::Range<usize>, Nfsstat4> {
    // No room for one id: no page could make progress.
    if max == 0 {
        return Err(NFS4ERR_INVAL);
    }
    if cookie != 0 && *verf != verifier(ids) {
        return Err(NFS4ERR_NOT_SAME);
    }
    let start = usize::try_from(cookie).unwrap_or(usize::MAX);
    if start > ids.len() {
        return Err(NFS4ERR_BAD_COOKIE);
    }
    // A huge gdla_maxdevices is only an upper bound: the list is at most
    // `config::MAX_DATA_SERVERS` ids.
    let end = start.saturating_add(max as usize).min(ids.len());
    Ok(start..end)
}

/// GETDEVICELIST (RFC 8881 §18.41).
pub(super) fn getdevicelist(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Some(a) = args(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let listed = (|| {
        if c.minor != ONLY_MINOR {
            return Err(NFS4ERR_NOTSUPP);
        }
        devices(c)?;
        // Any object of an export names its file system (§18.41.3); the pseudo
        // file system offers no layout type.
        cur_file(c, NFS4ERR_NOTSUPP)?;
        if a.layout_type != LAYOUT4_FLEX_FILES {
            return Err(NFS4ERR_UNKNOWN_LAYOUTTYPE);
        }
        let ids = c.state.layouts.listed_devices();
        let range = page(&ids, a.maxdevices, a.cookie, &a.verf)?;
        Ok((ids, range))
    })();
    let (ids, range) = match listed {
        Ok(v) => v,
        Err(st) => return put_status(w, st),
    };
    let verf = verifier(&ids);
    ok_with(w, |w| {
        w.u64(range.end as u64)?;
        w.opaque_fixed(&verf)?;
        w.u32(range.len() as u32)?;
        for id in &ids[range.clone()] {
            w.opaque_fixed(id)?;
        }
        w.bool(range.end == ids.len())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u8) -> Vec<[u8; 16]> {
        (0..n).map(|k| [k; 16]).collect()
    }

    #[test]
    fn pages_follow_the_cookie_and_stop_at_the_end() {
        let l = ids(5);
        let v = verifier(&l);
        assert_eq!(page(&l, 2, 0, &[0; 8]), Ok(0..2));
        assert_eq!(page(&l, 2, 2, &v), Ok(2..4));
        assert_eq!(page(&l, 2, 4, &v), Ok(4..5));
        // At the end: an empty last page.
        assert_eq!(page(&l, 2, 5, &v), Ok(5..5));
        // A huge maxdevices is a bound, not an allocation.
        assert_eq!(page(&l, u32::MAX, 1, &v), Ok(1..5));
        assert_eq!(page(&[], u32::MAX, 0, &[0; 8]), Ok(0..0));
    }

    #[test]
    fn hostile_cursors_get_the_rfc_errors() {
        let l = ids(3);
        let v = verifier(&l);
        assert_eq!(page(&l, 0, 0, &v), Err(NFS4ERR_INVAL));
        assert_eq!(page(&l, 1, 4, &v), Err(NFS4ERR_BAD_COOKIE));
        assert_eq!(page(&l, 1, u64::MAX, &v), Err(NFS4ERR_BAD_COOKIE));
        // The list changed under the cursor (one id fewer): NOT_SAME, whatever the
        // cookie; a forged verifier too.
        assert_eq!(page(&ids(2), 1, 1, &v), Err(NFS4ERR_NOT_SAME));
        assert_eq!(page(&l, 1, 1, &[0; 8]), Err(NFS4ERR_NOT_SAME));
        assert_ne!(verifier(&l), verifier(&ids(2)));
    }
}
