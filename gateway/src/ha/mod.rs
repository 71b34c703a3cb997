//! `[ha]`: one NFSv4.1 server identity, served by one gateway at a time, its recovery
//! record and lease in the store the gateways share (docs/ha.md).
//!
//! - `lease`: the identity lease, renewed by conditional writes; the holder's fence
//!   (`state::recovery::Fence`) stays open only while its renewals succeed in time;
//! - `record`: the recovery record (`state::recovery::Records` in the store);
//! - `layout_key`: the identity's pNFS layout stateid key (layouts reclaimed at a
//!   successor, RFC 8881 §18.42.3);
//! - here: the start-up probe of the store's conditional writes, and the keeper
//!   thread: wait for the identity (standby), take it over (record, grace period,
//!   fence), renew it, and give it up when it is lost.

pub mod etcd;
pub mod layout_key;
pub mod lease;
pub mod mixed;
pub mod record;
mod renew;
pub mod stats;

use crate::backend::{Backend, BackendError, Cas};
use crate::config::{BackendConfig, BackendKind, HaConfig, HaRole};
use crate::state::recovery::{Fence, RecordError, Records};
use crate::state::State;
use anyhow::{bail, Context};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A backend's `Cas` as an owned object a renewal thread can keep.
pub struct ViaBackend(pub Arc<dyn Backend>);

impl Cas for ViaBackend {
    fn cas_get(&self, name: &str) -> Result<Option<(Vec<u8>, String)>, BackendError> {
        self.0.cas().expect("checked at start").cas_get(name)
    }
    fn cas_put(
        &self,
        name: &str,
        data: &[u8],
        expect: Option<&str>,
    ) -> Result<String, BackendError> {
        self.0
            .cas()
            .expect("checked at start")
            .cas_put(name, data, expect)
    }
}

/// A conditional write that tells a lost reply from a lost race: when the condition
/// fails, the object is read back, and if it holds exactly `data` (whose bytes are
/// unique to this writer: holder and sequence) an earlier attempt of this same write
/// succeeded (a retried request) — its version is returned.
pub fn put_checked(
    cas: &dyn Cas,
    name: &str,
    data: &[u8],
    expect: Option<&str>,
) -> Result<String, BackendError> {
    put_checked_how(cas, name, data, expect).map(|(v, _)| v)
}

/// `put_checked`, and whether the version came from the read-back (`true`): an
/// earlier attempt landed, at a time only known to lie after that attempt was sent.
pub fn put_checked_how(
    cas: &dyn Cas,
    name: &str,
    data: &[u8],
    expect: Option<&str>,
) -> Result<(String, bool), BackendError> {
    match cas.cas_put(name, data, expect) {
        Err(BackendError::AlreadyExists) => match cas.cas_get(name)? {
            Some((b, v)) if b == data => Ok((v, true)),
            _ => Err(BackendError::AlreadyExists),
        },
        r => r.map(|v| (v, false)),
    }
}

