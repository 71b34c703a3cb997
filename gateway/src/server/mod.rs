//! Assembles the running gateway: per-core reactors that own TCP connections, a pool
//! of backend workers that run NFS/MOUNT procedures against the file model, and the
//! rings between them.
//!
//! Data flow for one call:
//! reactor: record → RPC header → (rejections and NULL answered inline) → `Job` on the
//! shared job ring → worker: decode args, run the procedure, encode the reply into a
//! pool buffer → `Done` on the owning reactor's ring → reactor: send.
//!
//! Sharing: `Shared` is read-mostly and used by workers only; each reactor's state is
//! owned by its thread; rings are the only cross-thread channels.

mod callbacks;
#[cfg(test)]
mod callbacks_tests;
mod direct;
mod dispatch;
mod ds_probe;
mod held;
mod orphans;
mod rdma_late;
mod reactor;
mod spin;
mod transport;
mod v3_recall;
mod worker;

use crate::backend::Backend;
use crate::config::{BackendKind, Config, Hugepages, Idle, IoMode, RdmaProvider};
use crate::export::Exports;
use crate::fs::{ExportRoot, FileModel};
use crate::mount::MountTable;
use anyhow::Context;
use engine::fabric::Fabric;
use engine::mem::{ClassSpec, HugePolicy, Pools};
use engine::rdma::server::{RdmaServer, ServerOptions};
use engine::reactor::{Counters, IdlePolicy};
use engine::ring::{Doorbell, Ring};
use engine::tcp::{TcpOptions, TcpTransport};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub(crate) use dispatch::Job;
pub(crate) use worker::Done;

/// What workers share: the file model, exports, mount table and each reactor's pools
/// and completion ring.
pub(crate) struct Shared {
    pub model: FileModel,
    /// Invalidation counters of every reactor's read cache (also the file model's
    /// `ChangeObserver`: namespace changes bump the files they touch).
    pub gens: Arc<crate::cache::Generations>,
    /// Whether reactors cache pages (workers then read ahead to fill them).
    pub cache_pages: bool,
    /// The export table; SIGHUP reload publishes a new one (`Server::set_exports`).
    /// Workers load it per call, reactors check its epoch per call: no lock.
    pub exports: Arc<crate::export::ExportTable>,
    /// Reactors read `fs` file data through io_uring (`backend.io`): workers then
    /// hand them the files they authenticate (`server::direct`).
    pub direct_io: bool,
    pub mounts: MountTable,
    /// NFSv4.1 clients, sessions, opens, locks and delegations.
    pub state: crate::state::State,
    /// pNFS fencing: this gateway's check of layouts' synthetic ids (`crate::fence`).
    pub fence: Option<Arc<crate::fence::Fence>>,
    pub reactors: Vec<ReactorLink>,
    /// QoS rules; SIGHUP reload publishes new ones (`Server::set_qos`). Reactors
    /// check its epoch once per pass (`qos::Gate::refresh`).
    pub qos: Arc<crate::qos::Table>,
}

/// How a worker reaches a reactor: its pools (for reply buffers), its completion ring
/// and the doorbell that wakes it.
pub(crate) struct ReactorLink {
    pub pools: Pools,
    /// Callback records (NFSv4.1 back channel) for this reactor to send on its
    /// connections, from the callback thread (record mark room first; an RDMA
    /// connection sends the record without it, as an RFC 8167 reverse call).
    pub calls: Arc<Ring<(crate::nfs4::ConnKind, engine::mem::Buf)>>,
    pub done: Arc<Ring<Done>>,
    pub bell: Arc<Doorbell>,
    /// Cleared when the reactor thread ends (shutdown or death): workers then drop
    /// its completions instead of waiting on a ring nobody drains.
    pub alive: Arc<AtomicBool>,
    /// Its RDMA server when the listener bound after start (`[ha]`, `rdma_late`).
    pub late_rdma: Arc<rdma_late::LateRdma>,
}

