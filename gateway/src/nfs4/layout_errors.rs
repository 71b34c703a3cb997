//! What clients tell the metadata server about its data servers: LAYOUTERROR (RFC
//! 7862 §15.6), LAYOUTSTATS (RFC 7862 §15.7), both NFSv4.2 only, and the
//! ff_layoutreturn4 body of a LAYOUTRETURN (RFC 8435 §9.3, its ff_ioerr4 list §9.1.1).
//!
//! An error report is a hint, not proof: each device_error4 is counted against the
//! data server its device id names and makes that server's prober probe at once
//! (`Layouts::report_error`); only the probe marks a server down
//! (`state/layouts_health.rs`). Device ids no configured server has are counted apart
//! and otherwise ignored rather than refused (a choice: the report is a hint, the
//! operation changes no state, and a client whose report is refused would learn
//! nothing it can act on; NFS4ERR_NOENT would be the other reading). What a
//! LAYOUTSTATS says (lsa_read, lsa_write for lsa_deviceid: READ and WRITE operations
//! and bytes) and what a LAYOUTRETURN's fflr_iostats_report says (RFC 8435 §9.2.1,
//! the same per data server) are added to the data server's reported I/O
//! (`nfsgw_pnfs_data_server_reported_{ops,bytes}_total`), the increase over the
//! layout's last report only (`state/layouts_stats.rs`: both carry running totals).
//! A LAYOUTSTATS whose counts are implausible (2^63 or more) or whose device id no
//! configured server has is acknowledged and ignored (logged, counted apart), as an
//! error report is: it changes no state.
//!
//! Hostile input: every count is checked against the bytes that remain before
//! anything is read, and at most `MAX_REPORTS` errors of one operation are acted
//! on (the rest are read past).

use super::layout_ops::{devices, layout_file, range_ok, LAYOUT4_FLEX_FILES};
use super::status::*;
use super::{put_status, Compound, OpResult};
use crate::state::layouts::health::Io;
use crate::state::layouts::{LayoutFile, Layouts};
use crate::state::stateid::Stateid;
use engine::xdr::{XdrError, XdrReader, XdrResult, XdrWriter};

/// device_error4 (RFC 7862 §15.6.1) as read: which device, what status, which
/// operation at the data server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DeviceError {
    pub id: [u8; 16],
    pub status: Nfsstat4,
    pub opnum: u32,
}

/// Errors acted on per operation (more are read past, not counted).
pub(super) const MAX_REPORTS: usize = 64;
/// Encoded sizes: device_error4, and ff_ioerr4 without its list.
const DEVICE_ERROR: usize = 16 + 4 + 4;
const IOERR_HEAD: usize = 8 + 8 + 16 + 4;

/// device_error4<> into `out` (at most `MAX_REPORTS` kept in all).
fn device_errors(r: &mut XdrReader, out: &mut Vec<DeviceError>) -> XdrResult<()> {
    let n = r.u32()? as usize;
    if n > r.remaining() / DEVICE_ERROR {
        return Err(XdrError::TooLong);
    }
    for _ in 0..n {
        let id: [u8; 16] = r.opaque_fixed(16)?.try_into().expect("16 bytes");
        // An nfsstat4 RFC 8881 §15.1 does not define does not decode (BADXDR).
        let (status, opnum) = (Nfsstat4::decode(r)?, r.u32()?);
        if out.len() < MAX_REPORTS {
            out.push(DeviceError { id, status, opnum });
        }
    }
    Ok(())
}

/// The errors of an ff_layoutreturn4 (RFC 8435 §9.3): its fflr_ioerr_report<>, each
/// an ff_ioerr4 (range, stateid, device_error4<>).
pub(super) fn ff_ioerrs(body: &[u8]) -> XdrResult<Vec<DeviceError>> {
    ioerrs(&mut XdrReader::new(body))
}

/// fflr_ioerr_report<> from `r`.
fn ioerrs(r: &mut XdrReader) -> XdrResult<Vec<DeviceError>> {
    let mut out = Vec::new();
    let n = r.u32()? as usize;
    if n > r.remaining() / IOERR_HEAD {
        return Err(XdrError::TooLong);
    }
    for _ in 0..n {
        r.skip(8 + 8 + 16)?;
        device_errors(r, &mut out)?;
    }
    Ok(out)
}

/// io_info4 (RFC 7862 §15.7.1): a count of operations and of bytes.
fn io_info(r: &mut XdrReader) -> XdrResult<(u64, u64)> {
    Ok((r.u64()?, r.u64()?))
}

