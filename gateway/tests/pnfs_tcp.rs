//! pNFS with the flexible files layout (RFC 8881 §12, §18.40–§18.44; RFC 8435)
//! through real gateways over TCP: a metadata server and two data servers, three
//! gateways on one S3 bucket (moto's server, as tests/e2e's S3 suites use; skipped
//! when `moto_server` is not installed). A client takes a layout, finds the data
//! server by GETDEVICEINFO, writes through it over NFSv3 with the layout's handle,
//! commits there, LAYOUTCOMMITs, and the metadata server shows the size and bytes.
//! Hostile values get the RFC's errors; with `[pnfs]` off the operations are
//! NFS4ERR_NOTSUPP.

mod common;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use common::v42::{NFS4ERR_INVAL, NFS4ERR_NOTSUPP, NFS4_OK, S};
use common::*;
use engine::xdr::XdrReader;
use nfs_wire::nfs4args::*;
use nfs_wire::v3call::{self, Call};
use nfs_wire::v4call::Ops;
use nfs_wire::v4op::{Claim, Fattr, How};
use nfs_wire::v4pnfs::{self, LayoutCommit, LayoutGet, Return};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NFS4ERR_NOENT: u32 = 2;
const NFS4ERR_BAD_STATEID: u32 = 10025;
const NFS4ERR_BADIOMODE: u32 = 10049;
const NFS4ERR_NOMATCHING_LAYOUT: u32 = 10060;
const NFS4ERR_UNKNOWN_LAYOUTTYPE: u32 = 10062;
const NFS4ERR_TOOSMALL: u32 = 10005;
/// Attribute bits as bitmap words: size (4), fs_layout_types (62), layout_types
/// (64), layout_blksize (65) (RFC 8881 §5.12).
const LAYOUT_ATTRS: [u32; 3] = [1 << 4, 1 << 30, 0b11];
const ALL: u64 = u64::MAX;

/// moto's S3 server on a free loopback port, killed when dropped.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Moto {
    fn start() -> Option<Moto> {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let m = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(m)
    }

    /// CreateBucket (moto accepts an unsigned request).
    fn bucket(&self, name: &str) {
        let addr = self.endpoint.trim_start_matches("http://");
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "PUT /{name} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut rep = String::new();
        s.read_to_string(&mut rep).unwrap();
        assert!(rep.starts_with("HTTP/1.1 200"), "{rep}");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gateway on `bucket` with the `[pnfs]` lines given.
fn gateway(m: &Moto, bucket: &str, pnfs: &str) -> Gw {
    Gw::start_text(|dir| {
        format!(
            "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\n\
             [backend]\nkind = \"s3\"\nworkers = 2\n\
             [backend.s3]\nendpoint = \"{}\"\nregion = \"us-east-1\"\nbucket = \"{bucket}\"\n\
             path_style = true\nallow_http = true\naccess_key_id = \"testing\"\n\
             secret_access_key = \"testing\"\ntimeout_s = 10\nretries = 3\n\
             [state]\ndir = \"{}\"\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{pnfs}",
            m.endpoint,
            dir.display()
        )
    })
}

fn pnfs_section(ds: &[SocketAddr]) -> String {
    pnfs_with(ds, "")
}

/// `[pnfs]` naming `ds`, with more `[pnfs]` keys (`extra`, newline-terminated).
fn pnfs_with(ds: &[SocketAddr], extra: &str) -> String {
    let mut s = format!("[pnfs]\nenabled = true\nrsize = 65536\nwsize = 65536\n{extra}");
    for a in ds {
        s += &format!("[[pnfs.data_servers]]\naddress = \"{a}\"\n");
    }
    s
}

fn layoutget(iomode: u32, stateid: [u8; 16]) -> LayoutGet {
    LayoutGet {
        layout_type: LAYOUT4_FLEX_FILES,
        iomode,
        offset: 0,
        length: ALL,
        minlength: 0,
        stateid,
        maxcount: 4096,
    }
}

/// One NFSv3 call to a data server as AUTH_SYS (uid, gid), a layout's: its results.
fn v3_as(addr: SocketAddr, (uid, gid): (u32, u32), call: &Call) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = vec![0u8; 2 << 20];
    let cred = engine::rpc::Cred::Sys(engine::rpc::AuthSys::new(uid, gid, &[]));
    // `encode` leaves the first 4 bytes for the record mark `tcp_call` adds.
    let n = v3call::encode(&mut buf, 9, &cred, call).unwrap();
    let rec = tcp_call(&mut s, &buf[4..n]).unwrap();
    v3call::results(&rec).unwrap().to_vec()
}

struct Layout {
    stateid: [u8; 16],
    ff: v4pnfs::FfLayout,
}

fn take_layout(s: &mut S, fh: &[u8], a: &LayoutGet) -> Result<Layout, u32> {
    let (st, rest) = s.on(fh, Ops::new().layoutget(a));
    if st != NFS4_OK {
        return Err(st);
    }
    let g = v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap();
    assert_eq!(g.layouts.len(), 1);
    let l = &g.layouts[0];
    assert_eq!((l.offset, l.length, l.iomode), (0, ALL, a.iomode));
    assert_eq!(l.layout_type, LAYOUT4_FLEX_FILES);
    Ok(Layout {
        stateid: g.stateid,
        ff: v4pnfs::ff_layout(&l.body).unwrap(),
    })
}

/// GETDEVICEINFO: the data server's address (RFC 8435 §5.1: NFSv3, loosely coupled).
fn device(s: &mut S, fh: &[u8], id: &[u8; 16]) -> Result<SocketAddr, u32> {
    let (st, rest) = s.on(fh, Ops::new().getdeviceinfo(id, LAYOUT4_FLEX_FILES, 0));
    if st != NFS4_OK {
        return Err(st);
    }
    let (t, body, notify) = v4pnfs::getdeviceinfo_ok(&mut XdrReader::new(&rest)).unwrap();
    assert_eq!((t, notify.iter().sum::<u32>()), (LAYOUT4_FLEX_FILES, 0));
    let d = v4pnfs::ff_device(&body).unwrap();
    assert_eq!(d.versions.len(), 1);
    let v = d.versions[0];
    assert_eq!((v.version, v.minor, v.rsize, v.wsize), (3, 0, 65536, 65536));
    assert!(!v.tightly_coupled);
    assert_eq!(d.netaddrs[0].0, "tcp");
    Ok(v4pnfs::uaddr(&d.netaddrs[0].1).unwrap())
}

fn commit(s: &mut S, fh: &[u8], c: &LayoutCommit) -> Result<Option<u64>, u32> {
    let (st, rest) = s.on(fh, Ops::new().layoutcommit(c));
    if st != NFS4_OK {
        return Err(st);
    }
    Ok(v4pnfs::layoutcommit_ok(&mut XdrReader::new(&rest)).unwrap())
}

fn give_back(s: &mut S, fh: &[u8], iomode: u32, r: &Return) -> Result<Option<[u8; 16]>, u32> {
    let (st, rest) = s.on(fh, Ops::new().layoutreturn(LAYOUT4_FLEX_FILES, iomode, r));
    if st != NFS4_OK {
        return Err(st);
    }
    Ok(v4pnfs::layoutreturn_ok(&mut XdrReader::new(&rest)).unwrap())
}

/// The layout's data server credentials (RFC 8435 §5.1 ffds_user/ffds_group): the
/// file's synthetic ids (`gateway::fence`: bit 31 set, no real user's).
fn synthetic(l: &Layout) -> (u32, u32) {
    let d = &l.ff.mirrors[0][0];
    let ids = (d.user.parse().unwrap(), d.group.parse().unwrap());
    assert!(ids.0 >= 1 << 31 && ids.1 >= 1 << 31, "{ids:?}");
    ids
}

fn exchange_flags(gw: &Gw) -> u32 {
    let mut c = nfs4_client::Tcp41::connect(gw.tcp_addr());
    c.exchange_id(b"pnfs-flags", [1; 8]).2
}

#[test]
fn a_write_through_a_data_server_shows_at_the_metadata_server() {
    let Some(moto) = Moto::start() else {
        eprintln!("moto_server not installed: skipped");
        return;
    };
    let bucket = format!("nfsgw-pnfs-{}", std::process::id());
    moto.bucket(&bucket);
    let ds = [gateway(&moto, &bucket, ""), gateway(&moto, &bucket, "")];
    let addrs: Vec<SocketAddr> = ds.iter().map(|g| g.tcp_addr()).collect();
    let mds = gateway(&moto, &bucket, &pnfs_section(&addrs));
    // §13.1: the metadata server says so, the data servers do not.
    let f = exchange_flags(&mds);
    assert_eq!(f & EXCHGID4_FLAG_USE_PNFS_MDS, EXCHGID4_FLAG_USE_PNFS_MDS);
    assert_eq!(f & EXCHGID4_FLAG_USE_NON_PNFS, 0);
    assert_ne!(exchange_flags(&ds[0]) & EXCHGID4_FLAG_USE_NON_PNFS, 0);

    let mut s = S::new(&mds, 1);
    let (open, fh) = s.create(b"big");
    // fs_layout_types and layout_types say flexfiles, layout_blksize the stripe unit.
    let (st, rest) = s.on(&fh, Ops::new().getattr(&LAYOUT_ATTRS));
    assert_eq!(st, NFS4_OK);
    let mut r = XdrReader::new(&rest);
    let n = r.u32().unwrap();
    let got: Vec<u32> = (0..n).map(|_| r.u32().unwrap()).collect();
    assert_eq!(got, LAYOUT_ATTRS);
    r.u32().unwrap();
    assert_eq!(r.u64().unwrap(), 0, "size");
    for _ in 0..2 {
        assert_eq!(
            (r.u32().unwrap(), r.u32().unwrap()),
            (1, LAYOUT4_FLEX_FILES)
        );
    }
    assert_eq!(r.u32().unwrap(), 1 << 20, "layout_blksize");

    // LAYOUTGET RW under the open stateid: one mirror of one data server, the
    // file's handle, the anonymous stateid, the file's synthetic credentials.
    let l = take_layout(&mut s, &fh, &layoutget(LAYOUTIOMODE4_RW, open)).unwrap();
    assert_eq!(l.ff.mirrors.len(), 1, "a write layout has one mirror");
    let d = &l.ff.mirrors[0][0];
    assert_eq!((d.fhs.len(), d.fhs[0].as_slice()), (1, fh.as_slice()));
    assert_eq!(d.stateid, [0; 16]);
    let ids = synthetic(&l);
    assert_eq!(l.ff.stripe_unit, 1 << 20);
    let at = device(&mut s, &fh, &d.deviceid).unwrap();
    assert!(addrs.contains(&at), "{at} is one of {addrs:?}");

    // NFSv3 UNSTABLE WRITE + COMMIT at the data server, with the layout's handle.
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    for (k, part) in data.chunks(65536).enumerate() {
        let rep = v3_as(at, ids, &Call::Write(&fh, (k * 65536) as u64, part));
        assert_eq!(v3call::status(&rep), 0, "WRITE at the data server");
    }
    let commit_at = v3_as(at, ids, &Call::Commit(&fh));
    assert_eq!(v3call::status(&commit_at), 0, "COMMIT");
    let c = LayoutCommit {
        offset: 0,
        length: data.len() as u64,
        reclaim: false,
        stateid: l.stateid,
        last_write: Some(data.len() as u64 - 1),
        mtime: Some((1_700_000_000, 5)),
        layout_type: LAYOUT4_FLEX_FILES,
    };
    let grew = commit(&mut s, &fh, &c).unwrap();
    assert!(
        grew.is_none() || grew == Some(data.len() as u64),
        "{grew:?}"
    );
    assert_eq!(s.size(&fh), data.len() as u64, "the size shows at once");
    let mut back = Vec::new();
    while back.len() < data.len() {
        back.extend(s.read(&fh, back.len() as u64, 65536));
    }
    assert_eq!(back, data, "the bytes written at the data server");

    // A LAYOUTCOMMIT beyond what the data servers wrote grows the file: the gap
    // reads as zeros (the metadata server's decision, layout_ops::layoutcommit).
    let far = LayoutCommit {
        length: ALL,
        last_write: Some((1 << 20) - 1),
        mtime: None,
        ..c
    };
    assert_eq!(commit(&mut s, &fh, &far), Ok(Some(1 << 20)));
    assert_eq!(s.size(&fh), 1 << 20);
    assert!(s.read(&fh, 200_000, 4096).iter().all(|b| *b == 0));

    hostile(&mut s, &fh, open, &l, &c);

    // Files spread over both data servers (placement by file id).
    let mut seen = std::collections::HashSet::new();
    for i in 0..16 {
        let (open, fh) = s.create(format!("f{i}").as_bytes());
        let l = take_layout(&mut s, &fh, &layoutget(LAYOUTIOMODE4_READ, open)).unwrap();
        seen.insert(l.ff.mirrors[0][0].deviceid);
    }
    assert_eq!(seen.len(), 2, "files land on every data server");
}

