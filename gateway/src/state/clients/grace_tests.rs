//! `Limits::grace_max` (`nfs4.grace_max_s`): the grace period's hard cap while
//! reclaims keep arriving (RFC 8881 §8.4.2.1 leaves the length to the server).

use super::*;

/// A client of the previous run on a fresh table with `limits` in `dir`.
fn restarted(limits: Limits, dir: &Path) -> (Clients, u64) {
    {
        let cl = Clients::new(limits, Some(dir));
        for o in [&b"busy"[..], b"absent"] {
            let id = cl.with(|t| t.insert(o, [1; 8], Principal::None)).unwrap();
            cl.with(|t| t.confirm(id));
        }
    }
    let cl = Clients::new(limits, Some(dir));
    let busy = cl
        .with(|t| t.insert(b"busy", [2; 8], Principal::None))
        .unwrap();
    cl.with(|t| t.confirm(busy));
    (cl, busy)
}

/// Reclaims every 50 ms keep the grace period open past twice `grace` when
/// `grace_max` allows it, and never past `grace_max`.
#[test]
fn reclaims_keep_the_grace_period_open_up_to_grace_max() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        lease: Duration::from_secs(5),
        grace: Duration::from_millis(200),
        grace_max: Some(Duration::from_millis(900)),
        ..Default::default()
    };
    let (cl, busy) = restarted(limits, dir.path());
    while cl.grace_elapsed() < Duration::from_millis(600) {
        assert!(cl.may_reclaim(busy), "reclaims keep it open");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(cl.in_grace(), "past twice the grace time: grace_max rules");
    while cl.grace_elapsed() < Duration::from_millis(950) {
        cl.may_reclaim(busy);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!cl.in_grace(), "never past grace_max");
    assert!(!cl.may_reclaim(busy));
}

/// The default cap is twice `grace` (knfsd's), and a cap below `grace` is `grace`.
#[test]
fn grace_max_defaults_to_twice_the_grace_time() {
    let grace = Duration::from_secs(20);
    let l = Limits {
        grace,
        ..Default::default()
    };
    assert_eq!(l.grace_max(), grace * 2);
    let short = Limits {
        grace_max: Some(Duration::from_secs(5)),
        ..l
    };
    assert_eq!(short.grace_max(), grace);
}