/// The two io_info4 (read, write) as `Io`.
fn io_pair(r: &mut XdrReader) -> XdrResult<Io> {
    let (read_ops, read_bytes) = io_info(r)?;
    let (write_ops, write_bytes) = io_info(r)?;
    Ok(Io {
        read_ops,
        read_bytes,
        write_ops,
        write_bytes,
    })
}

/// Encoded sizes: ff_iostats4 up to its ff_layoutupdate4 (range, stateid, two
/// io_info4, deviceid), and ff_io_latency4 (five counters, two nfstime4).
const IOSTATS_HEAD: usize = 8 + 8 + 16 + 16 + 16 + 16;
const IO_LATENCY: usize = 5 * 8 + 2 * 12;
/// The shortest ff_layoutupdate4: empty netid, address and handle, two
/// ff_io_latency4, ffl_duration, ffl_local.
const LAYOUTUPDATE_MIN: usize = 4 + 4 + 4 + 2 * IO_LATENCY + 12 + 4;
/// Longest netid or universal address read (RFC 5665: a few dozen bytes).
const ADDR_MAX: usize = 256;

/// The I/O of an ff_layoutreturn4 (RFC 8435 §9.3): its fflr_iostats_report<>, each an
/// ff_iostats4 (§9.2.1) naming a device and the READs and WRITEs (io_info4: count,
/// bytes) done through it; at most `MAX_REPORTS` kept.
pub(super) fn ff_iostats(body: &[u8]) -> XdrResult<Vec<([u8; 16], Io)>> {
    let mut r = XdrReader::new(body);
    ioerrs(&mut r)?;
    let n = r.u32()? as usize;
    if n > r.remaining() / (IOSTATS_HEAD + LAYOUTUPDATE_MIN) {
        return Err(XdrError::TooLong);
    }
    let mut out = Vec::new();
    for _ in 0..n {
        r.skip(8 + 8 + 16)?;
        let io = io_pair(&mut r)?;
        let id: [u8; 16] = r.opaque_fixed(16)?.try_into().expect("16 bytes");
        // ffis_layoutupdate (§9.2.1's ff_layoutupdate4): read past.
        r.string(ADDR_MAX)?; // netid
        r.string(ADDR_MAX)?; // universal address
        r.opaque_var(super::FH4_MAX)?;
        r.skip(2 * IO_LATENCY + 12 + 4)?;
        if out.len() < MAX_REPORTS {
            out.push((id, io));
        }
    }
    Ok(out)
}

/// Counts and logs the errors a LAYOUTRETURN's body reports, and the I/O it reports
/// (the increase over what the layout last reported: `seen`, taken before the
/// return; `held`, the layout when it is still held after it). A body that is
/// empty (what a client with nothing to report may send) or does not decode is
/// ignored: the return itself matters more than its report, so it never fails for it.
pub(super) fn returned_errors(
    c: &Compound,
    body: &[u8],
    seen: &[(u8, Io)],
    held: Option<(LayoutFile, Stateid)>,
) {
    if body.is_empty() {
        return;
    }
    match ff_ioerrs(body) {
        Ok(errs) => report(&c.state.layouts, &errs, "LAYOUTRETURN"),
        Err(_) => {
            tracing::debug!("LAYOUTRETURN: an ff_layoutreturn4 body that does not decode; ignored")
        }
    }
    // The I/O only from a body that decodes whole: a cut one says nothing sure.
    if let Ok(stats) = ff_iostats(body) {
        for (id, io) in &stats {
            match held {
                Some((lf, sid)) => c.state.layouts.report_stats(lf, &sid, id, io),
                None => c.state.layouts.report_returned(id, io, seen),
            };
        }
    }
}

fn report(l: &Layouts, errs: &[DeviceError], why: &str) {
    for e in errs.iter().filter(|e| !e.status.is_ok()) {
        l.report_error(&e.id, e.status.as_u32(), e.opnum, why);
    }
}

/// The range and layout stateid both operations start with (RFC 7862 §15.6.1,
/// §15.7.1).
fn head(r: &mut XdrReader) -> XdrResult<(u64, u64, Stateid)> {
    Ok((r.u64()?, r.u64()?, Stateid::decode(r)?))
}

