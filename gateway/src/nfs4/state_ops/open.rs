//! OPEN (RFC 8881 §18.16): claims, create modes, permission checks, share
//! reservations, delegations offered. Decoded arguments in, results out; the
//! encoding is in `super::encode_open`.

use super::args::{Claim, CreateHow, OpenArgs};
use super::fattr::{NewAttrs, FATTR4_SIZE};
use super::{caller, resolve_stateid};
use crate::export::Caller;
use crate::fs::access;
use crate::fs::{Attr, CreateMode, FileKind, Node, Owner, SetAttr, Status};
use crate::nfs4::status::*;
use crate::nfs4::{Compound, CurrentFh};
use crate::state::opens::{ACCESS_READ, ACCESS_WRITE};
use crate::state::stateid::Stateid;
use crate::state::Conflict;

/// OPEN4_SHARE_ACCESS_WANT_* (§18.16.1), in bits 8..16 of share_access.
pub const WANT_MASK: u32 = 0xff00;
pub const WANT_NO_PREFERENCE: u32 = 0;
pub const WANT_READ_DELEG: u32 = 0x100;
pub const WANT_WRITE_DELEG: u32 = 0x200;
pub const WANT_NO_DELEG: u32 = 0x400;
pub const WANT_CANCEL: u32 = 0x500;
/// OPEN4_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL / _PUSH_DELEG_WHEN_UNCONTENDED.
const SIGNAL_FLAGS: u32 = 0x30000;
/// RFC 9754's want flags (§5, §6), minor version 2 only: in 4.1 they are unknown
/// share_access bits (NFS4ERR_INVAL, RFC 8178 §4.4.3).
pub const WANT_DELEG_TIMESTAMPS: u32 = nfs_wire::delstid::OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS;
pub const WANT_OPEN_XOR_DELEGATION: u32 =
    nfs_wire::delstid::OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION;
const V42_FLAGS: u32 = WANT_DELEG_TIMESTAMPS | WANT_OPEN_XOR_DELEGATION;
/// OPEN4_RESULT_NO_OPEN_STATEID (RFC 9754 §5).
pub const OPEN4_RESULT_NO_OPEN_STATEID: u32 = nfs_wire::delstid::OPEN4_RESULT_NO_OPEN_STATEID;

/// why_no_delegation4 (§18.16.2).
pub const WND4_NOT_WANTED: u32 = 0;
pub const WND4_CONTENTION: u32 = 1;
pub const WND4_CANCELLED: u32 = 7;

/// OPEN4_RESULT_LOCKTYPE_POSIX (§18.16.2): locks follow POSIX (sub-ranges, merges).
pub const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 4;
/// OPEN4_RESULT_PRESERVE_UNLINKED (§18.16.4): a REMOVE of the open file keeps it
/// until its last CLOSE, and through the grace period after a restart
/// (`fs::imp::orphans`), so the client unlinks instead of silly-renaming.
pub const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 8;

/// NAME_MAX of a component.
const NAME_MAX: usize = 255;

/// The delegation part of OPEN4resok.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleg {
    None,
    /// OPEN_DELEGATE_NONE_EXT with its why_no_delegation4.
    NoneExt(u32),
    Read(Stateid),
    Write(Stateid),
    /// OPEN_DELEGATE_READ_ATTRS_DELEG / _WRITE_ATTRS_DELEG (RFC 9754 §6): the same
    /// delegations, the file's times delegated too.
    ReadAttrs(Stateid),
    WriteAttrs(Stateid),
}

impl Deleg {
    /// The delegation stateid granted, if any.
    pub fn stateid(&self) -> Option<Stateid> {
        match *self {
            Deleg::Read(s) | Deleg::Write(s) | Deleg::ReadAttrs(s) | Deleg::WriteAttrs(s) => {
                Some(s)
            }
            Deleg::None | Deleg::NoneExt(_) => None,
        }
    }
}

