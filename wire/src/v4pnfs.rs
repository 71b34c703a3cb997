//! pNFS as a client speaks it (RFC 8881 §18.40–§18.44) with the flexible files
//! layout (RFC 8435 §5): the operations' arguments ([`Ops`] methods and the writers
//! they use) and the results a client reads back — LAYOUTGET's layouts, an
//! `ff_layout4`, GETDEVICEINFO's `ff_device_addr4`, LAYOUTRETURN's and LAYOUTCOMMIT's
//! results. Every length is checked against its bound; malformed bytes are an
//! [`XdrError`], never a panic.

use crate::nfs4::*;
use crate::nfs4args::{LAYOUT4_FLEX_FILES, NOTIFY_DEVICEID4_CHANGE, NOTIFY_DEVICEID4_DELETE};
use crate::v4call::Ops;
use crate::v4op;
use engine::xdr::{XdrError, XdrReader, XdrResult, XdrWriter};

/// LAYOUTGET4args (§18.43.1) as given, so tests can also send what a server refuses.
#[derive(Debug, Clone, Copy)]
pub struct LayoutGet {
    pub layout_type: u32,
    pub iomode: u32,
    pub offset: u64,
    pub length: u64,
    pub minlength: u64,
    pub stateid: [u8; 16],
    pub maxcount: u32,
}

/// LAYOUTCOMMIT4args (§18.42.1); `mtime` is (seconds, nanoseconds).
#[derive(Debug, Clone, Copy)]
pub struct LayoutCommit {
    pub offset: u64,
    pub length: u64,
    pub reclaim: bool,
    pub stateid: [u8; 16],
    pub last_write: Option<u64>,
    pub mtime: Option<(i64, u32)>,
    pub layout_type: u32,
}

/// layoutreturn4 (§18.44.1): one file's range under a layout stateid, or bulk.
#[derive(Debug, Clone, Copy)]
pub enum Return {
    File {
        offset: u64,
        length: u64,
        stateid: [u8; 16],
    },
    Fsid,
    All,
}

/// LAYOUTGET (§18.43.1).
pub fn layoutget(w: &mut XdrWriter, a: &LayoutGet) -> XdrResult<()> {
    w.u32(OP_LAYOUTGET)?;
    w.bool(false)?; // loga_signal_layout_avail
    w.u32(a.layout_type)?;
    w.u32(a.iomode)?;
    w.u64(a.offset)?;
    w.u64(a.length)?;
    w.u64(a.minlength)?;
    w.opaque_fixed(&a.stateid)?;
    w.u32(a.maxcount)
}

/// GETDEVICEINFO (§18.40.1): device id, layout type, maxcount, notification types.
pub fn getdeviceinfo(
    w: &mut XdrWriter,
    id: &[u8; 16],
    layout_type: u32,
    maxcount: u32,
    notify: &[u32],
) -> XdrResult<()> {
    w.u32(OP_GETDEVICEINFO)?;
    w.opaque_fixed(id)?;
    w.u32(layout_type)?;
    w.u32(maxcount)?;
    v4op::bitmap(w, notify)
}

/// LAYOUTCOMMIT (§18.42.1), with an empty layoutupdate4 body (RFC 8435 §7).
pub fn layoutcommit(w: &mut XdrWriter, a: &LayoutCommit) -> XdrResult<()> {
    w.u32(OP_LAYOUTCOMMIT)?;
    w.u64(a.offset)?;
    w.u64(a.length)?;
    w.bool(a.reclaim)?;
    w.opaque_fixed(&a.stateid)?;
    w.bool(a.last_write.is_some())?;
    if let Some(o) = a.last_write {
        w.u64(o)?;
    }
    w.bool(a.mtime.is_some())?;
    if let Some((s, ns)) = a.mtime {
        w.i64(s)?;
        w.u32(ns)?;
    }
    w.u32(a.layout_type)?;
    w.opaque_var(&[])
}

