//! The pNFS metadata server (RFC 8881 §12, §18.40–§18.44) with the flexible files
//! layout (RFC 8435): LAYOUTGET, GETDEVICEINFO, LAYOUTCOMMIT and LAYOUTRETURN over the
//! layout table (`state::layouts`). GETDEVICELIST is `device_list.rs`.
//!
//! The data servers are the gateways on the same store, loosely coupled NFSv3 servers
//! (RFC 8435 §2.1) that all accept the same file handle: a layout names the file by
//! the handle the client already has (NFSv4's handles are the file model's, the
//! NFSv3 ones). A layout's data server credentials (ffds_user/ffds_group, §2.2) are
//! the file's synthetic ids at its current fence epoch (`crate::fence`): every data
//! server checks them and then acts as the file's owner; a revoked layout's file gets
//! a new epoch, so its old ids are refused (NFS3ERR_ACCES). On a store without
//! conditional writes (no fencing) they are the file's owner and group. Off (`[pnfs] enabled = false`), all
//! of these answer NFS4ERR_NOTSUPP, as when the server has no pNFS at all.
//!
//! Data servers the metadata server's probes find down are left out of layouts; with
//! none up LAYOUTGET is NFS4ERR_LAYOUTUNAVAILABLE, and the client does its I/O
//! through this server (RFC 8881 §18.43.3). Errors clients report in LAYOUTRETURN's
//! ff_layoutreturn4 (RFC 8435 §9.3) are counted against their data servers
//! (`layout_errors`, which also answers LAYOUTERROR and LAYOUTSTATS).
//!
//! After a restart (RFC 8881 §12.7.4) layouts are gone: LAYOUTGET is NFS4ERR_GRACE
//! while the grace period runs, and LAYOUTCOMMIT with loca_reclaim commits what a
//! client of the previous run wrote under a layout stateid it verifiably held for the
//! file (`state/layouts_reclaim.rs`); LAYOUTRETURN with lora_reclaim returns such a
//! layout (`reclaim_return`).

use super::file_ops::{cur_file, fs_err, ok_with, FileCtx};
use super::io_ops::need_reg;
use super::status::*;
use super::{put_status, Compound, CurrentFh, Full, OpResult};
use crate::fs::{NfsTime, SetAttr, SetTime};
use crate::state::layouts::{
    mask_of, Devices, LayoutFile, Layouts, IOMODE_ANY, IOMODE_READ, IOMODE_RW,
};
use crate::state::stateid::Stateid;
use crate::state::Conflict;
use engine::xdr::{XdrReader, XdrResult, XdrWriter};

/// layouttype4 LAYOUT4_FLEX_FILES (RFC 8435 §5).
pub const LAYOUT4_FLEX_FILES: u32 = 4;
/// NFS4_UINT64_MAX: "to the end of the file" (RFC 8881 §3.3.20).
const ALL: u64 = u64::MAX;
/// layoutreturn_type4 (RFC 8881 §18.44.1).
const RETURN_FILE: u32 = 1;
const RETURN_FSID: u32 = 2;
const RETURN_ALL: u32 = 3;
/// ff_flags4 (RFC 8435 §5.1): none set. In particular FF_FLAGS_NO_IO_THRU_MDS is
/// off, so a client may always fall back to I/O through this server.
const FF_FLAGS: u32 = 0;
/// The data servers speak NFSv3 (ffdv_version, ffdv_minorversion).
const DS_VERSION: u32 = 3;
/// Efficiency of the first mirror of a layout; later ones one less each (RFC 8435
/// §5.1: clients prefer the higher).
const EFFICIENCY: u32 = 100;

/// The largest LAYOUTGET4resok: the layout4 header and ff_layout4 with the most
/// mirrors (each its count of data servers) and the most data servers in all
/// (`layouts_stripe.rs`), each with the largest handle and owner strings of ten
/// digits; the COMPOUND's plan gives it `plan::PNFS_REPLY`.
pub const LAYOUT_MAX: usize = 4
    + 16
    + 4
    + 8
    + 8
    + 4
    + 4
    + 4
    + 8
    + 4
    + 4
    + 4
    + crate::config::MAX_READ_MIRRORS as usize * 4
    + crate::config::MAX_LAYOUT_SERVERS * (16 + 4 + 16 + 4 + 4 + super::FH4_MAX + 2 * (4 + 12));
