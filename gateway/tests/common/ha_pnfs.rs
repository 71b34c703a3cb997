//! The pNFS side of an `[ha]` takeover (docs/ha.md "pNFS"): a client's RW layout at
//! the metadata server, its writes through a data server over NFSv3 under the
//! layout's credentials (RFC 8435 §2.2, §5.1), and its LAYOUTCOMMIT (RFC 8881
//! §18.42), with loca_reclaim at the successor (§12.7.4).
#![allow(dead_code)]

use crate::nfs4_client::*;
use engine::xdr::XdrReader;
use nfs_wire::nfs4args::{LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_RW};
use nfs_wire::v3call::{self, Call};
use nfs_wire::v4pnfs::{self, LayoutCommit, LayoutGet};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `[pnfs]` naming the one data server `ds`, never probed (it stays in layouts).
pub fn pnfs_section(ds: SocketAddr) -> String {
    format!(
        "[pnfs]\nenabled = true\nrsize = 65536\nwsize = 65536\nprobe_ms = 0\n\
         [[pnfs.data_servers]]\naddress = \"{ds}\"\n"
    )
}

/// PUTFH `fh` + `op`: `op`'s status and the bytes after it.
pub fn on_fh(c: &mut Tcp41, fh: &[u8], op: Ops) -> (u32, Vec<u8>) {
    let (_, res) = c.seq_run(|o| o.putfh(fh).append(op));
    let mut r = after_seq(&res);
    assert_eq!(expect_op(&mut r, OP_PUTFH), NFS4_OK);
    r.u32().unwrap();
    let st = r.u32().unwrap();
    (st, r.rest().to_vec())
}

/// LAYOUTGET RW of the whole file under `open`: the layout stateid, or the status.
pub fn layout_rw(c: &mut Tcp41, fh: &[u8], open: [u8; 16]) -> Result<Granted, u32> {
    let get = LayoutGet {
        layout_type: LAYOUT4_FLEX_FILES,
        iomode: LAYOUTIOMODE4_RW,
        offset: 0,
        length: u64::MAX,
        minlength: 0,
        stateid: open,
        maxcount: 4096,
    };
    let (st, rest) = on_fh(c, fh, Ops::new().layoutget(&get));
    if st != NFS4_OK {
        return Err(st);
    }
    let g = v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap();
    let ff = v4pnfs::ff_layout(&g.layouts[0].body).unwrap();
    let d = &ff.mirrors[0][0];
    Ok(Granted {
        stateid: g.stateid,
        ids: (d.user.parse().unwrap(), d.group.parse().unwrap()),
    })
}

/// A layout as the client keeps it: its stateid and the data server credentials.
pub struct Granted {
    pub stateid: [u8; 16],
    pub ids: (u32, u32),
}

/// One NFSv3 call to the data server `ds` as AUTH_SYS `ids` (the layout's): its
/// NFSv3 status.
pub fn v3_as(ds: SocketAddr, ids: (u32, u32), call: &Call) -> u32 {
    let mut s = TcpStream::connect(ds).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let cred = engine::rpc::Cred::Sys(engine::rpc::AuthSys::new(ids.0, ids.1, &[]));
    // `encode` leaves the first 4 bytes for the record mark `tcp_call` adds.
    let n = v3call::encode(&mut buf, 9, &cred, call).unwrap();
    let rec = crate::common::tcp_call(&mut s, &buf[4..n]).unwrap();
    v3call::status(v3call::results(&rec).unwrap())
}

/// LAYOUTCOMMIT of the whole file under `sid` (`reclaim`: loca_reclaim), the last
/// byte written at `last`: the status and the new size.
pub fn layout_commit(
    c: &mut Tcp41,
    fh: &[u8],
    sid: [u8; 16],
    reclaim: bool,
    last: u64,
) -> (u32, Option<u64>) {
    let lc = LayoutCommit {
        offset: 0,
        length: u64::MAX,
        reclaim,
        stateid: sid,
        last_write: Some(last),
        mtime: None,
        layout_type: LAYOUT4_FLEX_FILES,
    };
    let (st, rest) = on_fh(c, fh, Ops::new().layoutcommit(&lc));
    let size =
        (st == NFS4_OK).then(|| v4pnfs::layoutcommit_ok(&mut XdrReader::new(&rest)).unwrap());
    (st, size.flatten())
}

/// GETATTR of the size.
pub fn size_of(c: &mut Tcp41, fh: &[u8]) -> u64 {
    let (st, rest) = on_fh(c, fh, Ops::new().getattr(&[1 << 4]));
    assert_eq!(st, NFS4_OK, "GETATTR");
    let mut r = XdrReader::new(&rest);
    let n = r.u32().unwrap();
    r.skip(4 * n as usize + 4).unwrap();
    r.u64().unwrap()
}

/// OPEN (create) `name` in the root for reading and writing, no delegation: the open
/// stateid and the handle.
pub fn create(c: &mut Tcp41, name: &[u8]) -> ([u8; 16], Vec<u8>) {
    let id = c.clientid;
    let (st, res) = c.seq_run(|o| {
        o.putrootfh()
            .open(
                id,
                b"po",
                ACCESS_BOTH | WANT_NO_DELEG,
                0,
                How::Unchecked,
                Claim::Null(name),
            )
            .getfh()
    });
    assert_eq!(st, NFS4_OK, "OPEN");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTROOTFH);
    expect_op(&mut r, OP_OPEN);
    let open = parse_open_ok(&mut r).stateid;
    expect_op(&mut r, OP_GETFH);
    (open, r.opaque_var(128).unwrap().to_vec())
}