/// LAYOUTRETURN (§18.44.1), with an empty lrf_body for a file.
pub fn layoutreturn(w: &mut XdrWriter, layout_type: u32, iomode: u32, r: &Return) -> XdrResult<()> {
    layoutreturn_as(w, false, layout_type, iomode, r)
}

/// LAYOUTRETURN (§18.44.1) with lora_reclaim as given (true: a layout the metadata
/// server's previous instance granted, returned in its grace period, §18.44.3).
pub fn layoutreturn_as(
    w: &mut XdrWriter,
    reclaim: bool,
    layout_type: u32,
    iomode: u32,
    r: &Return,
) -> XdrResult<()> {
    w.u32(OP_LAYOUTRETURN)?;
    w.bool(reclaim)?;
    w.u32(layout_type)?;
    w.u32(iomode)?;
    match r {
        Return::File {
            offset,
            length,
            stateid,
        } => {
            w.u32(1)?;
            w.u64(*offset)?;
            w.u64(*length)?;
            w.opaque_fixed(stateid)?;
            w.opaque_var(&[])
        }
        Return::Fsid => w.u32(2),
        Return::All => w.u32(3),
    }
}

/// GETDEVICELIST (RFC 8881 §18.41.1): layout type, gdla_maxdevices, the cursor
/// (gdla_cookie, gdla_cookieverf).
pub fn getdevicelist(
    w: &mut XdrWriter,
    layout_type: u32,
    maxdevices: u32,
    cookie: u64,
    verf: &[u8; 8],
) -> XdrResult<()> {
    w.u32(OP_GETDEVICELIST)?;
    w.u32(layout_type)?;
    w.u32(maxdevices)?;
    w.u64(cookie)?;
    w.opaque_fixed(verf)
}

/// device_error4 (RFC 7862 §15.6.1): a device, the status the client got there and
/// the operation that got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceError {
    pub deviceid: [u8; 16],
    pub status: u32,
    pub opnum: u32,
}

fn device_errors(w: &mut XdrWriter, errors: &[DeviceError]) -> XdrResult<()> {
    w.u32(errors.len() as u32)?;
    for e in errors {
        w.opaque_fixed(&e.deviceid)?;
        w.u32(e.status)?;
        w.u32(e.opnum)?;
    }
    Ok(())
}

/// LAYOUTERROR (RFC 7862 §15.6.1, NFSv4.2): range, layout stateid, device_error4<>.
pub fn layouterror(
    w: &mut XdrWriter,
    (offset, length): (u64, u64),
    stateid: &[u8; 16],
    errors: &[DeviceError],
) -> XdrResult<()> {
    w.u32(OP_LAYOUTERROR)?;
    w.u64(offset)?;
    w.u64(length)?;
    w.opaque_fixed(stateid)?;
    device_errors(w, errors)
}

/// LAYOUTSTATS (RFC 7862 §15.7.1, NFSv4.2): range, layout stateid, read and write
/// io_info4 (count, bytes), the device, and a flexfiles layoutupdate4 with `body`.
pub fn layoutstats(
    w: &mut XdrWriter,
    (offset, length): (u64, u64),
    stateid: &[u8; 16],
    (read, write): ((u64, u64), (u64, u64)),
    deviceid: &[u8; 16],
    body: &[u8],
) -> XdrResult<()> {
    w.u32(OP_LAYOUTSTATS)?;
    w.u64(offset)?;
    w.u64(length)?;
    w.opaque_fixed(stateid)?;
    for v in [read.0, read.1, write.0, write.1] {
        w.u64(v)?;
    }
    w.opaque_fixed(deviceid)?;
    w.u32(LAYOUT4_FLEX_FILES)?;
    w.opaque_var(body)
}

/// An ff_layoutreturn4 (RFC 8435 §9.3) for LAYOUTRETURN's lrf_body: one ff_ioerr4
/// (§9.1.1) per (offset, length, stateid, errors), and no ff_iostats4.
pub fn ff_layoutreturn(ioerrs: &[(u64, u64, [u8; 16], Vec<DeviceError>)]) -> Vec<u8> {
    ff_layoutreturn_with(ioerrs, &[])
}