/// What a successful OPEN answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub stateid: Stateid,
    /// change_info4 before/after of the directory (CLAIM_NULL), else zeros.
    pub cinfo: (u64, u64),
    pub attrset: [u32; 2],
    /// OPEN4_RESULT_* flags (§18.16.2).
    pub rflags: u32,
    pub deleg: Deleg,
}

/// component4 checks for a name opened or created (§18.16.3, as knfsd check_filename):
/// empty → INVAL, invalid UTF-8 → INVAL, too long → NAMETOOLONG, "." and ".." →
/// BADNAME, '/' or NUL → BADCHAR.
pub fn check_component(name: &[u8]) -> Result<(), Nfsstat4> {
    if name.is_empty() || std::str::from_utf8(name).is_err() {
        return Err(NFS4ERR_INVAL);
    }
    if name.len() > NAME_MAX {
        return Err(NFS4ERR_NAMETOOLONG);
    }
    if name == b"." || name == b".." {
        return Err(NFS4ERR_BADNAME);
    }
    if name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(NFS4ERR_BADCHAR);
    }
    Ok(())
}

/// share_access / share_deny (§18.16.3): the access bits (1..=3), the want, and the
/// deny bits; anything else → NFS4ERR_INVAL.
pub fn split_share(share_access: u32, share_deny: u32) -> Result<(u32, u32, u32), Nfsstat4> {
    split_share_in(share_access, share_deny, 1).map(|(a, w, d, _)| (a, w, d))
}

/// `split_share` in a COMPOUND of minor version `minor`: from 2 on, RFC 9754's
/// want flags are allowed too and returned last (any combination with any want: a
/// flag asking about a delegation that is not granted changes nothing).
pub fn split_share_in(
    share_access: u32,
    share_deny: u32,
    minor: u32,
) -> Result<(u32, u32, u32, u32), Nfsstat4> {
    let access = share_access & 3;
    let want = share_access & WANT_MASK;
    let known = 3 | WANT_MASK | SIGNAL_FLAGS | if minor >= 2 { V42_FLAGS } else { 0 };
    if share_access & !known != 0 || access == 0 || want > WANT_CANCEL || share_deny > 3 {
        return Err(NFS4ERR_INVAL);
    }
    Ok((access, want, share_deny, share_access & V42_FLAGS))
}

/// The file an OPEN names and whether this OPEN created it.
struct Target {
    node: Node,
    attr: Attr,
    created: bool,
    cinfo: (u64, u64),
    attrset: [u32; 2],
    /// UNCHECKED4 on an existing file with a size: truncate after the share check.
    truncate: Option<u64>,
}

fn fs(s: Status) -> Nfsstat4 {
    from_fs(s)
}

/// Type rules of OPEN (§18.16.3): a directory → ISDIR, a symlink → SYMLINK, any
/// other non-regular file → WRONG_TYPE.
fn check_regular(a: &Attr) -> Result<(), Nfsstat4> {
    match a.kind {
        FileKind::Reg => Ok(()),
        FileKind::Dir => Err(NFS4ERR_ISDIR),
        FileKind::Lnk => Err(NFS4ERR_SYMLINK),
        _ => Err(NFS4ERR_WRONG_TYPE),
    }
}

fn attrs(r: &Result<NewAttrs, Nfsstat4>) -> Result<NewAttrs, Nfsstat4> {
    *r
}

/// The current filehandle as a file of an export (the pseudo file system's
/// directories: `pseudo` is the error to give).
fn cfh_node(c: &Compound, pseudo: Nfsstat4) -> Result<Node, Nfsstat4> {
    match &c.cfh {
        None => Err(NFS4ERR_NOFILEHANDLE),
        Some(CurrentFh::Pseudo(_)) => Err(pseudo),
        Some(CurrentFh::File { node, .. }) => Ok(node.clone()),
    }
}

