//! What the s3 backend knows about the bucket without asking it again: the objects
//! this gateway itself wrote (their user metadata), and prefixes a listing just found
//! empty. Both spare store round trips on the metadata path (docs/s3.md "Store
//! requests per NFS operation").
//!
//! Written objects: a ListObjectsV2 entry carries size, LastModified and ETag but no
//! user metadata (mode, owner, times: docs/architecture.md §7), so READDIRPLUS would
//! need a HEAD per entry. For an object this gateway PUT, it knows that metadata: a
//! listed entry with the same ETag and size and a LastModified within a second of the
//! PUT's is that object, and its attributes come from the listing. A metadata change
//! by another client is a copy onto itself, which keeps the ETag of a single-part
//! object but moves LastModified: one made within the PUT's second is not seen, as an
//! attribute cached for `ATTR_TTL` would not be. No time limit otherwise: the ETag
//! and LastModified checks are what keep it exact. Bounded (`MAX_WRITTEN`).
//!
//! Empty prefixes: a model lookup of a name that is neither file nor directory marker
//! lists `name/` to rule out a directory only other S3 tools made (no marker); an NFS
//! CREATE looks the name up and then creates it, so the same listing ran twice. An
//! empty listing of a `/`-ending prefix is kept for `ATTR_TTL`, like an absent key.
//! Every key this gateway creates passes through `changed` (via
//! `ReadAhead::invalidate`), which drops its ancestors' entries.
//!
//! Absent names: the probe of a name a CREATE expects to be new (`probe_absent` in
//! `list.rs`, one listing of prefix `name`) is kept the same way under the name
//! without its '/', and is the exclusive PUT's look on a store that ignores
//! `If-None-Match` (`put` in `mod.rs`). Each probe first forgets the note an earlier
//! one left, so `put` reads only its own request's. Changes that make a key call
//! `changed` when sent and again when answered, so no probe that overlapped one is
//! believed. Ages count from when a listing was sent.
//!
//! Bare directories: after a MKDIR the worker asks whether the new directory holds
//! anything (`Backend::dir_is_empty`, for the reactor's run of it:
//! `server::worker::learned_empty`), which a listing of `name/` would answer. The
//! probe before the marker's exclusive PUT already listed `name` and found nothing
//! under `name/`, so the directory holds its marker only — unless this gateway made a
//! key below it since, or another writer did (seen within `ATTR_TTL`, as for every
//! note here). Noted when that PUT is sent (`making_dir`) if the probe's note stands
//! (no change of this gateway at the name or below it overlapped the probe), aged
//! from the probe; the marker's own `changed` leaves it, any key below `name/` ends
//! it (`changed`, from when that key's change is sent: a create in the directory
//! racing the question is either seen by this note's absence or made after it, which
//! the caller's stamp rules cover), a failed PUT ends it (`not_made`), and it is
//! read once (`take_bare`). Bounded (`MAX_EMPTY`). After a client's LOOKUP of the
//! new name (`mkdir` on Linux looks first) the probe answers from the look-up's
//! cached answers and notes nothing; the look-up's empty listing of `name/` then
//! stands instead (the same guarantee: any change at or below `name/` drops it,
//! and `making_dir` reads it before the marker's own `changed`).

use super::super::{ObjectMeta, UserMeta};
use super::readahead::ATTR_TTL;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// Written objects remembered; past it, an arbitrary half is forgotten (each costs a
/// HEAD again at its next READDIRPLUS, nothing more).
const MAX_WRITTEN: usize = 65536;
/// Empty prefixes remembered (they expire after `ATTR_TTL` anyway).
const MAX_EMPTY: usize = 16384;
const NS: u64 = 1_000_000_000;

struct Written {
    etag: String,
    size: u64,
    /// Whole seconds of the PUT's LastModified (or its Date).
    secs: u64,
    user: UserMeta,
}

#[derive(Default)]
pub(super) struct Known {
    written: Mutex<HashMap<String, Written>>,
    empty: Mutex<HashMap<String, Prefix>>,
    /// Directories made with nothing below their marker (`making_dir`): marker key
    /// → when the probe that found nothing under it was sent. Locked after `empty`
    /// when both are held.
    bare: Mutex<HashMap<String, Instant>>,
    /// Names listings in flight (`Prefix::Listing`).
    tokens: AtomicU64,
}

