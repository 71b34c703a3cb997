//! pNFS callbacks over the RPC-over-RDMA back channel (RFC 8167; issue 27: "CB_LAYOUTRECALL
//! and CB_NOTIFY_DEVICEID over the back channel on TCP and on the RDMA back channel"):
//! a metadata server serving NFSv4.1 over RDMA (the `soft` provider) and two data
//! servers on one shared `fs` directory. The project's own v4.1 RDMA client, whose
//! session's back channel is its RDMA connection, takes a layout on a file placed on
//! data server 1 and asks GETDEVICEINFO for deletions of that server's id; the server
//! stops, and the layout's recall and then the id's deletion both come over the RDMA
//! connection as reverse calls, are answered there, and are counted as RDMA callbacks.
//! (The same over TCP: pnfs_tcp.rs's `a_dead_data_servers_id_is_deleted_…`.)

mod common;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use common::{free_addr, wait_for, Gw};
use engine::xdr::XdrReader;
use nfs4_client::{expect_op, skip_sequence_ok, CONN_BACK_CHAN, V41, WANT_NO_DELEG};
use nfs_wire::nfs4::{OP_GETFH, OP_OPEN, OP_PUTFH, OP_PUTROOTFH, OP_SEQUENCE};
use nfs_wire::nfs4args::*;
use nfs_wire::v4call::{Claim, How, Ops};
use nfs_wire::v4pnfs::{self, DeviceNotice, LayoutGet, Return};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const NFS4_OK: u32 = 0;
const NFS4ERR_NOENT: u32 = 2;
const ALL: u64 = u64::MAX;

/// A gateway on the shared `fs` directory `root`, over TCP at `listen`, and over soft
/// RDMA at `rdma` when given; `more` ends the configuration (a `[pnfs]` section).
fn shared_fs(
    root: &std::path::Path,
    listen: SocketAddr,
    rdma: Option<SocketAddr>,
    more: &str,
) -> Gw {
    let rdma_section = match rdma {
        Some(a) => format!(
            "[rdma]\nprovider = \"soft\"\nlisten = \"{a}\"\ncredits = 32\ninline_size = 4096\n"
        ),
        None => String::new(),
    };
    let mut gw = Gw::start_text(|dir| {
        format!(
            "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
             [tcp]\nlisten = \"{listen}\"\n{rdma_section}\
             [backend]\nkind = \"fs\"\nroot = \"{}\"\nshared = true\n\
             [state]\ndir = \"{}\"\n[nfs4]\nlease_time_s = 10\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{more}",
            root.display(),
            dir.display()
        )
    });
    if let Some(a) = rdma {
        gw.rdma = a;
    }
    gw
}

/// The value of one series of the gateway's metrics (0 when absent).
fn metric(gw: &Gw, series: &str) -> u64 {
    gw.metric(series)
}

/// An RPC call record's procedure (RFC 5531 §9: xid, type, rpcvers, prog, vers, proc).
fn proc_of(rec: &[u8]) -> u32 {
    u32::from_be_bytes(rec[20..24].try_into().unwrap())
}

/// The RDMA client with its session and slot sequence.
struct Client {
    c: V41,
    clientid: u64,
    sid: [u8; 16],
    seq: u32,
}

impl Client {
    /// SEQUENCE + PUTFH `fh` + `op`: `op`'s status and results.
    fn on(&mut self, fh: &[u8], op: Ops) -> (u32, Vec<u8>) {
        let res = self.run(Ops::new().putfh(fh).append(op));
        let mut r = res.reader();
        expect_op(&mut r, OP_SEQUENCE);
        skip_sequence_ok(&mut r);
        assert_eq!(expect_op(&mut r, OP_PUTFH), NFS4_OK);
        r.u32().unwrap();
        let st = r.u32().unwrap();
        (st, r.rest().to_vec())
    }

    fn run(&mut self, ops: Ops) -> nfs_wire::v4reply::Res {
        let all = Ops::new().sequence(self.sid, self.seq).append(ops);
        self.seq += 1;
        self.c.compound(&all)
    }

