//! The client's side of ONC RPC (RFC 5531): a CALL message header (§9, `call_body`)
//! with an AUTH_NONE or AUTH_SYS credential (§8.2, Appendix A) and an AUTH_NONE
//! verifier, TCP record marking (§11), and the growable XDR helper the NFSv4.1
//! encoder builds on. The workspace's tests and fuzzer write every RPC call through
//! here (or through [`crate::v3call`] / [`crate::v4call`], which use it); the
//! layering check (tests/arch/check.py, "one-client-encoder") keeps it that way.

use engine::rpc::{self, Cred, AUTH_NONE, AUTH_SYS, MSG_CALL, RPC_VERSION};
use engine::xdr::{XdrError, XdrResult, XdrWriter};

/// Last-fragment bit of a record mark (RFC 5531 §11).
pub const LAST_FRAG: u32 = 0x8000_0000;
/// Largest record fragment a mark can describe.
pub const MAX_FRAG: usize = 0x7fff_ffff;
/// Largest encoding [`encode`] makes room for before it gives up.
const MAX_ENCODING: usize = 64 << 20;

/// XDR-encodes with `f` into a new vector: first into `hint` bytes, and on
/// [`XdrError::Overflow`] again into twice as many, so a caller need not size
/// exactly. Errors other than overflow (and an encoding beyond 64 MiB) are returned.
pub fn encode(hint: usize, f: impl Fn(&mut XdrWriter) -> XdrResult<()>) -> XdrResult<Vec<u8>> {
    let mut cap = hint.max(64);
    loop {
        let mut b = vec![0u8; cap];
        let mut w = XdrWriter::new(&mut b);
        match f(&mut w) {
            Ok(()) => {
                let n = w.position();
                b.truncate(n);
                return Ok(b);
            }
            Err(XdrError::Overflow) if cap < MAX_ENCODING => cap *= 2,
            Err(e) => return Err(e),
        }
    }
}

/// An AUTH_SYS credential as a client may send it — any machine name and any number
/// of groups, so a fuzzer can also write the ones a server must refuse (RFC 5531
/// Appendix A bounds the name at 255 bytes and the groups at 16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSysBody<'a> {
    pub stamp: u32,
    pub machine: &'a [u8],
    pub uid: u32,
    pub gid: u32,
    pub gids: &'a [u32],
}

/// The credential of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth<'a> {
    None,
    Sys(AuthSysBody<'a>),
}

impl Auth<'_> {
    /// `opaque_auth` (RFC 5531 §8.2): flavor and body.
    pub fn write(&self, w: &mut XdrWriter) -> XdrResult<()> {
        match self {
            Auth::None => {
                w.u32(AUTH_NONE)?;
                w.u32(0)
            }
            Auth::Sys(a) => {
                w.u32(AUTH_SYS)?;
                let len_at = w.reserve_u32()?;
                let start = w.position();
                w.u32(a.stamp)?;
                w.string(a.machine)?;
                w.u32(a.uid)?;
                w.u32(a.gid)?;
                let n = u32::try_from(a.gids.len()).map_err(|_| XdrError::Overflow)?;
                w.u32(n)?;
                for g in a.gids {
                    w.u32(*g)?;
                }
                let len = u32::try_from(w.position() - start).map_err(|_| XdrError::Overflow)?;
                w.patch_u32(len_at, len);
                Ok(())
            }
        }
    }
}

/// AUTH_SYS for `uid` (gid the same, no groups): what the tests call with.
pub fn sys(uid: u32) -> Cred {
    Cred::Sys(rpc::AuthSys::new(uid, uid, &[]))
}

/// A call message's header (RFC 5531 §9 `call_body` up to the procedure's
/// arguments) with one of engine's credentials, written into a caller's buffer: what
/// a client encoding into its own send buffer (bench) uses; the arguments follow.
pub fn header(
    w: &mut XdrWriter,
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &Cred,
) -> XdrResult<()> {
    rpc::write_call(w, xid, prog, vers, proc_, cred)
}

/// A call message (header and `args`) with one of engine's credentials, as
/// [`header`] writes it.
pub fn call(xid: u32, prog: u32, vers: u32, proc_: u32, cred: &Cred, args: &[u8]) -> Vec<u8> {
    let mut m = encode(512, |w| header(w, xid, prog, vers, proc_, cred))
        .expect("an RPC call header fits 64 MiB");
    m.extend_from_slice(args);
    m
}

/// A call message with any credential ([`Auth`]), hostile ones included.
pub fn call_with(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    auth: &Auth,
    args: &[u8],
) -> XdrResult<Vec<u8>> {
    let mut m = encode(512, |w| {
        w.u32(xid)?;
        w.u32(MSG_CALL)?;
        w.u32(RPC_VERSION)?;
        w.u32(prog)?;
        w.u32(vers)?;
        w.u32(proc_)?;
        auth.write(w)?;
        Auth::None.write(w) // verifier
    })?;
    m.extend_from_slice(args);
    Ok(m)
}

/// `msg` as one TCP record: a last-fragment mark and the message (RFC 5531 §11).
/// A message too long for one fragment is refused, never cut.
pub fn record(msg: &[u8]) -> XdrResult<Vec<u8>> {
    if msg.len() > MAX_FRAG {
        return Err(XdrError::Overflow);
    }
    let mut rec = Vec::with_capacity(4 + msg.len());
    rec.extend_from_slice(&(LAST_FRAG | msg.len() as u32).to_be_bytes());
    rec.extend_from_slice(msg);
    Ok(rec)
}