/// The checks LAYOUTERROR and LAYOUTSTATS share: pNFS on (else NFS4ERR_NOTSUPP), a
/// regular file, a range that is neither empty nor past 2^64, and a layout stateid of
/// this client for this file (NFS4ERR_BAD_STATEID otherwise). Its seqid is not
/// compared: neither operation changes the layout's state (RFC 8881 §8.2.2 asks
/// the check of operations that do), and a report sent under the stateid a recall
/// just advanced is still a true report.
fn check(c: &Compound, (offset, length, sid): (u64, u64, Stateid)) -> Result<(), Nfsstat4> {
    devices(c)?;
    let (_, lf) = layout_file(c)?;
    if !range_ok(offset, length) {
        return Err(NFS4ERR_INVAL);
    }
    let sid = c.resolve_stateid(&sid)?;
    if !Layouts::owns(&sid) {
        return Err(NFS4ERR_BAD_STATEID);
    }
    c.state.layouts.holds(lf, &sid).map_err(from_state)
}

/// LAYOUTERROR (RFC 7862 §15.6): the client met errors with data servers of its
/// layout of the current file.
pub(super) fn layouterror(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let mut errs = Vec::new();
    let Ok(h) = head(r).and_then(|h| device_errors(r, &mut errs).map(|_| h)) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    if let Err(st) = check(c, h) {
        return put_status(w, st);
    }
    report(&c.state.layouts, &errs, "LAYOUTERROR");
    put_status(w, NFS4_OK)
}

