//! Unit tests of the reactors' read cache (`cache.rs`): GETATTR and READ hits, fills,
//! invalidation by stamps, page accounting.

use super::*;
use crate::config::{Access, Cidr, Export, Squash};
use engine::rpc::AuthSys;

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

fn attr(size: u64, mode: u32) -> Attr {
    Attr {
        kind: FileKind::Reg,
        mode,
        nlink: 1,
        uid: 0,
        gid: 0,
        size,
        used: size,
        rdev: (0, 0),
        fsid: 1,
        fileid: 42,
        atime: NfsTime::default(),
        mtime: NfsTime { sec: 5, nsec: 0 },
        ctime: NfsTime { sec: 5, nsec: 0 },
        change: 5_000_000_000,
    }
}

fn data_buf(pools: &Pools, bytes: &[u8]) -> Buf {
    let mut b = pools.alloc(bytes.len()).unwrap();
    b.spare_mut()[..bytes.len()].copy_from_slice(bytes);
    b.set_len(bytes.len());
    b
}

struct T {
    cache: ReadCache,
    gens: Generations,
    exports: Exports,
    pools: Pools,
}

fn setup(pages: usize) -> T {
    T {
        cache: ReadCache::new(pages * PAGE, HugePolicy::Off).unwrap(),
        gens: Generations::new(),
        exports: exports(),
        pools: Pools::new(
            &[ClassSpec {
                size: 64 << 10,
                count: 4,
            }],
            HugePolicy::Off,
        )
        .unwrap(),
    }
}

const FH: &[u8] = b"handle-bytes";