const _: () = assert!(LAYOUT_MAX <= super::plan::PNFS_REPLY / 2);

/// The data servers, or NFS4ERR_NOTSUPP when this gateway is no metadata server.
pub(super) fn devices<'c>(c: &'c Compound) -> Result<&'c Devices, Nfsstat4> {
    c.state.layouts.devices().ok_or(NFS4ERR_NOTSUPP)
}

/// A byte range (offset, length) as RFC 8881 §18.43.3 accepts it: not empty, and
/// not past 2^64 unless its length is "to the end".
pub(super) fn range_ok(offset: u64, length: u64) -> bool {
    length != 0 && (length == ALL || offset.checked_add(length).is_some())
}

/// The current filehandle as a regular file, and the layout state key of it.
pub(super) fn layout_file(c: &Compound) -> Result<(FileCtx, LayoutFile), Nfsstat4> {
    let f = cur_file(c, NFS4ERR_ISDIR)?;
    need_reg(f.attr.kind)?;
    let lf = LayoutFile {
        clientid: c.clientid,
        fileid: f.node.fileid,
        fsid: f.attr.fsid,
        owner: 0,
    };
    Ok((f, lf))
}

/// LAYOUTGET4args (RFC 8881 §18.43.1).
struct GetArgs {
    layout_type: u32,
    iomode: u32,
    offset: u64,
    length: u64,
    minlength: u64,
    stateid: Stateid,
    maxcount: u32,
}

fn get_args(r: &mut XdrReader) -> XdrResult<GetArgs> {
    let _signal = r.bool()?;
    Ok(GetArgs {
        layout_type: r.u32()?,
        iomode: r.u32()?,
        offset: r.u64()?,
        length: r.u64()?,
        minlength: r.u64()?,
        stateid: Stateid::decode(r)?,
        maxcount: r.u32()?,
    })
}

/// LAYOUTGET (RFC 8881 §18.43): one flexfiles layout of the whole file. Every error
/// answer of a metadata server is counted (`nfsgw_pnfs_layoutget_errors_total`).
pub(super) fn layoutget(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let res = take_layout(c, r, w);
    if !matches!(res, Ok(NFS4_OK)) && c.state.layouts.devices().is_some() {
        c.state.layouts.get_failed();
    }
    res
}