/// LAYOUTSTATS (RFC 7862 §15.7): checked, and the I/O the client reports through
/// the data server lsa_deviceid names is counted against it (`Layouts::report_stats`;
/// the ff_layoutupdate4 body, latencies and the like, is read past).
pub(super) fn layoutstats(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let args = (|| {
        let h = head(r)?;
        let io = io_pair(r)?;
        let id: [u8; 16] = r.opaque_fixed(16)?.try_into().expect("16 bytes");
        let layout_type = r.u32()?;
        r.opaque_var(64 << 10)?; // lou_body
        Ok::<_, XdrError>((h, io, id, layout_type))
    })();
    let Ok((h, io, id, layout_type)) = args else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    if let Err(st) = check(c, h) {
        return put_status(w, st);
    }
    if layout_type != LAYOUT4_FLEX_FILES {
        return put_status(w, NFS4ERR_UNKNOWN_LAYOUTTYPE);
    }
    if let (Ok((_, lf)), Ok(sid)) = (layout_file(c), c.resolve_stateid(&h.2)) {
        c.state.layouts.report_stats(lf, &sid, &id, &io);
    }
    put_status(w, NFS4_OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::xdr::XdrWriter;

    fn enc(f: impl FnOnce(&mut XdrWriter) -> XdrResult<()>) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let mut w = XdrWriter::new(&mut buf);
        f(&mut w).unwrap();
        let n = w.position();
        buf.truncate(n);
        buf
    }

    fn ioerr(w: &mut XdrWriter, errs: &[([u8; 16], u32, u32)]) -> XdrResult<()> {
        w.u64(0)?;
        w.u64(u64::MAX)?;
        w.opaque_fixed(&[7; 16])?;
        w.u32(errs.len() as u32)?;
        for (id, st, op) in errs {
            w.opaque_fixed(id)?;
            w.u32(*st)?;
            w.u32(*op)?;
        }
        Ok(())
    }

    #[test]
    fn an_ff_layoutreturn4_gives_its_device_errors() {
        let body = enc(|w| {
            w.u32(2)?;
            ioerr(w, &[([1; 16], 10008, 38), ([2; 16], 5, 25)])?;
            ioerr(w, &[([3; 16], 70, 1)])?;
            w.u32(0) // fflr_iostats_report: none
        });
        let got = ff_ioerrs(&body).unwrap();
        assert_eq!(
            got,
            [
                DeviceError {
                    id: [1; 16],
                    status: NFS4ERR_DELAY,
                    opnum: 38
                },
                DeviceError {
                    id: [2; 16],
                    status: NFS4ERR_IO,
                    opnum: 25
                },
                DeviceError {
                    id: [3; 16],
                    status: NFS4ERR_STALE,
                    opnum: 1
                },
            ]
        );
        // Nothing reported: empty lists.
        assert!(ff_ioerrs(&enc(|w| {
            w.u32(0)?;
            w.u32(0)
        }))
        .unwrap()
        .is_empty());
    }

    #[test]
    fn hostile_counts_and_short_bodies_are_errors_not_panics_or_long_loops() {
        // A count far past the bytes that follow.
        for n in [u32::MAX, 1 << 20, 2] {
            let body = enc(|w| {
                w.u32(1)?;
                w.u64(0)?;
                w.u64(1)?;
                w.opaque_fixed(&[0; 16])?;
                w.u32(n)?;
                w.opaque_fixed(&[0; 16])?;
                w.u32(1)?;
                w.u32(1)
            });
            assert!(ff_ioerrs(&body).is_err(), "{n}");
        }
        assert!(ff_ioerrs(&enc(|w| w.u32(u32::MAX))).is_err());
        // A status no RFC defines.
        let undefined = enc(|w| {
            w.u32(1)?;
            ioerr(w, &[([1; 16], 12345, 38)])
        });
        assert!(ff_ioerrs(&undefined).is_err());
        assert!(ff_ioerrs(&[0, 0]).is_err());
        // Every prefix of a good body fails cleanly.
        let good = enc(|w| {
            w.u32(1)?;
            ioerr(w, &[([1; 16], 5, 38)])?;
            w.u32(0)
        });
        for cut in 0..good.len() - 4 {
            assert!(ff_ioerrs(&good[..cut]).is_err(), "{cut}");
        }
    }

    /// One ff_iostats4 (RFC 8435 §9.2.1) of device `id`: READ (2, 100), WRITE (3, 200)
    /// scaled by `k`, and an ff_layoutupdate4 with an address and a handle.
    fn iostat(w: &mut XdrWriter, id: [u8; 16], k: u64) -> XdrResult<()> {
        w.u64(0)?;
        w.u64(u64::MAX)?;
        w.opaque_fixed(&[7; 16])?;
        for v in [2 * k, 100 * k, 3 * k, 200 * k] {
            w.u64(v)?;
        }
        w.opaque_fixed(&id)?;
        w.string(b"tcp")?;
        w.string(b"10.0.0.2.8.1")?;
        w.opaque_var(&[9; 40])?;
        for _ in 0..2 * 5 {
            w.u64(1)?;
        }
        for _ in 0..5 {
            w.i64(1)?;
            w.u32(0)?;
        }
        w.bool(false)
    }

    #[test]
    fn an_ff_layoutreturn4_gives_its_iostats_after_its_errors() {
        let body = enc(|w| {
            w.u32(1)?;
            ioerr(w, &[([1; 16], 5, 38)])?;
            w.u32(2)?;
            iostat(w, [1; 16], 1)?;
            iostat(w, [2; 16], 10)
        });
        let io = |k: u64| Io {
            read_ops: 2 * k,
            read_bytes: 100 * k,
            write_ops: 3 * k,
            write_bytes: 200 * k,
        };
        assert_eq!(
            ff_iostats(&body).unwrap(),
            [([1; 16], io(1)), ([2; 16], io(10))]
        );
        assert_eq!(ff_ioerrs(&body).unwrap().len(), 1);
        // Every prefix fails cleanly; a count past the bytes is refused at once.
        for cut in 0..body.len() {
            assert!(ff_iostats(&body[..cut]).is_err(), "{cut}");
        }
        let huge = enc(|w| {
            w.u32(0)?;
            w.u32(u32::MAX)?;
            iostat(w, [1; 16], 1)
        });
        assert!(ff_iostats(&huge).is_err());
        // Many entries: at most MAX_REPORTS kept, all read.
        let mut many = vec![0u8; 64 << 10];
        let mut w = XdrWriter::new(&mut many);
        w.u32(0).unwrap();
        w.u32(100).unwrap();
        (0..100).for_each(|i| iostat(&mut w, [i as u8; 16], 1).unwrap());
        let n = w.position();
        assert_eq!(ff_iostats(&many[..n]).unwrap().len(), MAX_REPORTS);
    }

    #[test]
    fn at_most_max_reports_are_kept() {
        let many: Vec<([u8; 16], u32, u32)> = (0..100).map(|i| ([i as u8; 16], 5, 38)).collect();
        let body = enc(|w| {
            w.u32(1)?;
            ioerr(w, &many)
        });
        assert_eq!(ff_ioerrs(&body).unwrap().len(), MAX_REPORTS);
        // The LAYOUTERROR list reader: the same bound, and it reads past the rest.
        let list = enc(|w| {
            w.u32(many.len() as u32)?;
            for (id, st, op) in &many {
                w.opaque_fixed(id)?;
                w.u32(*st)?;
                w.u32(*op)?;
            }
            w.u32(0xabcd)
        });
        let mut r = XdrReader::new(&list);
        let mut out = Vec::new();
        device_errors(&mut r, &mut out).unwrap();
        assert_eq!(out.len(), MAX_REPORTS);
        assert_eq!(r.u32().unwrap(), 0xabcd, "read past every entry");
    }
}
