//! The reactors' caches (the read cache, `gateway::cache`, and the io_uring file
//! table, `gateway::uring::files`) against changes made anywhere in a COMPOUND or by
//! any front end: once a call that changed a file has been answered, no later call
//! may be answered with the file's old data, size or mode — whatever preceded the
//! change in its COMPOUND (session operations, LOOKUP, OPEN), whichever version asks
//! next, and whichever reactor answers. An `fs` backend, each data path
//! (`backend.io` = "workers" and "auto": io_uring where the kernel allows it), the
//! read cache on, two reactors.

mod common;

use common::v4::{
    compound_call, create_session_op, enc, exchange_id_op, putfh_op, read_op, sequence_op, v3_file,
};
use common::{tcp_call, MOUNT, NFS};
use engine::rpc::{self, AuthSys, Cred};
use engine::xdr::{XdrReader, XdrWriter};
use gateway::config::Config;
use gateway::server::Server;
use std::net::TcpStream;
use std::time::Duration;

use nfs_wire::nfs4::{OP_GETATTR, OP_READ, OP_SEQUENCE};
use nfs_wire::v3more;
use nfs_wire::v4call::Ops;
/// FATTR4_SIZE (4) and FATTR4_MODE (33) as bitmap words (RFC 8881 §5.8).
const SIZE_MODE: [u32; 2] = [1 << 4, 1 << 1];
const NFS3ERR_ACCES: u32 = 13;

/// A gateway on a fresh `fs` store; shut down on drop.
struct Gw {
    server: Option<Server>,
    _dir: tempfile::TempDir,
}

impl Gw {
    fn start(io: &str) -> Gw {
        let dir = tempfile::tempdir().unwrap();
        let (data, state) = (dir.path().join("data"), dir.path().join("state"));
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        let text = format!(
            "[engine]\ncores = [0, 1]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 32\nlarge = 8\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\n\
             [rdma]\nprovider = \"off\"\n\
             [backend]\nkind = \"fs\"\nroot = \"{}\"\nworkers = 2\nio = \"{io}\"\n\
             [cache]\nsize_mib = 8\n\
             [state]\ndir = \"{}\"\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n",
            data.display(),
            state.display()
        );
        let server = Server::start(&Config::parse(&text).unwrap()).unwrap();
        Gw {
            server: Some(server),
            _dir: dir,
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.server.as_ref().unwrap().local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            let _ = s.shutdown();
        }
    }
}

/// Each check once per data path: the workers' (`_workers`) and, where the kernel
/// allows it, the reactors' io_uring (`_auto`).
macro_rules! each_io {
    ($check:ident: $workers:ident, $auto:ident) => {
        #[test]
        fn $workers() {
            $check("workers");
        }
        #[test]
        fn $auto() {
            $check("auto");
        }
    };
}

// ---- NFSv3 ---------------------------------------------------------------------------

/// An NFSv3 (or MOUNT) call as `cred`; the procedure's results.
fn v3_as(s: &mut TcpStream, cred: &Cred, prog: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let call = nfs_wire::v3more::call(7, prog, proc_, cred, args);
    let reply = tcp_call(s, &call).unwrap();
    let (_, st, at) = rpc::decode_reply(&reply).unwrap();
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    reply[at..].to_vec()
}

fn root_cred() -> Cred {
    Cred::Sys(AuthSys::new(0, 0, &[]))
}

fn user_cred() -> Cred {
    Cred::Sys(AuthSys::new(1000, 1000, &[]))
}

fn mount(s: &mut TcpStream) -> Vec<u8> {
    let rep = v3_as(s, &root_cred(), MOUNT, 1, &v3more::mnt_args(b"/"));
    nfs_wire::v3call::parse_mount(&rep).expect("MNT")
}

/// fattr3's size and mode (RFC 1813 §2.6).
fn fattr3(r: &mut XdrReader) -> (u64, u32) {
    r.u32().unwrap();
    let mode = r.u32().unwrap();
    r.skip(12).unwrap();
    let size = r.u64().unwrap();
    r.skip(84 - 28).unwrap();
    (size, mode)
}