fn take_layout(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(a) = get_args(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let checked = (|| -> Result<_, Nfsstat4> {
        let ds = devices(c)?;
        let (f, lf) = layout_file(c)?;
        check_get(&a)?;
        // §18.43.3: layouts are not kept across restarts, so none is granted while
        // the previous run's clients may still reclaim (§12.7.4).
        if c.state.clients.in_grace() {
            return Err(NFS4ERR_GRACE);
        }
        let lf = LayoutFile {
            owner: owner_of(c),
            ..lf
        };
        let sid = c.resolve_stateid(&a.stateid)?;
        let presented = layout_or_open(c, &sid, lf.fileid, a.iomode == IOMODE_RW)?;
        Ok((ds, f, lf, presented))
    })();
    let (ds, f, lf, presented) = match checked {
        Ok(v) => v,
        Err(st) => return put_status(w, st),
    };
    // §18.43.3: no data server up, no layout: the client's I/O goes through us.
    // Striped (RFC 8435 §6) only for a client whose implementation takes it, and RW
    // only where the store writes in place (`state/layouts_stripe.rs`).
    let up = c.state.layouts.health();
    let write = a.iomode == IOMODE_RW;
    let striped = ds.stripe.width > 1
        && ds
            .stripe
            .applies(c.state.clients.stripes(c.clientid), write);
    let placed = ds.layout_up(f.node.fileid, write, striped, |i| up.is_up(i));
    if placed.is_empty() {
        return put_status(w, NFS4ERR_LAYOUTUNAVAILABLE);
    }
    // `_in_flight` lives to the end: past `grant_on` below.
    let (ids, _in_flight) = match ds_ids(c.state, &f, write) {
        Ok(ids) => ids,
        // §18.43.3: LAYOUTTRYLATER carries logr_will_signal_layout_avail.
        Err(NFS4ERR_LAYOUTTRYLATER) => {
            let st = NFS4ERR_LAYOUTTRYLATER;
            return ok_or_full(st.put(w).and_then(|_| w.bool(false)), st);
        }
        Err(st) => return put_status(w, st),
    };
    let f = (&f, ids);
    // The ids of the placement's servers now: a server that goes down after this
    // is refused by `grant_on`, or its layout (granted first) is recalled before
    // the id's deletion is told (`state/layouts_notify.rs`).
    let mirrors: Vec<Vec<[u8; 16]>> = placed
        .iter()
        .filter_map(|m| {
            m.iter()
                .map(|i| c.state.layouts.device_id(*i))
                .collect::<Option<Vec<_>>>()
        })
        .collect();
    let handle = match &c.cfh {
        Some(CurrentFh::File { handle, .. }) => handle.as_slice(),
        _ => &[],
    };
    // §18.43.3: a layout larger than loga_maxcount is NFS4ERR_TOOSMALL, and nothing
    // is granted (measured with a stand-in stateid of the same size).
    let start = w.position();
    let fits = ok_with(w, |w| {
        put_layout(w, (ds, &mirrors), (f, handle), &a, &Stateid::ANONYMOUS)
    });
    let len = w.position() - start;
    w.rewind(start);
    fits?;
    if len - 4 > a.maxcount as usize {
        return put_status(w, NFS4ERR_TOOSMALL);
    }
    let lease = c.state.delegations.lease();
    let servers = mask_of(&placed.concat());
    let grant = c
        .state
        .layouts
        .grant_on(lf, handle, presented.as_ref(), a.iomode, lease, servers);
    let lsid = match grant {
        Ok(s) => s,
        // §18.43.3: LAYOUTTRYLATER carries logr_will_signal_layout_avail.
        Err(crate::state::StateError::Resource) => {
            let st = NFS4ERR_LAYOUTTRYLATER;
            return ok_or_full(st.put(w).and_then(|_| w.bool(false)), st);
        }
        Err(e) => return put_status(w, from_state(e)),
    };
    let res = ok_with(w, |w| put_layout(w, (ds, &mirrors), (f, handle), &a, &lsid))?;
    c.current_stateid = Some(lsid);
    Ok(res)
}

/// The digest of the client's owner a new layout stateid is bound to.
fn owner_of(c: &Compound) -> u64 {
    c.state
        .clients
        .owner_of(c.clientid)
        .map_or(0, |o| crate::state::layouts::owner_digest(&o))
}

/// LAYOUTCOMMIT with loca_reclaim (RFC 8881 §18.42.3, §12.7.4): only in the grace
/// period, by a client of the previous run that has not sent RECLAIM_COMPLETE
/// (NFS4ERR_NO_GRACE / NFS4ERR_RECLAIM_BAD as for other reclaims), under a layout
/// stateid the server gave this client for this file (`state/layouts_reclaim.rs`),
/// else NFS4ERR_RECLAIM_BAD.
fn check_reclaim(c: &Compound, lf: LayoutFile, s: &Stateid) -> Result<(), Nfsstat4> {
    super::state_ops::reclaim_allowed(c)?;
    let lf = LayoutFile {
        owner: owner_of(c),
        ..lf
    };
    if !c.state.layouts.reclaimable(lf, s) {
        return Err(NFS4ERR_RECLAIM_BAD);
    }
    Ok(())
}

/// The AUTH_SYS (uid, gid) a layout of `f` gives for the data servers (RFC 8435
/// §2.2, §5.1): the synthetic pair of the file's fence epoch read from the store now
/// (not cached: a layout granted after a fence must carry the new pair) and of its
/// data generation (`state/layouts_gen.rs`: moved when data written through an RW
/// layout, or any change of the attributes, may have landed since the last grant;
/// a data server that has not seen it drops its caches of the file first), or the
/// owner's when fencing is off. A store that cannot answer: NFS4ERR_DELAY.
/// The layout's data-server credentials, and (for an RW layout under the fence) the
/// data generation's in-flight mark, to be dropped after `grant_on`
/// (`state/layouts_gen.rs`).
fn ds_ids<'s>(
    state: &'s crate::state::State,
    f: &FileCtx,
    write: bool,
) -> Result<
    (
        (u32, u32),
        Option<crate::state::layouts::DataGenPending<'s>>,
    ),
    Nfsstat4,
