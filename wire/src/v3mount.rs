//! MOUNT v3 EXPORT (RFC 1813 Appendix I, §5.2.5): the call, written into a caller's
//! buffer, and its `exports` reply, decoded with every length and count bounded —
//! what a client asks to find the exports a server offers (bench, when not told one).

use crate::mount3::MOUNTPROC3_EXPORT;
use crate::v3call::ReplyError;
use crate::{MOUNT_PROGRAM, MOUNT_V3};
use engine::rpc::{self, Cred};
use engine::xdr::{XdrError, XdrReader, XdrResult, XdrWriter};

/// MNTPATHLEN (RFC 1813 §5.1.1).
const MNT_PATH_LEN: usize = 1024;
/// MNTNAMLEN (RFC 1813 §5.1.2).
const MNT_NAME_LEN: usize = 255;
/// Most exports, and most groups of one export, accepted in a reply: far above any
/// real server's, low enough that a hostile reply cannot grow the list without end.
const MAX_ENTRIES: usize = 4096;

/// One exportnode (RFC 1813 §5.2.5): the exported directory and the groups (client
/// names or networks) it is exported to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportNode {
    pub dir: String,
    pub groups: Vec<String>,
}

/// Encodes MOUNTPROC3_EXPORT (no arguments) into `out[4..]`, the first four bytes
/// left for a record mark, and returns the end of the message.
pub fn encode_export(out: &mut [u8], xid: u32, cred: &Cred) -> XdrResult<usize> {
    let mut w = XdrWriter::at(out, 4);
    rpc::write_call(
        &mut w,
        xid,
        MOUNT_PROGRAM,
        MOUNT_V3,
        MOUNTPROC3_EXPORT,
        cred,
    )?;
    Ok(w.position())
}

/// The `exports` list of an EXPORT reply body: `*exportnode` entries, each with its
/// `*groupnode` list (XDR optional-data linked lists, RFC 4506 §4.19).
pub fn parse_exports(body: &[u8]) -> Result<Vec<ExportNode>, ReplyError> {
    let mut r = XdrReader::new(body);
    let mut out = Vec::new();
    while r.bool()? {
        if out.len() == MAX_ENTRIES {
            return Err(ReplyError::Xdr(XdrError::BadValue));
        }
        let dir = text(r.string(MNT_PATH_LEN)?);
        let mut groups = Vec::new();
        while r.bool()? {
            if groups.len() == MAX_ENTRIES {
                return Err(ReplyError::Xdr(XdrError::BadValue));
            }
            groups.push(text(r.string(MNT_NAME_LEN)?));
        }
        out.push(ExportNode { dir, groups });
    }
    Ok(out)
}

/// A path or name as text for messages and for MNT (lossy: a server's bytes need not
/// be UTF-8).
fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpccall;

    fn reply(f: impl Fn(&mut XdrWriter) -> XdrResult<()>) -> Vec<u8> {
        rpccall::encode(64, f).unwrap()
    }

    #[test]
    fn export_call_is_mount_v3_procedure_5_without_arguments() {
        let mut buf = [0u8; 128];
        let n = encode_export(&mut buf, 9, &Cred::None).unwrap();
        let (h, at) = rpc::decode_call(&buf[4..n]).unwrap();
        assert_eq!((h.xid, h.prog, h.vers, h.proc_), (9, 100005, 3, 5));
        assert_eq!(at, n - 4, "no arguments");
    }

    #[test]
    fn exports_with_their_groups() {
        let body = reply(|w| {
            w.bool(true)?;
            w.string(b"/data")?;
            w.bool(true)?;
            w.string(b"*")?;
            w.bool(true)?;
            w.string(b"10.0.0.0/8")?;
            w.bool(false)?;
            w.bool(true)?;
            w.string(b"/scratch")?;
            w.bool(false)?;
            w.bool(false)
        });
        let got = parse_exports(&body).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].dir, "/data");
        assert_eq!(got[0].groups, ["*", "10.0.0.0/8"]);
        assert_eq!((got[1].dir.as_str(), got[1].groups.len()), ("/scratch", 0));
        assert_eq!(parse_exports(&reply(|w| w.bool(false))).unwrap(), []);
    }

    /// Truncated lists, overlong paths and endless lists are errors, not panics or
    /// unbounded growth.
    #[test]
    fn hostile_replies_are_errors() {
        let cut = reply(|w| {
            w.bool(true)?;
            w.string(b"/data")
        });
        assert!(parse_exports(&cut).is_err());
        let long = reply(|w| {
            w.bool(true)?;
            w.string(&[b'a'; MNT_PATH_LEN + 1])?;
            w.bool(false)?;
            w.bool(false)
        });
        assert!(parse_exports(&long).is_err());
        let endless = reply(|w| {
            for _ in 0..=MAX_ENTRIES {
                w.bool(true)?;
                w.string(b"/")?;
                w.bool(false)?;
            }
            w.bool(false)
        });
        assert_eq!(
            parse_exports(&endless),
            Err(ReplyError::Xdr(XdrError::BadValue))
        );
    }
}
