//! In-process backchannel test over real TCP: a raw client acts as the callback
//! service on its own connection (answers the gateway's CB_NULL with a REPLY), a stray
//! REPLY is dropped and counted without hurting the connection, and an NFSv3 WRITE on
//! a delegated file gets NFS3ERR_JUKEBOX until the delegation is returned.
//!
//! Needs nothing from the session layer: the back channel is named directly (the
//! connection a call arrived on, noted by the worker in test builds), as
//! CREATE_SESSION will.

use super::Server;
use crate::nfs4::ConnRef;
use crate::state::BackChannelInfo;
use crate::stats::callbacks::{CallbackResult, RecallResult};
use engine::rpc::{self, AuthSys, Cred};
use engine::xdr::{XdrReader, XdrWriter};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static CONNS: Mutex<Option<HashMap<SocketAddr, ConnRef>>> = Mutex::new(None);

/// Test builds: the worker notes which connection each peer's calls came on.
pub(super) fn note_conn(peer: SocketAddr, c: ConnRef) {
    CONNS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(peer, c);
}

fn conn_of(peer: SocketAddr) -> ConnRef {
    CONNS.lock().unwrap().as_ref().unwrap()[&peer]
}

const CB_PROG: u32 = 0x4000_0000;
const CLIENT: u64 = 0x1234;

fn start(dir: &std::path::Path) -> Server {
    start_with(dir, "rw")
}

fn start_with(dir: &std::path::Path, access: &str) -> Server {
    let text = format!(
        "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
         [pools]\nsmall = 256\nmedium = 16\nlarge = 4\n\
         [tcp]\nlisten = \"127.0.0.1:0\"\n\
         [rdma]\nprovider = \"off\"\n\
         [backend]\nkind = \"memory\"\nworkers = 2\n\
         [state]\ndir = \"{}\"\n\
         [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\naccess = \"{access}\"\n",
        dir.display()
    );
    Server::start(&crate::config::Config::parse(&text).unwrap()).unwrap()
}