/// CLAIM_NULL / CLAIM_DELEGATE_CUR: the name in the current directory, looked up or
/// created per `create`.
fn by_name(c: &Compound, name: &[u8], create: Option<&CreateHow>) -> Result<Target, Nfsstat4> {
    let model = c.ctx.model;
    let dir = cfh_node(
        c,
        if create.is_some() {
            NFS4ERR_ROFS
        } else {
            NFS4ERR_ISDIR
        },
    )?;
    let dattr = model.getattr(&dir).map_err(fs)?;
    if dattr.kind != FileKind::Dir {
        return Err(NFS4ERR_NOTDIR);
    }
    check_component(name)?;
    let who = caller(c, &dir)?;
    access::check(&dattr, &who, access::X).map_err(fs)?;
    let before = dattr.change;
    let made = match create {
        Some(how) => create_first(c, &who, &dir, &dattr, name, how)?,
        None => None,
    };
    let (node, created, attrset, truncate) = match made {
        Some(m) => m,
        None => looked_up(c, &who, &dir, &dattr, name, create)?,
    };
    let attr = model.getattr(&node).map_err(fs)?;
    let dir_after = model.getattr(&dir).ok();
    let after = dir_after.map_or(before, |a| a.change);
    if created {
        note_made(c, &dir, &node, attr, dir_after);
    }
    Ok(Target {
        node,
        attr,
        created,
        cinfo: (before, after),
        attrset,
        truncate,
    })
}

/// The look-up path of a name OPEN names (no create asked, or a create the caller
/// may not make or whose name is taken: `create_first`).
fn looked_up(
    c: &Compound,
    who: &Caller,
    dir: &Node,
    dattr: &Attr,
    name: &[u8],
    create: Option<&CreateHow>,
) -> Result<Made, Nfsstat4> {
    let model = c.ctx.model;
    let found = match model.lookup(dir, name) {
        Ok(n) => Some(n),
        Err(Status::NoEnt) => None,
        Err(e) => return Err(fs(e)),
    };
    Ok(match (found, create) {
        (None, None) => return Err(NFS4ERR_NOENT),
        (Some(n), None) => (n, false, [0; 2], None),
        (Some(_), Some(CreateHow::Guarded(_))) => return Err(NFS4ERR_EXIST),
        (Some(n), Some(CreateHow::Unchecked(a))) => {
            // §18.16.3: UNCHECKED4 on an existing file opens it; only a size applies.
            let a = attrs(a)?;
            let mut set = [0; 2];
            if a.set.size.is_some() {
                set[0] = 1 << FATTR4_SIZE;
            }
            (n, false, set, a.set.size)
        }
        (Some(_), Some(how @ (CreateHow::Exclusive(_) | CreateHow::Exclusive41(..)))) => {
            // A retransmitted exclusive create with the same verifier returns the
            // file; another verifier → EXIST (the file model keeps the verifier).
            let (mode, _) = create_mode(how)?;
            let n = model
                .create(
                    dir,
                    name,
                    &mode,
                    Owner {
                        uid: who.uid,
                        gid: who.gid,
                    },
                )
                .map_err(fs)?;
            (n, true, [0; 2], None)
        }
        (None, Some(how)) => {
            let (mode, set) = create_mode(how)?;
            may_create(who, dattr, &set)?;
            let n = model
                .create(dir, name, &mode, new_owner(who, dattr))
                .map_err(fs)?;
            (n, true, set.map(|a| a.mask).unwrap_or([0; 2]), None)
        }
    })
}

/// What a create that makes a new file checks first (RFC 8881 §18.16.3, the write
/// and attribute rules as NFSv3's CREATE).
fn may_create(who: &Caller, dattr: &Attr, set: &Option<NewAttrs>) -> Result<(), Nfsstat4> {
    access::check_writable(who).map_err(fs)?;
    access::check_dir_modify(dattr, who).map_err(fs)?;
    if let Some(a) = set {
        access::check_new_attrs(who, &a.set).map_err(fs)?;
    }
    Ok(())
}

/// A new object's owner: the caller, with the group of a set-group-id directory.
fn new_owner(who: &Caller, dattr: &Attr) -> Owner {
    let gid = if dattr.mode & 0o2000 != 0 {
        dattr.gid
    } else {
        who.gid
    };
    Owner { uid: who.uid, gid }
}

/// What OPEN by name decides of its `Target`: node, created, attrset, truncate.
type Made = (Node, bool, [u32; 2], Option<u64>);

