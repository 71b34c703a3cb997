//! NFSv3 XDR types (RFC 1813 §2.5–2.6) and their codecs.
//!
//! Decoders borrow from the call (`XdrReader`), so handles, names and WRITE payloads
//! are never copied; every length is bounded before use. Encoders write into the
//! reply's fixed buffer.

use crate::fs::{
    Attr, CreateMode, FileHandle, FileKind, NfsTime, SetAttr, SetTime, Stable, WccAttr, FH_MAX,
};
use engine::xdr::{padded, XdrError, XdrReader, XdrResult, XdrWriter};

/// Largest filename3 accepted by the protocol layer (RFC 1813 does not bound it; we
/// refuse absurd lengths as garbage and report > `NAME_MAX` as NAMETOOLONG).
pub const NAME_DECODE_MAX: usize = 8192;
/// Longest name a directory entry may have (PATHCONF name_max).
pub const NAME_MAX: usize = 255;
/// Longest nfspath3 (symlink target) accepted.
pub const PATH_MAX: usize = 4096;
/// Largest nfspath3 decoded before calling the args garbage.
pub const PATH_DECODE_MAX: usize = 65536;

/// Bytes of an encoded fattr3.
pub const FATTR3_SIZE: usize = 84;
/// Bytes of a post_op_attr carrying attributes.
pub const POST_OP_ATTR_SIZE: usize = 4 + FATTR3_SIZE;

// ACCESS3 bits (RFC 1813 §3.3.4).
pub const ACCESS3_READ: u32 = 0x0001;
pub const ACCESS3_LOOKUP: u32 = 0x0002;
pub const ACCESS3_MODIFY: u32 = 0x0004;
pub const ACCESS3_EXTEND: u32 = 0x0008;
pub const ACCESS3_DELETE: u32 = 0x0010;
pub const ACCESS3_EXECUTE: u32 = 0x0020;

// FSINFO properties.
pub const FSF3_LINK: u32 = 0x0001;
pub const FSF3_SYMLINK: u32 = 0x0002;
pub const FSF3_HOMOGENEOUS: u32 = 0x0008;
pub const FSF3_CANSETTIME: u32 = 0x0010;

/// nfs_fh3: opaque<NFS3_FHSIZE>. Longer is garbage.
pub fn get_fh<'a>(r: &mut XdrReader<'a>) -> XdrResult<&'a [u8]> {
    r.opaque_var(FH_MAX)
}

/// filename3 (bounded at `NAME_DECODE_MAX`; semantic checks are done separately).
pub fn get_name<'a>(r: &mut XdrReader<'a>) -> XdrResult<&'a [u8]> {
    r.string(NAME_DECODE_MAX)
}

/// diropargs3.
pub fn get_diropargs<'a>(r: &mut XdrReader<'a>) -> XdrResult<(&'a [u8], &'a [u8])> {
    let fh = get_fh(r)?;
    let name = get_name(r)?;
    Ok((fh, name))
}

/// nfstime3: uint32 seconds, so a time set through NFSv3 is never before 1970 or
/// after 2106.
pub fn get_time(r: &mut XdrReader) -> XdrResult<NfsTime> {
    Ok(NfsTime {
        sec: i64::from(r.u32()?),
        nsec: r.u32()?,
    })
}

fn get_set_time(r: &mut XdrReader) -> XdrResult<SetTime> {
    match r.u32()? {
        0 => Ok(SetTime::DontChange),
        1 => Ok(SetTime::ServerTime),
        2 => Ok(SetTime::Client(get_time(r)?)),
        _ => Err(XdrError::BadValue),
    }
}

fn get_opt_u32(r: &mut XdrReader) -> XdrResult<Option<u32>> {
    Ok(if r.bool()? { Some(r.u32()?) } else { None })
}

/// sattr3.
pub fn get_sattr(r: &mut XdrReader) -> XdrResult<SetAttr> {
    let mode = get_opt_u32(r)?;
    let uid = get_opt_u32(r)?;
    let gid = get_opt_u32(r)?;
    let size = if r.bool()? { Some(r.u64()?) } else { None };
    let atime = get_set_time(r)?;
    let mtime = get_set_time(r)?;
    Ok(SetAttr {
        mode,
        uid,
        gid,
        size,
        atime,
        mtime,
    })
}

/// createhow3.
pub fn get_createhow(r: &mut XdrReader) -> XdrResult<CreateMode> {
    match r.u32()? {
        0 => Ok(CreateMode::Unchecked(get_sattr(r)?)),
        1 => Ok(CreateMode::Guarded(get_sattr(r)?)),
        2 => {
            let mut v = [0u8; 8];
            v.copy_from_slice(r.opaque_fixed(8)?);
            Ok(CreateMode::Exclusive(v))
        }
        _ => Err(XdrError::BadValue),
    }
}

