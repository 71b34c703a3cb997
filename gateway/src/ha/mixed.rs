//! One fence per identity: gateways of one identity that disagree on `ha.etcd` (one
//! fencing through etcd, another through the store's conditional writes) would each
//! hold a lease of their own and both serve (docs/ha.md "Fencing: etcd"). On a store
//! with conditional writes (where a gateway without `ha.etcd` can run at all) the two
//! sides find each other at start:
//!
//! - a gateway on etcd marks the identity in the store (`ha/<identity>/fenced-by-etcd`,
//!   created once, never removed by the gateway) and refuses to start while the store's
//!   own lease of the identity is renewed (watched for one lease when it exists);
//! - a gateway without `ha.etcd` refuses to start when the mark is there.
//!
//! On a store whose conditional writes fail or are ignored (Garage) a gateway without
//! `ha.etcd` is refused by the probe anyway; the etcd side's look at the store is then
//! best effort (a store error is logged, never a reason to refuse).

use crate::backend::{BackendError, Cas};
use anyhow::bail;
use std::time::{Duration, Instant};

pub fn mark_name(identity: &str) -> String {
    format!("ha/{identity}/fenced-by-etcd")
}

/// The start-up check; `store`: the store's own conditional writes, if it has them.
pub fn check(
    on_etcd: bool,
    store: Option<&dyn Cas>,
    identity: &str,
    lease: Duration,
) -> anyhow::Result<()> {
    let Some(store) = store else {
        return Ok(());
    };
    if !on_etcd {
        // A store error here is the probe's to report.
        if let Ok(Some(_)) = store.cas_get(&mark_name(identity)) {
            bail!(
                "ha: identity {identity:?} is fenced through etcd by other gateways (the store holds {:?}): set the same ha.etcd here, or remove that object once no gateway serves the identity through etcd",
                mark_name(identity)
            );
        }
        return Ok(());
    }
    let shown = |e: BackendError| {
        tracing::warn!(error = %e, "ha: cannot look for gateways fencing this identity through the store (its conditional writes fail): not checked");
    };
    match store.cas_put(&mark_name(identity), b"fenced by etcd\n", None) {
        Ok(_) | Err(BackendError::AlreadyExists) => {}
        Err(e) => {
            shown(e);
            return Ok(());
        }
    }
    watch_store_lease(store, identity, lease).or_else(|e| match e {
        Watched::Renewed => bail!(
            "ha: identity {identity:?} is held through the store's own lease by a gateway without ha.etcd, which renews it: refusing to start a second fence (set ha.etcd on every gateway of the identity)"
        ),
        Watched::Store(e) => {
            shown(e);
            Ok(())
        }
    })
}

enum Watched {
    Renewed,
    Store(BackendError),
}

/// `Err(Renewed)` when the store's lease of the identity changes within one lease.
fn watch_store_lease(store: &dyn Cas, identity: &str, lease: Duration) -> Result<(), Watched> {
    let name = format!("ha/{identity}/lease");
    let Some((_, v0)) = store.cas_get(&name).map_err(Watched::Store)? else {
        return Ok(());
    };
    tracing::info!(identity, "ha: the store holds a lease of this identity: watching it for one lease before fencing through etcd");
    let end = Instant::now() + lease;
    while Instant::now() < end {
        std::thread::sleep((lease / 10).max(Duration::from_millis(20)));
        match store.cas_get(&name).map_err(Watched::Store)? {
            Some((_, v)) if v == v0 => {}
            _ => return Err(Watched::Renewed),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;

    const L: Duration = Duration::from_millis(300);

    #[test]
    fn a_store_gateway_after_an_etcd_one_is_refused() {
        let m = MemoryBackend::new();
        check(false, Some(&m), "t", L).unwrap();
        check(true, Some(&m), "t", L).unwrap();
        check(true, Some(&m), "t", L).unwrap();
        let e = check(false, Some(&m), "t", L).unwrap_err().to_string();
        assert!(e.contains("fenced through etcd"), "{e}");
        check(false, Some(&m), "other", L).unwrap();
        check(false, None, "t", L).unwrap();
    }

    #[test]
    fn an_etcd_gateway_beside_a_renewed_store_lease_is_refused() {
        let m = MemoryBackend::new();
        let v = m.cas_put("ha/t/lease", b"0", None).unwrap();
        // A stale lease (its holder gone): watched for one lease, then fine.
        let t0 = Instant::now();
        check(true, Some(&m), "t", L).unwrap();
        assert!(t0.elapsed() >= L);
        // A renewed one: refused.
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut v = v.clone();
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(L / 4);
                    i += 1;
                    v = m
                        .cas_put("ha/t/lease", format!("{i}").as_bytes(), Some(&v))
                        .unwrap();
                }
            });
            let e = check(true, Some(&m), "t", L).unwrap_err().to_string();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(e.contains("without ha.etcd"), "{e}");
        });
    }
}
