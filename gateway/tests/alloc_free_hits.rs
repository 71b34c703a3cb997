//! A cached GETATTR, READ or LOOKUP over TCP allocates nothing on the heap. The
//! gateway runs in process (one reactor, memory backend) under a counting global
//! allocator; the client writes prebuilt calls and reads replies into a fixed buffer,
//! so every allocation counted while a batch runs is the gateway's.

mod common;

use common::{rpc_call, xdr_opaque, Gw, GwOpts, MOUNT, NFS};
use engine::rpc::{AuthSys, Cred};
use engine::xdr::XdrReader;
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Counts heap allocations (alloc and realloc) while `COUNTING` is set.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is
// an atomic and allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn record(call: &[u8]) -> Vec<u8> {
    nfs_wire::rpccall::record(call).expect("one fragment")
}

/// Reads one single-fragment reply into `buf`; returns its length. No allocation.
fn recv_into(s: &mut TcpStream, buf: &mut [u8]) -> usize {
    let mut mark = [0u8; 4];
    s.read_exact(&mut mark).unwrap();
    let m = u32::from_be_bytes(mark);
    assert!(m & 0x8000_0000 != 0, "single fragment");
    let n = (m & 0x7fff_ffff) as usize;
    s.read_exact(&mut buf[..n]).unwrap();
    n
}

/// Procedure results of a reply in `buf[..n]` (accepted, success), as a vector (setup
/// only).
fn results(buf: &[u8]) -> Vec<u8> {
    let (_, st, at) = engine::rpc::decode_reply(buf).unwrap();
    assert_eq!(
        st,
        engine::rpc::ReplyStatus::Accepted(engine::rpc::Accept::Success)
    );
    buf[at..].to_vec()
}

fn call(s: &mut TcpStream, prog: u32, proc_: u32, args: &[u8], buf: &mut [u8]) -> Vec<u8> {
    s.write_all(&record(&rpc_call(7, prog, proc_, args)))
        .unwrap();
    let n = recv_into(s, buf);
    results(&buf[..n])
}

#[test]
fn cached_getattr_and_reads_allocate_nothing() {
    let gw = Gw::start(&GwOpts {
        rdma: false,
        ..GwOpts::default()
    });
    let mut s = gw.connect_tcp();
    let mut buf = vec![0u8; 128 << 10];
    let mut a = Vec::new();
    xdr_opaque(&mut a, b"/");
    let res = call(&mut s, MOUNT, 1, &a, &mut buf);
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0, "MNT ok");
    let root = r.opaque_var(64).unwrap().to_vec();

    let mut a = Vec::new();
    xdr_opaque(&mut a, &root);
    xdr_opaque(&mut a, b"hot.bin");
    a.extend(0u32.to_be_bytes()); // UNCHECKED
    a.extend([0u8; 4 * 6]); // sattr3: nothing set
    let res = call(&mut s, NFS, 8, &a, &mut buf);
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0, "CREATE ok");
    assert!(r.bool().unwrap());
    let fh = r.opaque_var(64).unwrap().to_vec();
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 7) as u8).collect();
    let mut a = Vec::new();
    xdr_opaque(&mut a, &fh);
    a.extend(0u64.to_be_bytes());
    a.extend((data.len() as u32).to_be_bytes());
    a.extend(2u32.to_be_bytes()); // FILE_SYNC
    xdr_opaque(&mut a, &data);
    assert_eq!(call(&mut s, NFS, 7, &a, &mut buf)[..4], [0, 0, 0, 0]);

    // GETATTR, an 8 KiB READ (sent from the cache pages), a 512-byte READ (copied
    // into the reply) and an unaligned 4 KiB READ, in one pipelined burst.
    let read = |off: u64, count: u32| {
        let mut a = Vec::new();
        xdr_opaque(&mut a, &fh);
        a.extend(off.to_be_bytes());
        a.extend(count.to_be_bytes());
        a
    };
    let mut getattr = Vec::new();
    xdr_opaque(&mut getattr, &fh);
    // LOOKUP of the file's name, answered from the reactor's names (`cache_names`).
    let mut lookup = Vec::new();
    xdr_opaque(&mut lookup, &root);
    xdr_opaque(&mut lookup, b"hot.bin");
    let mut burst = Vec::new();
    // The caller has supplementary groups (admission copies them for every hit).
    let caller = Cred::Sys(AuthSys::new(0, 0, &[4, 5, 6, 7, 8, 9, 10, 11]));
    for (proc_, args) in [
        (3, lookup.clone()),
        (1, getattr),
        (6, read(8192, 8192)),
        (6, read(100, 512)),
        (6, read(20000, 4096)),
    ] {
        let call = nfs_wire::v3more::call(9, NFS, proc_, &caller, &args);
        burst.extend(record(&call));
    }
    // Fills cache whole pages only: one aligned READ caches the pages the burst reads.
    let warm = record(&rpc_call(8, NFS, 6, &read(0, 32768)));
    // And the name (an entry lives 1 s too), with the directory's attributes.
    let warm_name = record(&rpc_call(8, NFS, 3, &lookup));
    const ROUNDS: usize = 50;
    let mut batches = Vec::new();
    for _ in 0..20 {
        // Warm (uncounted): a miss fills the cache; the attributes live 1 s, so a
        // batch that straddles their expiry sees one miss (a worker call).
        s.write_all(&warm).unwrap();
        recv_into(&mut s, &mut buf);
        s.write_all(&warm_name).unwrap();
        recv_into(&mut s, &mut buf);
        for _ in 0..2 {
            s.write_all(&burst).unwrap();
            for _ in 0..5 {
                recv_into(&mut s, &mut buf);
            }
        }
        ALLOCS.store(0, Ordering::SeqCst);
        COUNTING.store(true, Ordering::SeqCst);
        let mut bytes = 0;
        for _ in 0..ROUNDS {
            s.write_all(&burst).unwrap();
            for _ in 0..5 {
                bytes += recv_into(&mut s, &mut buf);
            }
        }
        COUNTING.store(false, Ordering::SeqCst);
        batches.push(ALLOCS.load(Ordering::SeqCst));
        // Replies: 5 per round, the READs carrying their data.
        assert!(bytes > ROUNDS * (8192 + 512 + 4096), "{bytes}");
    }
    // Per-hit allocations would put every batch at 250 or more (a LOOKUP that went
    // to a worker: 350); a background thread
    // (or a batch straddling an attribute expiry) may add a few to some batches.
    batches.sort_unstable();
    assert_eq!(
        batches[0],
        0,
        "allocations per batch of {} cached calls: {batches:?}",
        ROUNDS * 5
    );
    assert!(
        batches[batches.len() / 2] < 10,
        "allocations per batch of {} cached calls: {batches:?}",
        ROUNDS * 5
    );
}