/// One ff_iostats4 (RFC 8435 §9.2.1) as a test sends it: the device and the READs and
/// WRITEs done through it, each (operations, bytes); the rest of the entry (range,
/// stateid, ff_layoutupdate4) is filled with plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoStats {
    pub deviceid: [u8; 16],
    pub read: (u64, u64),
    pub write: (u64, u64),
}

/// An ff_layoutreturn4 with `ioerrs` and `iostats` (fflr_iostats_report<>).
pub fn ff_layoutreturn_with(
    ioerrs: &[(u64, u64, [u8; 16], Vec<DeviceError>)],
    iostats: &[IoStats],
) -> Vec<u8> {
    // ff_iostats4: 80 bytes to the layoutupdate, which is "tcp", a 13-byte address,
    // an empty handle, two ff_io_latency4 (64 each), a duration and a bool.
    const IOSTATS: usize = 80 + 8 + 20 + 4 + 2 * 64 + 12 + 4;
    let room =
        8 + ioerrs.iter().map(|e| 40 + 24 * e.3.len()).sum::<usize>() + IOSTATS * iostats.len();
    let mut buf = vec![0u8; room];
    let mut w = XdrWriter::new(&mut buf);
    let ok: XdrResult<()> = (|| {
        w.u32(ioerrs.len() as u32)?;
        for (offset, length, stateid, errors) in ioerrs {
            w.u64(*offset)?;
            w.u64(*length)?;
            w.opaque_fixed(stateid)?;
            device_errors(&mut w, errors)?;
        }
        w.u32(iostats.len() as u32)?;
        for s in iostats {
            w.u64(0)?;
            w.u64(u64::MAX)?;
            w.opaque_fixed(&[0; 16])?;
            for v in [s.read.0, s.read.1, s.write.0, s.write.1] {
                w.u64(v)?;
            }
            w.opaque_fixed(&s.deviceid)?;
            w.string(b"tcp")?;
            w.string(b"127.0.0.1.8.1")?;
            w.opaque_var(&[])?;
            for _ in 0..2 {
                for _ in 0..5 {
                    w.u64(0)?;
                }
                for _ in 0..2 {
                    w.i64(0)?;
                    w.u32(0)?;
                }
            }
            w.i64(1)?;
            w.u32(0)?;
            w.bool(false)?;
        }
        Ok(())
    })();
    ok.expect("sized above");
    let n = w.position();
    buf.truncate(n);
    buf
}

/// LAYOUTRETURN4_FILE (§18.44.1) carrying `body` as lrf_body (`ff_layoutreturn`).
pub fn layoutreturn_file_body(
    w: &mut XdrWriter,
    iomode: u32,
    (offset, length): (u64, u64),
    stateid: &[u8; 16],
    body: &[u8],
) -> XdrResult<()> {
    w.u32(OP_LAYOUTRETURN)?;
    w.bool(false)?; // lora_reclaim
    w.u32(LAYOUT4_FLEX_FILES)?;
    w.u32(iomode)?;
    w.u32(1)?; // LAYOUTRETURN4_FILE
    w.u64(offset)?;
    w.u64(length)?;
    w.opaque_fixed(stateid)?;
    w.opaque_var(body)
}

impl Ops {
    pub fn layouterror(self, stateid: &[u8; 16], errors: &[DeviceError]) -> Ops {
        self.op(24 * errors.len(), |w| {
            layouterror(w, (0, u64::MAX), stateid, errors)
        })
    }

    pub fn layoutstats(self, stateid: &[u8; 16], deviceid: &[u8; 16]) -> Ops {
        self.layoutstats_io(stateid, deviceid, (1, 4096), (0, 0))
    }