> {
    let Some(fence) = state.layouts.fence() else {
        return Ok(((f.attr.uid, f.attr.gid), None));
    };
    let epoch = fence.read(f.node.fileid).map_err(|e| {
        tracing::warn!(error = %e, "LAYOUTGET: cannot read the file's fence epoch");
        NFS4ERR_DELAY
    })?;
    let (gen, pending) = state.layouts.data_gen(f.node.fileid, &f.attr, write);
    // At a boot epoch the store says a layout may exist at before one does, so a
    // restart after it waits for its ids to be fenced (`fence_boot.rs`).
    let ids = fence.grant_ids(f.node.fileid, epoch, gen).map_err(|e| {
        tracing::warn!(error = %e, "LAYOUTGET: cannot mark the boot epoch used");
        NFS4ERR_DELAY
    })?;
    // Another gateway moved the boot epoch: no grant for a window (`fence_boot.rs`).
    let ids = ids.ok_or(NFS4ERR_LAYOUTTRYLATER)?;
    Ok((ids, pending))
}

/// Before a truncate, REMOVE or RENAME over `fileid` (RFC 8881 §12.5.5): the other
/// clients' layouts of it are recalled (CB_LAYOUTRECALL, `state/layouts_recall.rs`);
/// NFS4ERR_DELAY until they are returned or revoked. Free while no layout is held.
pub(super) fn recall_conflicts(c: &Compound, fileid: u64) -> Result<(), Nfsstat4> {
    let st = &c.state;
    let lease = st.delegations.lease();
    if st
        .layouts
        .break_conflicts(fileid, Some(c.clientid), lease, &st.delegations.inbox)
    {
        Ok(())
    } else {
        Err(NFS4ERR_DELAY)
    }
}

fn ok_or_full(r: XdrResult<()>, st: Nfsstat4) -> OpResult {
    r.map(|_| st).map_err(|_| Full)
}

/// The arguments' own checks (§18.43.3): the type, the iomode (ANY is for returns
/// only), and ranges that are neither empty nor past 2^64.
fn check_get(a: &GetArgs) -> Result<(), Nfsstat4> {
    if a.layout_type != LAYOUT4_FLEX_FILES {
        return Err(NFS4ERR_UNKNOWN_LAYOUTTYPE);
    }
    if a.iomode != IOMODE_READ && a.iomode != IOMODE_RW {
        return Err(NFS4ERR_BADIOMODE);
    }
    let min_ok = a.minlength == 0 || range_ok(a.offset, a.minlength);
    if !range_ok(a.offset, a.length) || !min_ok || a.length < a.minlength {
        return Err(NFS4ERR_INVAL);
    }
    Ok(())
}

/// The stateid LAYOUTGET was sent with (§12.5.3): this client's layout stateid of
/// the file (returned), or an open, lock or delegation stateid that allows the I/O
/// (`None`); special stateids are NFS4ERR_BAD_STATEID.
fn layout_or_open(
    c: &Compound,
    sid: &Stateid,
    fileid: u64,
    write: bool,
) -> Result<Option<Stateid>, Nfsstat4> {
    if Layouts::owns(sid) {
        return Ok(Some(*sid));
    }
    if sid.other == Stateid::ANONYMOUS.other || sid.other == Stateid::BYPASS.other {
        return Err(NFS4ERR_BAD_STATEID);
    }
    c.state.check_io(c.clientid, sid, fileid, write)?;
    Ok(None)
}

/// LAYOUTGET4resok (§18.43.2) holding one layout4 of `ff_layout4` (RFC 8435 §5.1):
/// `mirrors`, each the device ids of its data servers (several: striped, RFC 8435 §6,
/// ffl_stripe_unit the unit).
fn put_layout(
    w: &mut XdrWriter,
    (ds, mirrors): (&Devices, &[Vec<[u8; 16]>]),
    ((_, ids), handle): ((&FileCtx, (u32, u32)), &[u8]),
    a: &GetArgs,
    lsid: &Stateid,
) -> XdrResult<()> {
    // logr_return_on_close (RFC 8881 §18.43.3, §12.5.3): the client gives the layout
    // back with its last CLOSE, so a later OPEN takes a new one, which carries the
    // data generation of then (`ds_ids`): a reader never meets a data server's
    // caches of before another client's close through an old layout.
    w.bool(true)?;
    lsid.encode(w)?;
    w.u32(1)?;
    w.u64(0)?;
    w.u64(ALL)?;
    w.u32(a.iomode)?;
    w.u32(LAYOUT4_FLEX_FILES)?;
    let len_at = w.reserve_u32()?;
    let body = w.position();
    w.u64(u64::from(ds.stripe_unit))?;
    w.u32(mirrors.len() as u32)?;
    for (k, d) in mirrors.iter().enumerate() {
        put_mirror(w, d, ids, handle, EFFICIENCY.saturating_sub(k as u32))?;
    }
    w.u32(FF_FLAGS)?;
    w.u32(0)?; // ffl_stats_collect_hint: none, the client reports at its own pace
    let len = w.position() - body;
    w.patch_u32(len_at, len as u32);
    Ok(())
}

