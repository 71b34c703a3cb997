//! Attributes in object user metadata.
//!
//! Names (as s3fs and rclone use them): "mode" — the full st_mode including the S_IFMT
//! type bits, written in octal as rclone does ("100644", "40755", "120777"); when read,
//! a value that is not a plausible octal mode is taken as decimal, as s3fs writes it
//! ("33188"). "uid", "gid" — decimal. "mtime", "atime", "ctime" — written as
//! "seconds.nanoseconds" with nine fraction digits ("1700000000.123456789"), which is
//! what rclone writes and what s3fs reads; when read, plain integer seconds and RFC 3339
//! ("2023-11-14T22:13:20.5Z") are accepted too. "nfsgw-verf" — the createverf3 of an
//! exclusive CREATE, 16 hex digits. "nfsgw-id" — on shared stores (s3, `fs` with
//! `backend.shared`), a random
//! incarnation id set at CREATE/MKDIR/SYMLINK, part of the file handle. "rdev" — the
//! device number of a character or block special file, decimal, in Linux's dev_t
//! encoding (glibc `makedev`), which is what s3fs writes.
//!
//! Special files (MKNOD: fifo, socket, character and block device) are empty objects
//! whose "mode" carries their S_IFMT type, as s3fs stores them.
//!
//! Times are signed (NFSv4 nfstime4): before 1970 they are written as a negative
//! decimal ("-1.500000000" is 1.5 s before the epoch, `{ sec: -2, nsec: 500000000 }`).
//!
//! Objects without metadata (written by other tools) get files 0644, directories 0755,
//! uid/gid 0, and all three times from the object's last-modified time. The gateway
//! writes "mtime"/"atime"/"ctime" only when SETATTR sets them; a WRITE or a size change
//! drops "mtime" and "ctime" so the object's own modification time shows through.

use crate::backend::UserMeta;
use crate::fs::{FileKind, NfsTime};

pub(super) const S_IFMT: u32 = 0o170000;
pub(super) const S_IFDIR: u32 = 0o040000;
pub(super) const S_IFREG: u32 = 0o100000;
pub(super) const S_IFLNK: u32 = 0o120000;
pub(super) const S_IFIFO: u32 = 0o010000;
pub(super) const S_IFCHR: u32 = 0o020000;
pub(super) const S_IFBLK: u32 = 0o060000;
pub(super) const S_IFSOCK: u32 = 0o140000;

pub(super) const M_MODE: &str = "mode";
pub(super) const M_UID: &str = "uid";
pub(super) const M_GID: &str = "gid";
pub(super) const M_MTIME: &str = "mtime";
pub(super) const M_ATIME: &str = "atime";
pub(super) const M_CTIME: &str = "ctime";
pub(super) const M_VERF: &str = "nfsgw-verf";
pub(super) const M_RDEV: &str = "rdev";
/// Shared stores: the object's incarnation (8 hex digits), part of its file handle.
pub(super) const M_ID: &str = "nfsgw-id";

/// The incarnation stored in `meta` (0 when there is none).
pub(super) fn incarnation(meta: &UserMeta) -> u32 {
    meta.get(M_ID)
        .and_then(|s| u32::from_str_radix(s, 16).ok())
        .unwrap_or(0)
}

fn valid_type(m: u32) -> bool {
    matches!(
        m & S_IFMT,
        0 | 0o010000 | 0o020000 | 0o040000 | 0o060000 | 0o100000 | 0o120000 | 0o140000
    )
}

/// The full mode stored in `meta`, if any.
///
/// Octal and decimal readings can both be plausible ("4516": octal 0o4516, a set-uid
/// mode without a type, or decimal 4516 = S_IFIFO | 0644 as s3fs writes a fifo): a
/// reading with file type bits wins, octal first.
pub(super) fn mode(meta: &UserMeta) -> Option<u32> {
    let s = meta.get(M_MODE)?.trim();
    let ok = |m: &u32| *m <= 0o177777 && valid_type(*m);
    let oct = u32::from_str_radix(s, 8).ok().filter(ok);
    let dec = s.parse::<u32>().ok().filter(ok);
    let typed = |m: &Option<u32>| m.filter(|m| m & S_IFMT != 0);
    typed(&oct).or(typed(&dec)).or(oct).or(dec)
}