/// READ of up to 64 bytes as `cred`: the status and the data.
fn v3_read(s: &mut TcpStream, cred: &Cred, fh: &[u8]) -> (u32, Vec<u8>) {
    let rep = v3_as(s, cred, NFS, 6, &v3more::read_args(fh, 0, 64));
    let mut r = XdrReader::new(&rep);
    let st = r.u32().unwrap();
    if st != 0 {
        return (st, Vec::new());
    }
    if r.bool().unwrap() {
        r.skip(84).unwrap();
    }
    r.u32().unwrap();
    r.bool().unwrap();
    (0, r.opaque_var(64).unwrap().to_vec())
}

/// GETATTR: size and mode.
fn v3_getattr(s: &mut TcpStream, fh: &[u8]) -> (u64, u32) {
    let rep = v3_as(s, &root_cred(), NFS, 1, &v3more::fh_args(fh));
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0, "GETATTR");
    fattr3(&mut r)
}

/// WRITE `data` at 0 with `stable` (0 UNSTABLE, 2 FILE_SYNC).
fn v3_write(s: &mut TcpStream, fh: &[u8], data: &[u8], stable: u32) {
    let rep = v3_as(
        s,
        &root_cred(),
        NFS,
        7,
        &v3more::write_args(fh, 0, stable, data),
    );
    assert_eq!(XdrReader::new(&rep).u32().unwrap(), 0, "WRITE");
}

// ---- NFSv4.1 -------------------------------------------------------------------------

/// One NFSv4.1 session (one slot) on a TCP connection.
struct V4 {
    s: TcpStream,
    sid: Vec<u8>,
    seq: u32,
    xid: u32,
}

impl V4 {
    fn connect(gw: &Gw, owner: &[u8]) -> V4 {
        let mut v = V4 {
            s: gw.connect(),
            sid: Vec::new(),
            seq: 1,
            xid: 1000,
        };
        let (st, res) = v.call(1, &exchange_id_op(owner));
        assert_eq!(st, 0, "EXCHANGE_ID");
        let mut r = XdrReader::new(&res);
        r.skip(8).unwrap();
        let clientid = r.u64().unwrap();
        let seq = r.u32().unwrap();
        let (st, res) = v.call(1, &create_session_op(clientid, seq));
        assert_eq!(st, 0, "CREATE_SESSION");
        let mut r = XdrReader::new(&res);
        r.skip(8).unwrap();
        v.sid = r.opaque_fixed(16).unwrap().to_vec();
        v
    }

    /// A COMPOUND of `nops` encoded operations: its status and results.
    fn call(&mut self, nops: u32, ops: &[u8]) -> (u32, Vec<u8>) {
        self.xid += 1;
        let reply = tcp_call(&mut self.s, &compound_call(self.xid, nops, ops)).unwrap();
        let (_, st, at) = rpc::decode_reply(&reply).unwrap();
        assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
        let mut r = XdrReader::new(&reply[at..]);
        let status = r.u32().unwrap();
        r.opaque_var(1024).unwrap();
        r.u32().unwrap();
        (status, r.rest().to_vec())
    }

    /// SEQUENCE + `ops`: the status and the results after SEQUENCE's.
    fn seq(&mut self, ops: &[Vec<u8>]) -> (u32, Vec<u8>) {
        let mut all = sequence_op(&self.sid, self.seq);
        self.seq += 1;
        ops.iter().for_each(|o| all.extend_from_slice(o));
        let (st, res) = self.call(ops.len() as u32 + 1, &all);
        let mut r = XdrReader::new(&res);
        assert_eq!(
            (r.u32().unwrap(), r.u32().unwrap()),
            (OP_SEQUENCE, 0),
            "SEQUENCE"
        );
        r.skip(16 + 20).unwrap();
        (st, r.rest().to_vec())
    }