/// ff_mirror4 (RFC 8435 §5.1): an ff_data_server4 per device, in stripe order, each
/// with the anonymous stateid (a loosely coupled data server has no NFSv4 state), the
/// file's handle (every data server serves the one object under the one handle), and
/// the AUTH_SYS credentials the client uses with the data servers (`ds_ids`).
fn put_mirror(
    w: &mut XdrWriter,
    devices: &[[u8; 16]],
    (uid, gid): (u32, u32),
    handle: &[u8],
    eff: u32,
) -> XdrResult<()> {
    w.u32(devices.len() as u32)?;
    for deviceid in devices {
        w.opaque_fixed(deviceid)?;
        w.u32(eff)?;
        Stateid::ANONYMOUS.encode(w)?;
        w.u32(1)?;
        w.opaque_var(handle)?;
        super::attrs::put_id(w, uid)?;
        super::attrs::put_id(w, gid)?;
    }
    Ok(())
}

/// GETDEVICEINFO (RFC 8881 §18.40): a data server's ff_device_addr4 (RFC 8435
/// §5.1): its one netaddr4 and NFSv3 with the configured rsize and wsize, loosely
/// coupled. A client that asks for NOTIFY_DEVICEID4_DELETE (gdia_notify_types) is
/// told of the id's deletion when the server goes down (CB_NOTIFY_DEVICEID,
/// §20.12; `state/layouts_notify.rs` says why DELETE and not CHANGE), and the reply's
/// gdir_notification says so; CHANGE is never sent, so never promised. A deleted
/// id, like one never issued, is NFS4ERR_NOENT.
pub(super) fn getdeviceinfo(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let id: [u8; 16] = match r.opaque_fixed(16).map(|b| b.try_into().expect("16")) {
        Ok(id) => id,
        Err(_) => return put_status(w, NFS4ERR_BADXDR),
    };
    let (Ok(layout_type), Ok(maxcount), Ok((notify, _))) =
        (r.u32(), r.u32(), super::attrs::get_bitmap(r))
    else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let found = (|| {
        let ds = devices(c)?;
        if layout_type != LAYOUT4_FLEX_FILES {
            return Err(NFS4ERR_UNKNOWN_LAYOUTTYPE);
        }
        let (i, gen) = c.state.layouts.find_device(&id).ok_or(NFS4ERR_NOENT)?;
        Ok((ds, (i, gen, ds.servers[i])))
    })();
    let (ds, (i, gen, d)) = match found {
        Ok(v) => v,
        Err(st) => return put_status(w, st),
    };
    let start = w.position();
    let res = ok_with(w, |w| {
        w.u32(LAYOUT4_FLEX_FILES)?;
        let len_at = w.reserve_u32()?;
        let body = w.position();
        w.u32(1)?;
        w.string(d.netid().as_bytes())?;
        w.string(d.uaddr().as_bytes())?;
        w.u32(1)?;
        for v in [DS_VERSION, 0, ds.rsize, ds.wsize] {
            w.u32(v)?;
        }
        w.bool(false)?; // ffdv_tightly_coupled
        let len = w.position() - body;
        w.patch_u32(len_at, len as u32);
        Ok(())
    })?;
    // §18.40.3: the device_addr4 must fit gdia_maxcount (0: no limit), else
    // NFS4ERR_TOOSMALL with the size it needs.
    let need = w.position() - start - 4;
    if maxcount != 0 && need > maxcount as usize {
        w.rewind(start);
        return ok_or_full(
            NFS4ERR_TOOSMALL.put(w).and_then(|_| w.u32(need as u32)),
            NFS4ERR_TOOSMALL,
        );
    }
    // gdir_notification: what will be sent of what was asked (bitmap word 0).
    let will = c.state.layouts.watch(c.clientid, i, gen, notify.0[0]);
    let bits = if will == 0 { &[][..] } else { &[will][..] };
    ok_or_full(
        w.u32(bits.len() as u32)
            .and_then(|_| bits.iter().try_for_each(|b| w.u32(*b))),
        res,
    )
}