/// stable_how.
pub fn get_stable(r: &mut XdrReader) -> XdrResult<Stable> {
    match r.u32()? {
        0 => Ok(Stable::Unstable),
        1 => Ok(Stable::DataSync),
        2 => Ok(Stable::FileSync),
        _ => Err(XdrError::BadValue),
    }
}

/// An 8-byte verifier (cookieverf3, createverf3, writeverf3).
pub fn get_verf(r: &mut XdrReader) -> XdrResult<[u8; 8]> {
    let mut v = [0u8; 8];
    v.copy_from_slice(r.opaque_fixed(8)?);
    Ok(v)
}

/// mknoddata3 (RFC 1813 §3.3.11), decoded: the type, its attributes and, for
/// devices, specdata3 (major, minor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MknodData {
    pub kind: FileKind,
    pub set: SetAttr,
    pub rdev: (u32, u32),
}

/// mknoddata3: NF3CHR/NF3BLK carry devicedata3 (sattr3 + specdata3), NF3SOCK/NF3FIFO a
/// sattr3, NF3REG/NF3DIR/NF3LNK nothing (the procedure answers NFS3ERR_BADTYPE); any
/// other type is garbage.
pub fn get_mknoddata(r: &mut XdrReader) -> XdrResult<MknodData> {
    let kind = FileKind::from_u32(r.u32()?).ok_or(XdrError::BadValue)?;
    let (set, rdev) = match kind {
        FileKind::Chr | FileKind::Blk => {
            let set = get_sattr(r)?;
            (set, (r.u32()?, r.u32()?))
        }
        FileKind::Sock | FileKind::Fifo => (get_sattr(r)?, (0, 0)),
        FileKind::Reg | FileKind::Dir | FileKind::Lnk => (SetAttr::default(), (0, 0)),
    };
    Ok(MknodData { kind, set, rdev })
}

// ---- encoders ----

/// nfstime3: seconds clamped to uint32 (a time before 1970 shows as 0, one after
/// 2106 as u32::MAX; NFSv4 carries them whole).
pub fn put_time(w: &mut XdrWriter, t: NfsTime) -> XdrResult<()> {
    w.u32(t.sec_u32())?;
    w.u32(t.nsec)
}

/// fattr3 (84 bytes).
pub fn put_fattr(w: &mut XdrWriter, a: &Attr) -> XdrResult<()> {
    if w.remaining() < FATTR3_SIZE {
        return Err(XdrError::Overflow);
    }
    w.u32(a.kind as u32)?;
    w.u32(a.mode & 0o7777)?;
    w.u32(a.nlink)?;
    w.u32(a.uid)?;
    w.u32(a.gid)?;
    w.u64(a.size)?;
    w.u64(a.used)?;
    w.u32(a.rdev.0)?;
    w.u32(a.rdev.1)?;
    w.u64(a.fsid)?;
    w.u64(a.fileid)?;
    put_time(w, a.atime)?;
    put_time(w, a.mtime)?;
    put_time(w, a.ctime)
}

/// Decodes a fattr3 (RFC 1813 §2.6), the inverse of `put_fattr`.
pub fn get_fattr(r: &mut XdrReader) -> XdrResult<Attr> {
    let kind = match r.u32()? {
        1 => FileKind::Reg,
        2 => FileKind::Dir,
        3 => FileKind::Blk,
        4 => FileKind::Chr,
        5 => FileKind::Lnk,
        6 => FileKind::Sock,
        7 => FileKind::Fifo,
        _ => return Err(XdrError::BadValue),
    };
    let mode = r.u32()?;
    let nlink = r.u32()?;
    let uid = r.u32()?;
    let gid = r.u32()?;
    let size = r.u64()?;
    let used = r.u64()?;
    let rdev = (r.u32()?, r.u32()?);
    let fsid = r.u64()?;
    let fileid = r.u64()?;
    let mut t = || -> XdrResult<NfsTime> {
        Ok(NfsTime {
            sec: i64::from(r.u32()?),
            nsec: r.u32()?,
        })
    };
    let (atime, mtime, ctime) = (t()?, t()?, t()?);
    Ok(Attr {
        kind,
        mode,
        nlink,
        uid,
        gid,
        size,
        used,
        rdev,
        fsid,
        fileid,
        atime,
        mtime,
        ctime,
        // fattr3 has no change attribute: the one the model derives from ctime.
        change: ctime.as_ns_clamped(),
    })
}

