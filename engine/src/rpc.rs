//! ONC RPC version 2 messages (RFC 5531): call and reply headers, the AUTH_NONE and
//! AUTH_SYS flavors, and every rejection a server must be able to send.
//!
//! Server side: `decode_call` turns a received record into a `CallHeader` plus the
//! offset of the procedure arguments, or tells the caller to drop the record (nothing
//! sensible can be answered) or which rejection to send. Program/version/procedure
//! dispatch belongs to the caller; `write_accepted` encodes PROG_UNAVAIL,
//! PROG_MISMATCH (with the supported range), PROC_UNAVAIL and GARBAGE_ARGS.
//!
//! Requester side (bench, tests): `write_call` and `decode_reply`.

use crate::xdr::{XdrError, XdrReader, XdrResult, XdrWriter};

pub const RPC_VERSION: u32 = 2;
pub const MSG_CALL: u32 = 0;
pub const MSG_REPLY: u32 = 1;
pub const MSG_ACCEPTED: u32 = 0;
pub const MSG_DENIED: u32 = 1;

pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;

/// RFC 5531 §8.2: opaque_auth bodies are at most 400 bytes.
pub const MAX_AUTH_BYTES: usize = 400;
/// RFC 5531 appendix A: machinename<255>, gids<16>.
pub const MAX_MACHINE_NAME: usize = 255;
pub const MAX_AUTH_SYS_GIDS: usize = 16;

/// auth_stat values (RFC 5531 §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AuthStat {
    Ok = 0,
    BadCred = 1,
    RejectedCred = 2,
    BadVerf = 3,
    RejectedVerf = 4,
    TooWeak = 5,
}

/// The decoded AUTH_SYS credential (machinename is validated but not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthSys {
    pub stamp: u32,
    pub uid: u32,
    pub gid: u32,
    pub ngids: u8,
    pub gids: [u32; MAX_AUTH_SYS_GIDS],
}

impl AuthSys {
    pub fn new(uid: u32, gid: u32, gids: &[u32]) -> Self {
        let n = gids.len().min(MAX_AUTH_SYS_GIDS);
        let mut a = [0u32; MAX_AUTH_SYS_GIDS];
        a[..n].copy_from_slice(&gids[..n]);
        AuthSys {
            stamp: 0,
            uid,
            gid,
            ngids: n as u8,
            gids: a,
        }
    }

    pub fn groups(&self) -> &[u32] {
        &self.gids[..self.ngids as usize]
    }
}

/// The caller's credential, owned so it can travel with a request to another thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cred {
    None,
    Sys(AuthSys),
}

/// The fixed part of a call, after the credential and verifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallHeader {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: Cred,
}

/// A reply the server must send instead of running the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// rpcvers was not 2 (RFC 5531 §9: reply RPC_MISMATCH with the range 2..2).
    RpcMismatch,
    /// The credential or verifier was malformed or of a flavor we do not accept.
    Auth(AuthStat),
}

/// Outcome of decoding a call that cannot proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// Not even an xid and message type: nothing can be answered; drop the record.
    Drop,
    /// A REPLY arrived where a CALL was expected: ignored by a server.
    NotACall { xid: u32 },
    /// Answer with MSG_DENIED.
    Deny { xid: u32, why: Denied },
}

/// accept_stat with the data some of its arms carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    Success,
    ProgUnavail,
    ProgMismatch { low: u32, high: u32 },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

fn decode_auth_sys(body: &[u8]) -> XdrResult<AuthSys> {
    let mut r = XdrReader::new(body);
    let stamp = r.u32()?;
    r.string(MAX_MACHINE_NAME)?;
    let uid = r.u32()?;
    let gid = r.u32()?;
    let n = r.u32()? as usize;
    if n > MAX_AUTH_SYS_GIDS {
        return Err(XdrError::TooLong);
    }
    let mut gids = [0u32; MAX_AUTH_SYS_GIDS];
    for g in gids.iter_mut().take(n) {
        *g = r.u32()?;
    }
    if r.remaining() != 0 {
        return Err(XdrError::BadValue);
    }
    Ok(AuthSys {
        stamp,
        uid,
        gid,
        ngids: n as u8,
        gids,
    })
}