/// LAYOUTCOMMIT4args (RFC 8881 §18.42.1).
struct CommitArgs {
    offset: u64,
    length: u64,
    reclaim: bool,
    stateid: Stateid,
    last_write: Option<u64>,
    mtime: Option<NfsTime>,
    layout_type: u32,
}

fn commit_args(r: &mut XdrReader) -> XdrResult<CommitArgs> {
    let (offset, length, reclaim, stateid) = (r.u64()?, r.u64()?, r.bool()?, Stateid::decode(r)?);
    let last_write = if r.bool()? { Some(r.u64()?) } else { None };
    let mtime = if r.bool()? {
        Some(NfsTime {
            sec: r.i64()?,
            nsec: r.u32()?,
        })
    } else {
        None
    };
    let layout_type = r.u32()?;
    // lou_body: flexfiles sends none (RFC 8435 §7); read past what a client sends.
    r.opaque_var(64 << 10)?;
    Ok(CommitArgs {
        offset,
        length,
        reclaim,
        stateid,
        last_write,
        mtime,
        layout_type,
    })
}

/// LAYOUTCOMMIT (RFC 8881 §18.42): what the client wrote through the data servers
/// becomes visible here at once. The data servers already hold the bytes (a
/// flexfiles client commits there first, RFC 8435 §7), so this sets what only the
/// metadata server decides: the size grows to `last_write_offset + 1` when that is
/// beyond the file's end — also when no data server wrote that far: the gap reads as
/// zeros, as after a SETATTR of the size — and time_modify takes the client's
/// loca_time_modify as `commit_mtime` rules. It never shrinks a file. A last write
/// offset outside the committed range, or past the largest file, is NFS4ERR_INVAL.
pub(super) fn layoutcommit(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(a) = commit_args(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    match commit(c, &a) {
        Ok(size) => ok_with(w, |w| {
            w.bool(size.is_some())?;
            match size {
                Some(s) => w.u64(s),
                None => Ok(()),
            }
        }),
        Err(st) => put_status(w, st),
    }
}

/// LAYOUTCOMMIT's checks and change; the new size when it changed.
fn commit(c: &Compound, a: &CommitArgs) -> Result<Option<u64>, Nfsstat4> {
    devices(c)?;
    let (f, lf) = layout_file(c)?;
    if a.layout_type != LAYOUT4_FLEX_FILES {
        return Err(NFS4ERR_UNKNOWN_LAYOUTTYPE);
    }
    if !range_ok(a.offset, a.length.max(1)) {
        return Err(NFS4ERR_INVAL);
    }
    // An nfstime4 that is no time (§3.3.1) is refused before any state is looked at.
    if a.mtime.is_some_and(|t| !time_ok(t)) {
        return Err(NFS4ERR_INVAL);
    }
    if a.reclaim {
        // §18.42.3: a layout the restart lost; it stays lost (a reclaim grants none).
        check_reclaim(c, lf, &a.stateid)?;
        // The stateid does not say whether that layout was RW (READ and RW share one
        // per client and file), and only data written under an RW layout is
        // committed: the caller must be one an RW layout is given to, by the mode
        // bits as at OPEN for writing (§18.16.3).
        crate::fs::access::check_open(&f.attr, &f.caller, false, true).map_err(fs_err)?;
    } else {
        let sid = c.resolve_stateid(&a.stateid)?;
        c.state.layouts.check_commit(lf, &sid)?;
    }
    let new_size = match a.last_write {
        None => None,
        Some(last) => Some(new_size(a, last)?),
    };
    let grow = new_size.filter(|s| *s > f.attr.size);
    let mtime = commit_mtime(a.mtime, f.attr.mtime, NfsTime::now());
    if grow.is_none() && mtime.is_none() {
        return Ok(None);
    }
    let others = Some(c.clientid);
    if !c
        .state
        .delegations
        .break_conflicts(f.node.fileid, others, Conflict::Write)
    {
        return Err(NFS4ERR_DELAY);
    }
    let set = SetAttr {
        size: grow,
        mtime: mtime.map_or(SetTime::DontChange, SetTime::Client),
        ..Default::default()
    };
    c.ctx.model.setattr(&f.node, &set).map_err(fs_err)?;
    Ok(grow)
}

/// Whether an nfstime4 is a time (RFC 8881 §3.3.1: nseconds below 10^9; the least
/// int64 second is refused as SETATTR refuses it).
fn time_ok(t: NfsTime) -> bool {
    t.nsec < 1_000_000_000 && t.sec != i64::MIN
}

/// The time_modify a LAYOUTCOMMIT sets (RFC 8881 §18.42.3): the server may use the
/// client's loca_time_modify or the time of the LAYOUTCOMMIT, and must not let the
/// time flow backwards. So the client's time is taken when it is newer than the
/// file's (`current`); one past this server's clock (`now`) is clamped to `now` (a
/// client's clock ahead, or a hostile time far in the future: no file is stamped
/// later than the moment it was committed); one not newer changes nothing (the data
/// servers' writes already moved the time). `None`: leave time_modify.
pub(super) fn commit_mtime(
    given: Option<NfsTime>,
    current: NfsTime,
    now: NfsTime,
) -> Option<NfsTime> {
    let t = given?.min(now);
    (t > current).then_some(t)
}

/// The size a last write offset implies, inside the committed range and the largest
/// file (§18.42.3).
fn new_size(a: &CommitArgs, last: u64) -> Result<u64, Nfsstat4> {
    let end = if a.length == ALL {
        u64::MAX
    } else {
        a.offset.saturating_add(a.length)
    };
    if last < a.offset || last >= end || last >= super::attrs::MAX_FILE_SIZE {
        return Err(NFS4ERR_INVAL);
    }
    Ok(last + 1)
}

/// LAYOUTRETURN (RFC 8881 §18.44) of one file's layouts, a file system's or all.
pub(super) fn layoutreturn(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(reclaim), Ok(layout_type), Ok(iomode), Ok(kind)) =
        (r.bool(), r.u32(), r.u32(), r.u32())
    else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let mut body: &[u8] = &[];
    let file = if kind == RETURN_FILE {
        let (Ok(offset), Ok(length), Ok(sid), Ok(b)) =
            (r.u64(), r.u64(), Stateid::decode(r), r.opaque_var(64 << 10))
        else {
            return put_status(w, NFS4ERR_BADXDR);
        };
        body = b;
        Some((offset, length, sid))
    } else {
        None
    };
    let res = (|| {
        devices(c)?;
        if layout_type != LAYOUT4_FLEX_FILES {
            return Err(NFS4ERR_UNKNOWN_LAYOUTTYPE);
        }
        if !(IOMODE_READ..=IOMODE_ANY).contains(&iomode) {
            return Err(NFS4ERR_BADIOMODE);
        }
        if reclaim {
            return reclaim_return(c, kind, file).map(|_| None);
        }
        // The layout's last I/O reports, before the return may end it: its
        // ff_iostats4 counts the increase only, and a LAYOUTSTATS meanwhile is not
        // counted (`state/layouts_stats.rs`).
        let seen = match file {
            Some((_, _, s)) => c.state.layouts.closing_io(&s.other),
            None => Vec::new(),
        };
        let given = give_back(c, kind, iomode, file);
        if let Some((_, _, s)) = file {
            c.state.layouts.reopen_io(&s.other);
        }
        let sid = given?;
        // RFC 8435 §9.3: the body reports the errors the client met at data
        // servers while it held the layout (a hint: counted, probed) — only from a
        // return that was accepted, so a forged stateid counts nothing.
        let held = match (sid, layout_file(c)) {
            (Some(s), Ok((_, lf))) => Some((lf, s)),
            _ => None,
        };
        super::layout_errors::returned_errors(c, body, &seen, held);
        Ok(sid)
    })();
    match res {
        Ok(sid) => ok_with(w, |w| {
            w.bool(sid.is_some())?;
            sid.map_or(Ok(()), |s| s.encode(w))
        }),
        Err(st) => put_status(w, st),
    }
}