    /// `SEQUENCE, PUTFH, READ` (64 bytes at 0): the shape the reactor answers.
    fn read(&mut self, fh: &[u8]) -> Vec<u8> {
        let (st, res) = self.seq(&[putfh_op(fh), read_op(0, 64)]);
        assert_eq!(st, 0, "PUTFH+READ");
        let mut r = XdrReader::new(&res);
        r.skip(8).unwrap();
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_READ, 0));
        r.bool().unwrap();
        r.opaque_var(64).unwrap().to_vec()
    }

    /// `SEQUENCE, PUTFH, GETATTR(size, mode)`: the shape the reactor answers.
    fn getattr(&mut self, fh: &[u8]) -> (u64, u32) {
        let (st, res) = self.seq(&[putfh_op(fh), getattr_op()]);
        assert_eq!(st, 0, "PUTFH+GETATTR");
        let mut r = XdrReader::new(&res);
        r.skip(8).unwrap();
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_GETATTR, 0));
        let words = r.u32().unwrap();
        r.skip(4 * words as usize).unwrap();
        r.u32().unwrap();
        (r.u64().unwrap(), r.u32().unwrap())
    }
}

fn getattr_op() -> Vec<u8> {
    Ops::new().getattr(&SIZE_MODE).bytes().to_vec()
}

/// WRITE (anonymous stateid, FILE_SYNC4) of `data` at 0.
fn write_op(data: &[u8]) -> Vec<u8> {
    Ops::new().write(&[0; 16], 0, data).bytes().to_vec()
}

/// SETATTR (anonymous stateid) of the size, or of the mode.
fn setattr_op(size: Option<u64>, mode: Option<u32>) -> Vec<u8> {
    let bitmap = [
        if size.is_some() { SIZE_MODE[0] } else { 0 },
        if mode.is_some() { SIZE_MODE[1] } else { 0 },
    ];
    let vals = enc(|v: &mut XdrWriter| {
        if let Some(s) = size {
            v.u64(s).unwrap();
        }
        if let Some(m) = mode {
            v.u32(m).unwrap();
        }
    });
    Ops::new()
        .setattr(&[0; 16], &bitmap, &vals)
        .bytes()
        .to_vec()
}

fn backchannel_ctl_op() -> Vec<u8> {
    Ops::new().backchannel_ctl().bytes().to_vec()
}

fn putrootfh_op() -> Vec<u8> {
    Ops::new().putrootfh().bytes().to_vec()
}

fn lookup_op(name: &[u8]) -> Vec<u8> {
    Ops::new().lookup(name).bytes().to_vec()
}

// ---- the checks ----------------------------------------------------------------------

/// A file `name` holding `data`, read and stat'ed through both versions until the
/// reactors answer (the first of each goes to a worker, which teaches the caches).
struct Warm {
    v3: TcpStream,
    v4: V4,
    fh: Vec<u8>,
}

fn warm(gw: &Gw, name: &[u8], data: &[u8]) -> Warm {
    let mut v3 = gw.connect();
    let root = mount(&mut v3);
    let fh = v3_file(&mut v3, &root, name, data);
    let mut v4 = V4::connect(gw, name);
    for _ in 0..3 {
        assert_eq!(v4.read(&fh), data);
        assert_eq!(v4.getattr(&fh).0, data.len() as u64);
        assert_eq!(v3_read(&mut v3, &user_cred(), &fh), (0, data.to_vec()));
        assert_eq!(v3_getattr(&mut v3, &fh).0, data.len() as u64);
    }
    Warm { v3, v4, fh }
}