/// The kind a full mode's type bits name (a file without a stored mode is regular).
pub(super) fn kind_of(full: Option<u32>) -> FileKind {
    match full.map_or(S_IFREG, |f| f & S_IFMT) {
        S_IFDIR => FileKind::Dir,
        S_IFLNK => FileKind::Lnk,
        S_IFIFO => FileKind::Fifo,
        S_IFCHR => FileKind::Chr,
        S_IFBLK => FileKind::Blk,
        S_IFSOCK => FileKind::Sock,
        _ => FileKind::Reg,
    }
}

/// The S_IFMT bits of a kind.
pub(super) fn type_bits(kind: FileKind) -> u32 {
    match kind {
        FileKind::Reg => S_IFREG,
        FileKind::Dir => S_IFDIR,
        FileKind::Lnk => S_IFLNK,
        FileKind::Fifo => S_IFIFO,
        FileKind::Chr => S_IFCHR,
        FileKind::Blk => S_IFBLK,
        FileKind::Sock => S_IFSOCK,
    }
}

/// Linux dev_t of (major, minor) (glibc `gnu_dev_makedev`): every pair of u32 maps to
/// a distinct u64 and back.
pub(super) fn makedev(major: u32, minor: u32) -> u64 {
    let (ma, mi) = (u64::from(major), u64::from(minor));
    ((ma & 0xfff) << 8) | ((ma & 0xffff_f000) << 32) | (mi & 0xff) | ((mi & 0xffff_ff00) << 12)
}

/// (major, minor) of a Linux dev_t.
pub(super) fn split_dev(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major as u32, minor as u32)
}

/// The device number stored in `meta`, (0, 0) when none or malformed.
pub(super) fn rdev(meta: &UserMeta) -> (u32, u32) {
    meta.get(M_RDEV)
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or((0, 0), split_dev)
}

pub(super) fn fmt_mode(m: u32) -> String {
    format!("{m:o}")
}

pub(super) fn id(meta: &UserMeta, name: &str) -> Option<u32> {
    meta.get(name)?.trim().parse().ok()
}

/// "seconds.nanoseconds" as a signed decimal: `{ sec: -2, nsec: 500000000 }` is
/// "-1.500000000" (the value s3fs/rclone would read), not "-2.500000000".
pub(super) fn fmt_time(t: NfsTime) -> String {
    let nsec = t.nsec.min(999_999_999);
    if t.sec < 0 && nsec > 0 {
        // sec + nsec/1e9 = -((-sec - 1) + (1e9 - nsec)/1e9); -sec - 1 cannot overflow.
        format!("-{}.{:09}", -(t.sec + 1), 1_000_000_000 - nsec)
    } else {
        format!("{}.{:09}", t.sec, nsec)
    }
}

pub(super) fn from_ns(ns: u64) -> NfsTime {
    NfsTime {
        sec: (ns / 1_000_000_000) as i64,
        nsec: (ns % 1_000_000_000) as u32,
    }
}

fn frac_ns(f: &str) -> Option<u32> {
    if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut digits: String = f.chars().take(9).collect();
    while digits.len() < 9 {
        digits.push('0');
    }
    digits.parse().ok()
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn rfc3339(s: &str) -> Option<NfsTime> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b't' || b[10] == b' ')
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<u32>().ok();
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    let mut rest = s.get(19..)?;
    let mut nsec = 0;
    if let Some(r) = rest.strip_prefix('.') {
        let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        nsec = frac_ns(&r[..end])?;
        rest = &r[end..];
    }
    let off: i64 = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 => {
            let sign = match &rest[..1] {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            // `get`: the offset may be hostile non-ASCII (no char boundary there).
            let oh: i64 = rest.get(1..3)?.parse().ok()?;
            let om: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (oh * 3600 + om * 60)
        }
        _ => return None,
    };
    let secs = days_from_civil(y as i64, mo, d) * 86400 + (h * 3600 + mi * 60 + se) as i64 - off;
    Some(NfsTime { sec: secs, nsec })
}

