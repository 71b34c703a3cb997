//! `--pnfs` at the metadata server: LAYOUTGET of a flexfiles layout for an open file
//! (RFC 8881 §18.43, RFC 8435 §5.1; a mirror of several data servers is striped, §6),
//! GETDEVICEINFO of its data servers (§18.40: the
//! `ff_device_addr4`'s "tcp" universal address, RFC 5665 §5.2.3.3), and at the end
//! LAYOUTCOMMIT (§18.42: the size the data server wrote) and LAYOUTRETURN (§18.44).
//! Every call goes on the setup session of the client that opened the files.

use super::stripe::View;
use crate::nfs4::reply::{self, status_name};
use crate::nfs4::session::{Client4, Opened};
use crate::nfs4::Op4;
use engine::xdr::XdrReader;
use nfs_wire::nfs4args::LAYOUT4_FLEX_FILES;
use nfs_wire::v4pnfs::{self, LayoutCommit, LayoutGet, Return};
use std::collections::HashMap;
use std::net::SocketAddr;

/// NFS4ERR_LAYOUTTRYLATER and NFS4ERR_LAYOUTUNAVAILABLE (RFC 8881 §15.1.10.3, .4).
const LAYOUTTRYLATER: u32 = 10058;
const LAYOUTUNAVAILABLE: u32 = 10059;

/// One data server of a layout's first mirror: where its share of the file goes and
/// as whom.
#[derive(Clone, Debug)]
pub struct TakenDs {
    pub deviceid: [u8; 16],
    /// The data server's NFSv3 file handle for the file.
    pub fh: Vec<u8>,
    /// AUTH_SYS uid and gid the data server accepts for this file (ffds_user,
    /// ffds_group: the synthetic ids of loosely coupled data servers, RFC 8435 §2.2).
    pub ids: (u32, u32),
    /// The largest READ and WRITE the device takes (ffdv_rsize, ffdv_wsize).
    pub rsize: u32,
    pub wsize: u32,
    pub addr: SocketAddr,
}

/// A layout taken for one file.
#[derive(Clone, Debug)]
pub struct Taken {
    /// The layout stateid (for LAYOUTCOMMIT and LAYOUTRETURN).
    pub stateid: [u8; 16],
    pub iomode: u32,
    /// ffl_stripe_unit: with several data servers, the unit of the stripes.
    pub stripe_unit: u64,
    /// The first mirror's data servers in stripe order (RFC 8435 §6): one, or a
    /// striped mirror's several.
    pub ds: Vec<TakenDs>,
}

impl Taken {
    /// Data server `j`'s share of the file when the mirror is striped; `None`: the
    /// whole file (one data server).
    pub fn view(&self, j: usize) -> Option<View> {
        let w = self.ds.len() as u64;
        if w > 1 {
            View::new(self.stripe_unit, w, j as u64)
        } else {
            None
        }
    }
}

/// Why a file's I/O goes through the metadata server instead.
#[derive(Debug)]
pub enum Refused {
    /// LAYOUTGET answered an error (LAYOUTUNAVAILABLE, LAYOUTTRYLATER, ...).
    Status(u32),
    /// A layout or device bench cannot use (no tcp address, another version, ...).
    Unusable(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Status(LAYOUTTRYLATER) => write!(f, "LAYOUTGET: NFS4ERR_LAYOUTTRYLATER"),
            Refused::Status(LAYOUTUNAVAILABLE) => {
                write!(f, "LAYOUTGET: NFS4ERR_LAYOUTUNAVAILABLE")
            }
            Refused::Status(st) => write!(f, "{}", status_name(*st)),
            Refused::Unusable(why) => f.write_str(why),
        }
    }
}

/// SEQUENCE + PUTFH + `op`: the COMPOUND status and the op's results.
fn on(c: &mut Client4, fh: &[u8], op: Op4) -> anyhow::Result<Result<Vec<u8>, u32>> {
    let body = c.compound(&[Op4::Putfh(fh), op])?;
    let d = reply::decode(&body).map_err(anyhow::Error::msg)?;
    if !d.ok() {
        return Ok(Err(d.status));
    }
    Ok(Ok(d.rest.unwrap_or_default().to_vec()))
}

fn bad(what: &str) -> impl Fn(engine::xdr::XdrError) -> Refused + '_ {
    move |e| Refused::Unusable(format!("malformed {what}: {e:?}"))
}

/// LAYOUTGET of the whole file (`iomode` READ or RW) under its open stateid, then
/// GETDEVICEINFO of each of the first mirror's data servers. `Ok(Err(_))`: refused
/// or unusable (the caller falls back to the metadata server); `Err`: the call itself
/// failed.
pub fn take(c: &mut Client4, f: &Opened, iomode: u32) -> anyhow::Result<Result<Taken, Refused>> {
    let a = LayoutGet {
        layout_type: LAYOUT4_FLEX_FILES,
        iomode,
        offset: 0,
        length: u64::MAX,
        minlength: 0,
        stateid: f.stateid.bytes(),
        maxcount: 64 << 10,
    };
    let rest = match on(c, &f.fh, Op4::LayoutGet(a))? {
        Ok(r) => r,
        Err(st) => return Ok(Err(Refused::Status(st))),
    };
    let g = match v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).map_err(bad("LAYOUTGET")) {
        Ok(g) => g,
        Err(e) => return Ok(Err(e)),
    };
    let mut taken = match first_mirror(&g) {
        Ok(t) => t,
        Err(e) => {
            give_back(c, &f.fh, iomode, g.stateid);
            return Ok(Err(e));
        }
    };
    let mut devices: HashMap<[u8; 16], (SocketAddr, u32, u32)> = HashMap::new();
    for d in taken.ds.iter_mut() {
        let dev = match devices.get(&d.deviceid) {
            Some(v) => Ok(*v),
            None => device(c, &f.fh, &d.deviceid)?,
        };
        match dev {
            Ok(v) => {
                devices.insert(d.deviceid, v);
                (d.addr, d.rsize, d.wsize) = v;
            }
            Err(e) => {
                give_back(c, &f.fh, iomode, g.stateid);
                return Ok(Err(e));
            }
        }
    }
    taken.iomode = iomode;
    Ok(Ok(taken))
}

