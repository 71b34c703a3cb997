//! Supervision: what a panic costs.
//!
//! The policy (README "Failures and supervision"):
//!
//! - **A panic while serving one request costs at most that request's connection.**
//!   On a reactor, the call is classified inside [`request`]; a panic there is caught,
//!   logged, counted (`nfsgw_requests_panicked_total`) and the connection it came on is
//!   closed (its buffers return through the normal close path). On a worker, the
//!   procedure runs inside [`request`] too and the call is answered `SYSTEM_ERR`
//!   (RFC 5531: "system error", e.g. a memory allocation failure) — the client sees an
//!   I/O error for that one call, the connection stays up.
//! - **A thread that dies for any other reason takes the process down**: every
//!   long-lived thread runs inside [`spawn`], which turns an escaping panic (or a return
//!   before shutdown was asked for) into [`fatal`]. The main thread notices within
//!   50 ms, logs one `FATAL` line naming the thread and the reason, makes staged
//!   writes durable if it still can (bounded in time), and exits with status
//!   [`EXIT_FATAL`]. File handles survive restarts, so a supervisor (systemd's
//!   `Restart=on-failure`, `configs/nfsgw.service`) restarting the process is safe, and
//!   clients resend what was not committed (the write verifier changes).
//!
//! Shared state: the counters and the fatal slot are process-wide atomics / a
//! `OnceLock`, written on the (rare) failure paths only and read by the main loop and
//! the stats endpoint.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::JoinHandle;

/// Exit status after a fatal thread death (EX_SOFTWARE, sysexits.h).
pub const EXIT_FATAL: u8 = 70;

/// Requests whose panic was caught (each cost its call or its connection).
static REQUESTS_PANICKED: AtomicU64 = AtomicU64::new(0);
/// Why the process must stop, set once by the first fatal failure.
static FATAL: OnceLock<String> = OnceLock::new();
/// Set when a clean shutdown begins: threads returning after this are not failures.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Requests whose panic was caught since start.
pub fn requests_panicked() -> u64 {
    REQUESTS_PANICKED.load(Ordering::Relaxed)
}

/// A request's work panicked (already logged and counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Panicked;

/// Runs one request's work; a panic is caught, logged with `what`, counted, and
/// returned as `Err(Panicked)` so the caller can answer `SYSTEM_ERR` or close the
/// connection. The panic message itself was already logged by the hook.
pub fn request<T>(what: &'static str, f: impl FnOnce() -> T) -> Result<T, Panicked> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => Ok(v),
        Err(_) => {
            REQUESTS_PANICKED.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                thread = std::thread::current().name().unwrap_or("?"),
                "{what}: request panicked; it costs only its call or connection (policy: README \
                 \"Failures and supervision\")"
            );
            Err(Panicked)
        }
    }
}

/// Records a fatal failure: the process will log `reason` and exit with
/// [`EXIT_FATAL`]. Only the first reason is kept.
pub fn fatal(reason: String) {
    if FATAL.set(reason.clone()).is_err() {
        tracing::error!("FATAL (another failure is already stopping the process): {reason}");
    }
}

/// The fatal failure that stops the process, if any.
pub fn fatal_reason() -> Option<&'static str> {
    FATAL.get().map(String::as_str)
}

/// A clean shutdown has begun: supervised threads may return now.
pub fn begin_stopping() {
    STOPPING.store(true, Ordering::SeqCst);
}

/// Spawns a long-lived supervised thread (pinned to `core` when given): a panic that
/// escapes `f`, or `f` returning before [`begin_stopping`], is fatal for the process.
pub fn spawn<F: FnOnce() + Send + 'static>(
    name: String,
    core: Option<usize>,
    f: F,
) -> std::io::Result<JoinHandle<()>> {
    let who = name.clone();
    engine::reactor::spawn_pinned(name, core, move || {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(()) if STOPPING.load(Ordering::SeqCst) => {}
            Ok(()) => fatal(format!("thread {who} stopped unexpectedly")),
            Err(p) => fatal(format!("thread {who} died: panicked: {}", message(&*p))),
        }
    })
}

/// The text of a panic payload.
pub fn message(p: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = p.downcast_ref::<&str>() {
        s
    } else if let Some(s) = p.downcast_ref::<String>() {
        s
    } else {
        "(non-string panic payload)"
    }
}

