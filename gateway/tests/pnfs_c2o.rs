//! Close-to-open across pNFS data servers (issue 27 "Consistency"; RFC 8881 §10.3.1,
//! RFC 8435 §2.2): what a writer wrote and committed through data server A, then
//! LAYOUTCOMMITted and gave back (its CLOSE), is what a reader that then takes a
//! layout reads through data server B, at once, even though B had the file's old
//! bytes cached a moment before. The layouts' data generation (`gateway::fence`,
//! `state/layouts_gen.rs`) tells B to drop its caches. One metadata server and two
//! data servers on one store: a shared `fs` directory, and (when `moto_server` is
//! installed) one S3 bucket, where B's HEAD and read-ahead caches are in play too.

mod common;

use common::v42::{NFS4_OK, S};
use common::*;
use engine::xdr::XdrReader;
use nfs_wire::nfs4args::*;
use nfs_wire::v3call::{self, Call};
use nfs_wire::v4call::Ops;
use nfs_wire::v4pnfs::{self, LayoutCommit, LayoutGet, Return};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ALL: u64 = u64::MAX;
const NFS3ERR_ACCES: u32 = 13;
/// Rounds of read-at-B, write-at-A, read-at-B.
const ROUNDS: usize = 20;
const LEN: usize = 12_288;

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

/// One NFSv3 call as AUTH_SYS (uid, gid): its results.
fn v3_as(addr: SocketAddr, (uid, gid): (u32, u32), call: &Call) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let cred = engine::rpc::Cred::Sys(engine::rpc::AuthSys::new(uid, gid, &[]));
    let n = v3call::encode(&mut buf, 9, &cred, call).unwrap();
    let rec = tcp_call(&mut s, &buf[4..n]).unwrap();
    v3call::results(&rec).unwrap().to_vec()
}

/// READ of the whole file at `at` as `ids`, in 4 KiB calls (each one the reactor's
/// read cache can answer).
fn read_at(at: SocketAddr, ids: (u32, u32), fh: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < LEN {
        let rep = v3_as(at, ids, &Call::Read(fh, out.len() as u64, 4096));
        let data = v3call::parse_read(&rep).unwrap_or_else(|e| panic!("READ: {e:?}"));
        assert!(!data.is_empty(), "short file");
        out.extend_from_slice(data);
    }
    out
}

/// A granted layout: its stateid, return-on-close, and per mirror (device id, ids).
struct Granted {
    stateid: [u8; 16],
    roc: bool,
    mirrors: Vec<([u8; 16], (u32, u32))>,
}

fn take(s: &mut S, fh: &[u8], iomode: u32, sid: [u8; 16]) -> Granted {
    let (st, rest) = s.on(fh, Ops::new().layoutget(&layoutget(iomode, sid)));
    assert_eq!(st, NFS4_OK, "LAYOUTGET");
    let g = v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap();
    let ff = v4pnfs::ff_layout(&g.layouts[0].body).unwrap();
    let mirrors = ff
        .mirrors
        .iter()
        .map(|m| {
            let d = &m[0];
            (
                d.deviceid,
                (d.user.parse().unwrap(), d.group.parse().unwrap()),
            )
        })
        .collect();
    Granted {
        stateid: g.stateid,
        roc: g.return_on_close,
        mirrors,
    }
}

fn device(s: &mut S, fh: &[u8], id: &[u8; 16]) -> SocketAddr {
    let (st, rest) = s.on(fh, Ops::new().getdeviceinfo(id, LAYOUT4_FLEX_FILES, 0));
    assert_eq!(st, NFS4_OK, "GETDEVICEINFO");
    let (_, body, _) = v4pnfs::getdeviceinfo_ok(&mut XdrReader::new(&rest)).unwrap();
    let d = v4pnfs::ff_device(&body).unwrap();
    v4pnfs::uaddr(&d.netaddrs[0].1).unwrap()
}

/// LAYOUTRETURN of the file (what the client's CLOSE does with a return-on-close
/// layout, RFC 8881 §18.43.3).
fn give_back(s: &mut S, fh: &[u8], sid: [u8; 16]) {
    let r = Return::File {
        offset: 0,
        length: ALL,
        stateid: sid,
    };
    let (st, _) = s.on(
        fh,
        Ops::new().layoutreturn(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &r),
    );
    assert_eq!(st, NFS4_OK, "LAYOUTRETURN");
}

fn content(round: usize) -> Vec<u8> {
    (0..LEN).map(|i| (i * 31 + round * 7 + 1) as u8).collect()
}