/// LAYOUTRETURN with lora_reclaim (RFC 8881 §18.44.3): a layout the metadata
/// server's previous instance granted, returned in the grace period. Layouts are not
/// kept across restarts, so there is nothing to free: the return is accepted when it
/// could be a reclaim — in the grace period, by a client of the previous run that has
/// not sent RECLAIM_COMPLETE (else NFS4ERR_NO_GRACE as for every reclaim,
/// `reclaim_allowed`), of one file (§18.44.3: lora_reclaim MUST be false with
/// LAYOUTRETURN4_FSID and _ALL: NFS4ERR_INVAL), under a layout stateid the server
/// gave this client for this file (`state/layouts_reclaim.rs`'s MAC). A stateid that
/// does not verify is NFS4ERR_BAD_STATEID (RECLAIM_BAD is not among LAYOUTRETURN's
/// errors, §15.2). The reply carries no stateid: none is left.
fn reclaim_return(
    c: &Compound,
    kind: u32,
    file: Option<(u64, u64, Stateid)>,
) -> Result<(), Nfsstat4> {
    // §18.44.3: lora_reclaim with a return type other than FILE is NFS4ERR_INVAL,
    // in grace or not, so the arguments are judged before the grace period.
    let (RETURN_FILE, Some((offset, length, sid))) = (kind, file) else {
        return Err(NFS4ERR_INVAL);
    };
    if !range_ok(offset, length) {
        return Err(NFS4ERR_INVAL);
    }
    super::state_ops::reclaim_allowed(c).map_err(|st| {
        if st == NFS4ERR_RECLAIM_BAD {
            NFS4ERR_NO_GRACE
        } else {
            st
        }
    })?;
    let (_, lf) = layout_file(c)?;
    let lf = LayoutFile {
        owner: owner_of(c),
        ..lf
    };
    if !c.state.layouts.reclaimable(lf, &sid) {
        return Err(NFS4ERR_BAD_STATEID);
    }
    Ok(())
}

