//! The restart gate (issue 27) over the memory store: after a start over a boot at
//! which a layout may have been granted, conflicts and LAYOUTGET wait the fence
//! window out; over one with none, nothing waits; a store that refuses the move keeps
//! the gate shut until a later call moves it.

use super::super::*;
use crate::backend::memory::MemoryBackend;
use crate::backend::Backend;
use crate::fence::Fence;
use crate::state::recall::Inbox;
use std::sync::Arc;

const LEASE: Duration = Duration::from_secs(90);
const F: LayoutFile = LayoutFile {
    clientid: 7,
    fileid: 100,
    fsid: 1,
    owner: 0,
};

fn table(store: &Arc<dyn Backend>, window: Duration) -> (Layouts, Arc<Fence>) {
    let devices = Devices {
        servers: vec![DataServer {
            addr: "10.0.0.1:2049".parse().unwrap(),
            rdma: false,
            probe: None,
        }],
        stripe_unit: 1 << 20,
        rsize: 1 << 20,
        wsize: 1 << 20,
        read_mirrors: 1,
        stripe: Default::default(),
        probe: Probe::default(),
    };
    let fence = Arc::new(Fence::new(store.clone(), [5; 32], window));
    let mut t = Layouts::new(Some(devices));
    t.set_fence(Some(fence.clone()));
    (t, fence)
}

fn conflict(t: &Layouts, fileid: u64) -> bool {
    t.break_conflicts(fileid, None, LEASE, &Inbox::default())
}

#[test]
fn a_start_after_a_boot_with_layouts_waits_the_window_out() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let window = Duration::from_millis(300);
    let (first, fence) = table(&store, window);
    assert!(first.restart_fence());
    assert!(!first.any(), "a fresh store: nothing to wait for");
    assert!(conflict(&first, 1));
    fence.mark_used().unwrap();
    first.grant(F, b"fh", None, IOMODE_RW, LEASE).unwrap();

    // The restart: a new table on the same store.
    let (t, _) = table(&store, window);
    let moved = Instant::now();
    assert!(t.restart_fence());
    assert!(t.any(), "every file counts as laid out");
    for fileid in [1, 100, 12345] {
        if moved.elapsed() < window {
            assert!(!conflict(&t, fileid), "file {fileid} waits");
        }
    }
    if moved.elapsed() < window {
        let got = t.grant(F, b"fh", None, IOMODE_RW, LEASE);
        assert_eq!(got.err(), Some(StateError::Resource), "LAYOUTTRYLATER");
    }
    std::thread::sleep(window);
    assert!(conflict(&t, 1), "the window ran out");
    assert!(!t.any(), "the fast path again");
    t.grant(F, b"fh", None, IOMODE_RW, LEASE).unwrap();
}

#[test]
fn a_store_that_refuses_the_move_keeps_the_gate_shut() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let cas = store.cas().unwrap();
    let v = cas
        .cas_put(crate::fence::BOOT_OBJECT, b"junk", None)
        .unwrap();
    let (t, fence) = table(&store, Duration::from_millis(50));
    assert!(!t.restart_fence());
    assert!(t.any());
    assert!(!conflict(&t, 1));
    assert!(t.grant(F, b"fh", None, IOMODE_RW, LEASE).is_err());
    std::thread::sleep(Duration::from_millis(60));
    assert!(!conflict(&t, 1), "still not moved");
    // The store answers again (its previous boot was used): moved by the next call,
    // open a window later.
    cas.cas_put(crate::fence::BOOT_OBJECT, b"4 1", Some(v.as_str()))
        .unwrap();
    assert!(!conflict(&t, 1), "moved now, the window starts");
    assert_eq!(fence.boot_epoch().unwrap(), 5);
    std::thread::sleep(Duration::from_millis(60));
    assert!(conflict(&t, 1));
}