/// Decodes a call header. On success returns the header and the offset in `rec` at
/// which the procedure arguments start.
pub fn decode_call(rec: &[u8]) -> Result<(CallHeader, usize), CallError> {
    let mut r = XdrReader::new(rec);
    let (xid, mtype) = match (r.u32(), r.u32()) {
        (Ok(x), Ok(m)) => (x, m),
        _ => return Err(CallError::Drop),
    };
    if mtype == MSG_REPLY {
        return Err(CallError::NotACall { xid });
    }
    if mtype != MSG_CALL {
        return Err(CallError::Drop);
    }
    let rpcvers = r.u32().map_err(|_| CallError::Drop)?;
    if rpcvers != RPC_VERSION {
        return Err(CallError::Deny {
            xid,
            why: Denied::RpcMismatch,
        });
    }
    let bad = |_| CallError::Deny {
        xid,
        why: Denied::Auth(AuthStat::BadCred),
    };
    let prog = r.u32().map_err(bad)?;
    let vers = r.u32().map_err(bad)?;
    let proc_ = r.u32().map_err(bad)?;
    let flavor = r.u32().map_err(bad)?;
    let body = r.opaque_var(MAX_AUTH_BYTES).map_err(bad)?;
    let cred = match flavor {
        AUTH_NONE => Cred::None,
        AUTH_SYS => Cred::Sys(decode_auth_sys(body).map_err(bad)?),
        _ => return Err(bad(XdrError::BadValue)),
    };
    let badverf = |_| CallError::Deny {
        xid,
        why: Denied::Auth(AuthStat::BadVerf),
    };
    let vflavor = r.u32().map_err(badverf)?;
    r.opaque_var(MAX_AUTH_BYTES).map_err(badverf)?;
    // AUTH_NONE and AUTH_SYS calls carry an AUTH_NONE verifier.
    if vflavor != AUTH_NONE {
        return Err(badverf(XdrError::BadValue));
    }
    Ok((
        CallHeader {
            xid,
            prog,
            vers,
            proc_,
            cred,
        },
        r.position(),
    ))
}

/// Writes an accepted reply header with an AUTH_NONE verifier. For `Accept::Success`
/// the procedure results follow; for the other arms the reply is complete.
pub fn write_accepted(w: &mut XdrWriter, xid: u32, stat: Accept) -> XdrResult<()> {
    w.u32(xid)?;
    w.u32(MSG_REPLY)?;
    w.u32(MSG_ACCEPTED)?;
    w.u32(AUTH_NONE)?;
    w.u32(0)?;
    match stat {
        Accept::Success => w.u32(0),
        Accept::ProgUnavail => w.u32(1),
        Accept::ProgMismatch { low, high } => {
            w.u32(2)?;
            w.u32(low)?;
            w.u32(high)
        }
        Accept::ProcUnavail => w.u32(3),
        Accept::GarbageArgs => w.u32(4),
        Accept::SystemErr => w.u32(5),
    }
}

/// Writes a complete MSG_DENIED reply.
pub fn write_denied(w: &mut XdrWriter, xid: u32, why: Denied) -> XdrResult<()> {
    w.u32(xid)?;
    w.u32(MSG_REPLY)?;
    w.u32(MSG_DENIED)?;
    match why {
        Denied::RpcMismatch => {
            w.u32(0)?;
            w.u32(RPC_VERSION)?;
            w.u32(RPC_VERSION)
        }
        Denied::Auth(s) => {
            w.u32(1)?;
            w.u32(s as u32)
        }
    }
}

/// Requester side: writes a call header; the arguments follow.
pub fn write_call(
    w: &mut XdrWriter,
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &Cred,
) -> XdrResult<()> {
    w.u32(xid)?;
    w.u32(MSG_CALL)?;
    w.u32(RPC_VERSION)?;
    w.u32(prog)?;
    w.u32(vers)?;
    w.u32(proc_)?;
    match cred {
        Cred::None => {
            w.u32(AUTH_NONE)?;
            w.u32(0)?;
        }
        Cred::Sys(a) => {
            w.u32(AUTH_SYS)?;
            let len_at = w.reserve_u32()?;
            let start = w.position();
            w.u32(a.stamp)?;
            w.string(b"nfsgw")?;
            w.u32(a.uid)?;
            w.u32(a.gid)?;
            w.u32(a.ngids as u32)?;
            for g in a.groups() {
                w.u32(*g)?;
            }
            let len = (w.position() - start) as u32;
            w.patch_u32(len_at, len);
        }
    }
    w.u32(AUTH_NONE)?;
    w.u32(0)
}