/// The first mirror of a flexfiles layout: its data servers, in stripe order (bench
/// reads and writes one mirror: a write layout of the gateway has exactly one, RFC
/// 8435 §5.1). A striped mirror (several data servers, RFC 8435 §6) needs a stripe
/// unit of at least one byte.
fn first_mirror(g: &v4pnfs::Granted) -> Result<Taken, Refused> {
    let l = g
        .layouts
        .iter()
        .find(|l| l.layout_type == LAYOUT4_FLEX_FILES)
        .ok_or_else(|| Refused::Unusable("LAYOUTGET granted no flexfiles layout".into()))?;
    let ff = v4pnfs::ff_layout(&l.body).map_err(bad("ff_layout4"))?;
    let mirror = ff
        .mirrors
        .first()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| Refused::Unusable("a layout without a data server".into()))?;
    if mirror.len() > 1 && ff.stripe_unit == 0 {
        return Err(Refused::Unusable(
            "a striped mirror with a stripe unit of 0".into(),
        ));
    }
    let id = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| Refused::Unusable(format!("ffds_user/group {s:?} is not a number")))
    };
    let ds = mirror
        .iter()
        .map(|d| {
            let fh = d
                .fhs
                .first()
                .ok_or_else(|| Refused::Unusable("a data server without a file handle".into()))?;
            Ok(TakenDs {
                deviceid: d.deviceid,
                fh: fh.clone(),
                ids: (id(&d.user)?, id(&d.group)?),
                rsize: 0,
                wsize: 0,
                addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            })
        })
        .collect::<Result<Vec<_>, Refused>>()?;
    Ok(Taken {
        stateid: g.stateid,
        iomode: l.iomode,
        stripe_unit: ff.stripe_unit,
        ds,
    })
}

/// GETDEVICEINFO: the device's "tcp" address and NFSv3 rsize/wsize.
fn device(
    c: &mut Client4,
    fh: &[u8],
    id: &[u8; 16],
) -> anyhow::Result<Result<(SocketAddr, u32, u32), Refused>> {
    let rest = match on(c, fh, Op4::GetDeviceInfo(*id))? {
        Ok(r) => r,
        Err(st) => {
            let why = format!("GETDEVICEINFO: {}", status_name(st));
            return Ok(Err(Refused::Unusable(why)));
        }
    };
    let dev = v4pnfs::getdeviceinfo_ok(&mut XdrReader::new(&rest))
        .map_err(bad("GETDEVICEINFO"))
        .and_then(|(t, body, _)| {
            if t != LAYOUT4_FLEX_FILES {
                return Err(Refused::Unusable(format!("device of layout type {t}")));
            }
            v4pnfs::ff_device(&body).map_err(bad("ff_device_addr4"))
        });
    let dev = match dev {
        Ok(d) => d,
        Err(e) => return Ok(Err(e)),
    };
    let Some(v) = dev.versions.iter().find(|v| v.version == 3) else {
        return Ok(Err(Refused::Unusable("the device speaks no NFSv3".into())));
    };
    let addr = dev
        .netaddrs
        .iter()
        .filter(|(netid, _)| netid == "tcp")
        .find_map(|(_, ua)| v4pnfs::uaddr(ua));
    Ok(match addr {
        Some(a) => Ok((a, v.rsize, v.wsize)),
        None => Err(Refused::Unusable("the device has no tcp address".into())),
    })
}

/// LAYOUTCOMMIT of a write layout: the file is `size` bytes as the data server wrote
/// it (`last_write_offset` = size - 1; nothing when nothing was written).
pub fn commit(c: &mut Client4, fh: &[u8], t: &Taken, size: u64) -> anyhow::Result<()> {
    let a = LayoutCommit {
        offset: 0,
        length: u64::MAX,
        reclaim: false,
        stateid: t.stateid,
        last_write: size.checked_sub(1),
        mtime: None,
        layout_type: LAYOUT4_FLEX_FILES,
    };
    match on(c, fh, Op4::LayoutCommit(a))? {
        Ok(_) => Ok(()),
        Err(st) => anyhow::bail!("LAYOUTCOMMIT: {}", status_name(st)),
    }
}

/// LAYOUTRETURN of the whole file's layout of `iomode`.
pub fn give_back(c: &mut Client4, fh: &[u8], iomode: u32, stateid: [u8; 16]) -> Option<String> {
    let r = Return::File {
        offset: 0,
        length: u64::MAX,
        stateid,
    };
    match on(c, fh, Op4::LayoutReturn(iomode, r)) {
        Ok(Ok(_)) => None,
        Ok(Err(st)) => Some(format!("LAYOUTRETURN: {}", status_name(st))),
        Err(e) => Some(format!("LAYOUTRETURN: {e:#}")),
    }
}
