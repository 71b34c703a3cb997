//! Directory listings on the reactor: the entries of recently listed directories, so
//! the next READDIRPLUS page of one (RFC 1813 §3.3.17) is answered without a worker
//! round trip (docs/architecture.md §5, "Listings").
//!
//! A worker's READDIRPLUS notes the page it listed (`call::note_listing`): every entry
//! the file model gave, in key order, with its cookie, file id, attributes and handle,
//! and whether the directory ends with them. The reactor keeps, per directory handle,
//! one *run*: entries contiguous in the listing's order from its start (cookie 0), to
//! which each page that resumes inside it is appended. A call is answered from the run
//! when its cookie is the start or one of the run's entries and the run holds enough
//! entries to fill the reply, or reaches the end of the directory.
//!
//! Consistency, as for attributes (`cache.rs`): a worker snapshots
//! `Generations::changes` before it lists; the reactor keeps the page only if no file
//! changed anywhere since (the counter moves with every bump), and then records each
//! entry's stamp. A hit needs the directory's stamp and every served entry's stamp
//! unchanged — a create, remove or rename in the directory bumps the directory, a
//! write or SETATTR of an entry bumps the entry, whichever protocol made it — and the
//! run younger than `ATTR_TTL` (changes behind the gateway's back). Cookies and the
//! verifier are the file model's own, so a listing resumed on a worker goes on
//! exactly; a cookie or verifier the run does not know is a miss, and the worker
//! answers it (NFS3ERR_BAD_COOKIE when it is really bad).

use super::{FhKey, Generations, Stamp, ATTR_TTL};
use crate::export::{admit, Exports};
use crate::fs::access::{may, R};
use crate::fs::{Attr, FileHandle, FileKind};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::time::Instant;

/// Entries all of a reactor's runs hold at most (about 250 bytes each).
const MAX_ENTRIES: usize = 32_768;
/// Entries one run holds at most: a bigger directory's tail goes to the workers.
const RUN_MAX: usize = 8_192;

/// One listed entry, as the file model gave it (neutral: no protocol's bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEntry {
    pub name: Box<[u8]>,
    pub fileid: u64,
    /// The cookie that resumes the listing after this entry.
    pub cookie: u64,
    /// Attributes and handle (`None`: the file went or could not be read).
    pub plus: Option<(Attr, FileHandle)>,
}

/// A page a worker listed (`call::note_listing`): the entries after `cookie`, in the
/// listing's order.
#[derive(Debug, Clone)]
pub struct ListedPage {
    pub cookie: u64,
    pub verf: [u8; 8],
    pub entries: Vec<ListedEntry>,
    /// `entries` reach the end of the directory.
    pub eof: bool,
    /// Listed by NFSv4.1's READDIR, which checked that no entry is another export's
    /// root (RFC 8881 §7.7: its attributes would be that root's): NFSv4.1 may be
    /// answered from it (`nfs4::fast_dirs`).
    pub v4: bool,
}

/// A listed page for the reactor (`FillData::Listing`, with the directory's handle,
/// export and attributes in the `Fill`), and `Generations::changes` before the worker
/// listed it.
#[derive(Debug)]
pub struct ListingFill {
    pub changes: u64,
    pub page: ListedPage,
}

/// A worker's page with each entry's stamp.
struct Page {
    cookie: u64,
    verf: [u8; 8],
    eof: bool,
    v4: bool,
    entries: Vec<(ListedEntry, Stamp)>,
}

struct Run {
    export: u16,
    dir: Attr,
    dir_stamp: Stamp,
    verf: [u8; 8],
    entries: Vec<(ListedEntry, Stamp)>,
    eof: bool,
    /// Every page of the run was NFSv4.1's (`ListedPage::v4`).
    v4: bool,
    at: Instant,
}

/// A call a run answers: the directory's attributes, the verifier, and the entries
/// after the call's cookie (`eof`: they end the directory). The caller encodes what
/// fits, then checks the entries it used (`Listings::current`).
pub struct ListingHit<'a> {
    pub dir: &'a Attr,
    pub verf: [u8; 8],
    pub entries: &'a [(ListedEntry, Stamp)],
    pub eof: bool,
    /// NFSv4.1 may show the entries (`ListedPage::v4`).
    pub v4: bool,
}

/// One reactor's runs, bounded in entries (oldest run evicted first).
#[derive(Default)]
pub struct Listings {
    runs: HashMap<FhKey, Run>,
    order: VecDeque<FhKey>,
    entries: usize,
}

