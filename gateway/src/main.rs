//! `gateway`: serve NFSv3 and MOUNT from an object store.
//!
//! `gateway --config FILE` serves until SIGINT/SIGTERM, then flushes staged writes and
//! exits 0; SIGHUP re-reads FILE and applies exports, `[stats]` and `log.level` live
//! (`gateway::reload`). `gateway --check-config FILE` validates the file and exits;
//! `gateway --print-config FILE` prints the effective configuration (defaults filled
//! in, secrets redacted).

use clap::Parser;
use gateway::cli::Cli;
use gateway::config::Config;
use gateway::server::Server;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static STOP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_hup(_: libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_hup as *const () as libc::sighandler_t);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Sets the log filter on reload; `None` when RUST_LOG overrides `log.level`.
type SetLevel = Option<Box<dyn Fn(&str) -> Result<(), String>>>;

fn init_logging(level: &str) -> SetLevel {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let from_env = EnvFilter::try_from_default_env().ok();
    let env_set = from_env.is_some();
    let filter = from_env.unwrap_or_else(|| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter_reloading();
    let handle = builder.reload_handle();
    builder.init();
    if env_set {
        return None;
    }
    Some(Box::new(move |level: &str| {
        let f = EnvFilter::try_new(level).map_err(|e| e.to_string())?;
        handle.reload(f).map_err(|e| e.to_string())
    }))
}

/// Rule: every TCP connection is a file descriptor, so the soft
/// RLIMIT_NOFILE (often 1024) is raised to the hard limit; if `tcp.max_connections`
/// per reactor plus a margin for listeners, backend files and RDMA still exceeds it,
/// say so (accept then fails with EMFILE and is logged).
fn raise_fd_limit(cfg: &Config) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read or write one rlimit struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    if lim.rlim_cur < lim.rlim_max {
        let want = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    let need = (cfg.tcp.max_connections as u64)
        .saturating_mul(cfg.engine.cores.len() as u64)
        .saturating_add(256);
    if need > lim.rlim_cur {
        tracing::warn!(
            "open-file limit is {} but tcp.max_connections = {} x {} reactor(s) + 256 needs {need}; \
             raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower tcp.max_connections",
            lim.rlim_cur,
            cfg.tcp.max_connections,
            cfg.engine.cores.len()
        );
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(path) = cli.print_config {
        let out = Config::load(&path).map_err(|e| e.to_string());
        return match out.and_then(|cfg| gateway::effective::render(&cfg)) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                ExitCode::from(2)
            }
        };
    }
    if let Some(path) = cli.check_config {
        return match Config::load(&path) {
            Ok(cfg) => {
                println!(
                    "{}: valid ({} reactor(s), {} export(s), backend {:?}, tcp {})",
                    path.display(),
                    cfg.engine.cores.len(),
                    cfg.exports.len(),
                    cfg.backend.kind,
                    cfg.tcp.listen
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                ExitCode::from(2)
            }
        };
    }
    let Some(path) = cli.config else {
        eprintln!(
            "gateway: pass --config FILE (try configs/default.toml), --check-config FILE or \
             --print-config FILE"
        );
        return ExitCode::from(2);
    };
    let cfg = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let set_level = init_logging(&cfg.log.level);
    gateway::supervise::install_panic_hook();
    gateway::supervise::hooks::init_from_env();
    install_signal_handlers();
    raise_fd_limit(&cfg);
    // Bound before the server starts: a taken port fails start-up before any reactor
    // runs, and the endpoint answers as soon as NFS does.
    let stats = match cfg
        .stats
        .addr()
        .map(gateway::stats::Bound::bind)
        .transpose()
    {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(
                "cannot start: stats.listen = \"{}\": {e}; choose a free local address:port \
                 or remove [stats] listen",
                cfg.stats.listen
            );
            return ExitCode::from(1);
        }
    };
    if let Err(e) = gateway::audit::configure(&cfg.audit, &cfg.state.dir) {
        tracing::error!(
            "cannot start: audit.path = {:?}: {e}; choose a writable file or set audit.enabled = false",
            cfg.audit.file(&cfg.state.dir)
        );
        return ExitCode::from(1);
    }
    let server = match Server::start(&cfg) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot start: {e:#}");
            return ExitCode::from(1);
        }
    };
    // The stats endpoint (off unless [stats] listen is set): its own thread, reading
    // the reactors' counters; dropped (stopped) at exit.
    let mut stats_ep = match stats {
        None => None,
        Some(bound) => match bound.serve(server.stats_source()) {
            Ok(e) => {
                tracing::info!(listen = %e.local_addr(), "stats: Prometheus metrics at /metrics");
                Some(e)
            }
            Err(e) => {
                tracing::error!("cannot start: stats endpoint thread: {e}");
                let _ = server.shutdown();
                return ExitCode::from(1);
            }
        },
    };
    tracing::info!(
        listen = %server.local_addr(),
        reactors = cfg.engine.cores.len(),
        backend = ?cfg.backend.kind,
        exports = ?cfg.exports.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
        "serving NFSv3, MOUNT v3 and NFSv4.1 over TCP"
    );
    let mut sd = gateway::sdnotify::Notifier::from_env();
    sd.notify("READY=1");
    let mut last_polls = server.reactor_polls();
    let mut running = cfg;
    // Supervision (README "Failures and supervision"): the main thread waits for a
    // signal or a fatal thread death, and pings systemd's watchdog while every
    // reactor keeps making passes.
    while !STOP.load(Ordering::SeqCst) {
        if let Some(reason) = gateway::supervise::fatal_reason() {
            drop(stats_ep);
            return fatal_exit(server, &sd, reason);
        }
        if RELOAD.swap(false, Ordering::SeqCst) {
            sd.notify("RELOADING=1");
            reload(&path, &mut running, &server, &mut stats_ep, &set_level);
            sd.notify("READY=1");
        }
        std::thread::sleep(Duration::from_millis(50));
        sd.tick(|| {
            let now = server.reactor_polls();
            let moving = now.iter().zip(&last_polls).all(|(a, b)| a != b);
            last_polls = now;
            moving
        });
    }
    sd.notify("STOPPING=1");
    tracing::info!("shutting down: flushing staged writes");
    let shut = server.shutdown();
    gateway::audit::flush(Duration::from_secs(5));
    match shut {
        Ok(()) => {
            tracing::info!("clean shutdown");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::from(1)
        }
    }
}