    /// LAYOUTSTATS of the whole file reporting `read` and `write` (operations,
    /// bytes: io_info4) through `deviceid`, with an empty layoutupdate body.
    pub fn layoutstats_io(
        self,
        stateid: &[u8; 16],
        deviceid: &[u8; 16],
        read: (u64, u64),
        write: (u64, u64),
    ) -> Ops {
        self.op(0, |w| {
            layoutstats(w, (0, u64::MAX), stateid, (read, write), deviceid, &[])
        })
    }

    pub fn layoutreturn_file_body(self, iomode: u32, stateid: &[u8; 16], body: &[u8]) -> Ops {
        self.op(body.len(), |w| {
            layoutreturn_file_body(w, iomode, (0, u64::MAX), stateid, body)
        })
    }

    pub fn layoutget(self, a: &LayoutGet) -> Ops {
        self.op(0, |w| layoutget(w, a))
    }

    pub fn getdeviceinfo(self, id: &[u8; 16], layout_type: u32, maxcount: u32) -> Ops {
        self.op(0, |w| getdeviceinfo(w, id, layout_type, maxcount, &[]))
    }

    /// GETDEVICEINFO asking for the notifications of `notify` (gdia_notify_types,
    /// bitmap words).
    pub fn getdeviceinfo_notify(self, id: &[u8; 16], layout_type: u32, notify: &[u32]) -> Ops {
        self.op(4 * notify.len(), |w| {
            getdeviceinfo(w, id, layout_type, 0, notify)
        })
    }

    pub fn layoutcommit(self, a: &LayoutCommit) -> Ops {
        self.op(0, |w| layoutcommit(w, a))
    }

    pub fn layoutreturn(self, layout_type: u32, iomode: u32, r: &Return) -> Ops {
        self.op(0, |w| layoutreturn(w, layout_type, iomode, r))
    }

    /// LAYOUTRETURN with lora_reclaim set (§18.44.3).
    pub fn layoutreturn_reclaim(self, layout_type: u32, iomode: u32, r: &Return) -> Ops {
        self.op(0, |w| layoutreturn_as(w, true, layout_type, iomode, r))
    }

    pub fn getdevicelist(
        self,
        layout_type: u32,
        maxdevices: u32,
        cookie: u64,
        verf: &[u8; 8],
    ) -> Ops {
        self.op(0, |w| {
            getdevicelist(w, layout_type, maxdevices, cookie, verf)
        })
    }
}

// ------------------------------------------------------------------ results

/// Longest layout body, device address or owner string accepted back.
const MAX_BODY: usize = 64 << 10;
const MAX_OWNER: usize = 1024;
/// Most layouts, mirrors, data servers, handles, addresses or versions accepted.
const MAX_ITEMS: u32 = 256;

/// One layout4 (§3.3.17): its range, iomode, type and opaque body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub offset: u64,
    pub length: u64,
    pub iomode: u32,
    pub layout_type: u32,
    pub body: Vec<u8>,
}

/// LAYOUTGET4resok (§18.43.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub return_on_close: bool,
    pub stateid: [u8; 16],
    pub layouts: Vec<Layout>,
}

fn count(r: &mut XdrReader) -> XdrResult<u32> {
    let n = r.u32()?;
    if n > MAX_ITEMS {
        return Err(XdrError::TooLong);
    }
    Ok(n)
}

fn fixed16(r: &mut XdrReader) -> XdrResult<[u8; 16]> {
    let mut s = [0u8; 16];
    s.copy_from_slice(r.opaque_fixed(16)?);
    Ok(s)
}

fn text(r: &mut XdrReader, max: usize) -> XdrResult<String> {
    String::from_utf8(r.string(max)?.to_vec()).map_err(|_| XdrError::BadValue)
}