/// Checks that `cas` keeps the guarantee the fencing needs (docs/ha.md "Fencing"):
/// create-if-absent refuses an existing object, replace-if-version refuses a wrong or
/// stale version and accepts the current one. An unexpected success is a store that
/// ignores the condition; an unexpected failure (another gateway probing the same
/// object) makes the probe run again.
pub fn probe(cas: &dyn Cas, identity: &str, holder: &str) -> anyhow::Result<()> {
    let name = format!("ha/{identity}/probe");
    let data = |i: u32| format!("probe {holder} {i} {}", rand::random::<u64>()).into_bytes();
    let ignored = |what: &str| {
        anyhow::anyhow!(
            "ha: the store does not honour conditional writes ({what} succeeded): refusing to serve identity {identity:?} (docs/ha.md \"Fencing\")"
        )
    };
    for _ in 0..5 {
        let v = match cas.cas_get(&name).context("ha: probing the store")? {
            Some((_, v)) => v,
            None => match cas.cas_put(&name, &data(0), None) {
                Ok(v) => v,
                Err(BackendError::AlreadyExists) => continue,
                Err(e) => return Err(e).context("ha: probing the store"),
            },
        };
        match cas.cas_put(&name, &data(1), None) {
            Err(BackendError::AlreadyExists) => {}
            Ok(_) => return Err(ignored("a create over an existing object")),
            Err(e) => return Err(e).context("ha: probing the store"),
        }
        match cas.cas_put(&name, &data(2), Some("0123456789abcdef0123456789abcdef")) {
            Err(BackendError::AlreadyExists) => {}
            Ok(_) => return Err(ignored("a replace of a version that is not current")),
            Err(e) => return Err(e).context("ha: probing the store"),
        }
        match cas.cas_put(&name, &data(3), Some(&v)) {
            Ok(_) => {}
            Err(BackendError::AlreadyExists) => continue,
            Err(e) => return Err(e).context("ha: probing the store"),
        }
        return match cas.cas_put(&name, &data(4), Some(&v)) {
            Err(BackendError::AlreadyExists) => Ok(()),
            Ok(_) => Err(ignored("a replace of a stale version")),
            Err(e) => Err(e).context("ha: probing the store"),
        };
    }
    bail!("ha: could not probe the store's conditional writes (the probe object kept changing)")
}

/// This gateway's name in lease and record: host and a random instance id.
fn holder_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect();
    format!("{host}/{:016x}", rand::random::<u64>())
}

/// What the server needs to build its NFSv4.1 state under `[ha]`.
pub struct Setup {
    fence: Arc<Fence>,
    records: record::StoreRecords,
    server_major: Vec<u8>,
    keeper: Keeper,
}

/// Probes the store and prepares the identity's fence and record (the fence shut until
/// the identity is held). `None` without `[ha]`. An `fs` root on a network file system
/// is refused: nothing bounds how long a call into it lasts (`HaConfig::check_fs_root`).
pub fn setup(
    cfg: &HaConfig,
    store: &BackendConfig,
    backend: &Arc<dyn Backend>,
) -> anyhow::Result<Option<Setup>> {
    let Some(identity) = cfg.on() else {
        return Ok(None);
    };
    if store.kind == BackendKind::Fs {
        let remote = crate::backend::fs::remote::network_kind(&store.root)
            .with_context(|| format!("ha: backend.root = {:?}", store.root))?;
        cfg.check_fs_root(&store.root, remote)?;
    }
    let holder = holder_name();
    let (cas, fenced_by) = fencing_cas(cfg, store, backend)?;
    probe(&*cas, identity, &holder).with_context(|| format!("ha: fencing through {fenced_by}"))?;
    // One fence per identity: not etcd for some gateways and the store for others.
    mixed::check(
        !cfg.etcd.is_empty(),
        backend.cas(),
        identity,
        Duration::from_secs(cfg.lease_s),
    )?;
    // COMPOUNDs that come while the fence is shut wait for it (`state::park`).
    let park = crate::state::park::Park::for_lease(Duration::from_secs(cfg.lease_s), store.workers);
    let fence = Arc::new(Fence::shut_parking(park));
    // The store checks the same deadline before each request that changes it
    // (docs/ha.md "Lease and clocks"): no store write from a stopped active.
    backend.gate_writes(fence.gate());
    let records = record::StoreRecords::with_cas(cas.clone(), identity, &holder, fence.clone());
    let record = records.clone();
    let lease = Duration::from_secs(cfg.lease_s);
    let mut major = crate::state::clients::SERVER_MAJOR.to_vec();
    major.extend_from_slice(format!("/{identity}").as_bytes());
    tracing::info!(identity, holder = %holder, lease_s = cfg.lease_s, role = ?cfg.role, fence = %fenced_by, "ha: the fence honours conditional writes");
    Ok(Some(Setup {
        fence: fence.clone(),
        records,
        server_major: major,
        keeper: Keeper {
            cas,
            identity: identity.to_string(),
            holder,
            lease,
            role: cfg.role,
            fence,
            record,
        },
    }))
}