/// What each reader answers that is not `data` (size included) with `mode`'s
/// permission bits: one line per stale answer.
fn stale(w: &mut Warm, data: &[u8], mode: u32, what: &str) -> Vec<String> {
    let size = data.len() as u64;
    let mut out = Vec::new();
    let mut check = |ok: bool, who: &str, got: String| {
        if !ok {
            out.push(format!("{what}: {who} answered {got}"));
        }
    };
    let d = w.v4.read(&w.fh);
    check(d == data, "v4 READ", format!("{d:?}"));
    let a = w.v4.getattr(&w.fh);
    check(
        a == (size, mode),
        "v4 GETATTR",
        format!("size {} mode {:o}", a.0, a.1),
    );
    let (st, d) = v3_read(&mut w.v3, &root_cred(), &w.fh);
    check(st == 0 && d == data, "v3 READ", format!("{st} {d:?}"));
    let (s3, m3) = v3_getattr(&mut w.v3, &w.fh);
    let a = (s3, m3 & 0o7777);
    check(
        a == (size, mode),
        "v3 GETATTR",
        format!("size {} mode {:o}", a.0, a.1),
    );
    out
}

/// Every reader sees `data` and `mode`.
fn sees(w: &mut Warm, data: &[u8], mode: u32, what: &str) {
    let bad = stale(w, data, mode, what);
    assert!(bad.is_empty(), "stale answers:\n{}", bad.join("\n"));
}

/// The cases: a WRITE or SETATTR(size) after a session operation
/// (BACKCHANNEL_CTL, EXCHANGE_ID) in a SEQUENCE COMPOUND, each on a freshly warmed
/// file; every stale answer is listed.
fn after_session_operations(io: &str) {
    let gw = Gw::start(io);
    let firsts: [(&str, Vec<u8>); 2] = [
        ("BACKCHANNEL_CTL", backchannel_ctl_op()),
        ("EXCHANGE_ID", exchange_id_op(b"again")),
    ];
    let changes: [(&str, Vec<u8>, &[u8]); 2] = [
        ("WRITE", write_op(b"bbbbbbbb"), b"bbbbbbbb"),
        ("SETATTR(size)", setattr_op(Some(2), None), b"aa"),
    ];
    let mut bad = Vec::new();
    for (i, (first_name, first)) in firsts.iter().enumerate() {
        for (j, (change_name, change, after)) in changes.iter().enumerate() {
            let file = format!("s{i}{j}");
            let mut w = warm(&gw, file.as_bytes(), b"aaaa");
            let fh = w.fh.clone();
            let (st, _) = w.v4.seq(&[first.clone(), putfh_op(&fh), change.clone()]);
            let what = format!("{io}: SEQUENCE, {first_name}, PUTFH, {change_name}");
            assert_eq!(st, 0, "{what}");
            bad.extend(stale(&mut w, after, 0o644, &what));
        }
    }
    assert!(bad.is_empty(), "stale answers:\n{}", bad.join("\n"));
}
each_io!(after_session_operations: changes_after_session_operations_workers, changes_after_session_operations_auto);

/// A SETATTR(mode) the scan could not name: cached attributes must not keep
/// answering with the old mode, nor admit a READ the new mode refuses.
fn mode_change(io: &str) {
    let gw = Gw::start(io);
    let mut w = warm(&gw, b"m", b"secret");
    let fh = w.fh.clone();
    let (st, _) = w.v4.seq(&[
        backchannel_ctl_op(),
        putfh_op(&fh),
        setattr_op(None, Some(0o600)),
    ]);
    assert_eq!(st, 0, "{io}: SETATTR(mode)");
    assert_eq!(
        v3_read(&mut w.v3, &user_cred(), &fh).0,
        NFS3ERR_ACCES,
        "{io}: a user the new mode refuses"
    );
    sees(&mut w, b"secret", 0o600, &format!("{io}: SETATTR(mode)"));
}
each_io!(mode_change: a_mode_change_is_seen_workers, a_mode_change_is_seen_auto);