/// Routes panic messages through the log (one `error` line with thread and location,
/// containing the word "panicked" so log checks find it) instead of raw stderr.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("?");
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let msg = message(info.payload());
        tracing::error!(thread = name, location = %at, "thread '{name}' panicked at {at}: {msg}");
    }));
}

/// Test-only fault injection, off unless the environment variable
/// `NFSGW_TEST_HOOKS=1` is set at start. An NFS NULL call whose XID is
/// `HOOK_XID | n` then triggers hook `n` (see [`Hook`]). Read once; a relaxed load of a
/// bool per NULL call when off.
pub mod hooks {
    use std::sync::atomic::{AtomicBool, Ordering};

    static ON: AtomicBool = AtomicBool::new(false);
    /// A reactor must panic after its current pass ([`Hook::ReactorThread`]).
    static KILL_REACTOR: AtomicBool = AtomicBool::new(false);
    /// High bits of the XIDs that trigger hooks.
    pub const HOOK_XID: u32 = 0xDEAD_0000;

    /// What a hooked NULL call does.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Hook {
        /// Panic while the reactor classifies the call (costs the connection).
        ReactorRequest = 1,
        /// Hand the call to a worker, which panics running it (answers SYSTEM_ERR).
        WorkerRequest = 2,
        /// Kill the reactor thread outside any request (the process must exit).
        ReactorThread = 3,
        /// Kill a worker thread outside any request (the process must exit).
        WorkerThread = 4,
        /// Hand the call to a worker, which takes half a second over it (a slow store:
        /// completions pile up behind it).
        WorkerSlow = 5,
    }

    /// Reads `NFSGW_TEST_HOOKS` (called once at start).
    pub fn init_from_env() {
        if std::env::var("NFSGW_TEST_HOOKS").as_deref() == Ok("1") {
            ON.store(true, Ordering::Relaxed);
            tracing::warn!("NFSGW_TEST_HOOKS=1: test fault injection is ON (never in production)");
        }
    }

    /// Asks the next reactor pass to end in a panic outside any request.
    pub fn kill_reactor_after_pass() {
        KILL_REACTOR.store(true, Ordering::Relaxed);
    }

    /// Whether a reactor must panic now (one relaxed load when hooks are off).
    #[inline]
    pub fn kill_pending() -> bool {
        ON.load(Ordering::Relaxed) && KILL_REACTOR.swap(false, Ordering::Relaxed)
    }

    /// Runs the reactor's part of the hook a NULL call asks for (a panic, or arming the
    /// thread kill); true when the call must go to a worker instead of being answered
    /// inline. One relaxed load when hooks are off.
    #[inline]
    pub fn on_reactor_null(xid: u32) -> bool {
        match of_xid(xid) {
            None => false,
            Some(Hook::ReactorRequest) => panic!("test hook: panic while classifying a call"),
            Some(Hook::ReactorThread) => {
                kill_reactor_after_pass();
                false
            }
            Some(Hook::WorkerRequest | Hook::WorkerThread | Hook::WorkerSlow) => true,
        }
    }

    /// The hook a NULL call's XID asks for, when hooks are on.
    #[inline]
    pub fn of_xid(xid: u32) -> Option<Hook> {
        if !ON.load(Ordering::Relaxed) || xid & 0xFFFF_0000 != HOOK_XID {
            return None;
        }
        match xid & 0xFFFF {
            1 => Some(Hook::ReactorRequest),
            2 => Some(Hook::WorkerRequest),
            3 => Some(Hook::ReactorThread),
            4 => Some(Hook::WorkerThread),
            5 => Some(Hook::WorkerSlow),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_catches_and_counts() {
        let before = requests_panicked();
        let r: Result<u32, Panicked> = request("test", || panic!("boom"));
        assert!(r.is_err());
        assert_eq!(request("test", || 7), Ok(7));
        assert!(requests_panicked() > before);
    }

    #[test]
    fn payload_messages() {
        let p = catch_unwind(|| panic!("static")).unwrap_err();
        assert_eq!(message(&*p), "static");
        let p = catch_unwind(|| panic!("{}", 42)).unwrap_err();
        assert_eq!(message(&*p), "42");
    }
}