fn connect(s: &Server) -> TcpStream {
    let c = TcpStream::connect(s.local_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.set_nodelay(true).unwrap();
    c
}

fn send_record(c: &mut TcpStream, body: &[u8]) {
    let mut v = (0x8000_0000u32 | body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    c.write_all(&v).unwrap();
}

fn read_record(c: &mut TcpStream) -> Vec<u8> {
    let mut m = [0u8; 4];
    c.read_exact(&mut m).unwrap();
    let n = u32::from_be_bytes(m) & 0x7fff_ffff;
    let mut b = vec![0u8; n as usize];
    c.read_exact(&mut b).unwrap();
    b
}

/// An NFSv3 call; returns the reply's first result word (the nfsstat3).
fn nfs3(c: &mut TcpStream, xid: u32, proc_: u32, args: &[u8]) -> u32 {
    let mut buf = vec![0u8; 512 + args.len()];
    let mut w = XdrWriter::new(&mut buf);
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    rpc::write_call(&mut w, xid, 100003, 3, proc_, &cred).unwrap();
    let n = w.position();
    buf.truncate(n);
    buf.extend_from_slice(args);
    send_record(c, &buf);
    let rep = read_record(c);
    let (x, st, at) = rpc::decode_reply(&rep).unwrap();
    assert_eq!(x, xid);
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    XdrReader::new(&rep[at..]).u32().unwrap()
}

fn fh_arg(fh: &[u8]) -> Vec<u8> {
    let mut v = (fh.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(fh);
    while !v.len().is_multiple_of(4) {
        v.push(0);
    }
    v
}

fn write_args(fh: &[u8]) -> Vec<u8> {
    let mut v = fh_arg(fh);
    v.extend(0u64.to_be_bytes());
    v.extend(4u32.to_be_bytes());
    v.extend(2u32.to_be_bytes()); // FILE_SYNC
    v.extend(4u32.to_be_bytes());
    v.extend(b"data");
    v
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn callback_on_the_client_connection_and_v3_recall() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path());
    let shared = srv.shared.clone();
    let dl = &shared.state.delegations;
    let root = shared.model.root(0).unwrap();
    let file = shared
        .model
        .create(
            &root,
            b"f",
            &crate::fs::CreateMode::Unchecked(Default::default()),
            crate::fs::Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    let fh = shared.model.handle(&file).as_bytes().to_vec();
    let root_fh = shared.model.handle(&root).as_bytes().to_vec();

    // The "v4 client": one call through a worker names its connection.
    let mut c1 = connect(&srv);
    assert_eq!(nfs3(&mut c1, 1, 19, &fh_arg(&root_fh)), 0, "FSINFO");
    let conn = conn_of(c1.local_addr().unwrap());
    let info = BackChannelInfo {
        session: [3; 16],
        conn,
        cb_program: CB_PROG,
        max_request: 4096,
        max_slots: 1,
        minor: 1,
    };
    crate::nfs4::callback::probe(&shared.state, CLIENT, info);
    // The CB_NULL arrives on our connection: answer it as the callback service.
    let call = read_record(&mut c1);
    let (h, _) = rpc::decode_call(&call).unwrap();
    assert_eq!((h.prog, h.vers, h.proc_), (CB_PROG, 1, 0));
    assert!(matches!(h.cred, Cred::Sys(_)), "AUTH_SYS");
    let mut rep = vec![0u8; 64];
    let mut w = XdrWriter::new(&mut rep);
    rpc::write_accepted(&mut w, h.xid, rpc::Accept::Success).unwrap();
    let n = w.position();
    rep.truncate(n);
    send_record(&mut c1, &rep);
    wait_for("the probe's answer", || dl.callback_up(CLIENT));
    let stats = dl.stats();
    assert_eq!(stats.callbacks(CallbackResult::Sent), 1);
    assert_eq!(stats.callbacks(CallbackResult::Replied), 1);

    // A stray REPLY: dropped and counted; the connection keeps working.
    let mut stray = vec![0u8; 64];
    let mut w = XdrWriter::new(&mut stray);
    rpc::write_accepted(&mut w, h.xid ^ 0x5555, rpc::Accept::Success).unwrap();
    let n = w.position();
    stray.truncate(n);
    send_record(&mut c1, &stray);
    wait_for("the stray reply to be counted", || {
        stats.callbacks(CallbackResult::Unmatched) == 1
    });
    assert_eq!(nfs3(&mut c1, 2, 19, &fh_arg(&root_fh)), 0, "still served");

    // A read delegation on the file; an NFSv3 WRITE from elsewhere must wait.
    let (sid, _) = dl
        .try_grant_fh(CLIENT, file.fileid, &fh, false)
        .expect("granted");
    let mut c2 = connect(&srv);
    assert_eq!(nfs3(&mut c2, 10, 7, &write_args(&fh)), 10008, "JUKEBOX");
    // The recall started (its "sent" is counted when a CB_RECALL goes out on a bound
    // back channel; this test binds none in the client table).
    assert!(dl.recall_target(&sid.other).is_some(), "recalling");
    assert_eq!(
        nfs3(&mut c2, 11, 2, &{
            let mut a = fh_arg(&fh);
            a.extend([0u8; 4 * 6]); // sattr3: nothing set
            a.extend(0u32.to_be_bytes()); // no guard
            a
        }),
        10008,
        "SETATTR waits too"
    );
    assert!(dl.recall_target(&sid.other).is_some(), "still recalling");
    // Returned: the writer proceeds.
    assert_eq!(dl.delegreturn(CLIENT, &sid, file.fileid), Ok(()));
    assert_eq!(stats.recalls(RecallResult::Returned), 1);
    assert_eq!(
        nfs3(&mut c2, 12, 7, &write_args(&fh)),
        0,
        "WRITE after return"
    );

    // Namespace conflicts: REMOVE of a delegated file, RENAME over it.
    let g = shared
        .model
        .create(
            &root,
            b"g",
            &crate::fs::CreateMode::Unchecked(Default::default()),
            crate::fs::Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    let gfh = shared.model.handle(&g).as_bytes().to_vec();
    let (gsid, _) = dl.try_grant_fh(CLIENT, g.fileid, &gfh, false).unwrap();
    let entry = |name: &[u8]| {
        let mut a = fh_arg(&root_fh);
        a.extend(fh_arg(name));
        a
    };
    assert_eq!(nfs3(&mut c2, 13, 12, &entry(b"g")), 10008, "REMOVE waits");
    let mut rename = entry(b"f");
    rename.extend(entry(b"g"));
    assert_eq!(
        nfs3(&mut c2, 14, 14, &rename),
        10008,
        "RENAME over it waits"
    );
    assert!(dl.recall_target(&gsid.other).is_some(), "recalling g");
    assert_eq!(dl.delegreturn(CLIENT, &gsid, g.fileid), Ok(()));
    assert_eq!(nfs3(&mut c2, 15, 14, &rename), 0, "RENAME after return");
    drop((c1, c2));
    srv.shutdown().unwrap();
}

/// A caller the export does not let write (read-only export) gets its own error, and
/// starts no recall (access is checked before a delegation is broken, as knfsd does).
#[test]
fn a_caller_who_may_not_write_recalls_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start_with(dir.path(), "ro");
    let shared = srv.shared.clone();
    let dl = &shared.state.delegations;
    let root = shared.model.root(0).unwrap();
    let file = shared
        .model
        .create(
            &root,
            b"f",
            &crate::fs::CreateMode::Unchecked(Default::default()),
            crate::fs::Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    let fh = shared.model.handle(&file).as_bytes().to_vec();
    dl.set_callback_up(CLIENT, true);
    dl.try_grant_fh(CLIENT, file.fileid, &fh, false).unwrap();
    let mut c = connect(&srv);
    assert_eq!(nfs3(&mut c, 1, 7, &write_args(&fh)), 30, "NFS3ERR_ROFS");
    assert_eq!(dl.stats().recalls(RecallResult::Sent), 0);
    drop(c);
    srv.shutdown().unwrap();
}