/// The `Cas` the identity's objects go through, and what it is for the logs: etcd
/// when `ha.etcd` is set (`etcd`: any store), else the store's own conditional writes.
fn fencing_cas(
    cfg: &HaConfig,
    store: &BackendConfig,
    backend: &Arc<dyn Backend>,
) -> anyhow::Result<(Arc<dyn Cas>, String)> {
    if cfg.etcd.is_empty() {
        if backend.cas().is_none() {
            bail!(
                "ha.identity: the {} store has no conditional writes (set ha.etcd: docs/ha.md \"Fencing: etcd\")",
                backend.name()
            );
        }
        let what = format!("the {} store's conditional writes", backend.name());
        return Ok((Arc::new(ViaBackend(backend.clone())), what));
    }
    let prefix = match &cfg.etcd_prefix {
        Some(p) => p.clone(),
        None => etcd_default_prefix(store),
    };
    let c = etcd::EtcdCas::new(&cfg.etcd, &prefix, cfg.etcd_timeout())?;
    let what = format!(
        "etcd {} under key prefix {prefix:?} (timeout {} ms)",
        c.urls().join(","),
        cfg.etcd_timeout().as_millis()
    );
    let cluster = c
        .learn_cluster()
        .with_context(|| format!("ha: fencing through {what}"))?;
    tracing::info!(endpoints = ?c.urls(), prefix = %prefix, cluster = %format!("{cluster:x}"), "ha: etcd is the fence: the identity's lease, record and layout key are in etcd, not the store");
    Ok((Arc::new(c), what))
}

/// `nfsgw/<16 hex>/`: a digest of what names the data (s3: bucket and prefix; fs: the
/// root), so two deployments on one etcd never share keys while every gateway of one
/// deployment derives the same (endpoints are left out: gateways may reach one store
/// at different addresses).
pub fn etcd_default_prefix(store: &BackendConfig) -> String {
    let named = match (store.kind, &store.s3) {
        (BackendKind::S3, Some(s3)) => format!("s3\0{}\0{}", s3.bucket, s3.prefix),
        _ => format!(
            "{:?}\0{}",
            store.kind,
            canonical_root(&store.root).display()
        ),
    };
    let h = blake3::hash(named.as_bytes());
    format!("nfsgw/{}/", &h.to_hex()[..16])
}

/// The root as every gateway spells it: `/srv/x`, `/srv/x/` and `/srv/./x` are one
/// (symbolic links resolved when it exists; lexically otherwise).
fn canonical_root(root: &std::path::Path) -> std::path::PathBuf {
    std::fs::canonicalize(root).unwrap_or_else(|_| root.components().collect())
}

impl Setup {
    /// The client table of this identity: its record in the store, its fence (shut
    /// until the identity is held), its server owner.
    pub fn clients(&self, limits: crate::state::clients::Limits) -> crate::state::clients::Clients {
        let records: Box<dyn Records> = Box::new(self.records.clone());
        crate::state::clients::Clients::with_records(
            limits,
            Some(records),
            self.fence.clone(),
            &self.server_major,
        )
    }

    /// Takes the identity (role `active`: now, or an error when another gateway holds
    /// it) and starts the keeper thread, which renews it (and, as a standby, waits for
    /// it first). `state` is the table `records` and `fence` were given to.
    pub fn start(self, state: &Arc<dyn AsState>, stop: &Arc<AtomicBool>) -> anyhow::Result<()> {
        let k = self.keeper;
        let held = match k.role {
            HaRole::Active => Some(k.acquire(stop, true)?),
            HaRole::Standby => None,
        };
        let (state, stop) = (state.clone(), stop.clone());
        std::thread::Builder::new()
            .name("ha-keeper".into())
            .spawn(move || k.run(held, &*state, &stop))
            .context("ha: starting the keeper thread")?;
        Ok(())
    }
}