/// A creating OPEN tries the create before any LOOKUP (one walk of the parents for a
/// new name, as NFSv3's CREATE: `FileModel::create` refuses a taken name in the same
/// step). UNCHECKED4 and GUARDED4 create as guarded, so a name already taken is never
/// changed here; it comes back `None` and takes the look-up path, which opens (or
/// refuses) the existing file by §18.16.3's rules. Also `None` when the caller may not
/// create: an existing file may still be opened without write access to its directory.
fn create_first(
    c: &Compound,
    who: &Caller,
    dir: &Node,
    dattr: &Attr,
    name: &[u8],
    how: &CreateHow,
) -> Result<Option<Made>, Nfsstat4> {
    let (mode, set) = create_mode(how)?;
    if may_create(who, dattr, &set).is_err() {
        return Ok(None);
    }
    let guarded = match &mode {
        CreateMode::Unchecked(s) | CreateMode::Guarded(s) => CreateMode::Guarded(*s),
        // EXCLUSIVE4(_1): the file model judges a taken name by its verifier.
        other => *other,
    };
    let exclusive = !matches!(mode, CreateMode::Unchecked(_) | CreateMode::Guarded(_));
    match c
        .ctx
        .model
        .create(dir, name, &guarded, new_owner(who, dattr))
    {
        Ok(n) => Ok(Some((n, true, set.map(|a| a.mask).unwrap_or([0; 2]), None))),
        Err(Status::Exist) if !exclusive => Ok(None),
        Err(e) => Err(fs(e)),
    }
}

/// Notes the file an OPEN created by name for the reactor's names (`call::note_named`,
/// as NFSv3's CREATE notes it; kept only for `SEQUENCE, PUTFH, OPEN ...` and when the
/// name changed by exactly this create, `cache::names::EntrySeen::learned`): a
/// regular file in the directory's export, with the directory's attributes after.
fn note_made(c: &Compound, dir: &Node, node: &Node, attr: Attr, dir_attr: Option<Attr>) {
    if attr.kind == FileKind::Reg {
        super::super::dir_ops::note_made(c, dir, node, attr, dir_attr);
    }
}

/// createhow4 → the file model's create mode and the attributes it applies.
fn create_mode(how: &CreateHow) -> Result<(CreateMode, Option<NewAttrs>), Nfsstat4> {
    Ok(match how {
        CreateHow::Unchecked(a) => {
            let a = attrs(a)?;
            (CreateMode::Unchecked(a.set), Some(a))
        }
        CreateHow::Guarded(a) => {
            let a = attrs(a)?;
            (CreateMode::Guarded(a.set), Some(a))
        }
        CreateHow::Exclusive(v) => (CreateMode::Exclusive(*v), None),
        CreateHow::Exclusive41(v, a) => {
            let a = attrs(a)?;
            (CreateMode::Exclusive41(*v, a.set), Some(a))
        }
    })
}

/// The current filehandle as the file (CLAIM_FH, CLAIM_PREVIOUS, CLAIM_DELEG_CUR_FH).
fn by_fh(c: &Compound) -> Result<Target, Nfsstat4> {
    let node = cfh_node(c, NFS4ERR_ISDIR)?;
    let attr = c.ctx.model.getattr(&node).map_err(fs)?;
    Ok(Target {
        node,
        attr,
        created: false,
        cinfo: (0, 0),
        attrset: [0; 2],
        truncate: None,
    })
}

/// Grace-period rules per claim (§8.4.2, §18.16.3): reclaims only in grace and only
/// by clients that may reclaim; everything else waits for the grace period to end.
fn check_grace(c: &Compound, claim: &Claim) -> Result<(), Nfsstat4> {
    let clients = &c.state.clients;
    let grace = clients.in_grace();
    match claim {
        Claim::Previous(_) => reclaim_allowed(c),
        // Delegations are not kept across restarts: nothing to reclaim.
        Claim::DelegatePrev(_) | Claim::DelegPrevFh => Err(if grace {
            NFS4ERR_RECLAIM_BAD
        } else {
            NFS4ERR_NO_GRACE
        }),
        _ if grace || !reclaim_completed(c) => Err(NFS4ERR_GRACE),
        _ => Ok(()),
    }
}