/// Hostile values and the RFC's answers, on a file holding an RW layout `l`.
fn hostile(s: &mut S, fh: &[u8], open: [u8; 16], l: &Layout, c: &LayoutCommit) {
    // GETDEVICEINFO of a device that does not exist (§18.40.3), of another type,
    // and too small a maxcount.
    assert_eq!(device(s, fh, &[0xee; 16]), Err(NFS4ERR_NOENT));
    let id = l.ff.mirrors[0][0].deviceid;
    let (st, _) = s.on(fh, Ops::new().getdeviceinfo(&id, 1, 0));
    assert_eq!(st, NFS4ERR_UNKNOWN_LAYOUTTYPE);
    let (st, rest) = s.on(fh, Ops::new().getdeviceinfo(&id, LAYOUT4_FLEX_FILES, 8));
    assert_eq!(st, NFS4ERR_TOOSMALL);
    assert!(XdrReader::new(&rest).u32().unwrap() > 8, "gdir_mincount");
    // LAYOUTGET ranges near 2^64, empty ones, minlength past length (§18.43.3).
    for (offset, length, minlength) in [
        (u64::MAX - 10, 100, 0),
        (0, 0, 0),
        (10, 100, 200),
        (u64::MAX - 10, ALL, 100),
    ] {
        let a = LayoutGet {
            offset,
            length,
            minlength,
            ..layoutget(LAYOUTIOMODE4_READ, open)
        };
        assert_eq!(take_layout(s, fh, &a).err(), Some(NFS4ERR_INVAL), "{a:?}");
    }
    // Iomode ANY, special stateids, a layout too large for maxcount.
    let any = layoutget(LAYOUTIOMODE4_ANY, open);
    assert_eq!(take_layout(s, fh, &any).err(), Some(NFS4ERR_BADIOMODE));
    let anon = layoutget(LAYOUTIOMODE4_READ, [0; 16]);
    assert_eq!(take_layout(s, fh, &anon).err(), Some(NFS4ERR_BAD_STATEID));
    let small = LayoutGet {
        maxcount: 16,
        ..layoutget(LAYOUTIOMODE4_READ, open)
    };
    assert_eq!(take_layout(s, fh, &small).err(), Some(NFS4ERR_TOOSMALL));
    // LAYOUTCOMMIT: a last write offset near 2^64 or outside the range is INVAL.
    for last in [u64::MAX, u64::MAX - 1, c.length] {
        let bad = LayoutCommit {
            last_write: Some(last),
            ..*c
        };
        assert_eq!(commit(s, fh, &bad), Err(NFS4ERR_INVAL), "{last}");
    }
    // LAYOUTRETURN of a file that holds no layout (§18.44.3).
    let (open2, fh2) = s.create(b"never");
    let r2 = Return::File {
        offset: 0,
        length: ALL,
        stateid: open2,
    };
    assert_eq!(
        give_back(s, &fh2, LAYOUTIOMODE4_ANY, &r2),
        Err(NFS4ERR_NOMATCHING_LAYOUT)
    );
    // Returning READ (never held) keeps RW: idempotent, the stateid advances.
    let r = Return::File {
        offset: 0,
        length: ALL,
        stateid: l.stateid,
    };
    let left = give_back(s, fh, LAYOUTIOMODE4_READ, &r)
        .unwrap()
        .expect("RW is left");
    let r = Return::File {
        offset: 0,
        length: ALL,
        stateid: left,
    };
    assert_eq!(
        give_back(s, fh, LAYOUTIOMODE4_ANY, &r),
        Ok(None),
        "all returned"
    );
    // The freed layout stateid: nothing to commit or return any more.
    let gone = LayoutCommit {
        stateid: left,
        ..*c
    };
    assert_eq!(commit(s, fh, &gone), Err(NFS4ERR_BAD_STATEID));
    assert_eq!(
        give_back(s, fh, LAYOUTIOMODE4_ANY, &r),
        Err(NFS4ERR_NOMATCHING_LAYOUT)
    );
    // Bulk returns with nothing held are fine.
    assert_eq!(give_back(s, fh, LAYOUTIOMODE4_ANY, &Return::All), Ok(None));
    assert_eq!(give_back(s, fh, LAYOUTIOMODE4_ANY, &Return::Fsid), Ok(None));
}

/// `[pnfs]` off (the default): no MDS flag, no layout types, the operations are
/// NFS4ERR_NOTSUPP (the server offers no pNFS, RFC 8881 §12.2.1).
#[test]
fn off_means_notsupp() {
    let gw = Gw::start(&GwOpts {
        rdma: false,
        ..Default::default()
    });
    let f = exchange_flags(&gw);
    assert_eq!(
        f & (EXCHGID4_FLAG_USE_PNFS_MDS | EXCHGID4_FLAG_USE_NON_PNFS),
        EXCHGID4_FLAG_USE_NON_PNFS
    );
    let mut s = S::new(&gw, 1);
    let (open, fh) = s.create(b"f");
    let (st, rest) = s.on(&fh, Ops::new().getattr(&LAYOUT_ATTRS));
    assert_eq!(st, NFS4_OK);
    let mut r = XdrReader::new(&rest);
    let n = r.u32().unwrap();
    let got: Vec<u32> = (0..n).map(|_| r.u32().unwrap()).collect();
    assert_eq!(got, [1 << 4, 1 << 30], "only size and fs_layout_types");
    r.skip(4 + 8).unwrap();
    assert_eq!(r.u32().unwrap(), 0, "no layout types");
    assert_eq!(
        take_layout(&mut s, &fh, &layoutget(LAYOUTIOMODE4_RW, open)).err(),
        Some(NFS4ERR_NOTSUPP)
    );
    assert_eq!(device(&mut s, &fh, &[1; 16]), Err(NFS4ERR_NOTSUPP));
    let list = Ops::new().getdevicelist(LAYOUT4_FLEX_FILES, 1, 0, &[0; 8]);
    assert_eq!(s.on(&fh, list).0, NFS4ERR_NOTSUPP);
    let r = Return::File {
        offset: 0,
        length: ALL,
        stateid: open,
    };
    assert_eq!(
        give_back(&mut s, &fh, LAYOUTIOMODE4_ANY, &r),
        Err(NFS4ERR_NOTSUPP)
    );
    let c = LayoutCommit {
        offset: 0,
        length: 1,
        reclaim: false,
        stateid: open,
        last_write: None,
        mtime: None,
        layout_type: LAYOUT4_FLEX_FILES,
    };
    assert_eq!(commit(&mut s, &fh, &c), Err(NFS4ERR_NOTSUPP));
}

/// A metadata server alone (memory backend; the data server it names is never
/// reached: recalls are the metadata server's business).
fn lone_mds() -> Gw {
    Gw::start_text(|dir| {
        format!(
            "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\n[backend]\nkind = \"memory\"\n\
             [state]\ndir = \"{}\"\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{}",
            dir.display(),
            // Never probed: the data server is never reached, and must stay placed.
            pnfs_with(&["127.0.0.1:9".parse().unwrap()], "probe_ms = 0\n")
        )
    })
}

/// OPEN (create) `name` in the root through a back-channel client: stateid, handle.
fn open_a(c: &mut nfs4_client::Tcp41, name: &[u8]) -> ([u8; 16], Vec<u8>) {
    use nfs4_client::{expect_op, skip_sequence_ok, Claim, How, WANT_NO_DELEG};
    let id = c.clientid;
    let (st, res) = c.seq_run(|o| {
        o.putrootfh()
            .open(
                id,
                name,
                3 | WANT_NO_DELEG,
                0,
                How::Unchecked,
                Claim::Null(name),
            )
            .getfh()
    });
    assert_eq!(st, NFS4_OK, "OPEN");
    let mut r = res.reader();
    expect_op(&mut r, nfs_wire::nfs4::OP_SEQUENCE);
    skip_sequence_ok(&mut r);
    expect_op(&mut r, nfs_wire::nfs4::OP_PUTROOTFH);
    expect_op(&mut r, nfs_wire::nfs4::OP_OPEN);
    let open = nfs_wire::v4reply::open_ok(&mut r).unwrap();
    expect_op(&mut r, nfs_wire::nfs4::OP_GETFH);
    (open.stateid, r.opaque_var(128).unwrap().to_vec())
}

/// PUTFH `fh` + `op` through a back-channel client: `op`'s status and results.
fn on_a(c: &mut nfs4_client::Tcp41, fh: &[u8], op: Ops) -> (u32, Vec<u8>) {
    use nfs4_client::{expect_op, skip_sequence_ok};
    let (_, res) = c.seq_run(|o| o.putfh(fh).append(op));
    let mut r = res.reader();
    expect_op(&mut r, nfs_wire::nfs4::OP_SEQUENCE);
    skip_sequence_ok(&mut r);
    assert_eq!(expect_op(&mut r, nfs_wire::nfs4::OP_PUTFH), NFS4_OK);
    r.u32().unwrap();
    let st = r.u32().unwrap();
    (st, r.rest().to_vec())
}

/// Answers a CB_LAYOUTRECALL on `c`'s back channel with `status`; what it recalled.
fn answer_recall(c: &mut nfs4_client::Tcp41, status: u32) -> v4pnfs::CbLayoutRecall {
    let rec = c
        .next_callback(Duration::from_secs(10))
        .expect("a CB_LAYOUTRECALL");
    let (xid, what) = v4pnfs::decode_layoutrecall(&rec).unwrap_or_else(|e| panic!("{e}"));
    let reply = v4pnfs::layoutrecall_reply(xid, &what, status);
    c.s.write_all(&nfs_wire::rpccall::record(&reply).unwrap())
        .unwrap();
    what
}