fn give_back(
    c: &mut Compound,
    kind: u32,
    iomode: u32,
    file: Option<(u64, u64, Stateid)>,
) -> Result<Option<Stateid>, Nfsstat4> {
    match (kind, file) {
        (RETURN_FILE, Some((offset, length, sid))) => {
            if !range_ok(offset, length) {
                return Err(NFS4ERR_INVAL);
            }
            let (_, lf) = layout_file(c)?;
            let sid = c.resolve_stateid(&sid)?;
            let left = c.state.layouts.give_back(lf, &sid, iomode)?;
            if let Some(s) = left {
                c.current_stateid = Some(s);
            }
            Ok(left)
        }
        (RETURN_FSID, _) => {
            // Any object of the export names its file system, a directory too.
            let f = cur_file(c, NFS4ERR_INVAL)?;
            c.state.layouts.give_back_all(c.clientid, Some(f.attr.fsid));
            Ok(None)
        }
        (RETURN_ALL, _) => {
            c.state.layouts.give_back_all(c.clientid, None);
            Ok(None)
        }
        _ => Err(NFS4ERR_INVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(sec: i64, nsec: u32) -> NfsTime {
        NfsTime { sec, nsec }
    }

    /// RFC 8881 §18.42.3: time_modify never flows backwards, and a LAYOUTCOMMIT never
    /// stamps a file later than its own time.
    #[test]
    fn commit_mtime_goes_forward_only_and_never_past_now() {
        let (cur, now) = (t(100, 5), t(200, 0));
        assert_eq!(commit_mtime(None, cur, now), None);
        assert_eq!(commit_mtime(Some(t(150, 1)), cur, now), Some(t(150, 1)));
        assert_eq!(commit_mtime(Some(t(100, 6)), cur, now), Some(t(100, 6)));
        for old in [t(100, 5), t(100, 4), t(-5, 0), t(i64::MIN + 1, 0)] {
            assert_eq!(commit_mtime(Some(old), cur, now), None, "{old:?}");
        }
        for ahead in [t(200, 1), t(i64::MAX, 999_999_999)] {
            assert_eq!(commit_mtime(Some(ahead), cur, now), Some(now), "{ahead:?}");
        }
        // A file already stamped ahead of this server's clock keeps its time.
        assert_eq!(commit_mtime(Some(t(300, 0)), t(250, 0), now), None);
        assert!(!time_ok(t(1, 1_000_000_000)) && !time_ok(t(i64::MIN, 0)));
        assert!(time_ok(t(-1, 999_999_999)));
    }
}