/// Whether the client has sent RECLAIM_COMPLETE (or never needed to). RFC 8881
/// §18.51.3: before RECLAIM_COMPLETE a client's non-reclaim OPENs get
/// NFS4ERR_GRACE, and after it its reclaims get NFS4ERR_NO_GRACE (knfsd does both).
pub fn reclaim_completed(c: &Compound) -> bool {
    c.state.clients.reclaim_completed(c.clientid)
}

/// A reclaim (CLAIM_PREVIOUS OPEN, LOCK with reclaim) is allowed (§8.4.2.1): in
/// the grace period (else NO_GRACE), before the client's RECLAIM_COMPLETE (else
/// NO_GRACE), by a client the previous run knew (else RECLAIM_BAD).
/// `may_reclaim` is asked first, always: it counts the answer
/// (`nfsgw_ha_reclaims_total`), a refusal after the grace period included.
pub fn reclaim_allowed(c: &Compound) -> Result<(), Nfsstat4> {
    let clients = &c.state.clients;
    if clients.may_reclaim(c.clientid) {
        Ok(())
    } else if !clients.in_grace() {
        Err(NFS4ERR_NO_GRACE)
    } else if reclaim_completed(c) {
        // Done reclaiming.
        Err(NFS4ERR_NO_GRACE)
    } else {
        Err(NFS4ERR_RECLAIM_BAD)
    }
}