/// post_op_attr.
pub fn put_post_op_attr(w: &mut XdrWriter, a: Option<&Attr>) -> XdrResult<()> {
    match a {
        Some(a) => {
            if w.remaining() < POST_OP_ATTR_SIZE {
                return Err(XdrError::Overflow);
            }
            w.bool(true)?;
            put_fattr(w, a)
        }
        None => w.bool(false),
    }
}

/// pre_op_attr.
pub fn put_pre_op_attr(w: &mut XdrWriter, a: Option<&WccAttr>) -> XdrResult<()> {
    match a {
        Some(a) => {
            w.bool(true)?;
            w.u64(a.size)?;
            put_time(w, a.mtime)?;
            put_time(w, a.ctime)
        }
        None => w.bool(false),
    }
}

/// wcc_data.
pub fn put_wcc(w: &mut XdrWriter, pre: Option<&Attr>, post: Option<&Attr>) -> XdrResult<()> {
    let pre = pre.map(WccAttr::from);
    put_pre_op_attr(w, pre.as_ref())?;
    put_post_op_attr(w, post)
}

/// nfs_fh3.
pub fn put_fh(w: &mut XdrWriter, fh: &FileHandle) -> XdrResult<()> {
    w.opaque_var(fh.as_bytes())
}

/// post_op_fh3.
pub fn put_post_op_fh(w: &mut XdrWriter, fh: Option<&FileHandle>) -> XdrResult<()> {
    match fh {
        Some(fh) => {
            if w.remaining() < 4 + 4 + padded(fh.as_bytes().len()) {
                return Err(XdrError::Overflow);
            }
            w.bool(true)?;
            put_fh(w, fh)
        }
        None => w.bool(false),
    }
}

/// Bytes of a post_op_attr.
pub fn post_op_attr_size(a: Option<&Attr>) -> usize {
    if a.is_some() {
        POST_OP_ATTR_SIZE
    } else {
        4
    }
}

/// Bytes of a post_op_fh3.
pub fn post_op_fh_size(fh: Option<&FileHandle>) -> usize {
    match fh {
        Some(fh) => 8 + padded(fh.as_bytes().len()),
        None => 4,
    }
}

/// Number of XDR `false` words that make up the attribute-less failure body of each
/// procedure (after the status): e.g. SETATTR's resfail is a wcc_data, i.e. an
/// absent pre_op_attr and an absent post_op_attr.
pub fn fail_words(proc_: u32) -> usize {
    match proc_ {
        // GETATTR: void.
        1 => 0,
        // LOOKUP, ACCESS, READLINK, READ, READDIR, READDIRPLUS, FSSTAT, FSINFO,
        // PATHCONF: post_op_attr.
        3 | 4 | 5 | 6 | 16 | 17 | 18 | 19 | 20 => 1,
        // SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, COMMIT: wcc_data.
        2 | 7 | 8 | 9 | 10 | 11 | 12 | 13 | 21 => 2,
        // LINK: post_op_attr + wcc_data.
        15 => 3,
        // RENAME: two wcc_data.
        14 => 4,
        _ => 0,
    }
}