pub fn layoutget_ok(r: &mut XdrReader) -> XdrResult<Granted> {
    let return_on_close = r.bool()?;
    let stateid = fixed16(r)?;
    let n = count(r)?;
    let layouts = (0..n)
        .map(|_| {
            Ok(Layout {
                offset: r.u64()?,
                length: r.u64()?,
                iomode: r.u32()?,
                layout_type: r.u32()?,
                body: r.opaque_var(MAX_BODY)?.to_vec(),
            })
        })
        .collect::<XdrResult<_>>()?;
    Ok(Granted {
        return_on_close,
        stateid,
        layouts,
    })
}

/// ff_data_server4 (RFC 8435 §5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FfDataServer {
    pub deviceid: [u8; 16],
    pub efficiency: u32,
    pub stateid: [u8; 16],
    pub fhs: Vec<Vec<u8>>,
    pub user: String,
    pub group: String,
}

/// ff_layout4 (RFC 8435 §5.1): mirrors, each a list of data servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FfLayout {
    pub stripe_unit: u64,
    pub mirrors: Vec<Vec<FfDataServer>>,
    pub flags: u32,
    pub stats_hint: u32,
}

pub fn ff_layout(body: &[u8]) -> XdrResult<FfLayout> {
    let mut r = XdrReader::new(body);
    let stripe_unit = r.u64()?;
    let n = count(&mut r)?;
    let mirrors = (0..n)
        .map(|_| {
            let k = count(&mut r)?;
            (0..k).map(|_| ff_data_server(&mut r)).collect()
        })
        .collect::<XdrResult<_>>()?;
    let l = FfLayout {
        stripe_unit,
        mirrors,
        flags: r.u32()?,
        stats_hint: r.u32()?,
    };
    if r.remaining() != 0 {
        return Err(XdrError::BadValue);
    }
    Ok(l)
}

fn ff_data_server(r: &mut XdrReader) -> XdrResult<FfDataServer> {
    let deviceid = fixed16(r)?;
    let efficiency = r.u32()?;
    let stateid = fixed16(r)?;
    let n = count(r)?;
    let fhs = (0..n)
        .map(|_| Ok(r.opaque_var(crate::v4reply::NFS4_FHSIZE)?.to_vec()))
        .collect::<XdrResult<_>>()?;
    Ok(FfDataServer {
        deviceid,
        efficiency,
        stateid,
        fhs,
        user: text(r, MAX_OWNER)?,
        group: text(r, MAX_OWNER)?,
    })
}

/// GETDEVICEINFO4resok (§18.40.2): the device_addr4's type and body, and the
/// notifications the server will send.
pub fn getdeviceinfo_ok(r: &mut XdrReader) -> XdrResult<(u32, Vec<u8>, Vec<u32>)> {
    let t = r.u32()?;
    let body = r.opaque_var(MAX_BODY)?.to_vec();
    let n = r.u32()?;
    if n > 8 {
        return Err(XdrError::TooLong);
    }
    let bits = (0..n).map(|_| r.u32()).collect::<XdrResult<_>>()?;
    Ok((t, body, bits))
}

/// ff_device_versions4 (RFC 8435 §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FfVersion {
    pub version: u32,
    pub minor: u32,
    pub rsize: u32,
    pub wsize: u32,
    pub tightly_coupled: bool,
}

/// ff_device_addr4 (RFC 8435 §5.1): (netid, universal address) pairs and versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FfDevice {
    pub netaddrs: Vec<(String, String)>,
    pub versions: Vec<FfVersion>,
}

pub fn ff_device(body: &[u8]) -> XdrResult<FfDevice> {
    let mut r = XdrReader::new(body);
    let n = count(&mut r)?;
    let netaddrs = (0..n)
        .map(|_| Ok((text(&mut r, 128)?, text(&mut r, 128)?)))
        .collect::<XdrResult<_>>()?;
    let n = count(&mut r)?;
    let versions = (0..n)
        .map(|_| {
            Ok(FfVersion {
                version: r.u32()?,
                minor: r.u32()?,
                rsize: r.u32()?,
                wsize: r.u32()?,
                tightly_coupled: r.bool()?,
            })
        })
        .collect::<XdrResult<_>>()?;
    Ok(FfDevice { netaddrs, versions })
}