fn read(t: &mut T, off: u64, count: u32, uid: u32) -> Option<Vec<u8>> {
    let cred = Cred::Sys(AuthSys::new(uid, uid, &[]));
    let req = Request {
        fh: FH,
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let Some(hit) = t.cache.read(&t.gens, &t.exports, &req, off, count) else {
        t.cache.missed();
        return None;
    };
    let mut data = vec![0u8; hit.done.n];
    t.cache.copy_read(&hit, &mut data);
    t.cache.answered(FH, hit.stale);
    Some(data)
}

fn fill(t: &mut T, a: Attr, stamp: Stamp, data: Option<(u64, &[u8])>) {
    let data = data.map(|(o, d)| FillData::Block(o, data_buf(&t.pools, d)));
    let f = Fill {
        fh: FhKey::new(FH).unwrap(),
        export: 0,
        attr: a,
        stamp,
        data,
        exact: false,
    };
    t.cache.fill(&t.gens, f, None);
}

/// A non-exact fill (the reactor's io_uring READ) keeps an exact entry exact when
/// it says the same about the same state of the file; anything else downgrades.
#[test]
fn inexact_fill_of_the_same_state_keeps_the_entry_exact() {
    let mut t = setup(64);
    let s = t.gens.stamp(42);
    let a = attr(20000, 0o644);
    let mk = |a: Attr, stamp, exact| Fill {
        fh: FhKey::new(FH).unwrap(),
        export: 0,
        attr: a,
        stamp,
        data: None,
        exact,
    };
    let exact_now = |t: &T| t.cache.attrs.get(&FhKey::new(FH).unwrap()).unwrap().exact;
    t.cache.fill(&t.gens, mk(a, s, true), None);
    t.cache.fill(&t.gens, mk(a, s, false), None);
    assert!(exact_now(&t), "same stamp, same attributes");
    t.cache
        .fill(&t.gens, mk(attr(20001, 0o644), s, false), None);
    assert!(!exact_now(&t), "other attributes");
    t.cache.fill(&t.gens, mk(a, s, true), None);
    t.gens.bump_file(42);
    let s2 = t.gens.stamp(42);
    t.cache.fill(&t.gens, mk(a, s2, false), None);
    assert!(!exact_now(&t), "another state of the file");
}

#[test]
fn hit_after_fill_and_exact_bytes() {
    let mut t = setup(64);
    let content: Vec<u8> = (0..20000u32).map(|i| i as u8).collect();
    let s = t.gens.stamp(42);
    fill(&mut t, attr(20000, 0o644), s, Some((0, &content)));
    assert_eq!(read(&mut t, 100, 5000, 0).unwrap(), &content[100..5100]);
    // The tail page ends at EOF, so reads past it are served short.
    assert_eq!(read(&mut t, 16384, 8192, 0).unwrap(), &content[16384..]);
    assert_eq!(read(&mut t, 30000, 10, 0).unwrap(), b"");
}

/// Regression: a READ at an offset in the last pages below 2^64 made
/// the fill's page rounding overflow and panicked the reactor. Fills and reads of
/// every offset near 2^64 — of small and of (store-reported) huge files — cache
/// nothing wrong and never panic.
#[test]
fn offsets_near_2_pow_64_never_panic_or_wrap() {
    let mut t = setup(64);
    let content = [7u8; 8192];
    for size in [20000u64, u64::MAX - 100, u64::MAX] {
        for off in [
            u64::MAX,
            u64::MAX - 1,
            u64::MAX - 4095,
            0xFFFF_FFFF_FFFF_F001,
            0xFFFF_FFFF_FFFF_F000,
            u64::MAX - 8191,
            (u64::MAX / 4096) * 4096,
            1 << 63,
        ] {
            let s = t.gens.stamp(42);
            fill(&mut t, attr(size, 0o644), s, Some((off, &content)));
            fill(&mut t, attr(size, 0o644), s, Some((off, &[])));
            for count in [0u32, 1, 4096, 65536, u32::MAX] {
                if let Some(got) = read(&mut t, off, count, 0) {
                    // Anything served lies inside the file and inside the range.
                    assert!(got.len() as u64 <= size.saturating_sub(off));
                    assert!(got.len() <= count as usize);
                }
            }
        }
    }
    // The cache still works for ordinary reads afterwards.
    let s = t.gens.stamp(42);
    fill(&mut t, attr(8192, 0o644), s, Some((0, &content)));
    assert_eq!(read(&mut t, 0, 8192, 0).unwrap(), &content[..]);
}

#[test]
fn mutation_during_read_rejects_the_fill() {
    let mut t = setup(64);
    let s = t.gens.stamp(42);
    t.gens.bump_file(42); // a WRITE started after the read's snapshot
    fill(&mut t, attr(4096, 0o644), s, Some((0, &[1u8; 4096])));
    assert!(read(&mut t, 0, 4096, 0).is_none());
}

#[test]
fn bumps_invalidate_cached_entries() {
    let mut t = setup(64);
    let s = t.gens.stamp(42);
    fill(&mut t, attr(4096, 0o644), s, Some((0, &[1u8; 4096])));
    assert!(read(&mut t, 0, 4096, 0).is_some());
    t.gens.bump_file(42);
    assert!(read(&mut t, 0, 4096, 0).is_none());
    let s = t.gens.stamp(42);
    fill(&mut t, attr(4096, 0o644), s, Some((0, &[2u8; 4096])));
    assert_eq!(read(&mut t, 0, 4096, 0).unwrap(), vec![2u8; 4096]);
    t.gens.bump_all();
    assert!(read(&mut t, 0, 4096, 0).is_none());
}

#[test]
fn changed_attributes_orphan_old_pages() {
    let mut t = setup(64);
    let s = t.gens.stamp(42);
    fill(&mut t, attr(8192, 0o644), s, Some((0, &[1u8; 8192])));
    // Fresh attributes (size changed behind our back), no data.
    fill(&mut t, attr(9000, 0o644), s, None);
    assert!(read(&mut t, 0, 4096, 0).is_none());
}

#[test]
fn missing_page_is_a_miss_and_unaligned_fills_skip_partial_pages() {
    let mut t = setup(64);
    let s = t.gens.stamp(42);
    fill(&mut t, attr(1 << 20, 0o644), s, Some((100, &[3u8; 8192])));
    // Only page 1 ([4096, 8192)) is fully covered by [100, 8292).
    assert!(read(&mut t, 0, 4096, 0).is_none());
    assert_eq!(read(&mut t, 4096, 4096, 0).unwrap(), vec![3u8; 4096]);
    assert!(read(&mut t, 8192, 4096, 0).is_none());
}

#[test]
fn permission_is_checked_on_hits() {
    let mut t = setup(64);
    let s = t.gens.stamp(42);
    fill(&mut t, attr(4096, 0o600), s, Some((0, &[1u8; 4096])));
    assert!(read(&mut t, 0, 4096, 0).is_some());
    assert!(read(&mut t, 0, 4096, 1000).is_none());
}

#[test]
fn fills_from_the_reply_and_detects_sequential_reads() {
    let mut t = setup(64);
    let s = t.gens.stamp(42);
    let mut reply = vec![0u8; 100];
    reply.extend_from_slice(&[9u8; 4096]);
    let f = Fill {
        fh: FhKey::new(FH).unwrap(),
        export: 0,
        attr: attr(1 << 20, 0o644),
        stamp: s,
        data: Some(FillData::InReply {
            offset: 8192,
            at: 100,
            len: 4096,
        }),
        exact: false,
    };
    t.cache.fill(&t.gens, f, Some(&reply));
    assert_eq!(read(&mut t, 8192, 4096, 0).unwrap(), vec![9u8; 4096]);
    assert!(!t.cache.note_read(b"unknown", 42, 0, 4096));
    assert!(!t.cache.note_read(b"unknown", 42, 4096, 4096));
    assert!(!t.cache.note_read(FH, 42, 0, 4096));
    assert!(t.cache.note_read(FH, 42, 4096, 4096));
    assert!(!t.cache.note_read(FH, 42, 100_000, 4096));
}

#[test]
fn eviction_keeps_the_pool_bounded() {
    let mut t = setup(4);
    let s = t.gens.stamp(42);
    fill(
        &mut t,
        attr(1 << 20, 0o644),
        s,
        Some((0, &vec![7u8; 64 << 10])),
    );
    assert_eq!(t.cache.stats().pages, 4);
    // The newest pages survive.
    assert!(read(&mut t, 60 << 10, 4096, 0).is_some());
    assert!(read(&mut t, 0, 4096, 0).is_none());
}

/// A page an RDMA Write is reading is never handed out again before its unpin,
/// even when eviction or a refill replaces it in the cache.
#[test]
fn pinned_pages_outlive_eviction_until_unpinned() {
    let mut t = setup(4);
    let s = t.gens.stamp(42);
    fill(
        &mut t,
        attr(1 << 20, 0o644),
        s,
        Some((0, &vec![7u8; 16384])),
    );
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let req = Request {
        fh: FH,
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let hit = t
        .cache
        .read(&t.gens, &t.exports, &req, 100, 5000)
        .expect("cached");
    assert_eq!((hit.done.n, hit.done.eof), (5000, false));
    let got = t.cache.pin_read(&hit, 77);
    assert_eq!(
        got.as_slice().len(),
        2,
        "5000 bytes from offset 100 span two pages"
    );
    assert_eq!(got.as_slice().iter().map(|g| g.len).sum::<u32>(), 5000);
    assert!(got.as_slice().iter().all(|g| g.lkey == 77));
    assert_eq!(t.cache.pinned(), 2);
    let pool = t.cache.pool.clone().unwrap();
    // Refill the whole cache with other data: the two pinned pages become zombies,
    // their buffers stay out of the pool.
    fill(
        &mut t,
        attr(1 << 20, 0o644),
        s,
        Some((65536, &vec![8u8; 16384])),
    );
    assert_eq!(
        pool.stats()[0].free,
        0,
        "pinned pages are not back in the pool"
    );
    assert_eq!(t.cache.zombies(), 2);
    let page_mem = got.as_slice()[0].addr as *const u8;
    // SAFETY: the page is pinned, so its buffer is still the data we cached.
    assert_eq!(
        // SAFETY: the page is pinned, so its buffer is still mapped and ours to read.
        unsafe { *page_mem },
        7,
        "pinned page untouched by the refill"
    );
    for g in got.as_slice() {
        t.cache.unpin(g.tag);
    }
    assert_eq!(t.cache.pinned(), 0);
    assert_eq!(t.cache.zombies(), 0);
    assert_eq!(pool.stats()[0].free, 2, "freed at the last unpin");
    t.cache.recycle(got);
}

/// Makes the cached attributes of `FH` `by` older.
fn age(t: &mut T, by: Duration) {
    let e = t.cache.attrs.get_mut(&FhKey::new(FH).unwrap()).unwrap();
    e.at = Instant::now().checked_sub(by).unwrap();
}

#[test]
fn expired_attributes_answer_v3_while_one_revalidation_runs() {
    let mut t = setup(16);
    let data = vec![3u8; 8192];
    let s = t.gens.stamp(42);
    fill(&mut t, attr(8192, 0o644), s, Some((0, &data)));
    assert_eq!(read(&mut t, 0, 4096, 0).unwrap(), &data[..4096]);
    assert!(
        t.cache.take_revalidation().is_none(),
        "fresh: nothing to revalidate"
    );
    // Past the TTL: still answered, and exactly one revalidation is asked for.
    age(&mut t, ATTR_TTL + Duration::from_millis(10));
    assert_eq!(read(&mut t, 4096, 4096, 0).unwrap(), &data[4096..]);
    assert_eq!(
        t.cache.take_revalidation().map(|k| k.bytes().to_vec()),
        Some(FH.to_vec())
    );
    assert!(read(&mut t, 0, 4096, 0).is_some());
    assert!(
        t.cache.take_revalidation().is_none(),
        "one revalidation per expiry"
    );
    // NFSv4 never answers from expired attributes.
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let req = Request {
        fh: FH,
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    assert!(t.cache.attr_v4(&t.gens, &t.exports, &req).is_none());
    // A change made through the gateway is never served stale.
    t.gens.bump_file(42);
    assert!(read(&mut t, 0, 4096, 0).is_none());
    // The revalidation's fill (new attributes: the object changed) replaces the
    // entry; the old pages no longer match it.
    let s = t.gens.stamp(42);
    let mut changed = attr(8192, 0o644);
    changed.mtime.sec = 9;
    fill(&mut t, changed, s, None);
    assert!(
        read(&mut t, 0, 4096, 0).is_none(),
        "pages of the old object"
    );
    fill(&mut t, changed, s, Some((0, &[4u8; 8192])));
    assert_eq!(read(&mut t, 0, 4096, 0).unwrap(), vec![4u8; 4096]);
    // A revalidation that never comes back: past STALE_MAX, calls miss.
    age(&mut t, ATTR_TTL + STALE_MAX);
    assert!(read(&mut t, 0, 4096, 0).is_none());
}

/// A write delegation's holder keeps the caches for its held file (`stamp_as`):
/// its stamp stays put while nobody else's (nor an NFSv3 caller's) ever matches;
/// what it learned under the hold is gone once released; holds of two clients
/// sharing one slot serve neither.
#[test]
fn the_holder_alone_keeps_a_held_files_stamp() {
    let g = Generations::new();
    let (a, b, f) = (0xa, 0xb, 7);
    let before = g.stamp_as(f, a);
    g.hold(f, a, true);
    let held = g.stamp_as(f, a);
    assert_ne!(
        held, before,
        "nothing learned before the hold answers after it"
    );
    assert_eq!(held, g.stamp_as(f, a));
    assert!(g.current(f, held), "a holder's fill is kept");
    let other = g.stamp_as(f, b);
    assert_ne!(other, g.stamp_as(f, b));
    assert!(!g.current(f, other), "another client's fill is not");
    assert_ne!(g.stamp(f), g.stamp(f), "nor an NFSv3 caller's");
    assert!(!g.current(f, g.stamp(f)));
    g.hold(f, a, false);
    assert!(!g.held(f));
    assert_ne!(
        g.stamp_as(f, a),
        held,
        "released: the holder's entries go too"
    );
    assert_eq!(g.stamp(f), g.stamp_as(f, b));
    // Another file on the same slot held by B: the slot serves neither.
    let twin = (f + 1..)
        .find(|&x| Generations::index(x) == Generations::index(f))
        .unwrap();
    g.hold(f, a, true);
    g.hold(twin, b, true);
    assert_ne!(g.stamp_as(f, a), g.stamp_as(f, a));
    assert_ne!(g.stamp_as(twin, b), g.stamp_as(twin, b));
    g.hold(twin, b, false);
    g.hold(f, a, false);
    assert_eq!(g.stamp_as(f, a), g.stamp(f), "all released: plain again");
    g.hold(f, b, true);
    assert_eq!(g.stamp_as(f, b), g.stamp_as(f, b), "a new holder: its own");
}
