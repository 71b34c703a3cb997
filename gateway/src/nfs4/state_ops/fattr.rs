//! The createattrs of OPEN (fattr4, RFC 8881 §3.3.4 / §5): the settable attributes
//! a create may carry, decoded into the file model's `SetAttr` with the bitmap of
//! what will be applied (OPEN4resok.attrset). Until `nfs4::attrs` (the file-ops
//! slice) offers a shared fattr4 decoder, this one covers what clients send on
//! create: size, mode, owner, owner_group, time_access_set, time_modify_set.

use crate::fs::{NfsTime, SetAttr, SetTime};
use crate::nfs4::status::*;
use engine::xdr::{XdrError, XdrReader, XdrResult};

pub const FATTR4_SIZE: u32 = 4;
pub const FATTR4_MODE: u32 = 33;
pub const FATTR4_OWNER: u32 = 36;
pub const FATTR4_OWNER_GROUP: u32 = 37;
pub const FATTR4_TIME_ACCESS_SET: u32 = 48;
pub const FATTR4_TIME_MODIFY_SET: u32 = 54;

/// Most bitmap4 words accepted (attributes go up to ~82 today: 3 words).
const BITMAP_WORDS_MAX: usize = 8;
/// Largest attrlist4 accepted.
const ATTRLIST_MAX: usize = 64 << 10;
/// Largest owner string.
const OWNER_STR_MAX: usize = 1024;

/// Decoded createattrs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NewAttrs {
    pub set: SetAttr,
    /// Bitmap of the attributes in `set` (words 0 and 1).
    pub mask: [u32; 2],
}

impl NewAttrs {
    fn mark(&mut self, bit: u32) {
        self.mask[(bit / 32) as usize] |= 1 << (bit % 32);
    }
}

/// Reads a bitmap4 (at most `BITMAP_WORDS_MAX` words).
pub fn bitmap(r: &mut XdrReader) -> XdrResult<Vec<u32>> {
    let n = r.u32()? as usize;
    if n > BITMAP_WORDS_MAX {
        return Err(XdrError::TooLong);
    }
    (0..n).map(|_| r.u32()).collect()
}

/// fattr4 → `NewAttrs`. The outer `Err` is a malformed fattr4 framing (BADXDR for
/// the whole operation); the inner one what to answer about its content:
/// NFS4ERR_ATTRNOTSUPP for attributes a create cannot set here, NFS4ERR_INVAL for
/// bad values, NFS4ERR_BADOWNER for non-numeric owners, NFS4ERR_BADXDR for an
/// attrlist that does not match its bitmap.
pub fn decode(r: &mut XdrReader) -> XdrResult<Result<NewAttrs, Nfsstat4>> {
    let words = bitmap(r)?;
    let list = r.opaque_var(ATTRLIST_MAX)?;
    Ok(parse(&words, list))
}

fn parse(words: &[u32], list: &[u8]) -> Result<NewAttrs, Nfsstat4> {
    let mut a = NewAttrs::default();
    let mut r = XdrReader::new(list);
    let x = |e: XdrError| {
        let _ = e;
        NFS4ERR_BADXDR
    };
    for (wi, w) in words.iter().enumerate() {
        for b in 0..32u32 {
            if w & (1 << b) == 0 {
                continue;
            }
            let bit = (wi as u32) * 32 + b;
            match bit {
                FATTR4_SIZE => a.set.size = Some(r.u64().map_err(x)?),
                FATTR4_MODE => {
                    let m = r.u32().map_err(x)?;
                    if m & !0o7777 != 0 {
                        return Err(NFS4ERR_INVAL);
                    }
                    a.set.mode = Some(m);
                }
                FATTR4_OWNER => {
                    a.set.uid = Some(numeric_id(r.opaque_var(OWNER_STR_MAX).map_err(x)?)?)
                }
                FATTR4_OWNER_GROUP => {
                    a.set.gid = Some(numeric_id(r.opaque_var(OWNER_STR_MAX).map_err(x)?)?)
                }
                FATTR4_TIME_ACCESS_SET => a.set.atime = settime(&mut r)?,
                FATTR4_TIME_MODIFY_SET => a.set.mtime = settime(&mut r)?,
                _ => return Err(NFS4ERR_ATTRNOTSUPP),
            }
            a.mark(bit);
        }
    }
    if r.remaining() != 0 {
        return Err(NFS4ERR_BADXDR);
    }
    Ok(a)
}

/// An owner or group given as a decimal id ("1000", what the Linux client sends
/// with AUTH_SYS and id mapping off). Names → NFS4ERR_BADOWNER.
fn numeric_id(s: &[u8]) -> Result<u32, Nfsstat4> {
    if s.is_empty() || s.len() > 10 || !s.iter().all(u8::is_ascii_digit) {
        return Err(NFS4ERR_BADOWNER);
    }
    std::str::from_utf8(s)
        .ok()
        .and_then(|t| t.parse::<u32>().ok())
        .ok_or(NFS4ERR_BADOWNER)
}