    /// OPEN (create) `name` in the root: the open stateid and the file's handle.
    fn open(&mut self, name: &[u8]) -> ([u8; 16], Vec<u8>) {
        let how = (How::Unchecked, Claim::Null(name));
        let op = Ops::new()
            .putrootfh()
            .open(self.clientid, name, 3 | WANT_NO_DELEG, 0, how.0, how.1)
            .getfh();
        let res = self.run(op);
        assert_eq!(res.status, NFS4_OK, "OPEN");
        let mut r = res.reader();
        expect_op(&mut r, OP_SEQUENCE);
        skip_sequence_ok(&mut r);
        expect_op(&mut r, OP_PUTROOTFH);
        expect_op(&mut r, OP_OPEN);
        let open = nfs_wire::v4reply::open_ok(&mut r).unwrap();
        expect_op(&mut r, OP_GETFH);
        (open.stateid, r.opaque_var(128).unwrap().to_vec())
    }

    /// A file whose RW layout names the data server at `want`: its handle, layout
    /// stateid and that server's device id (other files' layouts are returned).
    fn file_on(&mut self, want: SocketAddr) -> (Vec<u8>, [u8; 16], [u8; 16]) {
        for i in 0..64 {
            let (open, fh) = self.open(format!("r{i}").as_bytes());
            let get = LayoutGet {
                layout_type: LAYOUT4_FLEX_FILES,
                iomode: LAYOUTIOMODE4_RW,
                offset: 0,
                length: ALL,
                minlength: 0,
                stateid: open,
                maxcount: 4096,
            };
            let (st, rest) = self.on(&fh, Ops::new().layoutget(&get));
            assert_eq!(st, NFS4_OK, "LAYOUTGET");
            let g = v4pnfs::layoutget_ok(&mut XdrReader::new(&rest)).unwrap();
            let ff = v4pnfs::ff_layout(&g.layouts[0].body).unwrap();
            let dev = ff.mirrors[0][0].deviceid;
            let (st, rest) = self.on(&fh, Ops::new().getdeviceinfo(&dev, LAYOUT4_FLEX_FILES, 0));
            assert_eq!(st, NFS4_OK, "GETDEVICEINFO");
            let (_, body, _) = v4pnfs::getdeviceinfo_ok(&mut XdrReader::new(&rest)).unwrap();
            let d = v4pnfs::ff_device(&body).unwrap();
            if v4pnfs::uaddr(&d.netaddrs[0].1).unwrap() == want {
                return (fh, g.stateid, dev);
            }
            self.give_back(&fh, g.stateid);
        }
        panic!("no file placed on {want}");
    }

    fn give_back(&mut self, fh: &[u8], stateid: [u8; 16]) {
        let r = Return::File {
            offset: 0,
            length: ALL,
            stateid,
        };
        let ret = Ops::new().layoutreturn(LAYOUT4_FLEX_FILES, LAYOUTIOMODE4_ANY, &r);
        assert_eq!(self.on(fh, ret).0, NFS4_OK, "LAYOUTRETURN");
    }

    /// GETDEVICEINFO of `id` asking for `notify`: the status and gdir_notification.
    fn ask_notify(&mut self, fh: &[u8], id: &[u8; 16], notify: u32) -> (u32, Vec<u32>) {
        let op = Ops::new().getdeviceinfo_notify(id, LAYOUT4_FLEX_FILES, &[notify]);
        let (st, rest) = self.on(fh, op);
        if st != NFS4_OK {
            return (st, Vec::new());
        }
        let (_, _, bits) = v4pnfs::getdeviceinfo_ok(&mut XdrReader::new(&rest)).unwrap();
        (st, bits)
    }

    /// The next CB_COMPOUND over the RDMA connection within `wait` (CB_NULL probes met
    /// meanwhile are answered): its xid and record.
    fn next_compound(&mut self, wait: Duration) -> Option<(u32, Vec<u8>)> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (xid, rec) = self.c.next_callback(left)?;
            if proc_of(&rec) != 0 {
                return Some((xid, rec));
            }
            assert_eq!(self.c.answer(xid, &rec), None, "CB_NULL");
        }
    }
}