/// The NFSv4.1 state the keeper resets and hands a record to (the server's `Shared`).
pub trait AsState: Send + Sync {
    fn state(&self) -> &State;
}

struct Keeper {
    /// Where the lease and the layout key live: the store's or etcd's `Cas`.
    cas: Arc<dyn Cas>,
    identity: String,
    holder: String,
    lease: Duration,
    role: HaRole,
    fence: Arc<Fence>,
    /// The client table's record (a clone: one version, one writer).
    record: record::StoreRecords,
}

impl Keeper {
    fn cas(&self) -> &dyn Cas {
        &*self.cas
    }

    fn lease_name(&self) -> String {
        format!("ha/{}/lease", self.identity)
    }

    /// Whether a takeover by this gateway is in sight (the holder overdue, or the
    /// lease ours and the takeover under way): COMPOUNDs park longer, and
    /// `nfsgw_ha_takeover_imminent` (which tools/ha/check.sh follows) says so.
    fn in_sight(&self, on: bool) {
        self.fence.park().set_in_sight(on);
        stats::set_imminent(on);
    }

    fn poll(&self) -> Duration {
        (self.lease / 10).max(Duration::from_millis(100))
    }

    /// Waits until this gateway holds the lease. `refuse_if_held`: fail instead when
    /// the lease is renewed while we watch (an `active` at start).
    fn acquire(&self, stop: &AtomicBool, refuse_if_held: bool) -> anyhow::Result<lease::Held> {
        let mut w = lease::Watch::new(
            self.cas(),
            self.lease_name(),
            self.holder.clone(),
            self.lease,
        );
        let mut first = true;
        let mut logged = false;
        loop {
            match w.look() {
                lease::Look::Won(h) => {
                    stats::set_holder(&self.identity, Some(&self.holder), &self.holder);
                    // Ours: the takeover is under way until the fence opens.
                    self.in_sight(true);
                    return Ok(h);
                }
                lease::Look::Held {
                    holder,
                    changed,
                    overdue,
                } => {
                    if overdue != self.fence.park().in_sight() {
                        if overdue {
                            tracing::info!(identity = %self.identity, holder = %holder, "ha: the holder's lease is overdue: a takeover is imminent");
                        } else {
                            tracing::info!(identity = %self.identity, holder = %holder, "ha: the holder renewed its lease again: no takeover in sight");
                        }
                    }
                    self.in_sight(overdue);
                    let who = Some(holder.as_str()).filter(|h| !h.is_empty());
                    stats::set_holder(&self.identity, who, &self.holder);
                    if refuse_if_held && changed && !first {
                        bail!(
                            "ha: identity {:?} is held by {holder}, which renews it: refusing to start a second active (start this gateway with ha.role = \"standby\")",
                            self.identity
                        );
                    }
                    if !logged {
                        tracing::info!(identity = %self.identity, holder = %holder, "ha: identity held by another gateway; waiting for its lease to run out");
                        logged = true;
                    }
                }
                lease::Look::Unreachable(e) => {
                    self.in_sight(false);
                    tracing::warn!(error = %e, "ha: cannot read the identity lease");
                }
            }
            first = false;
            if stop.load(Ordering::Relaxed) {
                bail!("ha: stopping");
            }
            std::thread::sleep(self.poll());
        }
    }

    /// Serves the identity while it is held; waits for it again when it is lost.
    fn run(&self, mut held: Option<lease::Held>, st: &dyn AsState, stop: &AtomicBool) {
        loop {
            let mut h = match held.take() {
                Some(h) => h,
                None => match self.acquire(stop, false) {
                    Ok(h) => h,
                    Err(_) => return,
                },
            };
            self.serve(&mut h, st, stop);
            self.in_sight(false);
            stats::set_held(false);
            self.fence.close();
            let gone = st.state().clients.purge_all();
            st.state().purge(gone);
            if stop.load(Ordering::Relaxed) {
                return;
            }
        }
    }