/// Runs an OPEN; on success the current filehandle is the file and the current
/// stateid the open stateid (§16.2.3.1.2).
pub fn run(c: &mut Compound, a: &OpenArgs) -> Result<Opened, Nfsstat4> {
    let (access, want, deny, flags) = split_share_in(a.share_access, a.share_deny, c.minor)?;
    check_grace(c, &a.claim)?;
    if a.create.is_some() && !matches!(a.claim, Claim::Null(_)) {
        // Only CLAIM_NULL may create (§18.16.3); others carry no createhow.
        return Err(NFS4ERR_INVAL);
    }
    let t = match &a.claim {
        Claim::Null(name) => by_name(c, name, a.create.as_ref())?,
        Claim::DelegateCur(sid, name) => {
            let t = by_name(c, name, None)?;
            check_deleg(c, sid, t.node.fileid)?;
            t
        }
        Claim::DelegCurFh(sid) => {
            let t = by_fh(c)?;
            let sid = resolve_stateid(c, *sid)?;
            check_deleg(c, &sid, t.node.fileid)?;
            t
        }
        Claim::Fh | Claim::Previous(_) => by_fh(c)?,
        Claim::DelegatePrev(_) | Claim::DelegPrevFh => return Err(NFS4ERR_RECLAIM_BAD),
    };
    check_regular(&t.attr)?;
    let model = c.ctx.model;
    let fileid = t.node.fileid;
    if !t.created {
        // Opening an existing file needs the permissions of its share access by the
        // mode bits alone (§18.16.3; no NFSv3 owner override: READ and WRITE under
        // this open are not checked again). The creator may open what this OPEN
        // made, whatever its mode (POSIX open(O_CREAT|O_WRONLY, 0444); knfsd).
        if t.truncate.is_some() && access & ACCESS_WRITE == 0 {
            return Err(NFS4ERR_INVAL);
        }
        let who = caller(c, &t.node)?;
        let (read, write) = (access & ACCESS_READ != 0, access & ACCESS_WRITE != 0);
        access::check_open(&t.attr, &who, read, write).map_err(fs)?;
    }
    let why = if access & ACCESS_WRITE != 0 || deny != 0 {
        Conflict::Write
    } else {
        Conflict::OpenRead
    };
    if !c
        .state
        .delegations
        .break_conflicts(fileid, Some(c.clientid), why)
    {
        return Err(NFS4ERR_DELAY);
    }
    if t.truncate.is_some() {
        // A truncate changes what other clients' pNFS layouts map (RFC 8881
        // §12.5.5), as SETATTR of the size does: recalled (and, unreturned, fenced)
        // first.
        crate::nfs4::layout_ops::recall_conflicts(c, fileid)?;
    }
    // Share reservations of courtesy clients give way (`state/expiry.rs`). `fresh`:
    // this OPEN made the open (not an upgrade of one the owner held).
    let (stateid, fresh) = c.state.open(c.clientid, a.owner, fileid, access, deny)?;
    if let Some(size) = t.truncate {
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        // UNCHECKED4 with a size truncates: `setattr` reports the file to the
        // reactors' caches before and after (fs::ChangeObserver).
        let r = model.setattr(&t.node, &set);
        if let Err(e) = r {
            if fresh {
                let _ = c.state.opens.close(c.clientid, &stateid, fileid);
            }
            return Err(fs(e));
        }
    }
    let handle = model.handle(&t.node).as_bytes().to_vec();
    let mut rflags = OPEN4_RESULT_LOCKTYPE_POSIX;
    if model.preserves_unlinked(&t.node) {
        rflags |= OPEN4_RESULT_PRESERVE_UNLINKED;
    }
    let mut deleg = offer_delegation(c, a, fileid, &handle, access, want);
    if let Some(sid) = deleg.stateid() {
        // The file as granted: RFC 8881 §10.4.3's change attribute, which the
        // holder's CB_GETATTR answers are compared with, and RFC 9754 §6's original
        // times. Unreadable now: a plain delegation (no original times to vet by).
        let now = model.getattr(&t.node).ok();
        if let (Deleg::Write(_), Some(now)) = (deleg, &now) {
            let change = crate::nfs4::attrs::change_of(now);
            c.state.delegations.note_grant_change(&sid, change);
        }
        if let (true, Some(now)) = (flags & WANT_DELEG_TIMESTAMPS != 0, &now) {
            deleg = with_times(c, deleg, now);
        }
    }
    let mut current = stateid;
    let mut reply_stateid = stateid;
    if let (true, Some(dsid)) = (flags & WANT_OPEN_XOR_DELEGATION != 0, deleg.stateid()) {
        // RFC 9754 §5: the delegation and no open stateid; the client has nothing to
        // CLOSE (DELEGRETURN ends it all) and opens under the delegation as RFC 8881
        // §10.4 says. Only for an open-owner's first open of the file without a deny
        // (one that upgraded an open it holds, or reserved a deny, keeps its open
        // stateid, and the reply says so by leaving the flag clear).
        // The close takes this OPEN's own stateid (seqid 1): if a concurrent OPEN of
        // the same owner upgraded the open meanwhile, it is NFS4ERR_OLD_STATEID, the
        // open stays for that OPEN's sake, and this reply keeps its stateid too.
        if fresh && deny == 0 && c.state.opens.close(c.clientid, &stateid, fileid).is_ok() {
            rflags |= OPEN4_RESULT_NO_OPEN_STATEID;
            reply_stateid = Stateid {
                seqid: 0,
                other: [0; 12],
            };
            // The COMPOUND's current stateid is the state this OPEN made
            // (§16.2.3.1.2): the delegation's.
            current = dsid;
        }
    }
    c.cfh = Some(CurrentFh::File {
        node: t.node,
        handle,
    });
    c.current_stateid = Some(current);
    Ok(Opened {
        stateid: reply_stateid,
        cinfo: t.cinfo,
        attrset: t.attrset,
        rflags,
        deleg,
    })
}

/// A delegation granted to an OPEN asking for delegated timestamps (RFC 9754 §6)
/// becomes its `*_ATTRS_DELEG` kind, the file's times at the grant (`now`) kept as
/// the original times.
fn with_times(c: &Compound, d: Deleg, now: &crate::fs::Attr) -> Deleg {
    let times = crate::state::delegations::times::GrantTimes {
        atime: now.atime,
        mtime: now.mtime,
    };
    match d {
        Deleg::Read(s) => {
            c.state.delegations.note_times_deleg(&s, times);
            Deleg::ReadAttrs(s)
        }
        Deleg::Write(s) => {
            c.state.delegations.note_times_deleg(&s, times);
            Deleg::WriteAttrs(s)
        }
        other => other,
    }
}