/// A universal address of netid "tcp"/"rdma" (RFC 5665 §5.2.3.3/§5.2.3.4) as a
/// socket address.
pub fn uaddr(s: &str) -> Option<std::net::SocketAddr> {
    let mut parts = s.rsplitn(3, '.');
    let lo: u16 = parts.next()?.parse().ok()?;
    let hi: u16 = parts.next()?.parse().ok()?;
    let ip: std::net::IpAddr = parts.next()?.parse().ok()?;
    if hi > 255 || lo > 255 {
        return None;
    }
    Some(std::net::SocketAddr::new(ip, hi << 8 | lo))
}

/// LAYOUTRETURN4res's layoutreturn_stateid (§18.44.2).
pub fn layoutreturn_ok(r: &mut XdrReader) -> XdrResult<Option<[u8; 16]>> {
    if r.bool()? {
        Ok(Some(fixed16(r)?))
    } else {
        Ok(None)
    }
}

/// GETDEVICELIST4resok (RFC 8881 §18.41.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceList {
    pub cookie: u64,
    pub verf: [u8; 8],
    pub ids: Vec<[u8; 16]>,
    pub eof: bool,
}

/// GETDEVICELIST4resok: the cursor to go on from, the device ids, and whether the
/// list is done.
pub fn getdevicelist_ok(r: &mut XdrReader) -> XdrResult<DeviceList> {
    let cookie = r.u64()?;
    let mut verf = [0u8; 8];
    verf.copy_from_slice(r.opaque_fixed(8)?);
    let n = count(r)?;
    let ids = (0..n).map(|_| fixed16(r)).collect::<XdrResult<_>>()?;
    Ok(DeviceList {
        cookie,
        verf,
        ids,
        eof: r.bool()?,
    })
}

/// LAYOUTCOMMIT4resok's newsize4 (§18.42.2).
pub fn layoutcommit_ok(r: &mut XdrReader) -> XdrResult<Option<u64>> {
    if r.bool()? {
        Ok(Some(r.u64()?))
    } else {
        Ok(None)
    }
}

/// A CB_LAYOUTRECALL (RFC 8881 §20.3) as the client sees it: CB_SEQUENCE's session
/// and sequence id, then the recall of one file's layouts (LAYOUTRECALL4_FILE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbLayoutRecall {
    pub session: [u8; 16],
    pub seqid: u32,
    pub layout_type: u32,
    pub iomode: u32,
    pub changed: bool,
    pub fh: Vec<u8>,
    pub offset: u64,
    pub length: u64,
    pub stateid: [u8; 16],
}

/// The xid and CB_LAYOUTRECALL of a callback record (a CB_COMPOUND of minor version 1
/// with CB_SEQUENCE and CB_LAYOUTRECALL of one file); anything else is an `Err`.
pub fn decode_layoutrecall(rec: &[u8]) -> Result<(u32, CbLayoutRecall), String> {
    crate::v4cb::decode_cb(
        rec,
        Some(NFS4_CALLBACK),
        1,
        OP_CB_LAYOUTRECALL,
        cb_layoutrecall,
    )
}

/// CB_LAYOUTRECALL4args (RFC 8881 §20.3.1) after CB_SEQUENCE, of one file
/// (LAYOUTRECALL4_FILE); `None` for the other recall types.
fn cb_layoutrecall(
    r: &mut XdrReader,
    session: [u8; 16],
    seqid: u32,
) -> XdrResult<Option<CbLayoutRecall>> {
    let (layout_type, iomode, changed) = (r.u32()?, r.u32()?, r.bool()?);
    if r.u32()? != 1 {
        return Ok(None); // LAYOUTRECALL4_FSID / _ALL
    }
    let fh = r.opaque_var(128)?.to_vec();
    let (offset, length) = (r.u64()?, r.u64()?);
    let stateid = fixed16(r)?;
    Ok(Some(CbLayoutRecall {
        session,
        seqid,
        layout_type,
        iomode,
        changed,
        fh,
        offset,
        length,
        stateid,
    }))
}