/// Clears a reactor's `alive` flag when its thread ends, however it ends.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A running gateway.
pub struct Server {
    stop_reactors: Arc<AtomicBool>,
    stop_workers: Arc<AtomicBool>,
    reactors: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    callbacks: JoinHandle<()>,
    /// The thread retrying RDMA listeners that could not bind at start (`rdma_late`).
    late_rdma: Option<JoinHandle<()>>,
    /// The pNFS data server probes (`ds_probe`; none unless a metadata server).
    probes: Vec<JoinHandle<()>>,
    worker_bells: Arc<Vec<Arc<Doorbell>>>,
    shared: Arc<Shared>,
    counters: Vec<Arc<Counters>>,
    stats: Vec<Arc<crate::stats::ReactorStats>>,
    /// Each reactor's per-client and per-export counters (`stats::tenants`).
    tenants: Vec<Arc<crate::stats::TenantTable>>,
    rdma_credits: u32,
    local_addr: SocketAddr,
}

/// Callback records queued per reactor, at most (callbacks are rare).
const CALL_RING: usize = 256;

fn pool_specs(cfg: &Config) -> [ClassSpec; 3] {
    use crate::config::{LARGE_BUF, MEDIUM_BUF, SMALL_BUF};
    [
        ClassSpec {
            size: SMALL_BUF,
            count: cfg.pools.small,
        },
        ClassSpec {
            size: MEDIUM_BUF,
            count: cfg.pools.medium,
        },
        ClassSpec {
            size: LARGE_BUF,
            count: cfg.pools.large,
        },
    ]
}

/// A reactor's io_uring when `backend.io` asks for one and the backend is `fs`;
/// `None` (the worker path) otherwise or when the kernel refuses (logged once by
/// `log_io_mode`, with the reason here at debug).
fn open_ring(cfg: &Config, pools: &Pools) -> Option<crate::uring::Uring> {
    if cfg.backend.io == IoMode::Workers || cfg.backend.kind != BackendKind::Fs {
        return None;
    }
    match crate::uring::Uring::open(pools.region()) {
        Ok(r) => Some(r),
        Err(why) => {
            let level_warn = cfg.backend.io == IoMode::Uring;
            if level_warn {
                tracing::warn!("backend.io = \"uring\": io_uring unavailable ({why}); file data goes through the backend workers");
            } else {
                tracing::info!("backend.io = \"auto\": io_uring unavailable ({why}); file data goes through the backend workers");
            }
            None
        }
    }
}

/// Says once which data path is in force.
fn log_io_mode(cfg: &Config, rings: &[Option<crate::uring::Uring>]) {
    match rings.first() {
        Some(Some(r)) if rings.iter().all(Option::is_some) && r.writes() => tracing::info!(
            fixed_buffers = r.fixed(),
            registered_files = r.file_slots(),
            "data I/O: fs GETATTR, READ, WRITE (unstable and stable) and COMMIT, NFSv3 and the NFSv4.1 COMPOUNDs that carry them, on the reactors through io_uring (backend.io = {:?}); namespace calls, first opens and the rest on the backend workers",
            cfg.backend.io
        ),
        Some(Some(r)) if rings.iter().all(Option::is_some) => tracing::info!(
            fixed_buffers = r.fixed(),
            "data I/O: fs READs on the reactors through io_uring (backend.io = {:?}); WRITE and COMMIT on the backend workers (the kernel lacks an opcode they need)",
            cfg.backend.io
        ),
        _ if cfg.backend.io != IoMode::Workers && cfg.backend.kind != BackendKind::Fs => {
            tracing::info!(
                "data I/O: backend workers (backend.io = {:?} applies to the fs backend only)",
                cfg.backend.io
            )
        }
        _ => tracing::info!("data I/O: backend workers"),
    }
}