/// How a reply answered, as seen by a requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyStatus {
    Accepted(Accept),
    Denied(Denied),
}

/// Requester side: decodes a reply header. Returns xid, status and the offset of the
/// results (meaningful for `Accepted(Success)`).
pub fn decode_reply(rec: &[u8]) -> XdrResult<(u32, ReplyStatus, usize)> {
    let mut r = XdrReader::new(rec);
    let xid = r.u32()?;
    if r.u32()? != MSG_REPLY {
        return Err(XdrError::BadValue);
    }
    match r.u32()? {
        MSG_ACCEPTED => {
            r.u32()?;
            r.opaque_var(MAX_AUTH_BYTES)?;
            let st = match r.u32()? {
                0 => Accept::Success,
                1 => Accept::ProgUnavail,
                2 => Accept::ProgMismatch {
                    low: r.u32()?,
                    high: r.u32()?,
                },
                3 => Accept::ProcUnavail,
                4 => Accept::GarbageArgs,
                5 => Accept::SystemErr,
                _ => return Err(XdrError::BadValue),
            };
            Ok((xid, ReplyStatus::Accepted(st), r.position()))
        }
        MSG_DENIED => {
            let why = match r.u32()? {
                0 => {
                    r.u32()?;
                    r.u32()?;
                    Denied::RpcMismatch
                }
                1 => Denied::Auth(match r.u32()? {
                    0 => AuthStat::Ok,
                    1 => AuthStat::BadCred,
                    2 => AuthStat::RejectedCred,
                    3 => AuthStat::BadVerf,
                    4 => AuthStat::RejectedVerf,
                    5 => AuthStat::TooWeak,
                    _ => return Err(XdrError::BadValue),
                }),
                _ => return Err(XdrError::BadValue),
            };
            Ok((xid, ReplyStatus::Denied(why), r.position()))
        }
        _ => Err(XdrError::BadValue),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call_bytes(cred: &Cred) -> Vec<u8> {
        let mut buf = vec![0u8; 512];
        let mut w = XdrWriter::new(&mut buf);
        write_call(&mut w, 0x1234, 100003, 3, 1, cred).unwrap();
        w.u32(0xdead).unwrap(); // an argument
        let n = w.position();
        buf.truncate(n);
        buf
    }

    #[test]
    fn call_roundtrip_auth_sys() {
        let cred = Cred::Sys(AuthSys::new(1000, 100, &[4, 24]));
        let b = call_bytes(&cred);
        let (h, off) = decode_call(&b).unwrap();
        assert_eq!(h.xid, 0x1234);
        assert_eq!((h.prog, h.vers, h.proc_), (100003, 3, 1));
        assert_eq!(h.cred, cred);
        assert_eq!(&b[off..], &0xdeadu32.to_be_bytes());
    }

    #[test]
    fn call_roundtrip_auth_none() {
        let b = call_bytes(&Cred::None);
        let (h, _) = decode_call(&b).unwrap();
        assert_eq!(h.cred, Cred::None);
    }

    #[test]
    fn garbage_is_dropped() {
        assert_eq!(decode_call(&[1, 2, 3]), Err(CallError::Drop));
        assert_eq!(decode_call(&[0, 0, 0, 1, 0, 0, 0, 7]), Err(CallError::Drop));
    }

    #[test]
    fn reply_is_not_a_call() {
        assert_eq!(
            decode_call(&[0, 0, 0, 9, 0, 0, 0, 1]),
            Err(CallError::NotACall { xid: 9 })
        );
    }

    #[test]
    fn wrong_rpc_version_is_rpc_mismatch() {
        let mut b = call_bytes(&Cred::None);
        b[11] = 3;
        assert_eq!(
            decode_call(&b),
            Err(CallError::Deny {
                xid: 0x1234,
                why: Denied::RpcMismatch
            })
        );
    }

    #[test]
    fn unknown_flavor_is_badcred() {
        let mut b = call_bytes(&Cred::None);
        b[27] = 6; // RPCSEC_GSS
        assert_eq!(
            decode_call(&b),
            Err(CallError::Deny {
                xid: 0x1234,
                why: Denied::Auth(AuthStat::BadCred)
            })
        );
    }

    #[test]
    fn too_many_gids_is_badcred() {
        let mut a = AuthSys::new(1, 1, &[]);
        a.ngids = 16;
        let mut b = call_bytes(&Cred::Sys(a));
        // gids count sits right before the 16 gids; bump it to 17.
        let body_end = b.len() - 4 - 8 - 16 * 4;
        b[body_end - 1] = 17;
        assert!(matches!(
            decode_call(&b),
            Err(CallError::Deny {
                why: Denied::Auth(AuthStat::BadCred),
                ..
            })
        ));
    }

    #[test]
    fn oversized_cred_is_badcred() {
        let mut b = call_bytes(&Cred::None);
        b[28..32].copy_from_slice(&401u32.to_be_bytes());
        assert!(matches!(
            decode_call(&b),
            Err(CallError::Deny {
                why: Denied::Auth(AuthStat::BadCred),
                ..
            })
        ));
    }

    #[test]
    fn truncated_after_xid_is_denied_or_dropped_never_panics() {
        let b = call_bytes(&Cred::Sys(AuthSys::new(0, 0, &[1, 2, 3])));
        for n in 0..b.len() {
            let _ = decode_call(&b[..n]);
        }
    }

    #[test]
    fn accepted_and_denied_replies_roundtrip() {
        let cases = [
            ReplyStatus::Accepted(Accept::Success),
            ReplyStatus::Accepted(Accept::ProgUnavail),
            ReplyStatus::Accepted(Accept::ProgMismatch { low: 3, high: 3 }),
            ReplyStatus::Accepted(Accept::ProcUnavail),
            ReplyStatus::Accepted(Accept::GarbageArgs),
            ReplyStatus::Accepted(Accept::SystemErr),
            ReplyStatus::Denied(Denied::RpcMismatch),
            ReplyStatus::Denied(Denied::Auth(AuthStat::TooWeak)),
        ];
        for c in cases {
            let mut buf = [0u8; 64];
            let mut w = XdrWriter::new(&mut buf);
            match c {
                ReplyStatus::Accepted(a) => write_accepted(&mut w, 77, a).unwrap(),
                ReplyStatus::Denied(d) => write_denied(&mut w, 77, d).unwrap(),
            }
            let n = w.position();
            let (xid, st, off) = decode_reply(&buf[..n]).unwrap();
            assert_eq!((xid, st), (77, c));
            assert_eq!(off, n);
        }
    }

    #[test]
    fn prog_mismatch_bytes() {
        let mut buf = [0u8; 64];
        let mut w = XdrWriter::new(&mut buf);
        write_accepted(&mut w, 1, Accept::ProgMismatch { low: 3, high: 3 }).unwrap();
        let n = w.position();
        let words: Vec<u32> = buf[..n]
            .chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, vec![1, 1, 0, 0, 0, 2, 3, 3]);
    }

    /// Deterministic fuzz: random records and random mutations of a valid call never
    /// panic, and anything accepted re-encodes to a header with the same fields.
    #[test]
    fn random_input_never_panics() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let valid = call_bytes(&Cred::Sys(AuthSys::new(5, 6, &[7, 8])));
        for _ in 0..20_000 {
            let mut b = if next() % 2 == 0 {
                let n = (next() % 128) as usize;
                (0..n).map(|_| next() as u8).collect::<Vec<u8>>()
            } else {
                valid.clone()
            };
            for _ in 0..(next() % 4) {
                if !b.is_empty() {
                    let i = (next() as usize) % b.len();
                    b[i] = next() as u8;
                }
            }
            if let Ok((h, off)) = decode_call(&b) {
                assert!(off <= b.len());
                let mut out = vec![0u8; 512];
                let mut w = XdrWriter::new(&mut out);
                write_call(&mut w, h.xid, h.prog, h.vers, h.proc_, &h.cred).unwrap();
                let n = w.position();
                let (h2, _) = decode_call(&out[..n]).unwrap();
                assert_eq!(h.cred, h2.cred);
            }
        }
    }
}
