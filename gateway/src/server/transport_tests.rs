//! The reply value's parts go back by `Drop`: a reply dropped without being sent
//! gives back its TCP charge and its cache pins (counted).

use super::*;
use crate::cache::{FhKey, Fill, FillData, Generations, Request};
use crate::config::{Access, Cidr, Export, Squash};
use crate::export::Exports;
use crate::fs::{Attr, FileKind, NfsTime};
use engine::mem::{ClassSpec, HugePolicy, Pools};
use engine::rpc::{AuthSys, Cred};
use engine::tcp::TcpOptions;
use std::io::Write;
use std::time::{Duration, Instant};

const FH: &[u8] = b"handle-bytes";

fn pools() -> Pools {
    let c = ClassSpec {
        size: 64 << 10,
        count: 8,
    };
    Pools::new(&[c], HugePolicy::Off).unwrap()
}

fn exports() -> Exports {
    Exports::new(vec![Export {
        id: 0,
        path: "/".into(),
        prefix: String::new(),
        clients: vec![Cidr::parse("127.0.0.0/8").unwrap()],
        access: Access::Rw,
        squash: Squash::None,
        anon_uid: 65534,
        anon_gid: 65534,
    }])
}

fn attr(size: u64) -> Attr {
    let t = NfsTime { sec: 5, nsec: 0 };
    Attr {
        kind: FileKind::Reg,
        mode: 0o644,
        nlink: 1,
        uid: 0,
        gid: 0,
        size,
        used: size,
        rdev: (0, 0),
        fsid: 1,
        fileid: 42,
        atime: NfsTime::default(),
        mtime: t,
        ctime: t,
        change: 5_000_000_000,
    }
}

/// A cache holding 16 KiB of file 42, and the pins of a 5000-byte READ from it
/// (two pages).
fn pinned_read(cache: &mut ReadCache, p: &Pools) -> Box<PageRead> {
    let gens = Generations::new();
    let mut data = p.alloc(16384).unwrap();
    data.set_len(16384);
    let fill = Fill {
        fh: FhKey::new(FH).unwrap(),
        export: 0,
        attr: attr(1 << 20),
        stamp: gens.stamp(42),
        data: Some(FillData::Block(0, data)),
        exact: false,
    };
    cache.fill(&gens, fill, None);
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let req = Request {
        fh: FH,
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let hit = cache.read(&gens, &exports(), &req, 100, 5000).unwrap();
    cache.pin_read(&hit, 0)
}

/// A TCP transport with one connection whose first record was delivered and charged
/// `bytes` of its reply budget.
fn charged_call(p: &Pools, bytes: usize) -> (TcpTransport, std::net::TcpStream, ConnId, Charge) {
    let addr = "127.0.0.1:0".parse().unwrap();
    let mut tcp = TcpTransport::bind(addr, TcpOptions::default(), p.clone()).unwrap();
    let mut client = std::net::TcpStream::connect(tcp.local_addr()).unwrap();
    client
        .write_all(&[0x80, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0])
        .unwrap();
    let mut got = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.is_none() {
        assert!(Instant::now() < deadline, "no record delivered");
        tcp.poll(Some(Duration::from_millis(5)), &mut |c, _, _, budget| {
            got = Some((c, budget.charge(bytes).unwrap()));
        });
    }
    let (conn, charge) = got.unwrap();
    (tcp, client, conn, charge)
}

#[test]
fn a_reply_dropped_unsent_gives_back_its_charge_and_its_pins() {
    let p = pools();
    let mut cache = ReadCache::new(8 * crate::limits::CACHE_PAGE, HugePolicy::Off).unwrap();
    let (tcp, _client, conn, charge) = charged_call(&p, 1 << 16);
    assert_eq!(tcp.budget_used(conn), 1 << 16);
    let list = pinned_read(&mut cache, &p);
    assert_eq!(cache.pinned(), 2);
    let mut net = Transports {
        tcp,
        rdma: None,
        pins: PinHome::default(),
    };
    let mut head = p.alloc(64).unwrap();
    head.set_len(64);
    let reply = Reply {
        buf: Some(head),
        pages: Some(Pinned::new(list, &net.pins)),
        charge: Some(charge),
    };
    drop(reply);
    assert_eq!(net.tcp.budget_used(conn), 0, "the charge came back");
    net.take_unsent(&mut |l| cache.release(l));
    assert_eq!(cache.pinned(), 0, "the pins came back");
}

#[test]
fn a_charge_dropped_with_its_job_on_another_thread_comes_back() {
    // A worker that drops a call unanswered (e.g. its reply buffer never came).
    let p = pools();
    let (tcp, _client, conn, charge) = charged_call(&p, 4096);
    std::thread::spawn(move || drop(charge)).join().unwrap();
    assert_eq!(tcp.budget_used(conn), 0);
}

/// RFC 8267 §4, §6.4.1: an RDMA reply's DDP items are where the executor that
/// answered noted them (an NFSv3 READ's encoder, `crate::ddp::note`; a COMPOUND's
/// loop; a cached or io_uring READ's outcome), moved past the record-mark slot the
/// RDMA reply does not send; a reply that noted none carries none, whatever its bytes
/// say (the transport takes no reply bytes to find them), and a call whose binding
/// allows no item never gets one.
#[test]
fn ddp_items_come_from_the_note_never_from_the_reply() {
    let noted = DdpList::from(Some(MARK + 120..MARK + 4216));
    let got = ddp_of(ReplyItem::ReadData, Some(noted));
    assert_eq!((got.len(), got.get(0)), (1, Some(Some(120..4216))));
    assert_eq!(ddp_of(ReplyItem::ReadData, None), DdpList::new());
    assert_eq!(ddp_of(ReplyItem::ReadlinkPath, None), DdpList::new());
    assert_eq!(ddp_of(ReplyItem::Compound, None), DdpList::new());
    assert_eq!(ddp_of(ReplyItem::None, Some(noted)), DdpList::new());
    let mut two = DdpList::new();
    two.push(None);
    two.push(Some(MARK + 300..MARK + 310));
    let got = ddp_of(ReplyItem::Compound, Some(two));
    assert_eq!((got.get(0), got.get(1)), (Some(None), Some(Some(300..310))));
}
