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

/// The nonce word of an object's text: exactly 16 lowercase hex digits, not all zero
/// (what `nonce_word` writes; `None`: malformed, e.g. "+0000000000000ab", uppercase,
/// or a nonce 0, which is written as no word).
pub(super) fn parse_nonce(w: &str) -> Option<u64> {
    let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    if w.len() != 16 || !w.bytes().all(hex) {
        return None;
    }
    u64::from_str_radix(w, 16).ok().filter(|&x| x != 0)
}

/// An epoch number word: decimal digits only (`u64::from_str` alone takes a '+').
pub(super) fn parse_n(w: &str) -> Option<u64> {
    if w.is_empty() || !w.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    w.parse().ok()
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
    let n = it.next().and_then(parse_n).ok_or_else(bad)?;
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
    /// Keep the cached value: the read answered a lower number, or the same number
    /// with another nonce, and no earlier such read is confirmed by it (`take`).
    Keep,
    /// The read's value replaces it: a move (or the same value read again).
    Replace,
    /// The read's value replaces it, and the store went back: a restore, an object
    /// rewritten (counted, logged).
    Backwards,
}

/// A read below the cached value not yet confirmed: its value, and when it returned.
pub(super) type Pending = Option<(Epoch, Instant)>;

/// `read`, by a store call begun at `asked`, against `cached`, with `pending` the
/// unconfirmed read below it (updated here). A higher number (or the same value) is
/// taken at once: numbers only move up. A lower number, or the same number with
/// another nonce, is never acted on from one read: a store replica lagging, a retry
/// on another endpoint, or a read that began before a move can answer an older value
/// once, and following it would accept ids a bump fenced. It is followed only when a
/// second read, begun strictly after the first lower read returned (a read begun at
/// that same instant proves nothing), answers the same value; until then the cached
/// value is kept (a lower number refuses both the fenced ids and the new ones: the
/// safe side; the caller reads again rather than answer from a value out of its window).
pub(super) fn take(cached: Epoch, pending: &mut Pending, read: Epoch, asked: Instant) -> Take {
    if read == cached || read.n > cached.n {
        *pending = None;
        return Take::Replace;
    }
    match *pending {
        Some((p, returned)) if p == read && asked > returned => Take::Backwards,
        // Seen once already, not confirmed by this read: the first return counts.
        Some((p, _)) if p == read => Take::Keep,
        _ => {
            *pending = Some((read, Instant::now()));
            Take::Keep
        }
    }
}

/// Whether a successful conditional write of `wrote` over `cached` went back: a
/// conditional write is on the store's current version (`backend::Cas`), so a value
/// below the cached one is proof enough (no second read needed).
pub(super) fn wrote_back(cached: Epoch, wrote: Epoch) -> bool {
    wrote != cached && wrote.n <= cached.n
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