/// What is known of a prefix.
enum Prefix {
    /// A listing (this token, sent at this time) is in flight; nothing was created
    /// below it since it was sent, or the entry would be gone.
    Listing(u64, Instant),
    /// Listed empty by a listing sent at this time (what it saw is at least that
    /// old: `ATTR_TTL` counts from there).
    Empty(Instant),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Known {
    /// This gateway PUT `m` (its answer's ETag and time, the metadata it sent).
    pub fn wrote(&self, m: &ObjectMeta) {
        if m.etag.is_empty() {
            return;
        }
        let mut w = lock(&self.written);
        if w.len() >= MAX_WRITTEN {
            let mut drop = true;
            w.retain(|_, _| {
                drop = !drop;
                drop
            });
        }
        w.insert(
            m.key.clone(),
            Written {
                etag: m.etag.clone(),
                size: m.size,
                secs: m.mtime_ns / NS,
                user: m.user.clone(),
            },
        );
    }

    /// Completes a listed object's metadata when it is one this gateway wrote, its
    /// time cut to whole seconds as a HEAD's Last-Modified gives it (so the
    /// attributes do not move between a listing and a HEAD). False: a HEAD is needed.
    pub fn complete(&self, o: &mut ObjectMeta) -> bool {
        let w = lock(&self.written);
        let Some(k) = w.get(&o.key) else {
            return false;
        };
        let secs = o.mtime_ns / NS;
        if k.etag != o.etag || k.size != o.size || secs.abs_diff(k.secs) > 1 {
            return false;
        }
        o.user = k.user.clone();
        o.mtime_ns = secs * NS;
        true
    }

    /// Whether `m` (a cached HEAD or PUT answer) is the object this gateway wrote.
    pub fn is_written(&self, m: &ObjectMeta) -> bool {
        lock(&self.written)
            .get(&m.key)
            .is_some_and(|k| k.etag == m.etag && k.size == m.size)
    }

    /// A listing of `prefix` (ending in '/') is about to be sent; its token goes to
    /// `note_empty`.
    pub fn listing(&self, prefix: &str) -> u64 {
        let t = self.tokens.fetch_add(1, Ordering::Relaxed);
        let mut e = lock(&self.empty);
        if e.len() >= MAX_EMPTY {
            e.retain(|_, p| matches!(p, Prefix::Empty(at) if at.elapsed() < ATTR_TTL));
            if e.len() >= MAX_EMPTY {
                e.clear();
            }
        }
        e.insert(prefix.to_string(), Prefix::Listing(t, Instant::now()));
        t
    }

    /// The listing `token` of `prefix` answered, `empty` or not. Emptiness is not
    /// noted when a key below it was created since the listing was sent (its entry
    /// is gone) or another listing of it was sent after this one (that one notes).
    pub fn listed(&self, prefix: &str, token: u64, empty: bool) {
        let mut e = lock(&self.empty);
        if let Some(p) = e.get_mut(prefix) {
            if let Prefix::Listing(t, sent) = *p {
                if t != token {
                    return;
                }
                if empty {
                    *p = Prefix::Empty(sent);
                } else {
                    e.remove(prefix);
                }
            }
        }
    }

    /// Whether `prefix` was listed empty by a listing sent within `ATTR_TTL` and
    /// nothing was created under it since.
    pub fn is_empty(&self, prefix: &str) -> bool {
        lock(&self.empty)
            .get(prefix)
            .is_some_and(|p| matches!(p, Prefix::Empty(at) if at.elapsed() < ATTR_TTL))
    }

    /// Whether nothing was at name `name` (a key without the trailing '/': no object
    /// `name`, no `name/` and nothing under it) by a probe (`listing(name)` then
    /// `listed`) sent within `ATTR_TTL`, after every change of this gateway at the
    /// name had been answered (`changed` at both ends of each).
    pub fn is_absent(&self, name: &str) -> bool {
        !name.ends_with('/') && self.is_empty(name)
    }

    /// Forgets that `name` was probed absent (a listing of it in flight stays: its
    /// answer still notes).
    pub fn forget_absent(&self, name: &str) {
        if name.ends_with('/') {
            return;
        }
        let mut e = lock(&self.empty);
        if matches!(e.get(name), Some(Prefix::Empty(_))) {
            e.remove(name);
        }
    }

    /// The exclusive PUT of the marker `dkey` (`name/`) of a new directory is about
    /// to be sent: when the name's probe found nothing at it (`is_absent`), or a
    /// listing of `dkey` found nothing under it (`is_empty`: the LOOKUP before the
    /// MKDIR, whose cached answers the probe then takes without listing), the
    /// directory will hold its marker only, as of that listing's sending (the newer
    /// of the two). Both notes are dropped by every change of this gateway at
    /// `dkey` or below it (`changed`), so both are read before this PUT's own
    /// `changed` ends them. Any earlier note of `dkey` goes either way. Under both
    /// locks, so a `changed` below `name/` that ended the listing's note is never
    /// followed by a new note it missed.
    pub fn making_dir(&self, dkey: &str) {
        let Some(name) = dkey.strip_suffix('/') else {
            return;
        };
        let e = lock(&self.empty);
        let mut b = lock(&self.bare);
        b.remove(dkey);
        let empty_at = |k: &str| match e.get(k) {
            Some(&Prefix::Empty(at)) if at.elapsed() < ATTR_TTL => Some(at),
            _ => None,
        };
        let Some(at) = empty_at(name).max(empty_at(dkey)) else {
            return;
        };
        if b.len() >= MAX_EMPTY {
            b.retain(|_, at| at.elapsed() < ATTR_TTL);
            if b.len() >= MAX_EMPTY {
                b.clear();
            }
        }
        b.insert(dkey.to_string(), at);
    }

    /// The marker's PUT failed (perhaps after landing, perhaps refused because
    /// another gateway made the directory): nothing is known of what it holds.
    pub fn not_made(&self, dkey: &str) {
        lock(&self.bare).remove(dkey);
    }

    /// Whether directory `dkey` holds nothing but its marker, as far as this gateway
    /// knows: made after a probe sent within `ATTR_TTL` that found nothing under it,
    /// and nothing made below it by this gateway since. Answered once (the question
    /// after the MKDIR); later ones are the caller's listing's.
    pub fn take_bare(&self, dkey: &str) -> bool {
        lock(&self.bare)
            .remove(dkey)
            .is_some_and(|at| at.elapsed() < ATTR_TTL)
    }

    /// This gateway changes `key` (creates, replaces, copies onto or deletes it): its
    /// written metadata is no longer known, no prefix above it is empty, neither it
    /// nor any name above it is absent, and no directory above it is bare (its own
    /// marker, `key` itself, leaves its note). Called when the change is sent and
    /// again when it is answered: a listing sent in between may or may not have seen
    /// it, so its emptiness is not believed (the entry it would note is gone).
    pub fn changed(&self, key: &str) {
        lock(&self.written).remove(key);
        {
            let mut e = lock(&self.empty);
            if !e.is_empty() {
                e.remove(key.strip_suffix('/').unwrap_or(key));
                for (i, _) in key.match_indices('/') {
                    e.remove(&key[..=i]);
                    e.remove(&key[..i]);
                }
            }
        }
        // After `empty`: a `making_dir` in between finds the probe's note gone.
        let mut b = lock(&self.bare);
        if b.is_empty() {
            return;
        }
        for (i, _) in key.match_indices('/') {
            if i + 1 < key.len() {
                b.remove(&key[..=i]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(key: &str, etag: &str, size: u64, secs: u64) -> ObjectMeta {
        ObjectMeta {
            key: key.into(),
            size,
            mtime_ns: secs * NS,
            etag: etag.into(),
            user: UserMeta::new(),
        }
    }

    #[test]
    fn a_listed_object_is_completed_only_when_it_is_the_one_written() {
        let k = Known::default();
        let mut w = obj("d/f", "e1", 5, 100);
        w.user.insert("mode".into(), "100644".into());
        k.wrote(&w);
        // Same ETag, size, second (listings carry milliseconds): completed.
        let mut l = obj("d/f", "e1", 5, 100);
        l.mtime_ns += 250_000_000;
        assert!(k.complete(&mut l));
        assert_eq!(
            (l.user.get("mode").map(String::as_str), l.mtime_ns),
            (Some("100644"), 100 * NS)
        );
        // Another ETag, size, or a time two seconds off (a metadata copy): not.
        for mut o in [
            obj("d/f", "e2", 5, 100),
            obj("d/f", "e1", 6, 100),
            obj("d/f", "e1", 5, 102),
        ] {
            assert!(!k.complete(&mut o) && o.user.is_empty());
        }
        assert!(k.is_written(&w) && !k.is_written(&obj("d/f", "e2", 5, 100)));
        k.changed("d/f");
        assert!(!k.complete(&mut obj("d/f", "e1", 5, 100)));
        // No ETag (a store that sent none): nothing to check against, not kept.
        k.wrote(&obj("d/g", "", 0, 1));
        assert!(!k.complete(&mut obj("d/g", "", 0, 1)));
    }

    #[test]
    fn a_key_created_below_an_empty_prefix_unmarks_it() {
        let k = Known::default();
        for p in ["a/b/", "a/c/"] {
            let t = k.listing(p);
            k.listed(p, t, true);
        }
        assert!(k.is_empty("a/b/") && !k.is_empty("a/"));
        k.changed("a/b/x");
        assert!(!k.is_empty("a/b/") && k.is_empty("a/c/"));
        k.changed("a/c/");
        assert!(!k.is_empty("a/c/"));
        // A listing that overlapped a creation below it is not believed, nor one
        // overtaken by a later listing; a change elsewhere does not matter.
        let t = k.listing("a/d/");
        k.changed("a/d/x");
        k.listed("a/d/", t, true);
        assert!(!k.is_empty("a/d/"));
        let (t1, t2) = (k.listing("a/d/"), k.listing("a/d/"));
        k.changed("a/e/x");
        k.listed("a/d/", t1, true);
        assert!(!k.is_empty("a/d/"));
        k.listed("a/d/", t2, true);
        assert!(k.is_empty("a/d/"));
        // A listing that found something leaves nothing behind.
        let t = k.listing("a/f/");
        k.listed("a/f/", t, false);
        assert!(!k.is_empty("a/f/") && !lock(&k.empty).contains_key("a/f/"));
    }

    /// A name probed absent (`S3Backend::probe_absent`) stops being absent when this
    /// gateway creates it, its marker, or anything below it; a probe that overlapped
    /// a change at the name (sent before the change was answered) is not believed.
    #[test]
    fn a_name_probed_absent_is_present_once_anything_is_made_at_it() {
        let k = Known::default();
        let probe = |n: &str| {
            let t = k.listing(n);
            k.listed(n, t, true);
        };
        for made in ["a/n", "a/n/", "a/n/x", "a/n/x/y"] {
            probe("a/n");
            probe("a/m");
            assert!(k.is_absent("a/n") && !k.is_absent("a/n/"));
            k.changed(made);
            assert!(!k.is_absent("a/n"), "{made}");
            assert!(k.is_absent("a/m"), "{made}: another name");
        }
        // Sent after the change was sent, answered before it was: the change's
        // answer drops it, so what it answered is not noted.
        k.changed("a/p");
        let t = k.listing("a/p");
        k.changed("a/p");
        k.listed("a/p", t, true);
        assert!(!k.is_absent("a/p"));
    }

    /// A MKDIR's marker PUT after its name's probe (`making_dir`): the directory is
    /// bare until this gateway makes anything below it; the marker's own changes
    /// (its PUT, sent and answered) leave the note; read once.
    #[test]
    fn a_directory_made_after_its_probe_is_bare_until_a_key_is_made_below_it() {
        let k = Known::default();
        let mkdir = |n: &str| {
            let t = k.listing(n);
            k.listed(n, t, true);
            let dkey = format!("{n}/");
            k.making_dir(&dkey);
            k.changed(&dkey);
            k.changed(&dkey);
        };
        mkdir("a/n");
        assert!(k.take_bare("a/n/"));
        assert!(!k.take_bare("a/n/"), "read once");
        // Anything made below it ends the note, at any depth; elsewhere, or a file
        // of the same name beside it, does not.
        for (made, bare) in [
            ("a/n/x", false),
            ("a/n/s/", false),
            ("a/n/s/y", false),
            ("a/n", true),
            ("a/m/x", true),
            ("a/nx/y", true),
            ("b/n/x", true),
        ] {
            mkdir("a/n");
            k.changed(made);
            assert_eq!(k.take_bare("a/n/"), bare, "{made}");
        }
        // Its parent is not bare any more (the marker is below it).
        mkdir("a/p");
        mkdir("a/p/q");
        assert!(k.take_bare("a/p/q/") && !k.take_bare("a/p/"));
        // A failed PUT ends it.
        mkdir("a/f");
        k.not_made("a/f/");
        assert!(!k.take_bare("a/f/"));
    }

    /// No bare note without a probe that stands when the PUT is sent (none, one
    /// overlapped by a change below the name, one too old), and none lives past
    /// `ATTR_TTL` from the probe's sending (another writer may have made a key).
    #[test]
    fn a_bare_note_needs_a_standing_probe_and_expires() {
        let k = Known::default();
        k.making_dir("a/none/");
        assert!(!k.take_bare("a/none/"), "no probe");
        let t = k.listing("a/n");
        k.listed("a/n", t, true);
        k.changed("a/n/x");
        k.making_dir("a/n/");
        assert!(!k.take_bare("a/n/"), "made below since the probe");
        let old = Instant::now() - ATTR_TTL - std::time::Duration::from_millis(1);
        lock(&k.empty).insert("a/o".into(), Prefix::Empty(old));
        k.making_dir("a/o/");
        assert!(!k.take_bare("a/o/"), "a probe older than ATTR_TTL");
        let t = k.listing("a/e");
        k.listed("a/e", t, true);
        k.making_dir("a/e/");
        assert!(lock(&k.bare).contains_key("a/e/"));
        lock(&k.bare).insert("a/e/".into(), old);
        assert!(!k.take_bare("a/e/"), "noted, then ATTR_TTL passed");
        // A second PUT of the marker without a probe forgets an earlier note.
        let t = k.listing("a/r");
        k.listed("a/r", t, true);
        k.making_dir("a/r/");
        k.changed("a/r/");
        k.making_dir("a/r/");
        assert!(!k.take_bare("a/r/"));
    }

    /// After a LOOKUP of the new name the probe answers from the cache and leaves
    /// no note of its own (`probe_absent_at_store`); the look-up's empty listing of
    /// `name/` is the MKDIR's note then, ended as the probe's by anything made at or
    /// below `name/`, and by age. Fails if `making_dir` reads the probe's note only.
    #[test]
    fn a_directory_looked_up_empty_is_bare_without_a_probe_note() {
        let k = Known::default();
        let looked = |d: &str| {
            let t = k.listing(d);
            k.listed(d, t, true);
        };
        looked("a/n/");
        assert!(!k.is_absent("a/n"), "no probe note");
        k.making_dir("a/n/");
        k.changed("a/n/");
        k.changed("a/n/");
        assert!(k.take_bare("a/n/"));
        for made in ["a/n/", "a/n/x", "a/n/s/y"] {
            looked("a/n/");
            k.changed(made);
            k.making_dir("a/n/");
            assert!(!k.take_bare("a/n/"), "{made}");
        }
        let old = Instant::now() - ATTR_TTL - std::time::Duration::from_millis(1);
        lock(&k.empty).insert("a/o/".into(), Prefix::Empty(old));
        k.making_dir("a/o/");
        assert!(!k.take_bare("a/o/"), "a listing older than ATTR_TTL");
        // Both notes: the newer one ages the directory's.
        lock(&k.empty).insert("a/b".into(), Prefix::Empty(old));
        looked("a/b/");
        k.making_dir("a/b/");
        assert!(lock(&k.bare)
            .get("a/b/")
            .is_some_and(|at| at.elapsed() < ATTR_TTL));
    }

    /// `put` calls `making_dir` before the marker's `invalidate` (its `changed`):
    /// that change ends the notes `making_dir` reads, so in the other order no MKDIR
    /// would ever be bare. Pinned here on `Known` alone; the order in `put` is the
    /// live `a_mkdir_costs_its_probe_and_its_marker`'s (a second listing).
    #[test]
    fn the_marker_change_before_making_dir_leaves_nothing_to_note() {
        let k = Known::default();
        for note in ["a/n", "a/n/"] {
            let t = k.listing(note);
            k.listed(note, t, true);
            k.changed("a/n/");
            k.making_dir("a/n/");
            assert!(!k.take_bare("a/n/"), "{note}");
            let t = k.listing(note);
            k.listed(note, t, true);
            k.making_dir("a/n/");
            k.changed("a/n/");
            assert!(k.take_bare("a/n/"), "{note}");
        }
    }

    #[test]
    fn bare_notes_stay_bounded() {
        let k = Known::default();
        for i in 0..MAX_EMPTY + 10 {
            let n = format!("d{i}");
            let t = k.listing(&n);
            k.listed(&n, t, true);
            k.making_dir(&format!("{n}/"));
        }
        assert!(lock(&k.bare).len() <= MAX_EMPTY);
    }

    #[test]
    fn written_objects_stay_bounded() {
        let k = Known::default();
        for i in 0..MAX_WRITTEN + 10 {
            k.wrote(&obj(&format!("k{i}"), "e", 1, 1));
        }
        assert!(lock(&k.written).len() <= MAX_WRITTEN);
    }
}