/// SIGHUP: re-read the file; a file that does not load is refused whole (logged, the
/// running configuration stays); otherwise exports, `[qos]`, `[stats]` and `log.level` are
/// applied and keys that need a restart are named. Connections are untouched: the next
/// call of each sees the new export table.
fn reload(
    path: &std::path::Path,
    running: &mut Config,
    server: &Server,
    stats_ep: &mut Option<gateway::stats::Endpoint>,
    set_level: &SetLevel,
) {
    let new = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(
                "reload refused, keeping the running configuration: {}: {e}",
                path.display()
            );
            return;
        }
    };
    let mut plan = match gateway::reload::plan(running, &new) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("reload refused, keeping the running configuration: {e}");
            return;
        }
    };
    let mut applied = gateway::reload::merged(running, &new);
    if let Some(list) = plan.exports.take() {
        if let Err(e) = server.set_exports(list) {
            tracing::error!("reload: exports not applied, the old ones stay: {e:#}");
            applied.exports = running.exports.clone();
        }
    }
    if plan.qos {
        if let Err(e) = server.set_qos(&new) {
            tracing::error!("reload: [qos] not applied, the old rules stay: {e:#}");
            applied.qos = running.qos.clone();
        }
    }
    gateway::stats::set_top(&new.stats);
    if plan.stats && !rebind_stats(&new, server, stats_ep) {
        applied.stats = running.stats.clone();
    }
    if plan.audit {
        if let Err(e) = gateway::audit::configure(&new.audit, &new.state.dir) {
            tracing::error!(
                "reload: [audit] not applied, the old setting stays: {:?}: {e}",
                new.audit.file(&new.state.dir)
            );
            applied.audit = running.audit.clone();
        }
    }
    if plan.log {
        match set_level {
            None => tracing::warn!("reload: log.level not applied: RUST_LOG overrides it"),
            Some(f) => {
                if let Err(e) = f(&new.log.level) {
                    tracing::error!("reload: log.level not applied: {e}");
                    applied.log = running.log.clone();
                }
            }
        }
    }
    tracing::info!("{}", plan.summary(&new));
    *running = applied;
}

/// Moves the stats endpoint to `[stats] listen` of `new` (or stops it). The old
/// endpoint is stopped first (the new address may be the same port); if the new one
/// cannot bind, the old address is bound again. Returns whether the new setting runs.
fn rebind_stats(
    new: &Config,
    server: &Server,
    stats_ep: &mut Option<gateway::stats::Endpoint>,
) -> bool {
    let old = stats_ep.as_ref().map(|e| e.local_addr());
    if old.is_some() && old == new.stats.addr() {
        return true;
    }
    *stats_ep = None;
    let Some(addr) = new.stats.addr() else {
        return true;
    };
    match gateway::stats::Endpoint::start(addr, server.stats_source()) {
        Ok(e) => {
            tracing::info!(listen = %e.local_addr(), "stats: Prometheus metrics at /metrics");
            *stats_ep = Some(e);
            true
        }
        Err(e) => {
            tracing::error!("reload: stats.listen = \"{addr}\": {e}; keeping the old endpoint");
            *stats_ep =
                old.and_then(|a| gateway::stats::Endpoint::start(a, server.stats_source()).ok());
            false
        }
    }
}

/// How long a fatal exit waits for staged writes to be made durable.
const FATAL_FLUSH_LIMIT: Duration = Duration::from_secs(60);

/// A thread died: log why, make staged writes durable if that finishes in
/// `FATAL_FLUSH_LIMIT`, and exit with `EXIT_FATAL` so a supervisor restarts us.
fn fatal_exit(server: Server, sd: &gateway::sdnotify::Notifier, reason: &str) -> ExitCode {
    tracing::error!(
        "FATAL: {reason}; flushing staged writes, then exiting with status {} \
         (restart the gateway: file handles survive restarts)",
        gateway::supervise::EXIT_FATAL
    );
    sd.notify("STOPPING=1");
    let (tx, rx) = std::sync::mpsc::channel();
    let flusher = std::thread::spawn(move || {
        let _ = tx.send(server.shutdown());
    });
    match rx.recv_timeout(FATAL_FLUSH_LIMIT) {
        Ok(Ok(())) => {
            let _ = flusher.join();
            tracing::error!("FATAL: staged writes flushed; exiting");
        }
        Ok(Err(e)) => tracing::error!("FATAL: flushing staged writes failed: {e:#}"),
        Err(_) => tracing::error!(
            "FATAL: flushing staged writes did not finish in {FATAL_FLUSH_LIMIT:?}; exiting \
             anyway (uncommitted writes are resent by clients: the write verifier changes)"
        ),
    }
    ExitCode::from(gateway::supervise::EXIT_FATAL)
}
