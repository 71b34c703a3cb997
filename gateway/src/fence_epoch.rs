//! A fence epoch's value (issue 27): its number and the random nonce written with each
//! move, and what a data server makes of a value that went back.
//!
//! The numbers of a file's epoch and of the boot epoch only move up, by conditional
//! writes; but a store restored from a backup, or an object rewritten to an older
//! text, puts a number back, and the next moves would then give numbers an earlier
//! run already gave, so ids that run handed out (and fenced) would be accepted again.
//! Each move therefore also writes a fresh random nonce (64 bits, never 0), and the
//! ids hash it with the number: a value a move writes is new for all time (with
//! probability 1 - 2^-64 per move), whatever the store went through. Objects written
//! before nonces read as nonce 0, whose ids are the earlier builds' (`Fence::ids_at`).
//!
//! Only a move makes a fresh value: a restored object's own value is one an earlier
//! run had, and its ids are accepted until the next move (of the file's epoch, or of
//! the boot epoch at the next metadata server start: README "Fencing").

use crate::backend::BackendError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An epoch as the store has it: `n` orders moves, `nonce` makes each move's value
/// unique (0: an object of before nonces).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Epoch {
    pub n: u64,
    pub nonce: u64,
}

impl Epoch {
    /// The value a move writes over `self`: the next number, a fresh nonce.
    pub(super) fn next(self) -> Result<Epoch, BackendError> {
        let n = self.n.checked_add(1).ok_or(BackendError::TooLarge)?;
        Ok(Epoch { n, nonce: nonce() })
    }
}

/// A random nonce, never 0 (0 names the objects of before nonces).
fn nonce() -> u64 {
    loop {
        let x: u64 = rand::random();
        if x != 0 {
            return x;
        }
    }
}

/// The nonce word of an object's text: 16 hex digits (`None`: malformed).
pub(super) fn parse_nonce(w: &str) -> Option<u64> {
    (w.len() == 16)
        .then(|| u64::from_str_radix(w, 16).ok())
        .flatten()
}

/// The nonce word written with `e` (none for nonce 0: the old text, which builds of
/// before nonces still read).
pub(super) fn nonce_word(e: Epoch) -> String {
    if e.nonce == 0 {
        String::new()
    } else {
        format!(" {:016x}", e.nonce)
    }
}

/// A file epoch object's value: `"<n>"` (before nonces: nonce 0) or `"<n> <nonce>"`.
pub(super) fn parse_file(data: &[u8]) -> Result<Epoch, BackendError> {
    let bad = || BackendError::Permanent("pnfs fence epoch: not \"<n> [<nonce>]\"".into());
    let s = std::str::from_utf8(data).map_err(|_| bad())?;
    let mut it = s.split_whitespace();
    let n = it.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
    let nonce = match it.next() {
        None => 0,
        Some(w) => parse_nonce(w).ok_or_else(bad)?,
    };
    if it.next().is_some() {
        return Err(bad());
    }
    Ok(Epoch { n, nonce })
}

/// A file epoch object's text.
pub(super) fn file_text(e: Epoch) -> String {
    format!("{}{}", e.n, nonce_word(e))
}

/// What a read of an epoch makes of the value cached before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Take {
    /// Keep the cached value: the read began before that value was seen (a slow read
    /// answering after a move) and the cached value is still trusted.
    Keep,
    /// The read's value replaces it: a move (or the same value read again).
    Replace,
    /// The read's value replaces it, and the store went back: a number below the
    /// cached one, or the same number with another nonce, read by a call that began
    /// after the cached value was seen (a restore, an object rewritten).
    Backwards,
}

/// `read`, asked at `asked`, against `cached`, seen current at `done` and still
/// trusted when `fresh`.
pub(super) fn take(cached: Epoch, done: Instant, fresh: bool, read: Epoch, asked: Instant) -> Take {
    if read == cached || read.n > cached.n {
        Take::Replace
    } else if asked < done {
        // A slow read: not proof the store went back; taken only once the cached
        // value is no longer trusted anyway (it is itself trusted from `asked`).
        if fresh {
            Take::Keep
        } else {
            Take::Replace
        }
    } else {
        Take::Backwards
    }
}

/// Epoch values seen going back at this gateway, and when that was last logged.
#[derive(Default)]
pub(super) struct Backwards {
    count: AtomicU64,
    logged: Mutex<Option<Instant>>,
}

/// At most one log line of epochs gone back per this long.
const BACKWARDS_LOG_EVERY: Duration = Duration::from_secs(60);

impl Backwards {
    /// Epoch values seen going back (`nfsgw_pnfs_fence_epoch_backwards_total`).
    pub(super) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Counts a value that went back (`what`: "boot" or "file"), logged at most once
    /// per `BACKWARDS_LOG_EVERY`.
    pub(super) fn saw(&self, what: &'static str, fileid: u64, from: Epoch, to: Epoch) {
        let total = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let mut last = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|t| t.elapsed() >= BACKWARDS_LOG_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(
                what,
                fileid,
                from = from.n,
                to = to.n,
                backwards_total = total,
                "pNFS fence: an epoch in the store went back (restored from a backup, or its object rewritten): ids handed out at the restored value are accepted again until the epoch next moves; restart the metadata server to move the boot epoch (README \"Fencing\"); logged at most every 60 s"
            );
        }
    }
}