/// The scenario, on a metadata server whose read layouts name both data servers.
fn close_to_open(mds: &Gw, data_servers: &[SocketAddr]) {
    let mut w = S::new(mds, 1);
    let mut r = S::new(mds, 1);
    let (w_open, fh) = w.create(b"shared-file");
    // Readable by others: the data servers' read caches answer a layout's READ.
    let mode = Ops::new().setattr(&[0; 16], &[0, 1 << 1], &0o644u32.to_be_bytes());
    assert_eq!(w.on(&fh, mode).0, NFS4_OK);
    let (r_open, _) = r.create(b"shared-file");
    // The writer's data server: every RW layout of the file names the same one.
    let rw = take(&mut w, &fh, LAYOUTIOMODE4_RW, w_open);
    assert_eq!(rw.mirrors.len(), 1, "a write layout has one mirror");
    assert!(rw.roc, "return on close (RFC 8881 §18.43.3)");
    let a = device(&mut w, &fh, &rw.mirrors[0].0);
    assert!(data_servers.contains(&a));
    give_back(&mut w, &fh, rw.stateid);
    let write_round = |w: &mut S, round: usize| {
        let l = take(w, &fh, LAYOUTIOMODE4_RW, w_open);
        assert_eq!(device(w, &fh, &l.mirrors[0].0), a, "same placement");
        let ids = l.mirrors[0].1;
        for (k, part) in content(round).chunks(4096).enumerate() {
            let rep = v3_as(a, ids, &Call::Write(&fh, (k * 4096) as u64, part));
            assert_eq!(v3call::status(&rep), 0, "WRITE at A");
        }
        assert_eq!(v3call::status(&v3_as(a, ids, &Call::Commit(&fh))), 0);
        let c = LayoutCommit {
            offset: 0,
            length: LEN as u64,
            reclaim: false,
            stateid: l.stateid,
            last_write: Some(LEN as u64 - 1),
            mtime: None,
            layout_type: LAYOUT4_FLEX_FILES,
        };
        let (st, _) = w.on(&fh, Ops::new().layoutcommit(&c));
        assert_eq!(st, NFS4_OK, "LAYOUTCOMMIT");
        give_back(w, &fh, l.stateid);
    };
    write_round(&mut w, 0);
    for round in 1..=ROUNDS {
        // The reader opens: a read layout with a mirror on B, the other server.
        let l = take(&mut r, &fh, LAYOUTIOMODE4_READ, r_open);
        assert!(l.roc);
        assert_eq!(l.mirrors.len(), 2, "read_mirrors = 2");
        let (b, ids) = l
            .mirrors
            .iter()
            .map(|(id, ids)| (device(&mut r, &fh, id), *ids))
            .find(|(at, _)| *at != a)
            .expect("a mirror on the other data server");
        let want = content(round - 1);
        assert_eq!(read_at(b, ids, &fh), want, "round {round}: B before");
        // Again: now from B's caches.
        assert_eq!(read_at(b, ids, &fh), want, "round {round}: B cached");
        if round == 1 {
            // A made-up data generation under the real MAC bits: refused, never an
            // answer from the caches nor a fence bypass.
            let forged = (ids.0, ids.1 ^ (1 << 20));
            let rep = v3_as(b, forged, &Call::Read(&fh, 0, 4096));
            assert_eq!(v3call::status(&rep), NFS3ERR_ACCES, "forged generation");
        }
        give_back(&mut r, &fh, l.stateid);
        // The writer writes through A, commits, LAYOUTCOMMITs, closes.
        write_round(&mut w, round);
        // The reader opens again and reads through B at once: the new bytes.
        let l = take(&mut r, &fh, LAYOUTIOMODE4_READ, r_open);
        let (b2, ids2) = l
            .mirrors
            .iter()
            .map(|(id, ids)| (device(&mut r, &fh, id), *ids))
            .find(|(at, _)| *at == b)
            .expect("B again");
        assert_ne!(ids2, ids, "round {round}: a new data generation");
        let got = read_at(b2, ids2, &fh);
        assert!(got == content(round), "round {round}: B served old bytes");
        give_back(&mut r, &fh, l.stateid);
    }
}

fn shared_fs(root: &std::path::Path, pnfs: &str) -> Gw {
    Gw::start_text(|dir| {
        format!(
            "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\n\
             [backend]\nkind = \"fs\"\nroot = \"{}\"\nshared = true\n\
             [state]\ndir = \"{}\"\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{pnfs}",
            root.display(),
            dir.display()
        )
    })
}

/// `[pnfs]` naming `ds`, every read layout with a mirror on each.
fn pnfs(ds: &[SocketAddr]) -> String {
    let mut s = "[pnfs]\nenabled = true\nread_mirrors = 2\nprobe_ms = 0\n".to_string();
    for a in ds {
        s += &format!("[[pnfs.data_servers]]\naddress = \"{a}\"\n");
    }
    s
}

#[test]
fn close_to_open_across_data_servers_on_a_shared_directory() {
    let root = tempfile::tempdir().unwrap();
    let ds = [shared_fs(root.path(), ""), shared_fs(root.path(), "")];
    let addrs: Vec<SocketAddr> = ds.iter().map(|g| g.tcp_addr()).collect();
    let mds = shared_fs(root.path(), &pnfs(&addrs));
    close_to_open(&mds, &addrs);
}

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

fn s3_gateway(m: &Moto, bucket: &str, pnfs: &str) -> Gw {
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

#[test]
fn close_to_open_across_data_servers_on_one_bucket() {
    let Some(moto) = Moto::start() else {
        eprintln!("moto_server not installed: skipped");
        return;
    };
    let bucket = format!("nfsgw-c2o-{}", std::process::id());
    moto.bucket(&bucket);
    let ds = [
        s3_gateway(&moto, &bucket, ""),
        s3_gateway(&moto, &bucket, ""),
    ];
    let addrs: Vec<SocketAddr> = ds.iter().map(|g| g.tcp_addr()).collect();
    let mds = s3_gateway(&moto, &bucket, &pnfs(&addrs));
    close_to_open(&mds, &addrs);
}