#[test]
fn layout_recall_and_device_deletion_come_over_the_rdma_back_channel() {
    let root = tempfile::tempdir().unwrap();
    let at = [free_addr(), free_addr()];
    let mut ds: Vec<Option<Gw>> = at
        .iter()
        .map(|a| Some(shared_fs(root.path(), *a, None, "")))
        .collect();
    let mut pnfs = String::from(
        "[pnfs]\nenabled = true\nrsize = 65536\nwsize = 65536\n\
         probe_ms = 100\nprobe_timeout_ms = 1000\nprobe_failures = 2\n",
    );
    for a in &at {
        pnfs += &format!("[[pnfs.data_servers]]\naddress = \"{a}\"\n");
    }
    // Unique per process (the soft provider names its listener after the address).
    let pid = std::process::id();
    let rdma = SocketAddr::from((
        [127, (pid >> 16) as u8, (pid >> 8) as u8, pid as u8],
        46_901,
    ));
    let mds = shared_fs(
        root.path(),
        "127.0.0.1:0".parse().unwrap(),
        Some(rdma),
        &pnfs,
    );
    let up = |i: usize| {
        let s = format!("nfsgw_pnfs_data_server_up{{address=\"{}\"}}", at[i]);
        metric(&mds, &s)
    };
    wait_for("both data servers up", 5, || up(0) == 1 && up(1) == 1);

    let mut v41 = V41::connect(mds.rdma, 32, 2);
    let (clientid, sid, flags) = v41.session(b"pnfs-rdma", CONN_BACK_CHAN, 2);
    assert_eq!(
        flags & CONN_BACK_CHAN,
        CONN_BACK_CHAN,
        "back channel granted"
    );
    let mut a = Client {
        c: v41,
        clientid,
        sid,
        seq: 1,
    };
    // R8167: the probe comes over the RDMA connection as a reverse call.
    let (x, rec) =
        a.c.next_callback(Duration::from_secs(5))
            .expect("a CB_NULL probe over RDMA");
    assert_eq!(proc_of(&rec), 0, "CB_NULL first");
    assert_eq!(a.c.answer(x, &rec), None);
    assert_eq!(a.run(Ops::new().reclaim_complete()).status, NFS4_OK);

    let (fh, _, d1) = a.file_on(at[1]);
    let delete = 1 << NOTIFY_DEVICEID4_DELETE;
    assert_eq!(a.ask_notify(&fh, &d1, delete), (NFS4_OK, vec![delete]));

    // Data server 1 stops: its layout is recalled over RDMA (RFC 8881 §20.3).
    ds[1] = None;
    wait_for("data server 1 marked down", 10, || up(1) == 0);
    let (xid, rec) = a
        .next_compound(Duration::from_secs(10))
        .expect("a CB_LAYOUTRECALL over RDMA");
    let (rx, cb) = v4pnfs::decode_layoutrecall(&rec).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rx, xid);
    assert_eq!(cb.fh, fh, "the file on the dead data server");
    assert_eq!(cb.session, sid, "CB_SEQUENCE names the session");
    let reply = v4pnfs::layoutrecall_reply(xid, &cb, NFS4_OK);
    a.c.c.reply_callback(xid, &reply).expect("reply_callback");
    assert!(
        a.next_compound(Duration::from_secs(1)).is_none(),
        "no deletion while a layout naming the id is held (§20.12.3)"
    );
    assert_eq!(a.ask_notify(&fh, &d1, delete).0, NFS4ERR_NOENT);
    a.give_back(&fh, cb.stateid);

    // Then the id's deletion, over RDMA too (RFC 8881 §20.12).
    let (xid, rec) = a
        .next_compound(Duration::from_secs(5))
        .expect("a CB_NOTIFY_DEVICEID over RDMA");
    let (rx, n) = v4pnfs::decode_notify_deviceid(&rec).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rx, xid);
    let want = DeviceNotice {
        kind: NOTIFY_DEVICEID4_DELETE,
        layout_type: LAYOUT4_FLEX_FILES,
        deviceid: d1,
        immediate: false,
    };
    assert_eq!(n.notices, vec![want]);
    let reply = v4pnfs::notify_deviceid_reply(xid, &n, NFS4_OK);
    a.c.c.reply_callback(xid, &reply).expect("reply_callback");
    assert!(
        a.next_compound(Duration::from_secs(1)).is_none(),
        "told once"
    );

    // The operator's view: the probe, the recall and the deletion went out over RDMA
    // and were answered; nothing went over TCP.
    let cbs = |t: &str, r: &str| {
        metric(
            &mds,
            &format!("nfsgw_callbacks_total{{transport=\"{t}\",result=\"{r}\"}}"),
        )
    };
    wait_for("three RDMA callbacks answered", 5, || {
        cbs("rdma", "replied") >= 3
    });
    assert_eq!(cbs("tcp", "sent"), 0);
    drop(ds);
}