pub(super) fn time(meta: &UserMeta, name: &str) -> Option<NfsTime> {
    let s = meta.get(name)?.trim();
    if let Some(t) = rfc3339(s) {
        return Some(t);
    }
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (sec, frac) = match s.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    if sec.is_empty() || !sec.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Beyond i64 seconds: clamped (no clock or client can mean it).
    let sec: i64 = sec.parse::<u64>().ok()?.min(i64::MAX as u64) as i64;
    let nsec = match frac {
        Some(f) => frac_ns(f)?,
        None => 0,
    };
    Some(match (neg, nsec) {
        (false, _) => NfsTime { sec, nsec },
        (true, 0) => NfsTime { sec: -sec, nsec: 0 },
        (true, n) => NfsTime {
            sec: -sec - 1,
            nsec: 1_000_000_000 - n,
        },
    })
}

/// Attribute metadata is untrusted (other tools, other gateways, a hand-edited xattr):
/// a value that is present but unusable is ignored (the default shows instead) and
/// reported here, at most once a second so a directory of them cannot flood the log.
#[cfg(test)]
pub(super) fn report_malformed(key: &str, meta: &UserMeta) {
    report_unparsed(
        key,
        meta,
        &[
            (M_MODE, mode(meta).is_some()),
            (M_UID, id(meta, M_UID).is_some()),
            (M_GID, id(meta, M_GID).is_some()),
            (M_MTIME, time(meta, M_MTIME).is_some()),
            (M_ATIME, time(meta, M_ATIME).is_some()),
            (M_CTIME, time(meta, M_CTIME).is_some()),
        ],
    )
}