/// CLAIM_DELEGATE_CUR / CLAIM_DELEG_CUR_FH: the delegation must be the client's,
/// current, on this file (§18.16.3) → else NFS4ERR_RECLAIM_BAD.
fn check_deleg(c: &Compound, sid: &Stateid, fileid: u64) -> Result<(), Nfsstat4> {
    if c.state.delegations.holds(c.clientid, sid, fileid) {
        Ok(())
    } else {
        Err(NFS4ERR_RECLAIM_BAD)
    }
}

/// Whether another client has `fileid` open (every open of another open-owner
/// blocks an OPEN asking for both accesses and denying both; its own are left out).
fn others_open(c: &Compound, a: &OpenArgs, fileid: u64) -> bool {
    let both = ACCESS_READ | ACCESS_WRITE;
    c.state
        .opens
        .share_blockers(c.clientid, a.owner, fileid, both, both)
        .iter()
        .any(|&id| id != c.clientid)
}

/// CLAIM_PREVIOUS's delegate_type (open_delegation_type4, RFC 8881 §18.16.1).
const RECLAIM_READ: u32 = 1;
const RECLAIM_WRITE: u32 = 2;
/// OPEN_DELEGATE_READ_ATTRS_DELEG / _WRITE_ATTRS_DELEG (RFC 9754).
const RECLAIM_READ_ATTRS: u32 = 4;
const RECLAIM_WRITE_ATTRS: u32 = 5;

/// Which delegation to hand out (§10.4, §18.16.3 want flags).
fn offer_delegation(
    c: &Compound,
    a: &OpenArgs,
    fileid: u64,
    fh: &[u8],
    access: u32,
    want: u32,
) -> Deleg {
    let claim = &a.claim;
    match want {
        WANT_NO_DELEG => return Deleg::NoneExt(WND4_NOT_WANTED),
        WANT_CANCEL => return Deleg::NoneExt(WND4_CANCELLED),
        _ => {}
    }
    let want_write = match (claim, want) {
        // A delegation reclaim (§10.2.1, §18.16.3 CLAIM_PREVIOUS delegate_type): the
        // type the client held before the restart or takeover, under the grant
        // policy of any OPEN (a back channel that answered, no conflict).
        // RFC 9754's `*_ATTRS_DELEG` types are reclaimed as the plain type (Linux
        // reclaims a delegation with timestamps so); the reply says which it got.
        (Claim::Previous(RECLAIM_WRITE | RECLAIM_WRITE_ATTRS), _) => true,
        (Claim::Previous(RECLAIM_READ | RECLAIM_READ_ATTRS), _) => false,
        (Claim::Null(_) | Claim::Fh, WANT_WRITE_DELEG) => true,
        (Claim::Null(_) | Claim::Fh, WANT_READ_DELEG) => false,
        // WANT_ANY_DELEG, WANT_NO_PREFERENCE: what the access asks for.
        (Claim::Null(_) | Claim::Fh, _) => access & ACCESS_WRITE != 0,
        // Other reclaims and opens under a delegation get no new delegation.
        _ if want == WANT_NO_PREFERENCE => return Deleg::None,
        _ => return Deleg::NoneExt(WND4_CONTENTION),
    };
    // §10.4: a write delegation only while no other client has the file open (its
    // I/O would conflict at once); the delegation table checks the rest.
    let grant = !want_write || !others_open(c, a, fileid);
    match grant
        .then(|| {
            c.state
                .delegations
                .try_grant_fh(c.clientid, fileid, fh, want_write)
        })
        .flatten()
    {
        Some((sid, true)) => Deleg::Write(sid),
        Some((sid, false)) => Deleg::Read(sid),
        None if want == WANT_NO_PREFERENCE => Deleg::None,
        None => Deleg::NoneExt(WND4_CONTENTION),
    }
}
