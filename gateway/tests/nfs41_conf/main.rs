//! NFSv4.1 server conformance, written from RFC 8881 (each test cites its section):
//! an in-process gateway (TCP, `fs` backend in a temporary directory) and the raw
//! client of `common/nfs4_client.rs`, asserting exact status codes and reply
//! contents. One test binary for all areas, so CI links it once:
//! - `sessions`: EXCHANGE_ID, CREATE_SESSION, DESTROY_*, SEQUENCE and its slots;
//! - `stateids`: bad, old, future, seqid 0, current and special stateids;
//! - `opens`: share reservations, OPEN_DOWNGRADE, CLOSE, upgrades, claims, creates;
//! - `locks`: LOCK/LOCKT/LOCKU conflicts, splitting, types, RELEASE_LOCKOWNER;
//! - `deleg`: a read delegation recalled by another client's OPEN;
//! - `wdeleg`: write delegations recalled by NFSv3 and NFSv4.1 access, reads included;
//! - `cbgetattr`: another client's or NFSv3's GETATTR answered by CB_GETATTR;
//! - `deleg_times`: RFC 9754 in 4.2: open_arguments, OPEN_XOR_DELEGATION, delegated times;
//! - `grace`: a restart on the same state directory, reclaims and RECLAIM_COMPLETE;
//! - `links`: LINK, hard links' handles, counts and refusals, across a restart.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/nfs4_client.rs"]
mod nfs4_client;

mod cbgetattr;
mod deleg;
mod deleg_times;
mod grace;
mod links;
mod locks;
mod opens;
mod sessions;
mod stateids;
mod wdeleg;

use gateway::config::Config;
use gateway::server::Server;
use nfs4_client::*;
use std::net::SocketAddr;

/// A gateway on TCP only, with its data and state directories, restartable on them.
pub struct Gw41 {
    server: Option<Server>,
    pub addr: SocketAddr,
    data: tempfile::TempDir,
    state: tempfile::TempDir,
    nfs4: String,
    /// More `[[exports]]` tables after "/" (`start_with`).
    exports: String,
}

impl Gw41 {
    /// A gateway with the `[nfs4]` lines `nfs4` (e.g. `grace_time_s = 5`).
    pub fn start(nfs4: &str) -> Gw41 {
        Gw41::start_with(nfs4, "")
    }

    /// As `start`, with more `[[exports]]` tables (`exports`) after "/".
    pub fn start_with(nfs4: &str, exports: &str) -> Gw41 {
        let data = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let server = boot(&data, &state, nfs4, exports);
        Gw41 {
            addr: server.local_addr(),
            server: Some(server),
            data,
            state,
            nfs4: nfs4.to_string(),
            exports: exports.to_string(),
        }
    }

    /// Shuts the gateway down cleanly and starts a new one on the same directories
    /// (a new port): what a client sees as a server restart (RFC 8881 §8.4.2).
    pub fn restart(&mut self) {
        self.server.take().unwrap().shutdown().unwrap();
        let server = boot(&self.data, &self.state, &self.nfs4, &self.exports);
        self.addr = server.local_addr();
        self.server = Some(server);
    }

    /// A client with a session (no back channel) that sent RECLAIM_COMPLETE.
    pub fn client(&self, owner: &[u8]) -> Tcp41 {
        Tcp41::ready(self.addr, owner)
    }
}

fn boot(data: &tempfile::TempDir, state: &tempfile::TempDir, nfs4: &str, more: &str) -> Server {
    let text = format!(
        "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
         [pools]\nsmall = 256\nmedium = 16\nlarge = 4\n\
         [tcp]\nlisten = \"127.0.0.1:0\"\n\
         [rdma]\nprovider = \"off\"\n\
         [backend]\nkind = \"fs\"\nroot = \"{}\"\nworkers = 2\nio = \"workers\"\n\
         [state]\ndir = \"{}\"\n\
         [nfs4]\n{nfs4}\n\
         [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{more}",
        data.path().display(),
        state.path().display(),
    );
    Server::start(&Config::parse(&text).unwrap()).unwrap()
}

/// OPEN of `name` in the root (created UNCHECKED when `create`), no delegation
/// wanted, then GETFH: the open's stateid and the file's handle.
pub fn open_file(
    c: &mut Tcp41,
    owner: &[u8],
    name: &[u8],
    access: u32,
    deny: u32,
    create: bool,
) -> Result<([u8; 16], Vec<u8>), u32> {
    let how = if create {
        How::Unchecked
    } else {
        How::NoCreate
    };
    let clientid = c.clientid;
    let (st, res) = c.seq_run(|o| {
        o.putrootfh()
            .open(
                clientid,
                owner,
                access | WANT_NO_DELEG,
                deny,
                how,
                Claim::Null(name),
            )
            .getfh()
    });
    let mut r = after_seq(&res);
    assert_eq!(expect_op(&mut r, OP_PUTROOTFH), NFS4_OK);
    let ost = expect_op(&mut r, OP_OPEN);
    if ost != NFS4_OK {
        assert_eq!(st, ost, "the COMPOUND's status is the failed op's");
        return Err(ost);
    }
    let opened = parse_open_ok(&mut r);
    assert_eq!(expect_op(&mut r, OP_GETFH), NFS4_OK);
    Ok((opened.stateid, r.opaque_var(128).unwrap().to_vec()))
}

/// The status of the last operation of a SEQUENCE + PUTFH `fh` + `op` COMPOUND, and
/// a reader after it.
pub fn on_file(c: &mut Tcp41, fh: &[u8], f: impl FnOnce(Ops) -> Ops) -> (u32, Res) {
    let (st, res) = c.seq_run(|o| f(o.putfh(fh)));
    (st, res)
}

/// A reader positioned at the status of the COMPOUND's third result (after SEQUENCE
/// and PUTFH), checking the op number; returns (status, reader).
pub fn third(res: &Res, op: u32) -> (u32, engine::xdr::XdrReader<'_>) {
    let mut r = after_seq(res);
    assert_eq!(expect_op(&mut r, OP_PUTFH), NFS4_OK);
    let st = expect_op(&mut r, op);
    assert_eq!(st, res.status, "the COMPOUND's status is its last op's");
    (st, r)
}