/// `report_malformed` from values the caller parsed already (each attribute's name and
/// whether it parsed), so building an `Attr` parses each value once.
pub(super) fn report_unparsed(key: &str, meta: &UserMeta, parsed: &[(&'static str, bool)]) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let found = parsed
        .iter()
        .find(|(name, ok)| !ok && meta.contains_key(*name))
        .map(|(name, _)| *name);
    let Some(name) = found else { return };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if LAST.swap(now, Ordering::Relaxed) != now {
        let value: String = meta
            .get(name)
            .map(|v| v.chars().take(64).collect())
            .unwrap_or_default();
        tracing::warn!(
            key,
            attribute = name,
            value,
            "malformed attribute metadata ignored"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(k: &str, v: &str) -> UserMeta {
        [(k.to_string(), v.to_string())].into_iter().collect()
    }

    #[test]
    fn modes() {
        assert_eq!(mode(&m("mode", "100644")), Some(0o100644));
        assert_eq!(mode(&m("mode", "33188")), Some(0o100644));
        assert_eq!(mode(&m("mode", "33204")), Some(0o100664));
        assert_eq!(mode(&m("mode", "40755")), Some(0o40755));
        assert_eq!(mode(&m("mode", "16877")), Some(0o40755));
        assert_eq!(mode(&m("mode", "junk")), None);
        assert_eq!(fmt_mode(0o120777), "120777");
    }

    #[test]
    fn times() {
        let t = NfsTime {
            sec: 1_700_000_000,
            nsec: 5,
        };
        assert_eq!(fmt_time(t), "1700000000.000000005");
        assert_eq!(time(&m("mtime", &fmt_time(t)), "mtime"), Some(t));
        assert_eq!(
            time(&m("mtime", "1700000000"), "mtime"),
            Some(NfsTime {
                sec: 1_700_000_000,
                nsec: 0
            })
        );
        assert_eq!(
            time(&m("mtime", "1700000000.5"), "mtime"),
            Some(NfsTime {
                sec: 1_700_000_000,
                nsec: 500_000_000
            })
        );
        assert_eq!(
            time(&m("mtime", "2023-11-14T22:13:20.25Z"), "mtime"),
            Some(NfsTime {
                sec: 1_700_000_000,
                nsec: 250_000_000
            })
        );
        assert_eq!(
            time(&m("mtime", "2023-11-14T23:13:20+01:00"), "mtime"),
            Some(NfsTime {
                sec: 1_700_000_000,
                nsec: 0
            })
        );
        assert_eq!(time(&m("mtime", "x"), "mtime"), None);
    }

    #[test]
    fn signed_times_round_trip_as_decimals() {
        for (t, text) in [
            ((-1, 0), "-1.000000000"),
            ((-2, 500_000_000), "-1.500000000"),
            ((-1, 999_999_999), "-0.000000001"),
            ((0, 0), "0.000000000"),
            ((5_000_000_000, 7), "5000000000.000000007"),
            ((i64::MAX, 999_999_999), "9223372036854775807.999999999"),
            ((i64::MIN + 1, 1), "-9223372036854775806.999999999"),
        ] {
            let t = NfsTime {
                sec: t.0,
                nsec: t.1,
            };
            assert_eq!(fmt_time(t), text);
            assert_eq!(time(&m("mtime", text), "mtime"), Some(t), "{text}");
        }
        assert_eq!(
            time(&m("mtime", "-0.5"), "mtime"),
            Some(NfsTime {
                sec: -1,
                nsec: 500_000_000
            })
        );
        assert_eq!(
            time(&m("mtime", "1969-12-31T23:59:59Z"), "mtime"),
            Some(NfsTime { sec: -1, nsec: 0 })
        );
        for bad in ["-", "--1", "-x", "+1", "1.-5", "-.5"] {
            assert_eq!(time(&m("mtime", bad), "mtime"), None, "{bad}");
        }
        // Past i64: clamped, never wrapped.
        assert_eq!(
            time(&m("mtime", "99999999999999999999"), "mtime").map(|t| t.sec),
            None
        );
        assert_eq!(
            time(&m("mtime", "9999999999999999999"), "mtime").map(|t| t.sec),
            Some(i64::MAX)
        );
    }

    #[test]
    fn device_numbers_and_kinds() {
        // glibc makedev values.
        assert_eq!(makedev(1, 3), 259);
        assert_eq!(makedev(8, 1), 2049);
        assert_eq!(makedev(4, 64), 1088);
        for (ma, mi) in [
            (0, 0),
            (1, 3),
            (0xfff, 0xff),
            (0x1000, 0x100),
            (u32::MAX, u32::MAX),
            (0xdead_beef, 0x1234_5678),
        ] {
            assert_eq!(split_dev(makedev(ma, mi)), (ma, mi));
        }
        assert_eq!(rdev(&m("rdev", "2049")), (8, 1));
        assert_eq!(rdev(&m("rdev", "x")), (0, 0));
        assert_eq!(rdev(&m("rdev", "-1")), (0, 0));
        for k in [
            FileKind::Reg,
            FileKind::Dir,
            FileKind::Lnk,
            FileKind::Fifo,
            FileKind::Chr,
            FileKind::Blk,
            FileKind::Sock,
        ] {
            assert_eq!(kind_of(Some(type_bits(k) | 0o644)), k);
            assert_eq!(
                mode(&m("mode", &fmt_mode(type_bits(k) | 0o644))),
                Some(type_bits(k) | 0o644)
            );
        }
        assert_eq!(kind_of(None), FileKind::Reg);
        // s3fs writes decimal: S_IFIFO | 0644 = 4516.
        assert_eq!(kind_of(mode(&m("mode", "4516"))), FileKind::Fifo);
    }

    #[test]
    fn hostile_values_are_rejected_not_panicking() {
        for v in [
            "2023-11-14T22:13:20+a\u{e9}bc",
            "2023-11-14T22:13:2\u{e9}Z",
            "2023-11-14T22:13:20.\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}",
            "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}",
            "1.\u{e9}",
            "99999999999999999999999",
            "-5",
            "1700000000.1234567891234",
            "",
        ] {
            let meta = m("mtime", v);
            let t = time(&meta, "mtime");
            assert!(t.is_none_or(|t| t.nsec < 1_000_000_000), "{v:?}: {t:?}");
            report_malformed("k", &meta);
        }
        assert_eq!(mode(&m("mode", "777777777777")), None);
        assert_eq!(mode(&m("mode", "\u{e9}")), None);
        assert_eq!(id(&m("uid", "4294967296"), "uid"), None);
        assert_eq!(id(&m("uid", "-1"), "uid"), None);
    }
}