/// pNFS fencing (`crate::fence`) on stores with conditional writes, keyed by the
/// store-wide handle key (shared stores: the agreed key, or the one remembered in
/// `state.dir` when the store does not answer now; a gateway alone on its store: a
/// key of this run, since no other gateway checks its layouts' ids).
fn open_fence(
    backend: &Arc<dyn Backend>,
    state_dir: &std::path::Path,
) -> Option<Arc<crate::fence::Fence>> {
    let key = match backend.shared() {
        None => Some(rand::random::<[u8; 32]>()),
        Some(s) => s.mac_key().ok().or_else(|| {
            let b = std::fs::read(state_dir.join("shared-handle.key")).ok()?;
            b.try_into().ok()
        }),
    };
    let fence = key.and_then(|k| crate::fence::open(backend.clone(), k));
    if fence.is_some() {
        tracing::info!("pNFS fencing on: AUTH_SYS uids from 2^31 are layouts' synthetic ids");
    } else {
        tracing::info!(
            "pNFS fencing off: the store has no conditional writes (or no handle key yet)"
        );
    }
    fence
}

fn open_backend(cfg: &Config) -> anyhow::Result<Arc<dyn Backend>> {
    Ok(match cfg.backend.kind {
        BackendKind::Fs => Arc::new(
            crate::backend::fs::FsBackend::open_configured(
                &cfg.backend.root,
                cfg.backend.shared,
                cfg.backend.fs.flush,
            )
            .with_context(|| format!("backend.root = {:?}", cfg.backend.root))?,
        ),
        BackendKind::Memory => Arc::new(crate::backend::memory::MemoryBackend::new()),
        BackendKind::S3 => {
            let s3 = cfg.backend.s3.as_ref().context("backend.s3: missing")?;
            Arc::new(crate::backend::s3::S3Backend::open(s3)?)
        }
    })
}

impl crate::ha::AsState for Shared {
    fn state(&self) -> &crate::state::State {
        &self.state
    }
}