/// The REPLY to a CB_LAYOUTRECALL: CB_SEQUENCE OK (echoing the session and sequence
/// id) and CB_LAYOUTRECALL with `status` (NFS4_OK: the client will LAYOUTRETURN;
/// NFS4ERR_NOMATCHING_LAYOUT: it holds none).
pub fn layoutrecall_reply(xid: u32, c: &CbLayoutRecall, status: u32) -> Vec<u8> {
    let seq = (&c.session, c.seqid);
    crate::v4cb::cb_reply(xid, seq, OP_CB_LAYOUTRECALL, status, |_| Ok(()))
}

/// One change a CB_NOTIFY_DEVICEID carries (RFC 8881 §20.12.1): its type
/// (`NOTIFY_DEVICEID4_CHANGE` / `_DELETE`), layout type and device id, and for a
/// CHANGE whether it is immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceNotice {
    pub kind: u32,
    pub layout_type: u32,
    pub deviceid: [u8; 16],
    pub immediate: bool,
}

/// A CB_NOTIFY_DEVICEID (RFC 8881 §20.12) as the client sees it: CB_SEQUENCE's
/// session and sequence id, then every (mask, values) pair of cnda_changes read
/// into notices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbNotifyDeviceid {
    pub session: [u8; 16],
    pub seqid: u32,
    pub notices: Vec<DeviceNotice>,
}

/// The xid and CB_NOTIFY_DEVICEID of a callback record (CB_COMPOUND with CB_SEQUENCE
/// and CB_NOTIFY_DEVICEID); anything else is an `Err`.
pub fn decode_notify_deviceid(rec: &[u8]) -> Result<(u32, CbNotifyDeviceid), String> {
    crate::v4cb::decode_cb(
        rec,
        Some(NFS4_CALLBACK),
        1,
        OP_CB_NOTIFY_DEVICEID,
        cb_notify,
    )
}

/// CB_NOTIFY_DEVICEID4args (RFC 8881 §20.12.1) after CB_SEQUENCE: every (mask,
/// values) pair of cnda_changes read into notices.
fn cb_notify(
    r: &mut XdrReader,
    session: [u8; 16],
    seqid: u32,
) -> XdrResult<Option<CbNotifyDeviceid>> {
    let mut notices = Vec::new();
    for _ in 0..count(r)? {
        let words = count(r)?;
        let mask: Vec<u32> = (0..words).map(|_| r.u32()).collect::<XdrResult<_>>()?;
        let vals = r.opaque_var(MAX_BODY)?;
        let mut v = XdrReader::new(vals);
        // The values follow the mask's bits in order (§3.3.7, §20.12.3).
        for bit in 0..32 * mask.len() as u32 {
            if mask[(bit / 32) as usize] & (1 << (bit % 32)) == 0 {
                continue;
            }
            let (layout_type, deviceid) = (v.u32()?, fixed16(&mut v)?);
            let immediate = match bit {
                NOTIFY_DEVICEID4_CHANGE => v.bool()?,
                NOTIFY_DEVICEID4_DELETE => false,
                _ => return Ok(None),
            };
            notices.push(DeviceNotice {
                kind: bit,
                layout_type,
                deviceid,
                immediate,
            });
        }
    }
    Ok(Some(CbNotifyDeviceid {
        session,
        seqid,
        notices,
    }))
}

/// The REPLY to a CB_NOTIFY_DEVICEID: CB_SEQUENCE OK (echoing the session and
/// sequence id) and CB_NOTIFY_DEVICEID with `status`.
pub fn notify_deviceid_reply(xid: u32, c: &CbNotifyDeviceid, status: u32) -> Vec<u8> {
    let seq = (&c.session, c.seqid);
    crate::v4cb::cb_reply(xid, seq, OP_CB_NOTIFY_DEVICEID, status, |_| Ok(()))
}