impl Listings {
    /// Keeps what a worker listed, if nothing changed since it began (module docs).
    pub fn fill(&mut self, gens: &Generations, fh: FhKey, export: u16, dir: &Attr, f: ListingFill) {
        if dir.kind != FileKind::Dir {
            return;
        }
        // Stamps first, then the counter: a bump that completed after the worker
        // began moved the counter before the stamp we read (`Generations::bump_file`).
        let dir_stamp = gens.stamp(dir.fileid);
        let entries: Vec<(ListedEntry, Stamp)> = f
            .page
            .entries
            .into_iter()
            .map(|e| {
                let s = gens.stamp(e.fileid);
                (e, s)
            })
            .collect();
        if gens.changes() != f.changes {
            return;
        }
        let page = Page {
            cookie: f.page.cookie,
            verf: f.page.verf,
            eof: f.page.eof,
            v4: f.page.v4,
            entries,
        };
        if page.cookie == 0 {
            self.start(fh, export, *dir, dir_stamp, page);
        } else {
            self.extend(fh, *dir, dir_stamp, page);
        }
    }

    /// A listing from its start: a new run.
    fn start(&mut self, fh: FhKey, export: u16, dir: Attr, dir_stamp: Stamp, page: Page) {
        let mut entries = page.entries;
        let eof = page.eof && entries.len() <= RUN_MAX;
        entries.truncate(RUN_MAX);
        entries.shrink_to_fit();
        let run = Run {
            export,
            dir,
            dir_stamp,
            verf: page.verf,
            entries,
            eof,
            v4: page.v4,
            at: Instant::now(),
        };
        let n = run.entries.len();
        match self.runs.insert(fh, run) {
            Some(old) => self.entries -= old.entries.len(),
            None => self.order.push_back(fh),
        }
        self.entries += n;
        self.evict();
    }

    /// A page resuming inside the run of `fh` (same directory state and verifier):
    /// the run ends with it.
    fn extend(&mut self, fh: FhKey, dir: Attr, dir_stamp: Stamp, page: Page) {
        let Some(run) = self.runs.get_mut(&fh) else {
            return;
        };
        if run.at.elapsed() >= ATTR_TTL || run.dir_stamp != dir_stamp || run.verf != page.verf {
            return;
        }
        let Some(i) = run
            .entries
            .iter()
            .position(|(e, _)| e.cookie == page.cookie)
        else {
            return;
        };
        let before = run.entries.len();
        run.entries.truncate(i + 1);
        let room = RUN_MAX - run.entries.len();
        let n = page.entries.len();
        run.entries.extend(page.entries.into_iter().take(room));
        run.eof = page.eof && n <= room;
        run.v4 &= page.v4;
        run.dir = dir;
        let after = run.entries.len();
        self.entries = self.entries + after - before;
        self.evict();
    }

    /// Oldest runs go first past `MAX_ENTRIES`.
    fn evict(&mut self) {
        while self.entries > MAX_ENTRIES {
            let Some(fh) = self.order.pop_front() else {
                return;
            };
            if let Some(old) = self.runs.remove(&fh) {
                self.entries -= old.entries.len();
            }
        }
    }

    /// The run of directory `fh` when it answers a call from `cookie` with `verf`:
    /// young, the directory unchanged, the caller admitted to the export and allowed
    /// to read the directory (as a worker checks it), the verifier the directory's
    /// (or zero) and the cookie the start or one of its entries. Counts nothing.
    pub fn lookup(
        &self,
        gens: &Generations,
        exports: &Exports,
        req: &super::Request,
        cookie: u64,
        verf: [u8; 8],
    ) -> Option<ListingHit<'_>> {
        let run = self.runs.get(&FhKey::new(req.fh)?)?;
        if run.at.elapsed() >= ATTR_TTL || gens.stamp(run.dir.fileid) != run.dir_stamp {
            return None;
        }
        let export = exports.get(run.export)?;
        let caller = admit(export, req.client, req.cred).ok()?;
        if !may(&run.dir, &caller, R) {
            return None;
        }
        // A verifier other than the directory's is the worker's to refuse.
        if cookie != 0 && verf != [0; 8] && verf != run.verf {
            return None;
        }
        let from = match cookie {
            0 => 0,
            c => run.entries.iter().position(|(e, _)| e.cookie == c)? + 1,
        };
        Some(ListingHit {
            dir: &run.dir,
            verf: run.verf,
            entries: &run.entries[from..],
            eof: run.eof,
            v4: run.v4,
        })
    }

    /// Whether every entry of `used` is as it was listed (no change through the
    /// gateway since): a reply may show them.
    pub fn current(gens: &Generations, used: &[(ListedEntry, Stamp)]) -> bool {
        used.iter().all(|(e, s)| gens.stamp(e.fileid) == *s)
    }

    /// Entries held (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries
    }
}

#[cfg(test)]
#[path = "cache_dirs_tests.rs"]
mod tests;