impl Server {
    /// Opens the backend and file model, binds every reactor's listener and starts the
    /// reactor and worker threads. Errors name the config key at fault.
    pub fn start(cfg: &Config) -> anyhow::Result<Server> {
        let exports = cfg.exports()?;
        std::fs::create_dir_all(&cfg.state.dir)
            .with_context(|| format!("state.dir = {:?}: cannot create it", cfg.state.dir))?;
        // Every store call timed by operation (`nfsgw_backend_duration_seconds`).
        let backend = crate::backend::timed::Timed::wrap(open_backend(cfg)?);
        // `[ha]`: the store's conditional writes probed before anything is served.
        let ha = crate::ha::setup(&cfg.ha, &cfg.backend, &backend)?;
        let roots: Vec<ExportRoot> = exports
            .iter()
            .map(|e| ExportRoot {
                id: e.id,
                prefix: e.prefix.clone(),
            })
            .collect();
        let model = FileModel::open_with(
            backend.clone(),
            &cfg.state.dir,
            &roots,
            cfg.state.handle_cache_entries,
        )
        .with_context(|| format!("state.dir = {:?}", cfg.state.dir))?;
        let fence = match cfg.pnfs.fence {
            true => open_fence(&backend, &cfg.state.dir),
            false => None,
        };

        let policy = match cfg.engine.hugepages {
            Hugepages::Require => HugePolicy::Require,
            Hugepages::Auto => HugePolicy::Auto,
            Hugepages::Off => HugePolicy::Off,
        };
        let opts = TcpOptions {
            max_record: cfg.tcp.max_record,
            max_connections: cfg.tcp.max_connections,
            max_inflight: cfg.tcp.max_inflight,
            record_timeout: Duration::from_secs(cfg.tcp.record_timeout_s),
            send_timeout: Duration::from_secs(cfg.tcp.send_timeout_s),
            stall_reclaim: Duration::from_millis(cfg.tcp.stall_reclaim_ms),
            max_queued: cfg.tcp.max_queued_mib.saturating_mul(1 << 20),
        };
        let mut addr = exclusive_probe(cfg.listen_addr())?;
        let rdma_opts = ServerOptions {
            credits: cfg.rdma.credits,
            min_credits: cfg.rdma.min_credits,
            inline_size: cfg.rdma.inline_size,
            remote_invalidate: cfg.rdma.remote_invalidate,
            max_connections: cfg.rdma.max_connections,
            read_depth: cfg.rdma.read_depth,
            read_timeout: Duration::from_secs(cfg.rdma.read_timeout_s),
            send_timeout: Duration::from_secs(cfg.rdma.send_timeout_s),
            stall_reclaim: Duration::from_millis(cfg.rdma.stall_reclaim_ms),
            max_reply_bytes: cfg.rdma.max_reply_mib << 20,
            ..ServerOptions::default()
        };
        let mut rdma_servers = Vec::new();
        let mut transports = Vec::new();
        let mut links = Vec::new();
        let mut rings = Vec::new();
        // [ha]: a standby's service address may not be here yet (rdma_late).
        let ha_on = cfg.ha.identity.is_some();
        let mut rdma_waits: Option<anyhow::Error> = None;
        let fabrics = match open_fabrics(cfg, cfg.engine.cores.len()) {
            Err(e) if ha_on && rdma_late::address_not_yet(&e) => {
                rdma_waits = Some(e);
                (0..cfg.engine.cores.len()).map(|_| None).collect()
            }
            r => r?,
        };
        for fabric in fabrics {
            let pools =
                Pools::new(&pool_specs(cfg), policy).context("engine.hugepages / [pools]")?;
            let tcp = TcpTransport::bind(addr, opts.clone_opts(), pools.clone()).with_context(|| {
                format!("tcp.listen = \"{addr}\": cannot listen (port in use or not a local address?)")
            })?;
            // Port 0 picks a port once; every reactor listens on that same one.
            addr = tcp.local_addr();
            let rdma = match fabric {
                Some(_) if rdma_waits.is_some() => None,
                Some(fabric) => match open_rdma(cfg, fabric, &pools, rdma_opts) {
                    Err(e) if ha_on && rdma_late::address_not_yet(&e) => {
                        rdma_waits = Some(e);
                        None
                    }
                    r => {
                        let r = r?;
                        if let Some(fd) = r.wait_fd() {
                            tcp.register_external(fd)
                                .context("registering the fabric's wait fd")?;
                        }
                        Some(r)
                    }
                },
                None => None,
            };
            let ring = open_ring(cfg, &pools);
            if let Some(r) = &ring {
                // Completions wake an adaptive reactor sleeping in epoll.
                tcp.register_external(r.wait_fd())
                    .context("registering the io_uring eventfd")?;
            }
            rings.push(ring);
            let bell = Doorbell::new(Box::new(WakerBox(tcp.waker())));
            links.push(ReactorLink {
                pools,
                calls: Ring::new(CALL_RING),
                done: Ring::new(cfg.backend.ring_depth),
                bell,
                alive: Arc::new(AtomicBool::new(true)),
                late_rdma: Arc::default(),
            });
            transports.push(tcp);
            rdma_servers.push(rdma);
        }
        if let Some(e) = &rdma_waits {
            // All or none: one address, one listener group.
            rdma_servers.iter_mut().for_each(|r| *r = None);
            tracing::warn!(
                listen = %cfg.rdma.listen,
                "rdma: cannot listen yet ({e:#}); [ha]: serving TCP and retrying every {:?} \
                 (the service address comes with the identity; docs/ha.md)",
                rdma_late::RETRY
            );
        }
        if let Some(Some(r)) = rdma_servers.first() {
            tracing::info!(
                provider = r.provider(),
                reactors = rdma_servers.iter().flatten().count(),
                listen = %r.local_addr(),
                credits = r.options().credits,
                inline = r.options().inline_size,
                "serving NFSv3, MOUNT v3 and NFSv4.1 over RPC-over-RDMA"
            );
        }
        let direct_io = rings.iter().all(Option::is_some);
        log_io_mode(cfg, &rings);
        if !direct_io {
            // One reactor without a ring (set-up failed there): none uses the path,
            // so the mode is the same on every core.
            rings.iter_mut().for_each(|r| *r = None);
        }
        let local_addr = transports[0].local_addr();
        let gens = Arc::new(crate::cache::Generations::new());
        if fence.is_some() {
            // Layouts' data generations (`crate::fence`) are checked by the caches.
            gens.check_data_gens();
        }
        model.observe_changes(gens.clone());
        let shared = Arc::new(Shared {
            model,
            gens,
            cache_pages: cfg.cache.size_mib > 0,
            exports: Arc::new(crate::export::ExportTable::new(Exports::new(exports))),
            direct_io,
            mounts: MountTable::new(),
            state: match &ha {
                Some(h) => crate::state::State {
                    clients: h.clients(cfg.nfs4.limits()),
                    ..Default::default()
                },
                None => crate::state::State::with_config(cfg.nfs4.limits(), Some(&cfg.state.dir)),
            }
            .with_layouts(cfg.pnfs.layouts_on(&cfg.backend))
            // Under `[ha]` the key is the identity's, set at each takeover
            // (`ha::layout_key`); without it, this host's `state.dir` keeps it.
            .with_layout_key(
                cfg.pnfs
                    .layouts()
                    .filter(|_| ha.is_none())
                    .and_then(|_| crate::state::layouts::load_key(&cfg.state.dir)),
            )
            .with_fence(fence.clone()),
            fence,
            reactors: links,
            qos: Arc::new(crate::qos::Table::new(
                crate::qos::Rules::build(cfg, None).context("[qos]")?,
            )),
        });

        orphans::wire(&shared);
        // Issue 27: a metadata server's layouts did not survive its last run, so the
        // boot epoch moves before it serves (earlier ids fenced at every data server;
        // conflicting operations wait the window out: `state/layouts_boot.rs`). Under
        // `[ha]` the takeover does it.
        if ha.is_none() {
            shared.state.layouts.restart_fence();
        }
        shared
            .state
            .delegations
            .set_lease(Duration::from_secs(cfg.nfs4.lease_time_s));
        let delegations = &shared.state.delegations;
        delegations.set_write_delegations(cfg.nfs4.write_delegations);
        delegations.observe_holds(shared.gens.clone());
        let jobs: Arc<Ring<Job>> = Ring::new(cfg.backend.ring_depth);
        let stop_workers = Arc::new(AtomicBool::new(false));
        let (workers, worker_bells) = worker::spawn_workers(
            cfg.backend.workers,
            Duration::from_micros(cfg.backend.worker_spin_us),
            &shared,
            &jobs,
            &stop_workers,
        )?;

        let callbacks = callbacks::spawn(&shared, &stop_workers)?;
        let probes = ds_probe::spawn(&shared, &stop_workers)?;
        if let Some(h) = ha {
            let as_state: Arc<dyn crate::ha::AsState> = shared.clone();
            h.start(&as_state, &stop_workers)?;
        }

        let idle = match cfg.engine.idle {
            Idle::Busy => IdlePolicy::Busy,
            Idle::Adaptive => IdlePolicy::Adaptive {
                spins: cfg.engine.idle_spins,
                spin: Duration::from_micros(cfg.engine.idle_spin_us),
                bulk_spin: Duration::from_micros(cfg.engine.idle_bulk_spin_us),
                max_sleep: Duration::from_micros(cfg.engine.idle_sleep_us),
            },
        };
        let stop_reactors = Arc::new(AtomicBool::new(false));
        let late_rdma = match rdma_waits {
            Some(_) => Some(spawn_late_rdma(cfg, &shared, rdma_opts, &stop_reactors)?),
            None => None,
        };
        let mut reactors = Vec::new();
        let mut counters = Vec::new();
        let mut stats = Vec::new();
        let mut tenants = Vec::new();
        crate::stats::set_top(&cfg.stats);
        for (i, (((tcp, rdma), core), ring)) in transports
            .into_iter()
            .zip(rdma_servers)
            .zip(cfg.engine.cores.iter())
            .zip(rings)
            .enumerate()
        {
            let c = Arc::new(Counters::default());
            counters.push(c.clone());
            let st = Arc::new(crate::stats::ReactorStats::default());
            stats.push(st.clone());
            let tt = Arc::new(crate::stats::TenantTable::new(cfg.stats.client_slots));
            tenants.push(tt.clone());
            let cache = crate::cache::ReadCache::new(cfg.cache.size_mib << 20, policy)
                .context("cache.size_mib")?;
            let r = reactor::ReactorState::new(
                i,
                tcp,
                rdma,
                cache,
                shared.clone(),
                jobs.clone(),
                worker_bells.clone(),
                c.clone(),
                st,
                crate::stats::Tenants::new(tt, shared.exports.clone(), cfg.stats.per_client),
                ring.map(|r| direct::Direct::new(r, shared.clone()).with_pipes(cfg.backend.splice)),
            );
            let stop = stop_reactors.clone();
            let alive = AliveGuard(shared.reactors[i].alive.clone());
            reactors.push(crate::supervise::spawn(
                format!("reactor-{i}"),
                Some(*core),
                move || {
                    let _alive = alive;
                    let mut r = r;
                    engine::reactor::run(&mut r, idle, &stop, &c);
                    let s = r.cache_stats();
                    tracing::info!(
                        reactor = i,
                        hits = s.hits,
                        misses = s.misses,
                        pages = s.pages,
                        "read cache"
                    );
                },
            )?);
        }
        Ok(Server {
            stop_reactors,
            stop_workers,
            reactors,
            workers,
            callbacks,
            late_rdma,
            probes,
            worker_bells,
            shared,
            counters,
            stats,
            tenants,
            rdma_credits: cfg.rdma.credits,
            local_addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Every reactor's pass counter (the main thread's liveness check: a reactor whose
    /// count stops moving is stuck).
    pub fn reactor_polls(&self) -> Vec<u64> {
        self.counters
            .iter()
            .map(|c| c.polls.load(Ordering::Relaxed))
            .collect()
    }

    /// Pool buffers handed out, over every reactor (tests assert they all come back).
    pub fn pool_buffers_in_use(&self) -> usize {
        self.shared.reactors.iter().map(|r| r.pools.in_use()).sum()
    }

    /// What the stats endpoint reads: every reactor's counters, statistics and pools.
    /// Applies a reloaded export list (already validated by `Config::exports`): the
    /// file model learns new export roots first, then the table is published, so a
    /// call that sees a new export can resolve it. Calls already running finish under
    /// the table they started with; the next reactor pass or worker call sees the new
    /// one (and so does the read cache, which checks every hit against it).
    pub fn set_exports(&self, exports: Vec<crate::export::Export>) -> anyhow::Result<()> {
        let roots: Vec<ExportRoot> = exports
            .iter()
            .map(|e| ExportRoot {
                id: e.id,
                prefix: e.prefix.clone(),
            })
            .collect();
        self.shared.model.add_exports(&roots)?;
        self.shared.exports.publish(Exports::new(exports));
        Ok(())
    }

    /// Applies the `[qos]` rules of a reloaded configuration: buckets start full,
    /// held calls fall under the new rules at their reactor's next pass, no connection
    /// is touched.
    pub fn set_qos(&self, cfg: &crate::config::Config) -> anyhow::Result<()> {
        let old = self.shared.qos.load();
        let rules = crate::qos::Rules::build(cfg, Some(&old))?;
        self.shared.qos.publish(rules);
        Ok(())
    }

    pub fn stats_source(&self) -> crate::stats::Source {
        let reactors = self
            .counters
            .iter()
            .zip(&self.stats)
            .zip(&self.shared.reactors)
            .zip(&self.tenants)
            .map(|(((c, s), link), t)| crate::stats::ReactorSource {
                counters: c.clone(),
                stats: s.clone(),
                pools: link.pools.clone(),
                tenants: t.clone(),
            })
            .collect();
        crate::stats::Source {
            reactors,
            rdma_credits: self.rdma_credits,
            callbacks: self.shared.state.delegations.stats(),
            nfs4: Some({
                let shared = self.shared.clone();
                Arc::new(move || shared.state.gauges())
            }),
            qos: Some(self.shared.qos.clone()),
            exports: Some(self.shared.exports.clone()),
        }
    }

    /// Clean shutdown: stop accepting and reading, let workers finish what they hold,
    /// then make every staged write durable.
    pub fn shutdown(self) -> anyhow::Result<()> {
        crate::supervise::begin_stopping();
        self.stop_reactors.store(true, Ordering::SeqCst);
        for r in self.reactors {
            let _ = r.join();
        }
        if let Some(t) = self.late_rdma {
            let _ = t.join();
        }
        self.stop_workers.store(true, Ordering::SeqCst);
        for b in self.worker_bells.iter() {
            b.ring();
        }
        for w in self.workers {
            let _ = w.join();
        }
        self.callbacks.thread().unpark();
        let _ = self.callbacks.join();
        self.shared.state.layouts.health().wake_all();
        for p in self.probes {
            let _ = p.join();
        }
        for (i, (c, s)) in self.counters.iter().zip(&self.stats).enumerate() {
            use crate::stats::{counters::SLOTS, Transport};
            let both = |f: &dyn Fn(Transport) -> u64| f(Transport::Tcp) + f(Transport::Rdma);
            tracing::info!(
                reactor = i,
                polls = c.polls.load(Ordering::Relaxed),
                busy_polls = c.busy_polls.load(Ordering::Relaxed),
                ops = both(&|t| (0..SLOTS).map(|k| s.ops(t, k)).sum()),
                bytes_in = both(&|t| s.bytes_in_total(t)),
                bytes_out = both(&|t| s.bytes_out_total(t)),
                parked = c.parked.load(Ordering::Relaxed),
                "reactor counters"
            );
        }
        self.shared
            .model
            .flush_all()
            .map_err(|s| anyhow::anyhow!("flushing staged writes at shutdown failed: {s:?}"))?;
        Ok(())
    }
}

/// One fabric per reactor (`n`), per `rdma.provider`; `None` entries serve no RDMA.
/// With verbs they are one group on one device: one protection domain, one completion
/// queue per reactor, connections spread over the reactors by the first one's
/// listener (engine::fabric::verbs).
/// One reactor's RPC-over-RDMA listener on `rdma.listen`.
fn open_rdma(
    cfg: &Config,
    fabric: Box<dyn Fabric>,
    pools: &Pools,
    opts: ServerOptions,
) -> anyhow::Result<RdmaServer> {
    let provider = fabric.name();
    RdmaServer::new(fabric, pools.clone(), opts, cfg.rdma_addr()).with_context(|| {
        format!(
            "rdma.listen = \"{}\": cannot listen with the {provider} provider \
             (address in use by another gateway?)",
            cfg.rdma.listen
        )
    })
}

/// The `rdma_late` thread for listeners that could not bind at start: every
/// reactor's server, built on its own pools, all or none.
fn spawn_late_rdma(
    cfg: &Config,
    shared: &Arc<Shared>,
    opts: ServerOptions,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<JoinHandle<()>> {
    let pools: Vec<Pools> = shared.reactors.iter().map(|l| l.pools.clone()).collect();
    let mailboxes = shared
        .reactors
        .iter()
        .map(|l| (l.late_rdma.clone(), l.bell.clone()))
        .collect();
    let listen = cfg.rdma.listen.clone();
    let cfg = cfg.clone();
    let make = move || -> anyhow::Result<Vec<RdmaServer>> {
        open_fabrics(&cfg, pools.len())?
            .into_iter()
            .zip(&pools)
            .map(|(f, p)| {
                let f = f.context("rdma.provider is off")?;
                open_rdma(&cfg, f, p, opts)
            })
            .collect()
    };
    rdma_late::spawn(listen, mailboxes, stop.clone(), make).context("starting the rdma-late thread")
}

fn open_fabrics(cfg: &Config, n: usize) -> anyhow::Result<Vec<Option<Box<dyn Fabric>>>> {
    let soft = || -> anyhow::Result<Vec<Option<Box<dyn Fabric>>>> {
        (0..n)
            .map(|_| -> anyhow::Result<Option<Box<dyn Fabric>>> {
                Ok(Some(Box::new(
                    engine::fabric::soft::SoftFabric::new()
                        .context("starting the soft RDMA provider")?,
                )))
            })
            .collect()
    };
    match cfg.rdma.provider {
        RdmaProvider::Off => Ok((0..n).map(|_| None).collect()),
        RdmaProvider::Soft => soft(),
        #[cfg(feature = "rdma")]
        RdmaProvider::Verbs => verbs(cfg, n),
        #[cfg(not(feature = "rdma"))]
        RdmaProvider::Verbs => anyhow::bail!(
            "rdma.provider = \"verbs\": this gateway was built without RDMA verbs support; \
             rebuild with `cargo build --release -p gateway --features rdma` (needs \
             libibverbs-dev, librdmacm-dev and libclang-dev), or set rdma.provider = \"soft\" \
             or \"off\""
        ),
        #[cfg(feature = "rdma")]
        RdmaProvider::Auto => match verbs(cfg, n) {
            Ok(f) => Ok(f),
            Err(e) => {
                tracing::info!(
                    "rdma.provider = \"auto\": RDMA verbs unavailable ({e:#}); serving \
                     RPC-over-RDMA with the soft provider"
                );
                soft()
            }
        },
        #[cfg(not(feature = "rdma"))]
        RdmaProvider::Auto => {
            tracing::info!(
                "rdma.provider = \"auto\": no verbs support in this build; RDMA verbs are off, \
                 serving RPC-over-RDMA with the soft provider"
            );
            soft()
        }
    }
}

/// The verbs provider for `n` reactors on the RDMA device that owns `rdma.listen`, or
/// the one named by `rdma.device`. Errors name the key and the fix.
#[cfg(feature = "rdma")]
fn verbs(cfg: &Config, n: usize) -> anyhow::Result<Vec<Option<Box<dyn Fabric>>>> {
    use engine::fabric::verbs::{device_names, VerbsFabric};
    let addr = cfg.rdma_addr();
    let want = cfg.rdma.device.as_deref();
    if let Some(w) = want {
        let have = device_names();
        if !have.iter().any(|d| d == w) {
            anyhow::bail!(
                "rdma.device = \"{w}\": no such RDMA device (present: {}); set rdma.device \
                 to one of them (see `rdma link show`), or remove it to use the device that \
                 owns rdma.listen",
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            );
        }
    }
    let group = VerbsFabric::open_group(want, addr, n)
        .map_err(|e| rdma_late::verbs_open_error(want, addr, e))?;
    let device = group.first().map(|f| f.device_name().to_string());
    tracing::info!(
        device = device.as_deref().unwrap_or(""),
        listen = %addr,
        reactors = n,
        "rdma: verbs provider opened (one PD, one CQ per reactor)"
    );
    Ok(group
        .into_iter()
        .map(|f| Some(Box::new(f) as Box<dyn Fabric>))
        .collect())
}

/// Reactors share the listen address through SO_REUSEPORT, which would also let a
/// second gateway (same user) silently share the port. Bind once without it first: if
/// anyone else holds the address, fail with a clear message. Returns the address to
/// use (with the kernel's choice when the port is 0).
fn exclusive_probe(addr: SocketAddr) -> anyhow::Result<SocketAddr> {
    let probe = std::net::TcpListener::bind(addr).with_context(|| {
        format!(
            "tcp.listen = \"{addr}\": address in use or not local; stop the other server \
             or choose another address:port"
        )
    })?;
    let got = probe.local_addr()?;
    drop(probe);
    Ok(got)
}

/// Adapts the transport's mio waker to the doorbell's `Wake`.
struct WakerBox(Arc<mio::Waker>);

impl engine::ring::Wake for WakerBox {
    fn wake(&self) {
        let _ = self.0.wake();
    }
}

trait CloneOpts {
    fn clone_opts(&self) -> TcpOptions;
}

impl CloneOpts for TcpOptions {
    fn clone_opts(&self) -> TcpOptions {
        self.clone()
    }
}