    /// Takes over the record, opens the fence and renews until the lease is lost. Each
    /// renewal runs on a thread of its own (`renew`): the stop at the deadline, its log
    /// line and the held metric never wait for a store that hangs.
    fn serve(&self, h: &mut lease::Held, st: &dyn AsState, stop: &AtomicBool) {
        let mut adopted = false;
        let mut watch = renew::Watch::new(&self.identity);
        let mut tried = Instant::now();
        let name = self.lease_name();
        let cas = self.cas.clone();
        loop {
            if !adopted {
                adopted = self.take_over(st, h);
            }
            if adopted {
                watch.serve_until(&self.fence, h.sent + self.lease * 3 / 4);
                self.in_sight(false);
            }
            watch.look(&self.fence);
            let next = (h.sent + self.lease / 4).max(tried + self.poll());
            while Instant::now() < next {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(renew::TICK.min(self.lease / 4));
                watch.look(&self.fence);
            }
            tried = Instant::now();
            let r = renew::renew(
                &cas,
                &name,
                &self.holder,
                self.lease,
                h,
                &self.fence,
                &mut watch,
                stop,
            );
            match r {
                renew::Renewal::Stopped => return,
                renew::Renewal::Done(Ok(())) => {}
                renew::Renewal::Done(Err(BackendError::AlreadyExists)) => {
                    stats::count_lost();
                    tracing::error!(identity = %self.identity, "ha: another gateway took the identity: stopped serving NFSv4, now a standby");
                    return;
                }
                renew::Renewal::Done(Err(e)) => {
                    tracing::warn!(error = %e, "ha: identity lease not renewed")
                }
            }
        }
    }

    /// The takeover proper (docs/ha.md "Takeover"): reads the record, rewrites it under
    /// this gateway's version, resets the NFSv4.1 state and starts the grace period for
    /// the record's clients. `false` when the store did not answer (tried again).
    fn take_over(&self, st: &dyn AsState, h: &lease::Held) -> bool {
        let owners = match self.record.load() {
            Ok(o) => o,
            Err(RecordError::Torn(why)) => {
                stats::count_torn();
                tracing::error!(identity = %self.identity, why, "ha: the recovery record is torn: no client may reclaim (they get NFS4ERR_NO_GRACE)");
                Default::default()
            }
            Err(RecordError::Store(e)) => {
                tracing::warn!(error = %e, "ha: cannot read the recovery record; the fence stays shut");
                return false;
            }
        };
        if !self.adopt_layout_key(st) {
            return false;
        }
        // Issue 27: the previous holder's layouts are not kept, so their data server
        // ids are fenced (the boot epoch moves) before the fence opens.
        if !st.state().layouts.restart_fence() {
            return false;
        }
        // Rewritten under our version first: a late write of the previous holder then
        // fails its condition instead of replacing what we adopt.
        let mut v: Vec<Vec<u8>> = owners.iter().cloned().collect();
        v.sort();
        if let Err(e) = self.record.write(&v) {
            tracing::warn!(error = %e, "ha: cannot rewrite the recovery record; the fence stays shut");
            return false;
        }
        let s = st.state();
        s.purge(s.clients.purge_all());
        // The client table's writer starts from the version just written.
        s.clients.adopt(owners.clone());
        stats::count_takeover();
        tracing::info!(identity = %self.identity, clients = owners.len(), lease_age_ms = h.sent.elapsed().as_millis() as u64, "ha: took the identity; grace period for its clients");
        true
    }