/// settime4: SET_TO_SERVER_TIME4 (0) or SET_TO_CLIENT_TIME4 (1) with nfstime4.
fn settime(r: &mut XdrReader) -> Result<SetTime, Nfsstat4> {
    match r.u32().map_err(|_| NFS4ERR_BADXDR)? {
        0 => Ok(SetTime::ServerTime),
        1 => {
            let sec = r.i64().map_err(|_| NFS4ERR_BADXDR)?;
            let nsec = r.u32().map_err(|_| NFS4ERR_BADXDR)?;
            if nsec >= 1_000_000_000 {
                return Err(NFS4ERR_INVAL);
            }
            Ok(SetTime::Client(NfsTime { sec, nsec }))
        }
        _ => Err(NFS4ERR_BADXDR),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::xdr::XdrWriter;

    fn enc(words: &[u32], body: impl FnOnce(&mut XdrWriter)) -> Vec<u8> {
        let mut list = vec![0u8; 512];
        let n = {
            let mut w = XdrWriter::new(&mut list);
            body(&mut w);
            w.position()
        };
        let mut out = vec![0u8; 1024];
        let m = {
            let mut w = XdrWriter::new(&mut out);
            w.u32(words.len() as u32).unwrap();
            for x in words {
                w.u32(*x).unwrap();
            }
            w.opaque_var(&list[..n]).unwrap();
            w.position()
        };
        out.truncate(m);
        out
    }

    fn dec(b: &[u8]) -> XdrResult<Result<NewAttrs, Nfsstat4>> {
        decode(&mut XdrReader::new(b))
    }

    #[test]
    fn size_mode_owner_times() {
        let b = enc(
            &[
                1 << FATTR4_SIZE,
                (1 << 1) | (1 << 4) | (1 << 5) | (1 << 16) | (1 << 22),
            ],
            |w| {
                w.u64(0).unwrap();
                w.u32(0o640).unwrap();
                w.opaque_var(b"1000").unwrap();
                w.opaque_var(b"50").unwrap();
                w.u32(0).unwrap();
                w.u32(1).unwrap();
                w.i64(-5).unwrap();
                w.u32(7).unwrap();
            },
        );
        let a = dec(&b).unwrap().unwrap();
        assert_eq!(a.set.size, Some(0));
        assert_eq!(a.set.mode, Some(0o640));
        assert_eq!((a.set.uid, a.set.gid), (Some(1000), Some(50)));
        assert_eq!(a.set.atime, SetTime::ServerTime);
        assert_eq!(a.set.mtime, SetTime::Client(NfsTime { sec: -5, nsec: 7 }));
        assert_eq!(
            a.mask,
            [
                1 << 4,
                (1 << 1) | (1 << 4) | (1 << 5) | (1 << 16) | (1 << 22)
            ]
        );
    }

    #[test]
    fn errors() {
        // unsupported attribute (ACL, bit 12)
        let b = enc(&[1 << 12], |w| w.u32(0).unwrap());
        assert_eq!(dec(&b).unwrap(), Err(NFS4ERR_ATTRNOTSUPP));
        // mode with file-type bits
        let b = enc(&[0, 1 << 1], |w| w.u32(0o100644).unwrap());
        assert_eq!(dec(&b).unwrap(), Err(NFS4ERR_INVAL));
        // attrlist shorter or longer than its bitmap
        let b = enc(&[1 << FATTR4_SIZE], |w| w.u32(1).unwrap());
        assert_eq!(dec(&b).unwrap(), Err(NFS4ERR_BADXDR));
        let b = enc(&[0, 1 << 1], |w| w.u64(1).unwrap());
        assert_eq!(dec(&b).unwrap(), Err(NFS4ERR_BADXDR));
        // names as owners
        let b = enc(&[0, 1 << 4], |w| w.opaque_var(b"bob@x").unwrap());
        assert_eq!(dec(&b).unwrap(), Err(NFS4ERR_BADOWNER));
        let b = enc(&[0, 1 << 4], |w| w.opaque_var(b"99999999999").unwrap());
        assert_eq!(dec(&b).unwrap(), Err(NFS4ERR_BADOWNER));
        // nanoseconds out of range
        let b = enc(&[0, 1 << 22], |w| {
            w.u32(1).unwrap();
            w.i64(0).unwrap();
            w.u32(1_000_000_000).unwrap();
        });
        assert_eq!(dec(&b).unwrap(), Err(NFS4ERR_INVAL));
        // too many bitmap words, truncated framing
        let mut b = vec![0, 0, 0, 9];
        b.extend([0u8; 40]);
        assert!(dec(&b).is_err());
        assert!(dec(&[0, 0, 0, 1, 0, 0]).is_err());
        // empty is fine
        assert_eq!(
            dec(&[0, 0, 0, 0, 0, 0, 0, 0]).unwrap(),
            Ok(NewAttrs::default())
        );
    }
}