/// RFC 8881 §12.5.5, §20.3: another client's truncate (SETATTR of the size) recalls
/// a client's layout over its back channel — CB_LAYOUTRECALL of the file, the layout
/// stateid one seqid on — and is answered NFS4ERR_DELAY (LAYOUTGET of the file
/// NFS4ERR_RECALLCONFLICT for the recalled client) until the layout comes back by
/// LAYOUTRETURN; an NFSv3 REMOVE gets NFS3ERR_JUKEBOX until the client answers
/// NFS4ERR_NOMATCHING_LAYOUT (it holds none), and so does an NFSv3 RENAME over a file
/// with a layout. (The counters: `layouts_tests.rs`.)
#[test]
fn a_truncate_or_remove_by_another_client_recalls_the_layout() {
    const NFS4ERR_DELAY: u32 = 10008;
    const NFS4ERR_RECALLCONFLICT: u32 = 10061;
    const NFS3ERR_JUKEBOX: u32 = 10008;
    let mds = lone_mds();
    let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
    a.session(b"pnfs-recall-a", nfs4_client::CONN_BACK_CHAN);
    assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    // The back channel is probed (CB_NULL) before recalls can go over it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.cb_nulls == 0 {
        assert!(a.next_callback(Duration::from_millis(50)).is_none());
        assert!(Instant::now() < deadline, "no CB_NULL probe");
    }
    std::thread::sleep(Duration::from_millis(200));
    let (open, fh) = open_a(&mut a, b"recalled");
    let get = |a: &mut nfs4_client::Tcp41, sid| {
        let (st, rest) = on_a(
            a,
            &fh,
            Ops::new().layoutget(&layoutget(LAYOUTIOMODE4_RW, sid)),
        );
        (st == NFS4_OK).then(|| v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap())
    };
    let granted = get(&mut a, open).expect("LAYOUTGET").stateid;

    // Client B truncates: DELAY while A's layout is being recalled.
    let mut b = S::new(&mds, 1);
    let truncate = |b: &mut S| {
        let size = Ops::new().setattr(&[0; 16], &[1 << 4], &0u64.to_be_bytes());
        b.on(&fh, size).0
    };
    assert_eq!(truncate(&mut b), NFS4ERR_DELAY);
    let cb = answer_recall(&mut a, NFS4_OK);
    assert_eq!(
        (cb.layout_type, cb.iomode, cb.changed),
        (LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, false)
    );
    assert_eq!(
        (cb.fh.as_slice(), cb.offset, cb.length),
        (fh.as_slice(), 0, ALL)
    );
    assert_eq!(cb.stateid[4..], granted[4..], "the layout stateid");
    let seq = |s: &[u8; 16]| u32::from_be_bytes(s[..4].try_into().unwrap());
    assert_eq!(
        seq(&cb.stateid),
        seq(&granted) + 1,
        "one seqid on (§12.5.3)"
    );
    // Not returned yet: B still waits, A may not take the layout again.
    assert_eq!(truncate(&mut b), NFS4ERR_DELAY);
    assert!(get(&mut a, cb.stateid).is_none());
    let (st, _) = on_a(
        &mut a,
        &fh,
        Ops::new().layoutget(&layoutget(LAYOUTIOMODE4_RW, open)),
    );
    assert_eq!(st, NFS4ERR_RECALLCONFLICT);
    let r = Return::File {
        offset: 0,
        length: ALL,
        stateid: cb.stateid,
    };
    let (st, _) = on_a(
        &mut a,
        &fh,
        Ops::new().layoutreturn(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &r),
    );
    assert_eq!(st, NFS4_OK, "LAYOUTRETURN of the recalled layout");
    assert_eq!(
        truncate(&mut b),
        NFS4_OK,
        "the truncate goes on once it is back"
    );

    // OPEN UNCHECKED4 with a size (open(2) with O_TRUNC) is a truncate too
    // (§12.5.5): DELAY until A says it holds no layout.
    get(&mut a, open).expect("a layout again");
    let size0 = 0u64.to_be_bytes();
    let open_trunc = |b: &mut S| {
        let how = How::WithAttrs {
            mode: UNCHECKED4,
            attrs: Fattr {
                bitmap: &[1 << 4],
                values: &size0,
            },
        };
        let ops = Ops::new().putrootfh().open(
            b.clientid,
            b"recalled",
            3 | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
            0,
            how,
            Claim::Null(b"recalled"),
        );
        b.seq_call(ops).status
    };
    assert_eq!(open_trunc(&mut b), NFS4ERR_DELAY);
    answer_recall(&mut a, NFS4ERR_NOMATCHING_LAYOUT);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match open_trunc(&mut b) {
            NFS4_OK => break,
            NFS4ERR_DELAY => assert!(Instant::now() < deadline, "still DELAY"),
            st => panic!("OPEN answered {st}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    // NFSv3 REMOVE: JUKEBOX until A says it holds no layout.
    get(&mut a, open).expect("a layout again");
    let mut v3c = nfs4_client::V3::connect(mds.tcp_addr());
    let root = v3c.mount_root();
    let mut args = Vec::new();
    for part in [&root[..], b"recalled"] {
        args.extend((part.len() as u32).to_be_bytes());
        args.extend(part);
        args.resize(args.len().div_ceil(4) * 4, 0);
    }
    let remove = |v: &mut nfs4_client::V3| {
        v3call::status(&v.call(
            nfs_wire::NFS_PROGRAM,
            nfs_wire::nfs3::NFSPROC3_REMOVE,
            &args,
        ))
    };
    assert_eq!(remove(&mut v3c), NFS3ERR_JUKEBOX);
    answer_recall(&mut a, NFS4ERR_NOMATCHING_LAYOUT);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match remove(&mut v3c) {
            0 => break,
            NFS3ERR_JUKEBOX => assert!(Instant::now() < deadline, "still JUKEBOX"),
            st => panic!("REMOVE answered {st}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    // NFSv3 RENAME over a file A holds a layout of (§12.5.5: the object at the target
    // name goes away as with REMOVE): JUKEBOX until A says it holds no layout of
    // *that* file, then the name is the renamed file.
    let (t_open, t_fh) = open_a(&mut a, b"target");
    let (st, _) = on_a(
        &mut a,
        &t_fh,
        Ops::new().layoutget(&layoutget(LAYOUTIOMODE4_RW, t_open)),
    );
    assert_eq!(st, NFS4_OK, "LAYOUTGET of the rename's target");
    let (_, s_fh) = open_a(&mut a, b"source");
    let mut rargs = Vec::new();
    for part in [&root[..], b"source", &root[..], b"target"] {
        rargs.extend((part.len() as u32).to_be_bytes());
        rargs.extend(part);
        rargs.resize(rargs.len().div_ceil(4) * 4, 0);
    }
    let rename = |v: &mut nfs4_client::V3| {
        v3call::status(&v.call(
            nfs_wire::NFS_PROGRAM,
            nfs_wire::nfs3::NFSPROC3_RENAME,
            &rargs,
        ))
    };
    assert_eq!(rename(&mut v3c), NFS3ERR_JUKEBOX);
    let cb = answer_recall(&mut a, NFS4ERR_NOMATCHING_LAYOUT);
    assert_eq!(cb.fh, t_fh, "the recall names the file the rename replaces");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match rename(&mut v3c) {
            0 => break,
            NFS3ERR_JUKEBOX => assert!(Instant::now() < deadline, "still JUKEBOX"),
            st => panic!("RENAME answered {st}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, res) = a.seq_run(|o| o.putrootfh().lookup(b"target").getfh());
    assert_eq!(st, NFS4_OK, "LOOKUP of the target after the rename");
    let mut r = res.reader();
    for op in [
        nfs_wire::nfs4::OP_SEQUENCE,
        nfs_wire::nfs4::OP_PUTROOTFH,
        nfs_wire::nfs4::OP_LOOKUP,
    ] {
        nfs4_client::expect_op(&mut r, op);
        if op == nfs_wire::nfs4::OP_SEQUENCE {
            nfs4_client::skip_sequence_ok(&mut r);
        }
    }
    nfs4_client::expect_op(&mut r, nfs_wire::nfs4::OP_GETFH);
    assert_eq!(
        r.opaque_var(128).unwrap(),
        &s_fh[..],
        "the name is the renamed file"
    );
}

/// A gateway on the shared `fs` directory `root` (`backend.shared`: the handle key
/// and conditional writes every gateway on it agrees on) with a 10 s lease.
fn shared_fs(root: &std::path::Path, pnfs: &str) -> Gw {
    shared_fs_on(root, "127.0.0.1:0".parse().unwrap(), pnfs)
}

/// `shared_fs` listening on `listen`.
fn shared_fs_on(root: &std::path::Path, listen: SocketAddr, pnfs: &str) -> Gw {
    Gw::start_text(|dir| {
        format!(
            "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
             [tcp]\nlisten = \"{listen}\"\n\
             [backend]\nkind = \"fs\"\nroot = \"{}\"\nshared = true\n\
             [state]\ndir = \"{}\"\n[nfs4]\nlease_time_s = 10\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{pnfs}",
            root.display(),
            dir.display()
        )
    })
}

const NFS3ERR_ACCES: u32 = 13;

/// Fencing (RFC 8435 §2.2), a metadata server and a data server on one shared `fs`
/// directory: a layout's synthetic credentials write and commit through the data
/// server (and through the metadata server's own NFSv3); forged ones — another id, the
/// right uid with another gid, the ids on a directory — are NFS3ERR_ACCES while a real
/// user's keep the export's rules; a layout recalled and not returned within the lease
/// is revoked and its file fenced before the conflicting truncate proceeds: its
/// credentials are NFS3ERR_ACCES at the metadata server at once and at the data server
/// within `fence::WINDOW`; a layout granted after carries new credentials that work.
#[test]
fn a_revoked_layouts_credentials_are_refused_by_every_data_server() {
    const NFS4ERR_DELAY: u32 = 10008;
    let root = tempfile::tempdir().unwrap();
    let ds = shared_fs(root.path(), "");
    let mds = shared_fs(root.path(), &pnfs_section(&[ds.tcp_addr()]));
    let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
    a.session(b"pnfs-fence-a", nfs4_client::CONN_BACK_CHAN);
    assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let (open, fh) = open_a(&mut a, b"fenced");
    let (st, rest) = on_a(
        &mut a,
        &fh,
        Ops::new().layoutget(&layoutget(LAYOUTIOMODE4_RW, open)),
    );
    assert_eq!(st, NFS4_OK, "LAYOUTGET");
    let g = v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap();
    let old = Layout {
        stateid: g.stateid,
        ff: v4pnfs::ff_layout(&g.layouts[0].body).unwrap(),
    };
    let ids = synthetic(&old);
    let status = |at, who, call: &Call| v3call::status(&v3_as(at, who, call));
    for at in [ds.tcp_addr(), mds.tcp_addr()] {
        assert_eq!(status(at, ids, &Call::Write(&fh, 0, b"layout")), 0, "WRITE");
        assert_eq!(status(at, ids, &Call::Commit(&fh)), 0, "COMMIT");
        assert_eq!(status(at, ids, &Call::Read(&fh, 0, 6)), 0, "READ");
    }
    // Forged synthetic ids, and the right ones where no layout points.
    let mut v3c = nfs4_client::V3::connect(ds.tcp_addr());
    let dir = v3c.mount_root();
    let forged = [
        (ids.0 ^ 1, ids.1),
        (ids.0, ids.1 ^ 1),
        (u32::MAX, u32::MAX),
        (1 << 31, 0),
    ];
    for who in forged {
        let w = status(ds.tcp_addr(), who, &Call::Write(&fh, 0, b"forged"));
        assert_eq!(w, NFS3ERR_ACCES, "{who:?}");
        assert_eq!(
            status(ds.tcp_addr(), who, &Call::Commit(&fh)),
            NFS3ERR_ACCES
        );
    }
    let on_dir = status(ds.tcp_addr(), ids, &Call::Lookup(&dir, "fenced"));
    assert_eq!(on_dir, NFS3ERR_ACCES, "a file's ids on a directory");
    assert_eq!(
        status(ds.tcp_addr(), (0, 0), &Call::Write(&fh, 6, b"root")),
        0
    );

    // B truncates; A never answers the recall: DELAY for a lease, then A's layout is
    // revoked, its file fenced first, and the truncate goes on a fence window later.
    // A writes through the data server meanwhile, so the data server holds the epoch
    // (the old one) in its cache when the fence comes.
    let mut b = S::new(&mds, 1);
    let truncate = |b: &mut S| {
        let size = Ops::new().setattr(&[0; 16], &[1 << 4], &0u64.to_be_bytes());
        b.on(&fh, size).0
    };
    assert_eq!(truncate(&mut b), NFS4ERR_DELAY);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Accepted until the fence, refused once the data server read the new epoch.
        let w = status(ds.tcp_addr(), ids, &Call::Write(&fh, 0, b"w"));
        assert!(w == 0 || w == NFS3ERR_ACCES, "WRITE answered {w}");
        match truncate(&mut b) {
            NFS4_OK => break,
            NFS4ERR_DELAY => assert!(Instant::now() < deadline, "never revoked"),
            st => panic!("SETATTR answered {st}"),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // The data server trusts an epoch it read for at most the window (2 s) after the
    // bump, and the truncate waited that out before it went on: from its reply on, the
    // old credentials are refused everywhere, so no fenced WRITE lands after the
    // truncate (a truncated file growing back).
    let w = status(mds.tcp_addr(), ids, &Call::Write(&fh, 0, b"late"));
    assert_eq!(w, NFS3ERR_ACCES, "fenced at the metadata server");
    let w = status(ds.tcp_addr(), ids, &Call::Write(&fh, 0, b"late"));
    assert_eq!(
        w, NFS3ERR_ACCES,
        "fenced at the data server once the truncate is done"
    );
    assert_eq!(
        status(ds.tcp_addr(), ids, &Call::Commit(&fh)),
        NFS3ERR_ACCES
    );
    assert_eq!(b.size(&fh), 0, "the late writes did not land");

    // A layout granted now carries the new epoch's ids, which work.
    let (open_b, _) = b.create(b"fenced");
    let fresh = take_layout(&mut b, &fh, &layoutget(LAYOUTIOMODE4_RW, open_b)).unwrap();
    let new_ids = synthetic(&fresh);
    assert_ne!(new_ids, ids);
    assert_eq!(
        status(ds.tcp_addr(), new_ids, &Call::Write(&fh, 0, b"fresh")),
        0
    );
    assert_eq!(status(ds.tcp_addr(), new_ids, &Call::Commit(&fh)), 0);
}

/// The value of one series of the gateway's metrics (0 when absent).
fn metric(gw: &Gw, series: &str) -> u64 {
    gw.metric(series)
}

/// LAYOUTGET of `fh` through a back-channel client: the layout stateid and the device
/// id of each mirror's data server.
fn layout_a(
    a: &mut nfs4_client::Tcp41,
    fh: &[u8],
    iomode: u32,
    sid: [u8; 16],
) -> Result<([u8; 16], Vec<[u8; 16]>), u32> {
    let (st, rest) = on_a(a, fh, Ops::new().layoutget(&layoutget(iomode, sid)));
    if st != NFS4_OK {
        return Err(st);
    }
    let g = v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap();
    let ff = v4pnfs::ff_layout(&g.layouts[0].body).unwrap();
    Ok((
        g.stateid,
        ff.mirrors.iter().map(|m| m[0].deviceid).collect(),
    ))
}

/// GETDEVICEINFO through a back-channel client: the data server's address.
fn addr_of(a: &mut nfs4_client::Tcp41, fh: &[u8], id: &[u8; 16]) -> SocketAddr {
    let (st, rest) = on_a(a, fh, Ops::new().getdeviceinfo(id, LAYOUT4_FLEX_FILES, 0));
    assert_eq!(st, NFS4_OK, "GETDEVICEINFO");
    let (_, body, _) = v4pnfs::getdeviceinfo_ok(&mut XdrReader::new(&rest)).unwrap();
    let d = v4pnfs::ff_device(&body).unwrap();
    v4pnfs::uaddr(&d.netaddrs[0].1).unwrap()
}

/// Answers every CB_LAYOUTRECALL that comes within a second with
/// NFS4ERR_NOMATCHING_LAYOUT (the client holds nothing of it): how many.
fn drain_recalls(a: &mut nfs4_client::Tcp41) -> usize {
    let mut n = 0;
    while let Some(rec) = a.next_callback(Duration::from_secs(1)) {
        let (xid, what) = v4pnfs::decode_layoutrecall(&rec).unwrap_or_else(|e| panic!("{e}"));
        let reply = v4pnfs::layoutrecall_reply(xid, &what, NFS4ERR_NOMATCHING_LAYOUT);
        a.s.write_all(&nfs_wire::rpccall::record(&reply).unwrap())
            .unwrap();
        n += 1;
    }
    n
}

/// Data server failure at the metadata server (README "Scaling out with pNFS"): two
/// data servers on one shared `fs` directory, probed every 100 ms (down after two
/// failures in a row). One is stopped: within seconds its probes mark it down
/// (`nfsgw_pnfs_data_server_up` 0), every layout naming it — and only those — is
/// recalled over the back channel (RFC 8881 §12.5.5), a LAYOUTRETURN's ff_ioerr4 list (RFC
/// 8435 §9.3) is counted against the server, and new layouts, READ and RW, name only
/// the live server. LAYOUTERROR (RFC 7862 §15.6) about the live server is counted
/// and does not mark it down (the probe decides); an unknown device id is accepted
/// and counted apart; a stateid that is not this file's layout is BAD_STATEID;
/// LAYOUTSTATS is acknowledged. Both stopped: LAYOUTGET is NFS4ERR_LAYOUTUNAVAILABLE
/// (RFC 8881 §18.43.3: I/O through the metadata server). One restarted at its
/// address: placed in layouts again.
#[test]
fn a_dead_data_server_is_left_out_of_layouts_and_its_layouts_recalled() {
    const NFS4ERR_LAYOUTUNAVAILABLE: u32 = 10059;
    const NFS4ERR_NXIO: u32 = 6;
    use nfs_wire::v4pnfs::DeviceError;
    use std::collections::HashSet;
    let root = tempfile::tempdir().unwrap();
    let at = [free_addr(), free_addr()];
    let mut ds: Vec<Option<Gw>> = at
        .iter()
        .map(|a| Some(shared_fs_on(root.path(), *a, "")))
        .collect();
    // A stopped gateway refuses connections at once; the long timeout keeps a live
    // one from looking dead on a loaded machine (two 1 s stalls in a row).
    let probing = "probe_ms = 100\nprobe_timeout_ms = 1000\nprobe_failures = 2\n";
    let mds = shared_fs(root.path(), &pnfs_with(&at, probing));
    let series = |name: &str, i: usize| format!("{name}{{address=\"{}\"}}", at[i]);
    let up = |i| metric(&mds, &series("nfsgw_pnfs_data_server_up", i));
    let errors = |i| metric(&mds, &series("nfsgw_pnfs_data_server_errors_total", i));
    wait_for("both data servers up", 5, || up(0) == 1 && up(1) == 1);

    let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
    a.minor = 2; // LAYOUTERROR and LAYOUTSTATS are NFSv4.2's
    a.session(b"pnfs-failover-a", nfs4_client::CONN_BACK_CHAN);
    assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.cb_nulls == 0 {
        assert!(a.next_callback(Duration::from_millis(50)).is_none());
        assert!(Instant::now() < deadline, "no CB_NULL probe");
    }
    // RW layouts until files sit on both data servers: (open, fh, layout, server).
    let mut files = Vec::new();
    let mut dev = [None, None];
    for i in 0..64 {
        let (open, fh) = open_a(&mut a, format!("f{i}").as_bytes());
        let (sid, devs) = layout_a(&mut a, &fh, LAYOUTIOMODE4_RW, open).unwrap();
        assert_eq!(devs.len(), 1, "a write layout has one mirror");
        let k = at
            .iter()
            .position(|x| *x == addr_of(&mut a, &fh, &devs[0]))
            .unwrap();
        dev[k] = Some(devs[0]);
        files.push((open, fh, sid, k));
        if dev.iter().all(Option::is_some) {
            break;
        }
    }
    let dev = dev.map(|d| d.expect("files land on both data servers"));
    let on = |k: usize| -> HashSet<Vec<u8>> {
        files
            .iter()
            .filter(|f| f.3 == k)
            .map(|f| f.1.clone())
            .collect()
    };
    let (on0, on1) = (on(0), on(1));

    // Data server 1 stops.
    ds[1] = None;
    let stopped = Instant::now();
    wait_for("data server 1 marked down", 10, || up(1) == 0);
    assert_eq!(up(0), 1);
    let mut recalled = std::collections::HashMap::new();
    while recalled.len() < on1.len() {
        let cb = answer_recall(&mut a, NFS4_OK);
        assert_eq!(
            (cb.iomode, cb.offset, cb.length),
            (LAYOUTIOMODE4_ANY, 0, ALL)
        );
        assert!(on1.contains(&cb.fh), "only layouts naming the dead server");
        recalled.insert(cb.fh.clone(), cb.stateid);
    }
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
    assert!(
        a.next_callback(Duration::from_millis(500)).is_none(),
        "the layouts on the live server stay"
    );
    let n1 = on1.len() as u64;
    assert_eq!(
        metric(&mds, "nfsgw_pnfs_layouts_recalled_ds_down_total"),
        n1
    );
    let open_of = |fh: &Vec<u8>| files.iter().find(|f| &f.1 == fh).unwrap().0;
    // Each return also reports the I/O done through the dead server (ff_iostats4,
    // RFC 8435 §9.2.1): counted per data server at the metadata server.
    let io = v4pnfs::IoStats {
        deviceid: dev[1],
        read: (2, 8192),
        write: (3, 12288),
    };
    let reported = |what: &str, op: &str| {
        let name = format!("nfsgw_pnfs_data_server_reported_{what}_total");
        metric(
            &mds,
            &format!("{name}{{address=\"{}\",op=\"{op}\"}}", at[1]),
        )
    };
    // A return under a stateid that is no layout of this client's counts nothing
    // (the report is only read from a return that was accepted).
    if let Some((fh, sid)) = recalled.iter().next() {
        let mut forged = *sid;
        forged[15] ^= 0xff;
        let e = DeviceError {
            deviceid: dev[1],
            status: NFS4ERR_NXIO,
            opnum: nfs_wire::nfs4::OP_WRITE,
        };
        let body = v4pnfs::ff_layoutreturn_with(&[(0, ALL, forged, vec![e])], &[io]);
        let ret = Ops::new().layoutreturn_file_body(LAYOUTIOMODE4_ANY, &forged, &body);
        assert_ne!(
            on_a(&mut a, fh, ret).0,
            NFS4_OK,
            "LAYOUTRETURN, forged stateid"
        );
        assert_eq!(errors(1), 0, "a refused return's report is not counted");
        assert_eq!(reported("ops", "write"), 0);
    }
    for (fh, sid) in &recalled {
        // (Its LAYOUTGET before the return would let the layout go:
        // `a_client_recalled_for_a_dead_data_server_goes_on_at_once`.)
        let e = DeviceError {
            deviceid: dev[1],
            status: NFS4ERR_NXIO,
            opnum: nfs_wire::nfs4::OP_WRITE,
        };
        let body = v4pnfs::ff_layoutreturn_with(&[(0, ALL, *sid, vec![e])], &[io]);
        let ret = Ops::new().layoutreturn_file_body(LAYOUTIOMODE4_ANY, sid, &body);
        assert_eq!(on_a(&mut a, fh, ret).0, NFS4_OK, "LAYOUTRETURN");
    }
    assert_eq!(errors(1), n1, "ff_ioerr4 reports counted");
    let k = recalled.len() as u64;
    assert_eq!(
        [
            reported("ops", "read"),
            reported("bytes", "read"),
            reported("ops", "write"),
            reported("bytes", "write")
        ],
        [2 * k, 8192 * k, 3 * k, 12288 * k],
        "ff_iostats4 counted per data server"
    );
    // New layouts, READ and RW, of the recalled files and of new ones: the live one.
    for fh in recalled.keys() {
        let (_, devs) = layout_a(&mut a, fh, LAYOUTIOMODE4_RW, open_of(fh)).unwrap();
        assert_eq!(devs, [dev[0]]);
    }
    for i in 0..8 {
        let (open, fh) = open_a(&mut a, format!("g{i}").as_bytes());
        for iomode in [LAYOUTIOMODE4_READ, LAYOUTIOMODE4_RW] {
            let (_, devs) = layout_a(&mut a, &fh, iomode, open).unwrap();
            assert_eq!(devs, [dev[0]], "g{i} iomode {iomode}");
        }
    }

    // LAYOUTERROR about the live server: counted, probed at once, still up.
    let y = files.iter().find(|f| f.3 == 0).unwrap();
    assert!(on0.contains(&y.1));
    let (y_fh, y_sid) = (y.1.clone(), y.2);
    let e0 = DeviceError {
        deviceid: dev[0],
        status: NFS4ERR_NXIO,
        opnum: nfs_wire::nfs4::OP_READ,
    };
    let (st, _) = on_a(&mut a, &y_fh, Ops::new().layouterror(&y_sid, &[e0]));
    assert_eq!(st, NFS4_OK, "LAYOUTERROR");
    assert_eq!(errors(0), 1);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(up(0), 1, "a report is a hint: the probe decides");
    let unknown = DeviceError {
        deviceid: [0xee; 16],
        ..e0
    };
    let (st, _) = on_a(&mut a, &y_fh, Ops::new().layouterror(&y_sid, &[unknown]));
    assert_eq!(st, NFS4_OK, "an unknown device id is ignored");
    assert_eq!(metric(&mds, "nfsgw_pnfs_unknown_device_reports_total"), 1);
    assert_eq!(errors(0), 1);
    // Not this file's layout stateid: another file's, an open stateid.
    let other_sid = files.iter().find(|f| f.1 != y_fh && f.3 == 0).map(|f| f.2);
    for sid in other_sid.into_iter().chain([y.0]) {
        let (st, _) = on_a(&mut a, &y_fh, Ops::new().layouterror(&sid, &[e0]));
        assert_eq!(st, NFS4ERR_BAD_STATEID);
    }
    let (st, _) = on_a(&mut a, &y_fh, Ops::new().layoutstats(&y_sid, &dev[0]));
    assert_eq!(st, NFS4_OK, "LAYOUTSTATS");

    // Both stopped: no layout; the client's I/O goes through the metadata server.
    ds[0] = None;
    wait_for("data server 0 marked down", 10, || up(0) == 0);
    assert!(
        drain_recalls(&mut a) >= on0.len() + 8,
        "the live server's layouts"
    );
    let (open, fh) = open_a(&mut a, b"late");
    assert_eq!(
        layout_a(&mut a, &fh, LAYOUTIOMODE4_RW, open).err(),
        Some(NFS4ERR_LAYOUTUNAVAILABLE)
    );

    // Data server 1 back at its address: placed again, under a new device id (its
    // old one was deleted as it went down: RFC 8881 §20.12.3, never reused).
    ds[1] = Some(shared_fs_on(root.path(), at[1], ""));
    wait_for("data server 1 up again", 10, || up(1) == 1);
    let (_, devs) = layout_a(&mut a, &fh, LAYOUTIOMODE4_RW, open).unwrap();
    assert_eq!(devs.len(), 1);
    assert_ne!(devs[0], dev[1], "a deleted device id is not reused");
    assert_eq!(addr_of(&mut a, &fh, &devs[0]), at[1]);
    let (st, _) = on_a(
        &mut a,
        &fh,
        Ops::new().getdeviceinfo(&dev[1], LAYOUT4_FLEX_FILES, 0),
    );
    assert_eq!(st, NFS4ERR_NOENT, "the deleted id");
}

/// A back-channel client with its session and RECLAIM_COMPLETE, once the gateway's
/// CB_NULL probe came.
fn bc_client(mds: &Gw, owner: &[u8]) -> nfs4_client::Tcp41 {
    let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
    a.session(owner, nfs4_client::CONN_BACK_CHAN);
    assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.cb_nulls == 0 {
        assert!(a.next_callback(Duration::from_millis(50)).is_none());
        assert!(Instant::now() < deadline, "no CB_NULL probe");
    }
    a
}

/// GETDEVICEINFO asking for `notify`: the status, and gdir_notification.
fn ask_notify(
    c: &mut nfs4_client::Tcp41,
    fh: &[u8],
    id: &[u8; 16],
    notify: u32,
) -> (u32, Vec<u32>) {
    let op = Ops::new().getdeviceinfo_notify(id, LAYOUT4_FLEX_FILES, &[notify]);
    let (st, rest) = on_a(c, fh, op);
    if st != NFS4_OK {
        return (st, Vec::new());
    }
    let (_, _, bits) = v4pnfs::getdeviceinfo_ok(&mut XdrReader::new(&rest)).unwrap();
    (st, bits)
}

/// A file of `c`'s whose RW layout names the data server at `want`: its handle,
/// layout stateid and that server's device id (other files' layouts are returned).
fn file_on(
    c: &mut nfs4_client::Tcp41,
    want: SocketAddr,
    tag: &str,
) -> (Vec<u8>, [u8; 16], [u8; 16]) {
    for i in 0..64 {
        let (open, fh) = open_a(c, format!("{tag}{i}").as_bytes());
        let (sid, devs) = layout_a(c, &fh, LAYOUTIOMODE4_RW, open).unwrap();
        if addr_of(c, &fh, &devs[0]) == want {
            return (fh, sid, devs[0]);
        }
        let r = Return::File {
            offset: 0,
            length: ALL,
            stateid: sid,
        };
        let ret = Ops::new().layoutreturn(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &r);
        assert_eq!(on_a(c, &fh, ret).0, NFS4_OK, "LAYOUTRETURN");
    }
    panic!("no file placed on {want}");
}

/// CB_NOTIFY_DEVICEID (RFC 8881 §20.12, §18.40.3): client A asks GETDEVICEINFO for
/// CHANGE and DELETE notifications of a data server's id and is promised DELETE only
/// (gdir_notification); client B asks for CHANGE only and is promised nothing. The
/// server stops: A's layout naming it is recalled, and no deletion comes while A
/// holds it (§20.12.3); GETDEVICEINFO of the id is NFS4ERR_NOENT at once; once A
/// returns the layout, one CB_NOTIFY_DEVICEID DELETE of the flexfiles id comes over
/// A's back channel, and B gets no callback at all. The server back: a new id with
/// the same address.
#[test]
fn a_dead_data_servers_id_is_deleted_for_the_clients_that_asked() {
    use nfs_wire::v4pnfs::{decode_notify_deviceid, notify_deviceid_reply, DeviceNotice};
    let root = tempfile::tempdir().unwrap();
    let at = [free_addr(), free_addr()];
    let mut ds: Vec<Option<Gw>> = at
        .iter()
        .map(|a| Some(shared_fs_on(root.path(), *a, "")))
        .collect();
    let probing = "probe_ms = 100\nprobe_timeout_ms = 1000\nprobe_failures = 2\n";
    let mds = shared_fs(root.path(), &pnfs_with(&at, probing));
    let up = |i: usize| {
        let s = format!("nfsgw_pnfs_data_server_up{{address=\"{}\"}}", at[i]);
        metric(&mds, &s)
    };
    wait_for("both data servers up", 5, || up(0) == 1 && up(1) == 1);
    let mut a = bc_client(&mds, b"pnfs-notify-a");
    let mut b = bc_client(&mds, b"pnfs-notify-b");
    let (fh, _, d1) = file_on(&mut a, at[1], "n");
    let (change, delete) = (1 << NOTIFY_DEVICEID4_CHANGE, 1 << NOTIFY_DEVICEID4_DELETE);
    assert_eq!(
        ask_notify(&mut a, &fh, &d1, change | delete),
        (NFS4_OK, vec![delete])
    );
    assert_eq!(ask_notify(&mut b, &fh, &d1, change), (NFS4_OK, vec![]));
    assert_eq!(ask_notify(&mut b, &fh, &[7; 16], delete).0, NFS4ERR_NOENT);

    // Data server 1 stops.
    ds[1] = None;
    wait_for("data server 1 marked down", 10, || up(1) == 0);
    let cb = answer_recall(&mut a, NFS4_OK);
    assert_eq!(cb.fh, fh);
    assert!(
        a.next_callback(Duration::from_secs(1)).is_none(),
        "no deletion while a layout naming the id is held"
    );
    assert_eq!(ask_notify(&mut a, &fh, &d1, delete).0, NFS4ERR_NOENT);
    let r = Return::File {
        offset: 0,
        length: ALL,
        stateid: cb.stateid,
    };
    let ret = Ops::new().layoutreturn(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &r);
    assert_eq!(on_a(&mut a, &fh, ret).0, NFS4_OK, "LAYOUTRETURN");
    let rec = a
        .next_callback(Duration::from_secs(5))
        .expect("CB_NOTIFY_DEVICEID");
    let (xid, n) = decode_notify_deviceid(&rec).unwrap_or_else(|e| panic!("{e}"));
    let want = DeviceNotice {
        kind: NOTIFY_DEVICEID4_DELETE,
        layout_type: LAYOUT4_FLEX_FILES,
        deviceid: d1,
        immediate: false,
    };
    assert_eq!(n.notices, vec![want]);
    let reply = notify_deviceid_reply(xid, &n, NFS4_OK);
    a.s.write_all(&nfs_wire::rpccall::record(&reply).unwrap())
        .unwrap();
    assert!(
        a.next_callback(Duration::from_secs(1)).is_none(),
        "told once"
    );
    assert!(
        b.next_callback(Duration::from_secs(1)).is_none(),
        "B did not ask"
    );

    // Back at its address: a new id that names it.
    ds[1] = Some(shared_fs_on(root.path(), at[1], ""));
    wait_for("data server 1 up again", 10, || up(1) == 1);
    let (fh2, _, d1b) = file_on(&mut a, at[1], "m");
    assert_ne!(d1b, d1);
    assert_eq!(
        ask_notify(&mut a, &fh2, &d1b, delete),
        (NFS4_OK, vec![delete])
    );
}

/// A metadata server on the shared `fs` directory `root` with its state in `state`
/// (kept across restarts), naming the data server `ds`, a 30 s grace period.
fn mds_on(root: &std::path::Path, state: &std::path::Path, ds: SocketAddr) -> Gw {
    let pnfs = pnfs_with(&[ds], "probe_ms = 0\n");
    Gw::start_text(|_| {
        format!(
            "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\n\
             [backend]\nkind = \"fs\"\nroot = \"{}\"\nshared = true\n\
             [state]\ndir = \"{}\"\n[nfs4]\nlease_time_s = 10\ngrace_time_s = 30\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{pnfs}",
            root.display(),
            state.display()
        )
    })
}

/// LAYOUTCOMMIT with loca_reclaim (RFC 8881 §18.42.3) under `sid`: status, new size.
fn commit_a(
    c: &mut nfs4_client::Tcp41,
    fh: &[u8],
    sid: [u8; 16],
    reclaim: bool,
    last: u64,
) -> (u32, Option<u64>) {
    commit_t(c, fh, sid, reclaim, (Some(last), Some((1_000_000, 0))))
}

/// LAYOUTCOMMIT under `sid` with loca_last_write_offset and loca_time_modify as
/// given: status, new size.
fn commit_t(
    c: &mut nfs4_client::Tcp41,
    fh: &[u8],
    sid: [u8; 16],
    reclaim: bool,
    (last_write, mtime): (Option<u64>, Option<(i64, u32)>),
) -> (u32, Option<u64>) {
    let lc = LayoutCommit {
        offset: 0,
        length: ALL,
        reclaim,
        stateid: sid,
        last_write,
        mtime,
        layout_type: LAYOUT4_FLEX_FILES,
    };
    let (st, rest) = on_a(c, fh, Ops::new().layoutcommit(&lc));
    let size =
        (st == NFS4_OK).then(|| v4pnfs::layoutcommit_ok(&mut XdrReader::new(&rest)).unwrap());
    (st, size.flatten())
}

/// GETATTR of time_modify (attribute 53, RFC 8881 §5.8.2.43) through `c`.
fn mtime_a(c: &mut nfs4_client::Tcp41, fh: &[u8]) -> (i64, u32) {
    let (st, rest) = on_a(c, fh, Ops::new().getattr(&[0, 1 << 21]));
    assert_eq!(st, NFS4_OK, "GETATTR");
    let mut r = XdrReader::new(&rest);
    let n = r.u32().unwrap();
    r.skip(4 * n as usize + 4).unwrap();
    (r.i64().unwrap(), r.u32().unwrap())
}

/// `t` plus `ns` nanoseconds, as an nfstime4.
fn later(t: (i64, u32), ns: u64) -> (i64, u32) {
    let total = i128::from(t.0) * 1_000_000_000 + i128::from(t.1) + i128::from(ns);
    (
        (total.div_euclid(1_000_000_000)) as i64,
        total.rem_euclid(1_000_000_000) as u32,
    )
}

/// The wall clock now, as an nfstime4.
fn wall() -> (i64, u32) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (d.as_secs() as i64, d.subsec_nanos())
}

/// GETATTR of the size through `c`.
fn size_a(c: &mut nfs4_client::Tcp41, fh: &[u8]) -> u64 {
    let (st, rest) = on_a(c, fh, Ops::new().getattr(&[1 << 4]));
    assert_eq!(st, NFS4_OK, "GETATTR");
    let mut r = XdrReader::new(&rest);
    let n = r.u32().unwrap();
    r.skip(4 * n as usize + 4).unwrap();
    r.u64().unwrap()
}

/// Metadata server restart (RFC 8881 §12.7.4): a client writes through the data
/// server under a layout, and the metadata server restarts before its LAYOUTCOMMIT.
/// In the grace period LAYOUTGET is NFS4ERR_GRACE (§18.43.3); the client's
/// LAYOUTCOMMIT with loca_reclaim under its old layout stateid is accepted and the
/// size and mtime it sets are what GETATTR shows (§18.42.3); the same stateid on
/// another file, a forged one, or a client the previous run did not know:
/// NFS4ERR_RECLAIM_BAD; after the client's RECLAIM_COMPLETE (the grace period ends:
/// it was the only client) NFS4ERR_NO_GRACE, and LAYOUTGET works again.
#[test]
fn after_a_metadata_server_restart_layoutcommit_is_reclaimed_in_grace() {
    const NFS4ERR_GRACE: u32 = 10013;
    const NFS4ERR_NO_GRACE: u32 = 10033;
    const NFS4ERR_RECLAIM_BAD: u32 = 10034;
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let ds = shared_fs(root.path(), "");
    let mds = mds_on(root.path(), state.path(), ds.tcp_addr());
    let (fh, other_fh, sid) = {
        let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
        a.session(b"pnfs-reclaim-a", 0);
        assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
        let (open, fh) = open_a(&mut a, b"reclaimed");
        let (_, other_fh) = open_a(&mut a, b"never-laid-out");
        let l = take_layout_a(&mut a, &fh, open);
        // No grace period on a first start: a reclaim return is NO_GRACE, and the
        // layout is still held.
        assert_eq!(return_a(&mut a, &fh, true, l.stateid), NFS4ERR_NO_GRACE);
        let w = v3_as(
            ds.tcp_addr(),
            synthetic(&l),
            &Call::Write(&fh, 0, b"through the DS"),
        );
        assert_eq!(v3call::status(&w), 0, "WRITE at the data server");
        let c = v3_as(ds.tcp_addr(), synthetic(&l), &Call::Commit(&fh));
        assert_eq!(v3call::status(&c), 0, "COMMIT at the data server");
        (fh, other_fh, l.stateid)
    };
    drop(mds);
    let mds = mds_on(root.path(), state.path(), ds.tcp_addr());
    let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
    a.session(b"pnfs-reclaim-a", 0);
    let (st, _) = on_a(
        &mut a,
        &fh,
        Ops::new().layoutget(&layoutget(LAYOUTIOMODE4_RW, [0; 16])),
    );
    assert_eq!(st, NFS4ERR_GRACE, "LAYOUTGET in grace");
    // A client the previous run did not know.
    let mut x = nfs4_client::Tcp41::connect(mds.tcp_addr());
    x.session(b"pnfs-reclaim-x", 0);
    assert_eq!(commit_a(&mut x, &fh, sid, true, 99).0, NFS4ERR_RECLAIM_BAD);
    // Another file, a forged stateid.
    assert_eq!(
        commit_a(&mut a, &other_fh, sid, true, 99).0,
        NFS4ERR_RECLAIM_BAD
    );
    let mut forged = sid;
    forged[15] ^= 1;
    assert_eq!(
        commit_a(&mut a, &fh, forged, true, 99).0,
        NFS4ERR_RECLAIM_BAD
    );
    assert_eq!(size_a(&mut a, &fh), 14, "nothing changed yet");
    // LAYOUTRETURN with lora_reclaim (§18.44.3) before the LAYOUTCOMMIT: the same
    // checks; a return does not end the client's right to reclaim.
    reclaim_returns(&mut a, &mut x, (&fh, &other_fh), sid);
    // The reclaim: past what the data server wrote, so only it can make the size;
    // its time_modify is newer than the data server's write (and not ahead of this
    // server's clock), so it is the file's (§18.42.3).
    let written = mtime_a(&mut a, &fh);
    std::thread::sleep(Duration::from_millis(30));
    let stamp = later(written, 10_000_007);
    let reclaimed = commit_t(&mut a, &fh, sid, true, (Some(99), Some(stamp)));
    assert_eq!(reclaimed, (NFS4_OK, Some(100)));
    assert_eq!(size_a(&mut a, &fh), 100);
    assert_eq!(mtime_a(&mut a, &fh), stamp, "the client's time_modify");
    assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    assert_eq!(commit_a(&mut a, &fh, sid, true, 199).0, NFS4ERR_NO_GRACE);
    assert_eq!(commit_a(&mut x, &fh, sid, true, 199).0, NFS4ERR_NO_GRACE);
    assert_eq!(return_a(&mut a, &fh, true, sid), NFS4ERR_NO_GRACE);
    assert_eq!(size_a(&mut a, &fh), 100);
    // Grace over: a new layout (once the restart's fence window ran out:
    // NFS4ERR_LAYOUTTRYLATER until then, `state/layouts_boot.rs`).
    let (open, _) = open_a(&mut a, b"reclaimed");
    take_layout_after_restart(&mut a, &fh, open);
}

/// LAYOUTGET right after a metadata server restart: NFS4ERR_LAYOUTTRYLATER while the
/// boot epoch's fence window runs (a data server may still trust the previous boot
/// epoch and would refuse the new ids), then a layout.
fn take_layout_after_restart(c: &mut nfs4_client::Tcp41, fh: &[u8], open: [u8; 16]) -> Layout {
    const NFS4ERR_LAYOUTTRYLATER: u32 = 10058;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (st, rest) = on_a(
            c,
            fh,
            Ops::new().layoutget(&layoutget(LAYOUTIOMODE4_RW, open)),
        );
        match st {
            NFS4_OK => {
                let g = v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap();
                return Layout {
                    stateid: g.stateid,
                    ff: v4pnfs::ff_layout(&g.layouts[0].body).unwrap(),
                };
            }
            NFS4ERR_LAYOUTTRYLATER => assert!(Instant::now() < deadline, "still TRYLATER"),
            st => panic!("LAYOUTGET answered {st}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 27, a metadata server restart (RFC 8881 §12.7.4; RFC 8435 §2.2): the layouts
/// of the previous run are not kept, so the boot epoch in the store moves at start
/// and every synthetic id of the previous run is refused at every data server once
/// the fence window (2 s) after it ran out. A layout's ids work at the data server;
/// the metadata server restarts on the same store and `state.dir`; an NFSv3 truncate
/// at it right away is NFS3ERR_JUKEBOX (every file counts as laid out) until the
/// window ran out, and from its reply on no WRITE with the old ids lands anywhere:
/// the file stays truncated. After the grace period a new layout's ids work.
#[test]
fn after_a_metadata_server_restart_earlier_layouts_ids_are_fenced_before_a_truncate() {
    const NFS3ERR_JUKEBOX: u32 = 10008;
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let ds = shared_fs(root.path(), "");
    let mds = mds_on(root.path(), state.path(), ds.tcp_addr());
    let status = |at, who, call: &Call| v3call::status(&v3_as(at, who, call));
    let (fh, old) = {
        let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
        a.session(b"pnfs-boot-a", 0);
        assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
        let (open, fh) = open_a(&mut a, b"restarted");
        let ids = synthetic(&take_layout_a(&mut a, &fh, open));
        let w = status(ds.tcp_addr(), ids, &Call::WriteSync(&fh, 0, b"before"));
        assert_eq!(w, 0, "a layout's ids write through the data server");
        (fh, ids)
    };
    drop(mds);
    // The boot epoch moves after this, during the start.
    let restarted = Instant::now();
    let mds = mds_on(root.path(), state.path(), ds.tcp_addr());
    // The old ids still work at the data server within the window (it cached the
    // previous boot epoch), never after: the truncate waits that out.
    let mut v3c = nfs4_client::V3::connect(mds.tcp_addr());
    v3c.mount_root();
    let mut args = Vec::new();
    args.extend((fh.len() as u32).to_be_bytes());
    args.extend(&fh);
    args.resize(args.len().div_ceil(4) * 4, 0);
    // sattr3: mode, uid, gid unset; size 0; times unchanged; no guard.
    for w in [0u32, 0, 0, 1, 0, 0, 0, 0, 0] {
        args.extend(w.to_be_bytes());
    }
    let truncate = |v: &mut nfs4_client::V3| {
        v3call::status(&v.call(
            nfs_wire::NFS_PROGRAM,
            nfs_wire::nfs3::NFSPROC3_SETATTR,
            &args,
        ))
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut jukeboxes = 0;
    let first_sent = restarted.elapsed();
    loop {
        let w = status(ds.tcp_addr(), old, &Call::WriteSync(&fh, 0, b"during"));
        assert!(w == 0 || w == NFS3ERR_ACCES, "WRITE answered {w}");
        match truncate(&mut v3c) {
            0 => break,
            NFS3ERR_JUKEBOX => assert!(Instant::now() < deadline, "still JUKEBOX"),
            st => panic!("SETATTR answered {st}"),
        }
        jukeboxes += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    // The truncate went on no sooner than the boot epoch's move + the window (2 s),
    // which came after `restarted`.
    let waited = restarted.elapsed();
    assert!(
        waited >= Duration::from_secs(2),
        "the truncate went on {waited:?} after the restart ({jukeboxes} JUKEBOX)"
    );
    if first_sent < Duration::from_millis(1500) {
        assert!(jukeboxes > 0, "the truncate waited");
    }
    for at in [ds.tcp_addr(), mds.tcp_addr()] {
        let w = status(at, old, &Call::WriteSync(&fh, 0, b"late write"));
        assert_eq!(w, NFS3ERR_ACCES, "the previous run's ids at {at}");
        assert_eq!(status(at, old, &Call::Commit(&fh)), NFS3ERR_ACCES);
    }
    let mut b = S::new(&mds, 1);
    assert_eq!(b.size(&fh), 0, "no late write landed after the truncate");

    // The client of the previous run ends its grace (it was the only one) and gets
    // a new layout, whose ids work.
    let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
    a.session(b"pnfs-boot-a", 0);
    assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let (open, _) = open_a(&mut a, b"restarted");
    let new = synthetic(&take_layout_after_restart(&mut a, &fh, open));
    assert_ne!(new, old);
    let w = status(ds.tcp_addr(), new, &Call::WriteSync(&fh, 0, b"after"));
    assert_eq!(w, 0, "the new layout's ids");
}

/// LAYOUTCOMMIT's loca_time_modify (RFC 8881 §18.42.3: the server may take the
/// client's time or the time of the LAYOUTCOMMIT, and must not let time_modify flow
/// backwards): a time newer than the file's and not ahead of the server's clock is
/// what GETATTR shows; an older one (or one far in the past) changes nothing; one
/// ahead of the server's clock (far in the future too) is clamped to the time of the
/// LAYOUTCOMMIT; an nfstime4 that is no time (nseconds of 10^9 or more, §3.3.1; the
/// least int64 second) is NFS4ERR_INVAL and changes nothing.
#[test]
fn layoutcommit_takes_the_clients_time_modify_only_forward_and_never_ahead() {
    let root = tempfile::tempdir().unwrap();
    let ds = shared_fs(root.path(), "");
    let mds = shared_fs(root.path(), &pnfs_with(&[ds.tcp_addr()], "probe_ms = 0\n"));
    let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
    a.session(b"pnfs-mtime-a", 0);
    assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let (open, fh) = open_a(&mut a, b"stamped");
    let l = take_layout_a(&mut a, &fh, open);
    let w = v3_as(
        ds.tcp_addr(),
        synthetic(&l),
        &Call::WriteSync(&fh, 0, b"data"),
    );
    assert_eq!(v3call::status(&w), 0, "WRITE at the data server");
    let m0 = mtime_a(&mut a, &fh);
    let commit =
        |a: &mut nfs4_client::Tcp41, t| commit_t(a, &fh, l.stateid, false, (Some(3), Some(t))).0;
    for bad in [(m0.0 + 1, 1_000_000_000), (0, u32::MAX), (i64::MIN, 0)] {
        assert_eq!(commit(&mut a, bad), NFS4ERR_INVAL, "{bad:?}");
        assert_eq!(mtime_a(&mut a, &fh), m0, "{bad:?}");
    }
    for old in [
        (m0.0 - 10, m0.1),
        m0,
        (0, 0),
        (-1_000_000_000_000, 5),
        (i64::MIN + 1, 0),
    ] {
        assert_eq!(commit(&mut a, old), NFS4_OK, "{old:?}");
        assert_eq!(mtime_a(&mut a, &fh), m0, "never backwards: {old:?}");
    }
    std::thread::sleep(Duration::from_millis(30));
    let t = later(m0, 10_000_007);
    assert_eq!(commit(&mut a, t), NFS4_OK);
    assert_eq!(mtime_a(&mut a, &fh), t, "the client's newer time");
    let mut last = t;
    for ahead in [
        (i64::MAX, 999_999_999),
        (wall().0 + 3600, 0),
        later(wall(), 500_000_000),
    ] {
        let before = wall();
        assert_eq!(commit(&mut a, ahead), NFS4_OK, "{ahead:?}");
        let after = wall();
        let m = mtime_a(&mut a, &fh);
        assert!(
            before <= m && m <= after && m > last,
            "{ahead:?}: clamped to the commit's time, got {m:?} in {before:?}..{after:?}"
        );
        last = m;
    }
}

/// Issue 27, several metadata servers on one store (clients mount either; every
/// gateway is a data server): the boot epoch is one per store (`fence_boot.rs`), so
/// each one's start fences every metadata server's earlier layouts at every data
/// server within the fence window. B's start after A granted waits the window
/// (LAYOUTTRYLATER). A, whose epoch B moved, finds out within a window of its next
/// LAYOUTGETs (it reads the store again, as a data server does), grants nothing
/// for a window, then grants at the new epoch: ids every data server takes. (The
/// bug this pins: A used to grant at the epoch it had marked forever.)
fn two_metadata_servers_fence_each_other(ds: &Gw, start: &dyn Fn(&std::path::Path) -> Gw) {
    let (state_a, state_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mds_a = start(state_a.path());
    let status = |at, who, call: &Call| v3call::status(&v3_as(at, who, call));
    let mut a = nfs4_client::Tcp41::connect(mds_a.tcp_addr());
    a.session(b"pnfs-two-a", 0);
    assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let (open, fh) = open_a(&mut a, b"of-a");
    let ids_a = synthetic(&take_layout_after_restart(&mut a, &fh, open));
    assert_eq!(
        status(ds.tcp_addr(), ids_a, &Call::WriteSync(&fh, 0, b"a")),
        0
    );
    assert_eq!(metric(ds, "nfsgw_pnfs_fence_refused_total"), 0);
    // B starts after A granted: its start moves the store's epoch.
    let b_started = Instant::now();
    let mds_b = start(state_b.path());
    let (fh_b, ids_b) = {
        let mut b = nfs4_client::Tcp41::connect(mds_b.tcp_addr());
        b.session(b"pnfs-two-b", 0);
        assert_eq!(b.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
        let (open, fh) = open_a(&mut b, b"of-b");
        let ids = synthetic(&take_layout_after_restart(&mut b, &fh, open));
        assert!(
            b_started.elapsed() >= Duration::from_secs(2),
            "B waited the window: A had granted"
        );
        assert_eq!(
            status(ds.tcp_addr(), ids, &Call::WriteSync(&fh, 0, b"b")),
            0
        );
        (fh, ids)
    };
    for at in [ds.tcp_addr(), mds_a.tcp_addr(), mds_b.tcp_addr()] {
        let w = status(at, ids_a, &Call::WriteSync(&fh, 0, b"late"));
        assert_eq!(
            w, NFS3ERR_ACCES,
            "A's earlier layout at {at} after B's start"
        );
    }
    // A's next layout: at most a window of LAYOUTTRYLATER, then ids every data
    // server takes (the epoch B set).
    let (open, fh2) = open_a(&mut a, b"of-a-2");
    let ids2 = synthetic(&take_layout_after_restart(&mut a, &fh2, open));
    for at in [ds.tcp_addr(), mds_a.tcp_addr(), mds_b.tcp_addr()] {
        let w = status(at, ids2, &Call::WriteSync(&fh2, 0, b"new"));
        assert_eq!(w, 0, "A's new layout at {at}");
        assert_eq!(status(at, ids_b, &Call::Commit(&fh_b)), 0, "B's at {at}");
    }
    // B's restart fences B's and A's layouts alike.
    drop(mds_b);
    let mds_b = start(state_b.path());
    // (Writes inside the window may land: one byte, the size stays.)
    wait_for("A's ids fenced by B's restart", 10, || {
        status(ds.tcp_addr(), ids2, &Call::WriteSync(&fh2, 0, b"x")) == NFS3ERR_ACCES
    });
    std::thread::sleep(Duration::from_millis(2500));
    for at in [ds.tcp_addr(), mds_a.tcp_addr(), mds_b.tcp_addr()] {
        let w = status(at, ids_b, &Call::WriteSync(&fh_b, 0, b"late"));
        assert_eq!(w, NFS3ERR_ACCES, "B's earlier layout at {at}");
        let w = status(at, ids2, &Call::WriteSync(&fh2, 0, b"late"));
        assert_eq!(w, NFS3ERR_ACCES, "A's earlier layout at {at}");
    }
    let (open, fh3) = open_a(&mut a, b"of-a-3");
    let ids3 = synthetic(&take_layout_after_restart(&mut a, &fh3, open));
    assert_eq!(
        status(ds.tcp_addr(), ids3, &Call::WriteSync(&fh3, 0, b"3")),
        0
    );
    // Each refusal counted where it happened (`nfsgw_pnfs_fence_refused_total`):
    // A's first ids once, then A's second and B's after B's restart, at least.
    let refused = metric(ds, "nfsgw_pnfs_fence_refused_total");
    assert!(
        refused >= 3,
        "refusals counted at the data server: {refused}"
    );
    let mut v = S::new(&mds_b, 1);
    assert_eq!(
        v.size(&fh),
        1,
        "A's first write landed, the fenced ones did not"
    );
    assert_eq!(v.size(&fh2), 3);
}

#[test]
fn two_metadata_servers_on_one_fs_directory_fence_each_other_at_each_start() {
    let root = tempfile::tempdir().unwrap();
    let ds = shared_fs(root.path(), "");
    let addr = ds.tcp_addr();
    two_metadata_servers_fence_each_other(&ds, &|state| mds_on(root.path(), state, addr));
}

#[test]
fn two_metadata_servers_on_one_bucket_fence_each_other_at_each_start() {
    let Some(moto) = Moto::start() else {
        eprintln!("moto_server not installed: skipped");
        return;
    };
    let bucket = format!("nfsgw-pnfs-two-{}", std::process::id());
    moto.bucket(&bucket);
    let ds = gateway(&moto, &bucket, "");
    let pnfs = pnfs_with(&[ds.tcp_addr()], "probe_ms = 0\n");
    two_metadata_servers_fence_each_other(&ds, &|state| {
        Gw::start_text(|_| {
            format!(
                "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
                 [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
                 [tcp]\nlisten = \"127.0.0.1:0\"\n\
                 [backend]\nkind = \"s3\"\nworkers = 2\n\
                 [backend.s3]\nendpoint = \"{}\"\nregion = \"us-east-1\"\nbucket = \"{bucket}\"\n\
                 path_style = true\nallow_http = true\naccess_key_id = \"testing\"\n\
                 secret_access_key = \"testing\"\ntimeout_s = 10\nretries = 3\n\
                 [state]\ndir = \"{}\"\n[nfs4]\nlease_time_s = 10\n\
                 [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{pnfs}",
                moto.endpoint,
                state.display()
            )
        })
    });
}

/// LAYOUTSTATS (RFC 7862 §15.7) is kept: the READ and WRITE operations and bytes a
/// client reports through a data server (lsa_read, lsa_write for lsa_deviceid) are
/// counted against that server (`nfsgw_pnfs_data_server_reported_{ops,bytes}_total`),
/// each report's increase over the layout's last one (they are running totals), and
/// the LAYOUTRETURN's ff_iostats4 (RFC 8435 §9.2.1) with the layout's final totals
/// adds only what is new. Hostile reports: counts of 2^63 or more, or a device id no
/// data server has, are acknowledged and ignored (counted apart); a layout stateid
/// not held is NFS4ERR_BAD_STATEID. Nothing moves the counters but the real reports.
#[test]
fn layoutstats_count_each_layouts_io_once_per_data_server() {
    let root = tempfile::tempdir().unwrap();
    let ds = shared_fs(root.path(), "");
    let mds = shared_fs(root.path(), &pnfs_with(&[ds.tcp_addr()], "probe_ms = 0\n"));
    let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
    a.minor = 2;
    a.session(b"pnfs-stats-a", 0);
    assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let (open, fh) = open_a(&mut a, b"counted");
    let (sid, devs) = layout_a(&mut a, &fh, LAYOUTIOMODE4_RW, open).unwrap();
    let dev = devs[0];
    let counted = || {
        let one = |what: &str, op: &str| {
            let name = format!("nfsgw_pnfs_data_server_reported_{what}_total");
            metric(
                &mds,
                &format!("{name}{{address=\"{}\",op=\"{op}\"}}", ds.tcp_addr()),
            )
        };
        [
            one("ops", "read"),
            one("bytes", "read"),
            one("ops", "write"),
            one("bytes", "write"),
        ]
    };
    let mut stats = |sid: &[u8; 16], dev: &[u8; 16], r, w| {
        on_a(&mut a, &fh, Ops::new().layoutstats_io(sid, dev, r, w)).0
    };
    assert_eq!(stats(&sid, &dev, (2, 8192), (3, 12288)), NFS4_OK);
    assert_eq!(counted(), [2, 8192, 3, 12288]);
    assert_eq!(stats(&sid, &dev, (2, 8192), (3, 12288)), NFS4_OK);
    assert_eq!(
        counted(),
        [2, 8192, 3, 12288],
        "the same totals: nothing new"
    );
    assert_eq!(stats(&sid, &dev, (5, 20480), (3, 12288)), NFS4_OK);
    assert_eq!(counted(), [5, 20480, 3, 12288], "the increase");
    for (r, w) in [
        ((u64::MAX, u64::MAX), (0, 0)),
        ((1 << 63, 0), (0, 0)),
        ((0, 0), (u64::MAX - 1, 1)),
    ] {
        assert_eq!(stats(&sid, &dev, r, w), NFS4_OK, "{r:?} {w:?}: ignored");
    }
    assert_eq!(metric(&mds, "nfsgw_pnfs_layoutstats_ignored_total"), 3);
    assert_eq!(stats(&sid, &[0xee; 16], (9, 9), (9, 9)), NFS4_OK);
    assert_eq!(metric(&mds, "nfsgw_pnfs_unknown_device_reports_total"), 1);
    let mut forged = sid;
    forged[15] ^= 0xff;
    for bad in [forged, open] {
        assert_eq!(stats(&bad, &dev, (9, 9), (9, 9)), NFS4ERR_BAD_STATEID);
    }
    assert_eq!(counted(), [5, 20480, 3, 12288], "nothing else counted");
    // The return reports the layout's final totals: only the increase is new.
    let io = v4pnfs::IoStats {
        deviceid: dev,
        read: (6, 24576),
        write: (4, 16384),
    };
    let body = v4pnfs::ff_layoutreturn_with(&[], &[io]);
    let ret = Ops::new().layoutreturn_file_body(LAYOUTIOMODE4_ANY, &sid, &body);
    assert_eq!(on_a(&mut a, &fh, ret).0, NFS4_OK, "LAYOUTRETURN");
    assert_eq!(counted(), [6, 24576, 4, 16384]);
    let st = on_a(
        &mut a,
        &fh,
        Ops::new().layoutstats_io(&sid, &dev, (7, 1), (7, 1)),
    )
    .0;
    assert_eq!(st, NFS4ERR_BAD_STATEID, "a layout given back");
    assert_eq!(counted(), [6, 24576, 4, 16384]);
}

/// LAYOUTRETURN4_FILE of the whole file under `sid`, lora_reclaim as given: status.
fn return_a(c: &mut nfs4_client::Tcp41, fh: &[u8], reclaim: bool, sid: [u8; 16]) -> u32 {
    let r = Return::File {
        offset: 0,
        length: ALL,
        stateid: sid,
    };
    let op = if reclaim {
        Ops::new().layoutreturn_reclaim(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &r)
    } else {
        Ops::new().layoutreturn(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &r)
    };
    let (st, rest) = on_a(c, fh, op);
    if st == NFS4_OK {
        let left = v4pnfs::layoutreturn_ok(&mut XdrReader::new(&rest)).unwrap();
        assert_eq!(
            left, None,
            "no layout stateid is left after a reclaim return"
        );
    }
    st
}

/// LAYOUTRETURN with lora_reclaim in the grace period after a metadata server
/// restart (RFC 8881 §18.44.3), `sid` the layout stateid of `fh` the previous run
/// gave `a`: a client the previous run did not know gets NFS4ERR_NO_GRACE (nothing to
/// reclaim); the stateid on another file or forged, NFS4ERR_BAD_STATEID; lora_reclaim
/// with LAYOUTRETURN4_FSID or _ALL (§18.44.3: MUST be false there) and an empty
/// range, NFS4ERR_INVAL; the return itself is accepted, twice (nothing was held: the
/// restart lost it), while a return of it without lora_reclaim names no layout of
/// this run (NFS4ERR_NOMATCHING_LAYOUT).
fn reclaim_returns(
    a: &mut nfs4_client::Tcp41,
    x: &mut nfs4_client::Tcp41,
    (fh, other_fh): (&[u8], &[u8]),
    sid: [u8; 16],
) {
    const NFS4ERR_NO_GRACE: u32 = 10033;
    assert_eq!(return_a(x, fh, true, sid), NFS4ERR_NO_GRACE);
    assert_eq!(return_a(a, other_fh, true, sid), NFS4ERR_BAD_STATEID);
    let mut forged = sid;
    forged[14] ^= 0x40;
    assert_eq!(return_a(a, fh, true, forged), NFS4ERR_BAD_STATEID);
    for bulk in [Return::Fsid, Return::All] {
        let op = Ops::new().layoutreturn_reclaim(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &bulk);
        assert_eq!(on_a(a, fh, op).0, NFS4ERR_INVAL, "{bulk:?}");
    }
    let empty = Return::File {
        offset: 0,
        length: 0,
        stateid: sid,
    };
    let op = Ops::new().layoutreturn_reclaim(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &empty);
    assert_eq!(on_a(a, fh, op).0, NFS4ERR_INVAL);
    assert_eq!(return_a(a, fh, false, sid), NFS4ERR_NOMATCHING_LAYOUT);
    assert_eq!(return_a(a, fh, true, sid), NFS4_OK);
    assert_eq!(return_a(a, fh, true, sid), NFS4_OK);
}

/// GETDEVICELIST through `c` on `fh`: the status and, on success, the page.
fn list_a(
    c: &mut nfs4_client::Tcp41,
    fh: &[u8],
    (layout_type, max): (u32, u32),
    (cookie, verf): (u64, [u8; 8]),
) -> Result<v4pnfs::DeviceList, u32> {
    let op = Ops::new().getdevicelist(layout_type, max, cookie, &verf);
    let (st, rest) = on_a(c, fh, op);
    if st != NFS4_OK {
        return Err(st);
    }
    Ok(v4pnfs::getdevicelist_ok(&mut XdrReader::new(&rest)).unwrap())
}

/// GETDEVICELIST (RFC 8881 §18.41): a metadata server naming two live data servers
/// and an address nothing answers on (probed down). The list, one id a page, is the
/// two live servers' ids — each one GETDEVICEINFO resolves to that server — with a
/// cookie to go on from, one verifier and eof on the last page; a huge gdla_maxdevices
/// gives the whole list at once. Hostile cursors: gdla_maxdevices 0 NFS4ERR_INVAL, a
/// cookie past the end (or 2^64 - 1) NFS4ERR_BAD_COOKIE, a verifier not the list's
/// NFS4ERR_NOT_SAME, another layout type NFS4ERR_UNKNOWN_LAYOUTTYPE, no current
/// filehandle NFS4ERR_NOFILEHANDLE. A data server stopped under a client's cursor:
/// the old verifier is NFS4ERR_NOT_SAME, and a fresh list has the live one only. In
/// an NFSv4.2 COMPOUND GETDEVICELIST is NFS4ERR_NOTSUPP (RFC 7862 §13: "MNI").
#[test]
fn getdevicelist_pages_the_live_data_servers_ids() {
    const NFS4ERR_BAD_COOKIE: u32 = 10003;
    const NFS4ERR_NOT_SAME: u32 = 10027;
    const NFS4ERR_NOFILEHANDLE: u32 = 10020;
    const LAYOUT4_NFSV4_1_FILES: u32 = 1;
    let root = tempfile::tempdir().unwrap();
    let live = [free_addr(), free_addr()];
    let mut ds: Vec<Option<Gw>> = live
        .iter()
        .map(|a| Some(shared_fs_on(root.path(), *a, "")))
        .collect();
    let dead = free_addr();
    let probing = "probe_ms = 100\nprobe_timeout_ms = 1000\nprobe_failures = 2\n";
    let mds = shared_fs(root.path(), &pnfs_with(&[live[0], dead, live[1]], probing));
    let up = |a: SocketAddr| {
        metric(
            &mds,
            &format!("nfsgw_pnfs_data_server_up{{address=\"{a}\"}}"),
        )
    };
    wait_for("the dead address marked down", 20, || up(dead) == 0);
    wait_for("the live ones up", 20, || {
        up(live[0]) == 1 && up(live[1]) == 1
    });
    let mut a = nfs4_client::Tcp41::connect(mds.tcp_addr());
    a.session(b"pnfs-devicelist", 0);
    assert_eq!(a.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let (_, fh) = open_a(&mut a, b"listed");
    let flex = |max| (LAYOUT4_FLEX_FILES, max);

    let p1 = list_a(&mut a, &fh, flex(1), (0, [0; 8])).unwrap();
    assert_eq!((p1.ids.len(), p1.cookie, p1.eof), (1, 1, false));
    let p2 = list_a(&mut a, &fh, flex(1), (p1.cookie, p1.verf)).unwrap();
    assert_eq!((p2.ids.len(), p2.cookie, p2.eof), (1, 2, true));
    assert_eq!(p2.verf, p1.verf);
    let ids = [p1.ids[0], p2.ids[0]];
    let mut at: Vec<SocketAddr> = ids.iter().map(|id| addr_of(&mut a, &fh, id)).collect();
    at.sort();
    let mut want = live.to_vec();
    want.sort();
    assert_eq!(at, want, "the ids are the live data servers'");
    let all = list_a(&mut a, &fh, flex(u32::MAX), (0, [0; 8])).unwrap();
    assert_eq!((all.ids, all.eof, all.cookie), (ids.to_vec(), true, 2));
    // At the end: an empty last page.
    let end = list_a(&mut a, &fh, flex(5), (2, p1.verf)).unwrap();
    assert_eq!((end.ids.len(), end.eof), (0, true));

    // Hostile values.
    assert_eq!(
        list_a(&mut a, &fh, flex(0), (0, [0; 8])).err(),
        Some(NFS4ERR_INVAL)
    );
    for cookie in [3, u64::MAX] {
        let got = list_a(&mut a, &fh, flex(1), (cookie, p1.verf)).err();
        assert_eq!(got, Some(NFS4ERR_BAD_COOKIE), "cookie {cookie}");
    }
    let mut bad = p1.verf;
    bad[0] ^= 1;
    assert_eq!(
        list_a(&mut a, &fh, flex(1), (1, bad)).err(),
        Some(NFS4ERR_NOT_SAME)
    );
    let files = (LAYOUT4_NFSV4_1_FILES, 1);
    assert_eq!(
        list_a(&mut a, &fh, files, (0, [0; 8])).err(),
        Some(NFS4ERR_UNKNOWN_LAYOUTTYPE)
    );
    let (st, _) = a.seq_run(|o| o.getdevicelist(LAYOUT4_FLEX_FILES, 1, 0, &[0; 8]));
    assert_eq!(st, NFS4ERR_NOFILEHANDLE);

    // The list changes under the cursor: a data server stops.
    let stopped = ds[1].take().unwrap().tcp_addr();
    wait_for("the stopped server marked down", 20, || up(stopped) == 0);
    assert_eq!(
        list_a(&mut a, &fh, flex(1), (1, p1.verf)).err(),
        Some(NFS4ERR_NOT_SAME)
    );
    let now = list_a(&mut a, &fh, flex(8), (0, [0; 8])).unwrap();
    assert_eq!(now.ids.len(), 1);
    assert_eq!(addr_of(&mut a, &fh, &now.ids[0]), live[0]);
    assert_ne!(now.verf, p1.verf);

    // NFSv4.2 has no GETDEVICELIST.
    a.minor = 2;
    assert_eq!(
        list_a(&mut a, &fh, flex(8), (0, [0; 8])).err(),
        Some(NFS4ERR_NOTSUPP)
    );
}

/// LAYOUTGET RW through a back-channel-less client: the layout.
fn take_layout_a(c: &mut nfs4_client::Tcp41, fh: &[u8], open: [u8; 16]) -> Layout {
    let (st, rest) = on_a(
        c,
        fh,
        Ops::new().layoutget(&layoutget(LAYOUTIOMODE4_RW, open)),
    );
    assert_eq!(st, NFS4_OK, "LAYOUTGET");
    let g = v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap();
    Layout {
        stateid: g.stateid,
        ff: v4pnfs::ff_layout(&g.layouts[0].body).unwrap(),
    }
}

/// A layout's data server credentials (ffds_user, ffds_group) as sent.
type DsIds = (String, String);

/// LAYOUTGET of `fh` through a back-channel client with stateid `sid`: its one
/// mirror's device id and data server credentials.
fn layout_ids(
    a: &mut nfs4_client::Tcp41,
    fh: &[u8],
    sid: [u8; 16],
) -> Result<([u8; 16], DsIds), u32> {
    let (st, rest) = on_a(
        a,
        fh,
        Ops::new().layoutget(&layoutget(LAYOUTIOMODE4_RW, sid)),
    );
    if st != NFS4_OK {
        return Err(st);
    }
    let g = v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap();
    let ff = v4pnfs::ff_layout(&g.layouts[0].body).unwrap();
    let d = &ff.mirrors[0][0];
    Ok((d.deviceid, (d.user.clone(), d.group.clone())))
}

/// Going on sooner (README "When a data server dies"): a client whose layouts the
/// metadata server recalled only because their data server went down gets a layout
/// naming the live one at once, not NFS4ERR_RECALLCONFLICT until the lease (10 s
/// here) revokes the recalled one: its LAYOUTGET with the recalled layout's stateid
/// is NFS4ERR_BAD_STATEID (the layout let go unreturned, its file not fenced: the new
/// layout carries the same credentials), and with its open stateid a layout naming
/// the live data server. A down-recalled layout that another client's truncate then
/// needs is as strict as any conflict recall: RECALLCONFLICT for its holder and
/// NFS4ERR_DELAY for the truncate until the layout is returned.
#[test]
fn a_client_recalled_for_a_dead_data_server_goes_on_at_once() {
    const NFS4ERR_DELAY: u32 = 10008;
    const NFS4ERR_RECALLCONFLICT: u32 = 10061;
    struct File {
        open: [u8; 16],
        fh: Vec<u8>,
        ids: DsIds,
    }
    let root = tempfile::tempdir().unwrap();
    let at = [free_addr(), free_addr()];
    let mut ds: Vec<Option<Gw>> = at
        .iter()
        .map(|a| Some(shared_fs_on(root.path(), *a, "")))
        .collect();
    let probing = "probe_ms = 100\nprobe_timeout_ms = 1000\nprobe_failures = 2\n";
    let mds = shared_fs(root.path(), &pnfs_with(&at, probing));
    let up = |i: usize| {
        let series = format!("nfsgw_pnfs_data_server_up{{address=\"{}\"}}", at[i]);
        metric(&mds, &series)
    };
    wait_for("both data servers up", 5, || up(0) == 1 && up(1) == 1);
    let mut a = bc_client(&mds, b"pnfs-go-on-a");
    // Two files whose RW layouts name data server 1 (others stay on server 0).
    let mut on1 = Vec::new();
    for i in 0..64 {
        let (open, fh) = open_a(&mut a, format!("x{i}").as_bytes());
        let (dev, ids) = layout_ids(&mut a, &fh, open).unwrap();
        if addr_of(&mut a, &fh, &dev) == at[1] {
            on1.push(File { open, fh, ids });
        }
        if on1.len() == 2 {
            break;
        }
    }
    assert_eq!(on1.len(), 2, "files placed on data server 1");

    ds[1] = None;
    wait_for("data server 1 marked down", 10, || up(1) == 0);
    // Both recalled; answered NFS4_OK: the client holds them (as one whose I/O to
    // the dead server is still in flight does, Linux's DELAY answers included).
    let mut recalled = std::collections::HashMap::new();
    while recalled.len() < 2 {
        let cb = answer_recall(&mut a, NFS4_OK);
        recalled.insert(cb.fh.clone(), cb.stateid);
    }
    let at_recall = Instant::now();
    let (x, y) = (&on1[0], &on1[1]);
    // Another client truncates y: y's recall is now a conflict's too.
    let mut b = S::new(&mds, 1);
    let truncate = |b: &mut S| {
        let size = Ops::new().setattr(&[0; 16], &[1 << 4], &0u64.to_be_bytes());
        b.on(&y.fh, size).0
    };
    assert_eq!(truncate(&mut b), NFS4ERR_DELAY);

    // x: let go at its holder's LAYOUTGET; with the open stateid, the live server.
    let err = layout_ids(&mut a, &x.fh, recalled[&x.fh]).err();
    assert_eq!(err, Some(NFS4ERR_BAD_STATEID), "the recalled layout let go");
    let (dev, ids) = layout_ids(&mut a, &x.fh, x.open).expect("a new layout at once");
    assert_eq!(addr_of(&mut a, &x.fh, &dev), at[0], "the live data server");
    // Not fenced: the old credentials still work at the live data server (the new
    // ones differ in their data generation: an RW layout was held since the last
    // grant, `gateway::fence`).
    let num = |ids: &DsIds| (ids.0.parse().unwrap(), ids.1.parse().unwrap());
    for who in [&x.ids, &ids] {
        let w = v3_as(at[0], num(who), &Call::Write(&x.fh, 0, b"x"));
        assert_eq!(v3call::status(&w), 0, "not fenced: both credentials work");
    }
    assert!(
        at_recall.elapsed() < Duration::from_secs(5),
        "at once, not after the lease: {:?}",
        at_recall.elapsed()
    );
    assert_eq!(metric(&mds, "nfsgw_pnfs_layouts_released_ds_down_total"), 1);
    assert_eq!(
        metric(&mds, "nfsgw_pnfs_layouts_total{event=\"revoked\"}"),
        0
    );

    // y: as strict as a conflict recall, with either stateid, until returned.
    for sid in [y.open, recalled[&y.fh]] {
        let err = layout_ids(&mut a, &y.fh, sid).err();
        assert_eq!(err, Some(NFS4ERR_RECALLCONFLICT));
    }
    assert_eq!(truncate(&mut b), NFS4ERR_DELAY);
    let r = Return::File {
        offset: 0,
        length: ALL,
        stateid: recalled[&y.fh],
    };
    let ret = Ops::new().layoutreturn(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &r);
    assert_eq!(on_a(&mut a, &y.fh, ret).0, NFS4_OK, "LAYOUTRETURN of y");
    assert_eq!(
        truncate(&mut b),
        NFS4_OK,
        "the truncate goes on once it is back"
    );
    let (dev, _) = layout_ids(&mut a, &y.fh, y.open).unwrap();
    assert_eq!(addr_of(&mut a, &y.fh, &dev), at[0]);
    assert_eq!(metric(&mds, "nfsgw_pnfs_layouts_released_ds_down_total"), 1);
}

/// LAYOUTGET of `fh` (`iomode`) through `c`: the layout stateid and the whole
/// ff_layout4.
fn ff_a(
    c: &mut nfs4_client::Tcp41,
    fh: &[u8],
    iomode: u32,
    sid: [u8; 16],
) -> ([u8; 16], v4pnfs::FfLayout) {
    let (st, rest) = on_a(c, fh, Ops::new().layoutget(&layoutget(iomode, sid)));
    assert_eq!(st, NFS4_OK, "LAYOUTGET");
    let g = v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap();
    (g.stateid, v4pnfs::ff_layout(&g.layouts[0].body).unwrap())
}

/// LAYOUTRETURN of `fh`'s layouts, any iomode.
fn return_all_a(c: &mut nfs4_client::Tcp41, fh: &[u8], sid: [u8; 16]) {
    let r = Return::File {
        offset: 0,
        length: ALL,
        stateid: sid,
    };
    let ret = Ops::new().layoutreturn(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &r);
    assert_eq!(on_a(c, fh, ret).0, NFS4_OK, "LAYOUTRETURN");
}

/// Striped layouts (RFC 8435 §6; README "Scaling out with pNFS", "Striping"): three
/// data servers on one shared `fs` directory and `stripe_width = 3`. A client whose
/// EXCHANGE_ID names bench's implementation (eia_client_impl_id, RFC 8881 §18.35)
/// gets READ and RW layouts whose one mirror lists the three data servers — each with
/// the file's handle, the synthetic ids and the anonymous stateid — and the stripe
/// unit; a client naming the Linux client, and one naming none, get one data server
/// per mirror. Written unit by unit through the striped RW layout, each 64 KiB unit to
/// the data server of its index mod 3 (the sparse mapping: the file's own offsets),
/// the file reads back exactly through the metadata server. One data server stops:
/// the striped layout naming it is recalled, and a new one names the two left.
#[test]
fn striped_layouts_for_the_clients_that_take_them() {
    use nfs_wire::nfs4args::{BENCH_IMPL_DOMAIN, BENCH_IMPL_NAME};
    const UNIT: usize = 65536;
    let root = tempfile::tempdir().unwrap();
    let at = [free_addr(), free_addr(), free_addr()];
    let mut ds: Vec<Option<Gw>> = at
        .iter()
        .map(|a| Some(shared_fs_on(root.path(), *a, "")))
        .collect();
    let keys = "stripe_width = 3\nstripe_unit = 65536\n\
                probe_ms = 100\nprobe_timeout_ms = 1000\nprobe_failures = 2\n";
    let mds = shared_fs(root.path(), &pnfs_with(&at, keys));
    let up = |i: usize| {
        metric(
            &mds,
            &format!("nfsgw_pnfs_data_server_up{{address=\"{}\"}}", at[i]),
        )
    };
    wait_for("the data servers up", 5, || (0..3).all(|i| up(i) == 1));

    // bench's implementation: striped, READ and RW (the store writes in place).
    let mut b = nfs4_client::Tcp41::connect(mds.tcp_addr());
    b.session_as(
        b"stripe-bench",
        nfs4_client::CONN_BACK_CHAN,
        (BENCH_IMPL_DOMAIN, BENCH_IMPL_NAME),
    );
    assert_eq!(b.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.cb_nulls == 0 {
        assert!(b.next_callback(Duration::from_millis(50)).is_none());
        assert!(Instant::now() < deadline, "no CB_NULL probe");
    }
    let (open, fh) = open_a(&mut b, b"striped");
    let (_, r) = ff_a(&mut b, &fh, LAYOUTIOMODE4_READ, open);
    let (sid, w) = ff_a(&mut b, &fh, LAYOUTIOMODE4_RW, open);
    for l in [&r, &w] {
        assert_eq!(l.stripe_unit, UNIT as u64);
        assert_eq!(l.mirrors.len(), 1, "one mirror (read_mirrors = 1)");
        let m = &l.mirrors[0];
        assert_eq!(m.len(), 3, "striped over the three data servers");
        let mut addrs: Vec<SocketAddr> = m
            .iter()
            .map(|d| addr_of(&mut b, &fh, &d.deviceid))
            .collect();
        for d in m {
            assert_eq!(d.fhs, vec![fh.clone()]);
            assert_eq!((&d.user, &d.group), (&m[0].user, &m[0].group));
            assert_eq!(d.stateid, [0u8; 16], "the anonymous stateid");
        }
        addrs.sort();
        let mut want = at.to_vec();
        want.sort();
        assert_eq!(addrs, want);
    }
    let order: Vec<SocketAddr> = w.mirrors[0]
        .iter()
        .map(|d| addr_of(&mut b, &fh, &d.deviceid))
        .collect();

    // Four units through the RW layout, unit i at data server i mod 3, at the file's
    // own offsets; COMMIT at each, LAYOUTCOMMIT; read back through the metadata
    // server.
    let ids = synthetic(&Layout {
        stateid: sid,
        ff: w.clone(),
    });
    let data: Vec<u8> = (0..4 * UNIT).map(|i| (i * 7 + i / UNIT) as u8).collect();
    for u in 0..4 {
        let off = (u * UNIT) as u64;
        let res = v3_as(
            order[u % 3],
            ids,
            &Call::Write(&fh, off, &data[u * UNIT..(u + 1) * UNIT]),
        );
        assert_eq!(v3call::status(&res), 0, "WRITE of unit {u}");
    }
    for a in &order {
        assert_eq!(v3call::status(&v3_as(*a, ids, &Call::Commit(&fh))), 0);
    }
    let c = LayoutCommit {
        offset: 0,
        length: ALL,
        reclaim: false,
        stateid: sid,
        last_write: Some(4 * UNIT as u64 - 1),
        mtime: None,
        layout_type: LAYOUT4_FLEX_FILES,
    };
    assert_eq!(on_a(&mut b, &fh, Ops::new().layoutcommit(&c)).0, NFS4_OK);
    let res = v3_as(mds.tcp_addr(), ids, &Call::Read(&fh, 0, 4 * UNIT as u32));
    assert!(
        v3call::parse_read(&res).unwrap() == &data[..],
        "bytes differ"
    );

    // The Linux client's name, and none: one data server per mirror, READ and RW.
    let linux = (
        "kernel.org",
        "Linux 6.1.0-13-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.55-1 (2023-09-29) x86_64",
    );
    let mut named = nfs4_client::Tcp41::connect(mds.tcp_addr());
    named.session_as(b"stripe-linux", 0, linux);
    assert_eq!(named.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let nameless = nfs4_client::Tcp41::ready(mds.tcp_addr(), b"stripe-none");
    for (mut c, tag) in [(named, "linux"), (nameless, "none")] {
        let (open, fh) = open_a(&mut c, tag.as_bytes());
        let (_, r) = ff_a(&mut c, &fh, LAYOUTIOMODE4_READ, open);
        let (sid, w) = ff_a(&mut c, &fh, LAYOUTIOMODE4_RW, open);
        for l in [r, w] {
            assert!(
                l.mirrors.iter().all(|m| m.len() == 1),
                "{tag}: one data server per mirror"
            );
        }
        return_all_a(&mut c, &fh, sid);
    }

    // A data server stops: the striped layout that names it is recalled.
    ds[1] = None;
    wait_for("data server 1 marked down", 10, || up(1) == 0);
    let cb = answer_recall(&mut b, NFS4_OK);
    assert_eq!(cb.fh, fh, "the striped layout naming the dead server");
    return_all_a(&mut b, &fh, cb.stateid);
    let (open2, fh2) = open_a(&mut b, b"striped-2");
    let (sid2, l) = ff_a(&mut b, &fh2, LAYOUTIOMODE4_READ, open2);
    let left: Vec<SocketAddr> = l.mirrors[0]
        .iter()
        .map(|d| addr_of(&mut b, &fh2, &d.deviceid))
        .collect();
    assert_eq!(
        left.len(),
        2,
        "the width shrinks to the servers up: {left:?}"
    );
    assert!(!left.contains(&at[1]), "{left:?}");
    return_all_a(&mut b, &fh2, sid2);
}

/// Rule (README "Striping"): RW layouts are striped only where the store writes in
/// place. A metadata server on `memory` (no `fs` with `shared`), three data servers
/// listed (never reached: `probe_ms = 0`), `stripe_width = 3`: bench's implementation
/// gets a READ layout over the three and an RW layout of one data server.
#[test]
fn rw_layouts_are_not_striped_where_the_store_does_not_write_in_place() {
    use nfs_wire::nfs4args::{BENCH_IMPL_DOMAIN, BENCH_IMPL_NAME};
    let ds: Vec<SocketAddr> = (9..12)
        .map(|p| format!("127.0.0.1:{p}").parse().unwrap())
        .collect();
    let mds = Gw::start_text(|dir| {
        format!(
            "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\n[backend]\nkind = \"memory\"\n\
             [state]\ndir = \"{}\"\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{}",
            dir.display(),
            pnfs_with(&ds, "probe_ms = 0\nstripe_width = 3\n")
        )
    });
    let mut b = nfs4_client::Tcp41::connect(mds.tcp_addr());
    b.session_as(b"stripe-rw", 0, (BENCH_IMPL_DOMAIN, BENCH_IMPL_NAME));
    assert_eq!(b.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let (open, fh) = open_a(&mut b, b"rw");
    let (_, r) = ff_a(&mut b, &fh, LAYOUTIOMODE4_READ, open);
    assert_eq!(r.mirrors.len(), 1);
    assert_eq!(r.mirrors[0].len(), 3, "READ layouts are striped");
    let (sid, w) = ff_a(&mut b, &fh, LAYOUTIOMODE4_RW, open);
    assert_eq!(w.mirrors.len(), 1);
    assert_eq!(w.mirrors[0].len(), 1, "an RW layout is not, on this store");
    return_all_a(&mut b, &fh, sid);
}