/// A WRITE or SETATTR of a file reached by name (LOOKUP), not by PUTFH.
fn reached_by_name(io: &str) {
    let gw = Gw::start(io);
    let mut w = warm(&gw, b"n", b"aaaa");
    let (st, _) =
        w.v4.seq(&[putrootfh_op(), lookup_op(b"n"), write_op(b"cccccc")]);
    assert_eq!(st, 0, "{io}: LOOKUP, WRITE");
    sees(
        &mut w,
        b"cccccc",
        0o644,
        &format!("{io}: WRITE after LOOKUP"),
    );
    let (st, _) = w.v4.seq(&[
        putrootfh_op(),
        lookup_op(b"n"),
        setattr_op(Some(3), Some(0o640)),
    ]);
    assert_eq!(st, 0, "{io}: LOOKUP, SETATTR");
    sees(
        &mut w,
        b"ccc",
        0o640,
        &format!("{io}: SETATTR after LOOKUP"),
    );
}
each_io!(reached_by_name: changes_of_a_file_reached_by_name_workers, changes_of_a_file_reached_by_name_auto);

/// Writes through the reactors' own path (NFSv3 UNSTABLE WRITE on a file a worker
/// authenticated: the ring with io = "auto") and through the workers, on one
/// connection; readers on several others, spread by SO_REUSEPORT over both
/// reactors, each warmed first: every reader sees every write at once.
fn across_reactors(io: &str) {
    let gw = Gw::start(io);
    let mut w = gw.connect();
    let root = mount(&mut w);
    let fh = v3_file(&mut w, &root, b"x", b"0000");
    let mut readers: Vec<TcpStream> = (0..6).map(|_| gw.connect()).collect();
    for round in 1..6u8 {
        for r in readers.iter_mut() {
            for _ in 0..2 {
                let (st, _) = v3_read(r, &root_cred(), &fh);
                assert_eq!(st, 0);
            }
            v3_getattr(r, &fh);
        }
        // The writer's reactor learns the file (GETATTR), then writes on its ring.
        v3_getattr(&mut w, &fh);
        let data = vec![b'0' + round; 4 + round as usize];
        v3_write(&mut w, &fh, &data, if round % 2 == 0 { 2 } else { 0 });
        for (i, r) in readers.iter_mut().enumerate() {
            assert_eq!(
                v3_read(r, &root_cred(), &fh),
                (0, data.clone()),
                "{io}: round {round}, reader {i}"
            );
            assert_eq!(v3_getattr(r, &fh).0, data.len() as u64);
        }
    }
}

each_io!(across_reactors: writes_on_one_reactor_are_seen_by_the_others_workers, writes_on_one_reactor_are_seen_by_the_others_auto);

/// NFSv4.1 WRITE and SETATTR run by workers on a file the reactors read through
/// their io_uring path (`server::direct`): the next direct-path answer is the new
/// state, in both versions.
#[test]
fn worker_changes_leave_no_stale_direct_path_answer() {
    let gw = Gw::start("auto");
    let mut w = warm(&gw, b"d", b"aaaa");
    let fh = w.fh.clone();
    for (i, data) in [&b"dddddddddd"[..], b"ee", b"fffffffffffffff"]
        .iter()
        .enumerate()
    {
        let (st, _) = w.v4.seq(&[putfh_op(&fh), write_op(data)]);
        assert_eq!(st, 0);
        // A WRITE of less than the file keeps the size: truncate to the data.
        let (st, _) =
            w.v4.seq(&[putfh_op(&fh), setattr_op(Some(data.len() as u64), None)]);
        assert_eq!(st, 0);
        sees(&mut w, data, 0o644, &format!("write {i}"));
    }
    // v3 SETATTR(size) by a worker, then direct-path GETATTR/READ.
    let args = enc(|wr| {
        wr.opaque_var(&fh).unwrap();
        wr.bool(false).unwrap(); // mode
        wr.bool(false).unwrap(); // uid
        wr.bool(false).unwrap(); // gid
        wr.bool(true).unwrap(); // size
        wr.u64(1).unwrap();
        wr.u32(0).unwrap(); // atime: don't change
        wr.u32(0).unwrap(); // mtime: don't change
        wr.bool(false).unwrap(); // no guard
    });
    let rep = v3_as(&mut w.v3, &root_cred(), NFS, 2, &args);
    assert_eq!(XdrReader::new(&rep).u32().unwrap(), 0, "v3 SETATTR");
    sees(&mut w, b"f", 0o644, "v3 SETATTR(size)");
}