    /// With pNFS on, layout stateids are bound under the identity's key, read (or made,
    /// the first time) from the store before the fence opens, so the previous holder's
    /// layouts are reclaimed here (`layout_key`). `false` when the store did not answer
    /// (the takeover is tried again, the fence shut).
    fn adopt_layout_key(&self, st: &dyn AsState) -> bool {
        let layouts = &st.state().layouts;
        if layouts.devices().is_none() {
            return true;
        }
        match layout_key::load_or_create(self.cas(), &self.identity) {
            Ok(layout_key::Key::Key(k)) => layouts.set_key(Some(k)),
            Ok(layout_key::Key::Torn) => {
                tracing::error!(identity = %self.identity, object = %layout_key::name(&self.identity), "ha: the layout stateid key is torn: no pNFS layout can be reclaimed (LAYOUTCOMMIT reclaims get NFS4ERR_RECLAIM_BAD) until the object is removed");
                layouts.set_key(None);
            }
            Err(e) => {
                tracing::warn!(error = %e, "ha: cannot read the layout stateid key; the fence stays shut");
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::state::clients::{Clients, Limits, Principal};
    use crate::state::StateError;

    /// A store that takes every write whatever its condition, as Garage does with
    /// `If-None-Match` (docs/ha.md "Fencing"): what the probe must refuse.
    struct Ignores(MemoryBackend);

    impl Cas for Ignores {
        fn cas_get(&self, name: &str) -> Result<Option<(Vec<u8>, String)>, BackendError> {
            self.0.cas_get(name)
        }
        fn cas_put(
            &self,
            name: &str,
            data: &[u8],
            _: Option<&str>,
        ) -> Result<String, BackendError> {
            let now = self.0.cas_get(name)?.map(|(_, v)| v);
            self.0.cas_put(name, data, now.as_deref())
        }
    }

    #[test]
    fn the_probe_passes_on_conditional_stores_and_refuses_others() {
        let m = MemoryBackend::new();
        probe(&m, "t", "h").unwrap();
        probe(&m, "t", "h2").unwrap();
        let e = probe(&Ignores(MemoryBackend::new()), "t", "h").unwrap_err();
        assert!(
            e.to_string().contains("does not honour conditional writes"),
            "{e}"
        );
    }

    /// A retried write that had landed is not a lost race.
    #[test]
    fn put_checked_tells_a_retry_from_a_race() {
        let m = MemoryBackend::new();
        let v = m.cas_put("n", b"mine 1", None).unwrap();
        assert_eq!(put_checked(&m, "n", b"mine 1", None), Ok(v.clone()));
        assert_eq!(
            put_checked(&m, "n", b"other", None),
            Err(BackendError::AlreadyExists)
        );
    }

    /// Under `[ha]` the client table serves nothing until the fence opens, and a
    /// client whose owner cannot be recorded is not confirmed (NFS4ERR_DELAY).
    #[test]
    fn no_state_without_the_identity_nor_without_the_record() {
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        let fence = Arc::new(Fence::shut());
        let rec = record::StoreRecords::new(b.clone(), "t", "h", fence.clone());
        let cl = Clients::with_records(
            Limits::default(),
            Some(Box::new(rec.clone())),
            fence.clone(),
            b"nfs-gateway/t",
        );
        assert!(!cl.serving());
        assert_eq!(cl.server_major(), b"nfs-gateway/t");
        let id = cl
            .with_purge(|t| t.insert(b"o1", [1; 8], Principal::None))
            .0
            .unwrap();
        assert_eq!(cl.record_before_confirm(id), Err(StateError::Delay));
        fence.serve_until(Instant::now() + Duration::from_secs(60));
        assert_eq!(cl.record_before_confirm(id), Ok(()));
        assert!(rec.load().unwrap().contains(b"o1".as_slice()));
        // A successor that takes the record over: this table can no longer write it.
        let other = record::StoreRecords::new(b.clone(), "t", "h2", Arc::new(Fence::open()));
        let owners = other.load().unwrap();
        other
            .write(&owners.into_iter().collect::<Vec<_>>())
            .unwrap();
        let id2 = cl
            .with_purge(|t| t.insert(b"o2", [1; 8], Principal::None))
            .0
            .unwrap();
        assert_eq!(cl.record_before_confirm(id2), Err(StateError::Delay));
        assert!(!cl.serving(), "the changed record shut the fence");
    }
}