/// A failure reply without attributes: status then the procedure's empty resfail.
pub fn put_fail(w: &mut XdrWriter, proc_: u32, status: u32) -> XdrResult<()> {
    w.u32(status)?;
    for _ in 0..fail_words(proc_) {
        w.bool(false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FileKind;

    pub(crate) fn attr() -> Attr {
        Attr {
            kind: FileKind::Reg,
            mode: 0o644,
            nlink: 1,
            uid: 1000,
            gid: 100,
            size: 0x1_0000_0002,
            used: 4096,
            rdev: (0, 0),
            fsid: 7,
            fileid: 42,
            atime: NfsTime { sec: 1, nsec: 2 },
            mtime: NfsTime { sec: 3, nsec: 4 },
            ctime: NfsTime { sec: 5, nsec: 6 },
            change: 5_000_000_006,
        }
    }

    fn enc(f: impl FnOnce(&mut XdrWriter) -> XdrResult<()>) -> Vec<u8> {
        let mut buf = vec![0u8; 1024];
        let mut w = XdrWriter::new(&mut buf);
        f(&mut w).unwrap();
        let n = w.position();
        buf.truncate(n);
        buf
    }

    #[test]
    fn fattr3_golden() {
        let b = enc(|w| put_fattr(w, &attr()));
        assert_eq!(b.len(), 84);
        #[rustfmt::skip]
        let want: Vec<u8> = vec![
            0, 0, 0, 1, // NF3REG
            0, 0, 0o644u32.to_be_bytes()[2], 0o644u32.to_be_bytes()[3],
            0, 0, 0, 1, // nlink
            0, 0, 0x03, 0xe8, // uid 1000
            0, 0, 0, 100, // gid
            0, 0, 0, 1, 0, 0, 0, 2, // size
            0, 0, 0, 0, 0, 0, 0x10, 0, // used
            0, 0, 0, 0, 0, 0, 0, 0, // rdev
            0, 0, 0, 0, 0, 0, 0, 7, // fsid
            0, 0, 0, 0, 0, 0, 0, 42, // fileid
            0, 0, 0, 1, 0, 0, 0, 2,
            0, 0, 0, 3, 0, 0, 0, 4,
            0, 0, 0, 5, 0, 0, 0, 6,
        ];
        assert_eq!(b, want);
    }

    #[test]
    fn post_op_and_wcc_golden() {
        assert_eq!(enc(|w| put_post_op_attr(w, None)), vec![0, 0, 0, 0]);
        let b = enc(|w| put_post_op_attr(w, Some(&attr())));
        assert_eq!(b.len(), 88);
        assert_eq!(&b[..4], &[0, 0, 0, 1]);
        assert_eq!(enc(|w| put_wcc(w, None, None)), vec![0; 8]);
        let b = enc(|w| put_wcc(w, Some(&attr()), None));
        assert_eq!(b.len(), 4 + 24 + 4);
        assert_eq!(
            &b[..12],
            &[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2] // present, size
        );
        assert_eq!(
            &b[12..28],
            &[0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0, 6]
        );
        let b = enc(|w| put_wcc(w, Some(&attr()), Some(&attr())));
        assert_eq!(b.len(), 28 + 88);
    }

    #[test]
    fn post_op_fh_golden() {
        let mut fh = FileHandle {
            len: 5,
            bytes: [0; FH_MAX],
        };
        fh.bytes[..5].copy_from_slice(b"abcde");
        let b = enc(|w| put_post_op_fh(w, Some(&fh)));
        assert_eq!(
            b,
            vec![0, 0, 0, 1, 0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0]
        );
        assert_eq!(b.len(), post_op_fh_size(Some(&fh)));
        assert_eq!(enc(|w| put_post_op_fh(w, None)), vec![0, 0, 0, 0]);
    }

    #[test]
    fn fattr_overflow_is_error() {
        let mut buf = [0u8; 80];
        let mut w = XdrWriter::new(&mut buf);
        assert_eq!(put_fattr(&mut w, &attr()), Err(XdrError::Overflow));
        assert_eq!(w.position(), 0);
    }

    fn put_sattr(w: &mut XdrWriter, s: &SetAttr) -> XdrResult<()> {
        for v in [s.mode, s.uid, s.gid] {
            match v {
                Some(v) => {
                    w.bool(true)?;
                    w.u32(v)?
                }
                None => w.bool(false)?,
            }
        }
        match s.size {
            Some(v) => {
                w.bool(true)?;
                w.u64(v)?
            }
            None => w.bool(false)?,
        }
        for t in [s.atime, s.mtime] {
            match t {
                SetTime::DontChange => w.u32(0)?,
                SetTime::ServerTime => w.u32(1)?,
                SetTime::Client(t) => {
                    w.u32(2)?;
                    put_time(w, t)?
                }
            }
        }
        Ok(())
    }

    #[test]
    fn sattr_roundtrip_and_golden() {
        let cases = [
            SetAttr::default(),
            SetAttr {
                mode: Some(0o755),
                uid: Some(1),
                gid: Some(2),
                size: Some(1 << 40),
                atime: SetTime::ServerTime,
                mtime: SetTime::Client(NfsTime { sec: 9, nsec: 10 }),
            },
        ];
        for s in cases {
            let b = enc(|w| put_sattr(w, &s));
            let mut r = XdrReader::new(&b);
            assert_eq!(get_sattr(&mut r).unwrap(), s);
            assert_eq!(r.remaining(), 0);
            for n in 0..b.len() {
                assert!(get_sattr(&mut XdrReader::new(&b[..n])).is_err());
            }
        }
        assert_eq!(enc(|w| put_sattr(w, &SetAttr::default())), vec![0; 24]);
        // Bad time_how.
        let mut b = vec![0u8; 20];
        b.extend_from_slice(&[0, 0, 0, 3, 0, 0, 0, 0]);
        assert_eq!(get_sattr(&mut XdrReader::new(&b)), Err(XdrError::BadValue));
    }

    #[test]
    fn createhow_roundtrip() {
        let s = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        for (how, tag) in [
            (CreateMode::Unchecked(s), 0u32),
            (CreateMode::Guarded(s), 1),
        ] {
            let b = enc(|w| {
                w.u32(tag)?;
                put_sattr(w, &s)
            });
            assert_eq!(get_createhow(&mut XdrReader::new(&b)).unwrap(), how);
        }
        let b = enc(|w| {
            w.u32(2)?;
            w.opaque_fixed(b"12345678")
        });
        assert_eq!(
            get_createhow(&mut XdrReader::new(&b)).unwrap(),
            CreateMode::Exclusive(*b"12345678")
        );
        let b = enc(|w| w.u32(3));
        assert!(get_createhow(&mut XdrReader::new(&b)).is_err());
    }

    #[test]
    fn fh_and_names_bounded() {
        let b = enc(|w| w.opaque_var(&[1u8; 64]));
        assert_eq!(get_fh(&mut XdrReader::new(&b)).unwrap().len(), 64);
        let b = enc(|w| w.opaque_var(&[1u8; 65]));
        assert_eq!(get_fh(&mut XdrReader::new(&b)), Err(XdrError::TooLong));
        let b = enc(|w| {
            w.opaque_var(b"fh")?;
            w.string(b"name")
        });
        assert_eq!(
            get_diropargs(&mut XdrReader::new(&b)).unwrap(),
            (&b"fh"[..], &b"name"[..])
        );
        assert_eq!(
            get_name(&mut XdrReader::new(&[0xff, 0xff, 0xff, 0xff])),
            Err(XdrError::TooLong)
        );
    }

    /// nfstime3 has uint32 seconds: signed 64-bit times are clamped, never wrapped.
    #[test]
    fn times_clamp_to_nfstime3() {
        for (sec, want) in [
            (-1i64, 0u32),
            (i64::MIN, 0),
            (0, 0),
            (4_000_000_000, 4_000_000_000),
            (u32::MAX as i64 + 1, u32::MAX),
            (i64::MAX, u32::MAX),
        ] {
            let b = enc(|w| put_time(w, NfsTime { sec, nsec: 9 }));
            let mut r = XdrReader::new(&b);
            assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (want, 9), "{sec}");
            assert_eq!(
                get_time(&mut XdrReader::new(&b)).unwrap(),
                NfsTime {
                    sec: i64::from(want),
                    nsec: 9
                }
            );
        }
    }

    #[test]
    fn stable_and_mknod() {
        for (v, s) in [
            (0, Stable::Unstable),
            (1, Stable::DataSync),
            (2, Stable::FileSync),
        ] {
            assert_eq!(
                get_stable(&mut XdrReader::new(&enc(|w| w.u32(v)))).unwrap(),
                s
            );
        }
        assert!(get_stable(&mut XdrReader::new(&enc(|w| w.u32(3)))).is_err());
        let chr = enc(|w| {
            w.u32(4)?;
            put_sattr(w, &SetAttr::default())?;
            w.u32(1)?;
            w.u32(2)
        });
        let mut r = XdrReader::new(&chr);
        let d = get_mknoddata(&mut r).unwrap();
        assert_eq!((d.kind, d.rdev), (FileKind::Chr, (1, 2)));
        assert_eq!(r.remaining(), 0);
        assert!(get_mknoddata(&mut XdrReader::new(&chr[..chr.len() - 1])).is_err());
        for bad in [0, 8, u32::MAX] {
            assert!(get_mknoddata(&mut XdrReader::new(&enc(|w| w.u32(bad)))).is_err());
        }
        let reg = get_mknoddata(&mut XdrReader::new(&enc(|w| w.u32(1)))).unwrap();
        assert_eq!(reg.kind, FileKind::Reg);
        let fifo = enc(|w| {
            w.u32(7)?;
            put_sattr(
                w,
                &SetAttr {
                    mode: Some(0o600),
                    ..Default::default()
                },
            )
        });
        let mut r = XdrReader::new(&fifo);
        let d = get_mknoddata(&mut r).unwrap();
        assert_eq!(
            (d.kind, d.set.mode, d.rdev),
            (FileKind::Fifo, Some(0o600), (0, 0))
        );
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn fail_shapes() {
        assert_eq!(enc(|w| put_fail(w, 1, 70)), vec![0, 0, 0, 70]);
        assert_eq!(enc(|w| put_fail(w, 3, 2)).len(), 8);
        assert_eq!(enc(|w| put_fail(w, 2, 2)).len(), 12);
        assert_eq!(enc(|w| put_fail(w, 14, 2)).len(), 20);
        assert_eq!(enc(|w| put_fail(w, 15, 2)).len(), 16);
    }
}
