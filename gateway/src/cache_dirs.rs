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
//!
//! Runs the gateway's own changes keep complete (docs/architecture.md §5,
//! docs/performance.md "Listing, fifth pass"): a MKDIR starts an empty, complete run
//! for the new directory (`start_empty`: its stamp read *before* a worker saw it
//! empty, so every later change of it moves the stamp past the run's base), and each
//! CREATE or MKDIR in a directory inserts its name into the directory's run
//! (`made`), in the listing's key order with the cookie the file model gives it
//! (`listing::entry_cookie`: the file id), and advances the stamp the run expects by
//! the create's two reports. A run answers only while the directory's stamp is what
//! it expects: every change it did not apply (a remove, a rename, a create whose fill
//! went to another reactor or was not taught, a SETATTR, a hash-slot neighbour's
//! change) leaves the count short for good, until a worker lists again. Fills of
//! concurrent creates may arrive in any order: the count only matches once every
//! bump since the base is a create whose fill was applied (`made`). Inserted entries
//! carry no attributes of their own (a created file is written after its CREATE):
//! a hit takes each shown entry's attributes from the attribute table under the
//! entry's current stamp (`lookup`'s `attrs`), as cached LOOKUPs do, and a listed
//! entry whose stamp moved since is refreshed the same way instead of missing.
//!
//! Runs past `ATTR_TTL` are revalidated, not dropped (docs/architecture.md §5,
//! docs/performance.md "Listings past the TTL"): a hit within `STALE_MAX` more, of
//! either version, is answered (its entries' attributes as old as the run, as a
//! GETATTR's past the TTL) and asks for one revalidation (`ListingHit::revalidate`:
//! a READDIRPLUS from cookie 0 on a worker — NFSv3's own call, or one made for an
//! NFSv4.1 READDIR, `dispatch::listing_revalidation` — which lists ahead, no
//! client waiting for it), whose first page, when it lists the whole directory or
//! carries the digest of all of its names (`ListedPage::names`) and they are the
//! run's, renews the run (`renew`, which keeps it NFSv4.1's); else the page replaces
//! it. Renewed entries beyond the page take their attributes from the attribute
//! table again, so nothing shown is older than cached attributes may be. Each
//! reactor keeps its own runs; every create reaches all of them
//! (`server::worker::tell_other_reactors`).
//!
//! NFSv4.1's READDIR (`nfs4::fast_dirs`) is answered from a run while NFSv4.1 may
//! show all of it (`ListingHit::v4`): every page a worker listed was NFSv4.1's
//! (`ListedPage::v4`: it checked that no entry is another export's root, RFC 8881
//! §7.7) or the run started empty; every entry a hit has shown had the model's own
//! attributes (`Fill::exact`: never a fattr3's); and, when creates inserted entries
//! (`Run::made`, whose names nothing checked against other exports' roots), the
//! server has one export. So bench md's NFSv4.1 first listing of a directory it
//! made with CREATE and filled with OPEN is the reactor's, as NFSv3's is.

use super::{FhKey, Generations, Stamp, ATTR_TTL, STALE_MAX};
use crate::export::{admit, Exports};
use crate::fs::access::{is_dot, may, R};
use crate::fs::{Attr, FileHandle, FileKind, NamesDigest, NamesSeen};
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
    /// The export table that check was made under (`Exports::gen`): a reload may
    /// add an export whose root is one of the entries, so NFSv4.1 is answered only
    /// while that table is current.
    pub exports_gen: u64,
    /// When the worker's listing began to read the directory (`DirPage::at`): a page
    /// shared from the workers' memo may be up to a second old when noted, and a run
    /// answers for `ATTR_TTL` from what it shows, not from when it was noted.
    pub at: Instant,
    /// The whole directory's names, where the file model could tell them without
    /// listing (`DirPage::names`): a run holding exactly these names is renewed
    /// (`Listings::renew`).
    pub names: Option<NamesSeen>,
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
    exports_gen: u64,
    /// `ListedPage::at`.
    at: Instant,
    /// `ListedPage::names`.
    names: Option<NamesSeen>,
    entries: Vec<(ListedEntry, Stamp)>,
}

struct Run {
    export: u16,
    /// The directory's attributes, current under `dir_at` (else the attribute
    /// table's are used, `lookup`).
    dir: Attr,
    dir_at: Stamp,
    /// The directory's stamp the entries are complete and current under: its stamp
    /// when the run started, advanced by two for each create applied (`made`).
    expect: Stamp,
    /// The directory's generation when the run started: a create whose worker read
    /// an earlier one may be in the start's listing, so it cannot be applied.
    base: u64,
    verf: [u8; 8],
    entries: Vec<(ListedEntry, Stamp)>,
    eof: bool,
    /// Every page of the run was NFSv4.1's (`ListedPage::v4`) or the run started
    /// empty (`start_empty`), and every entry shown so far had the model's own
    /// attributes (`Fill::exact`).
    v4: bool,
    /// Entries the gateway's creates inserted (`made`): no NFSv4.1 READDIR checked
    /// them against other exports' roots (RFC 8881 §7.7), so NFSv4.1 is shown them
    /// only on a server with one export (`lookup`).
    made: bool,
    /// The export table the NFSv4.1 pages' export-root check was made under
    /// (`ListedPage::exports_gen`; `None`: no page was a worker's, as a run started
    /// empty): NFSv4.1 is answered only while it is the current one (`lookup`).
    exports_gen: Option<u64>,
    /// The handle of "..", whose attributes a hit takes from the attribute table.
    parent: Option<FileHandle>,
    at: Instant,
    /// A hit past `ATTR_TTL` asked for the run's revalidation (`ListingHit::revalidate`):
    /// no other hit asks again; the page it lists renews the run or replaces it.
    revalidating: bool,
}

/// The stamp of an entry whose attributes are not known yet (a created entry, a
/// new directory's ".."): no file's stamp equals it (a generation of 2^64 - 1
/// bumps), so the first hit that shows the entry takes its attributes from the
/// attribute table (`Listings::lookup`).
const UNKNOWN: Stamp = Stamp {
    gen: u64::MAX,
    epoch: u64::MAX,
};

/// A name a CREATE or MKDIR made in a directory (`names::NameFill::made`), for the
/// directory's run (`Listings::made`).
#[derive(Debug, Clone)]
pub struct Made {
    /// The directory's stamp its worker read before the create ran.
    pub before: Stamp,
    /// The new object's attributes as its reply showed them: its kind orders the
    /// entry (a directory's key ends in '/'); the values are never shown.
    pub attr: Attr,
    /// The new object's handle, as the reply gave it.
    pub fh: FileHandle,
}

/// A directory a MKDIR just made, seen empty by a worker after it read the
/// directory's stamp (`FillData::Empty`, whose `Fill` carries the new directory's
/// handle, export, attributes and that stamp): the start of its listing, "." and
/// "..", as the file model would list it.
#[derive(Debug, Clone)]
pub struct EmptyFill {
    pub verf: [u8; 8],
    /// "." (its handle) and ".." (its file id and handle).
    pub dot: FileHandle,
    pub parent: (u64, FileHandle),
}

/// A call a run answers: the directory's attributes, the verifier, and the entries
/// after the call's cookie (`eof`: they end the directory). The caller encodes what
/// fits, then checks the entries it used (`Listings::current`).
pub struct ListingHit<'a> {
    /// The directory's attributes: current when the caller shows them (`lookup`'s
    /// `dir_shown`), else possibly older (its mode and owners current).
    pub dir: &'a Attr,
    /// At most `lookup`'s `max` entries after the cookie, each with its attributes
    /// current (or none, for a "..": unknown); `eof` only when they end the run.
    pub verf: [u8; 8],
    pub entries: &'a [(ListedEntry, Stamp)],
    pub eof: bool,
    /// NFSv4.1 may show the entries: every page NFSv4.1's or the run started empty,
    /// every entry's attributes the model's own, and no created entry that could be
    /// another export's root (`Run::made`).
    pub v4: bool,
    /// The run is past `ATTR_TTL` and this hit is the first since: the caller has a
    /// worker list the directory's first page again (NFSv3's READDIRPLUS, whichever
    /// version's call the run answered), whose
    /// fill renews the run (its names unchanged, `renew`) or replaces it
    /// (stale-while-revalidate, as cached attributes: `cache::STALE_MAX`).
    pub revalidate: bool,
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
            exports_gen: f.page.exports_gen,
            at: f.page.at,
            names: f.page.names,
            entries,
        };
        if page.cookie == 0 {
            if let Err(page) = self.renew(&fh, *dir, dir_stamp, page) {
                self.start(fh, export, *dir, dir_stamp, page);
            }
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
        let parent = entries
            .iter()
            .take(2)
            .find(|(e, _)| e.cookie == 2 && &*e.name == b"..")
            .and_then(|(e, _)| e.plus.as_ref().map(|(_, fh)| *fh));
        let run = Run {
            export,
            dir,
            dir_at: dir_stamp,
            expect: dir_stamp,
            base: dir_stamp.gen,
            verf: page.verf,
            entries,
            eof,
            v4: page.v4,
            made: false,
            exports_gen: Some(page.exports_gen),
            parent,
            at: page.at.min(Instant::now()),
            revalidating: false,
        };
        self.insert(fh, run);
    }

    /// A first page of a directory whose run is complete and current under the
    /// directory's stamp (every change through the gateway since it started was a
    /// create it applied), when the page says the whole directory's names
    /// (`ListedPage::names`), or lists the whole directory, and they are the run's:
    /// the names were proven
    /// unchanged behind the gateway's back, so the run answers on for `ATTR_TTL`
    /// from the page's listing (docs/performance.md, "the readdir cliff"). The page's
    /// entries (the run's first ones) bring their attributes and stamps; every other
    /// entry's attributes are taken from the attribute table again at the hit that
    /// shows it (`UNKNOWN`: `lookup` refreshes it there, or misses when the table
    /// holds none young enough), so nothing shown is older than `ATTR_TTL` as before.
    /// `Err(page)` (nothing changed) otherwise.
    fn renew(&mut self, fh: &FhKey, dir: Attr, dir_stamp: Stamp, page: Page) -> Result<(), Page> {
        let Some(run) = self.runs.get_mut(fh) else {
            return Err(page);
        };
        let same_start =
            page.entries.len() <= run.entries.len() && same_entries(&page.entries, &run.entries);
        if !run.eof || run.expect != dir_stamp || run.verf != page.verf || !same_start {
            return Err(page);
        }
        // A page of the whole directory is its names; else the digest of them it
        // carries must be the run's.
        let whole = page.eof && page.entries.len() == run.entries.len();
        let seen_at = match &page.names {
            _ if whole => page.at,
            Some(seen) if digest(&run.entries) == Some(seen.digest) => seen.at,
            _ => return Err(page),
        };
        let n = page.entries.len();
        for (slot, fresh) in run.entries.iter_mut().zip(page.entries) {
            *slot = fresh;
        }
        for (_, s) in &mut run.entries[n..] {
            *s = UNKNOWN;
        }
        run.dir = dir;
        run.dir_at = dir_stamp;
        // An NFSv3 page (an NFSv4.1 hit's revalidation is one,
        // `dispatch::listing_revalidation`) checked no export's root, but its
        // names are the run's: the check that let NFSv4.1 see them still holds under
        // the run's export table (`lookup` compares it with the current one), and its
        // entries' attributes are the file model's own as an NFSv4.1 page's.
        if page.v4 {
            run.v4 &= run.exports_gen.is_none_or(|g| g == page.exports_gen);
            run.exports_gen = Some(page.exports_gen);
        }
        run.at = page.at.min(seen_at).min(Instant::now());
        run.revalidating = false;
        Ok(())
    }

    fn insert(&mut self, fh: FhKey, run: Run) {
        let n = run.entries.len();
        match self.runs.insert(fh, run) {
            Some(old) => self.entries -= old.entries.len(),
            None => self.order.push_back(fh),
        }
        self.entries += n;
        self.evict();
    }

    /// The run of a directory a MKDIR just made (`EmptyFill`; `dir` its attributes,
    /// `stamp` its stamp read before a worker saw it empty): complete, "." and ".."
    /// only, as the file model lists it from cookie 0 (cookies 1 and 2). ".." shows
    /// the attribute table's attributes of the parent when current, else none.
    pub fn start_empty(&mut self, fh: FhKey, export: u16, dir: &Attr, stamp: Stamp, e: EmptyFill) {
        if dir.kind != FileKind::Dir {
            return;
        }
        let dot = ListedEntry {
            name: (*b".").into(),
            fileid: dir.fileid,
            cookie: 1,
            plus: Some((*dir, e.dot)),
        };
        let dotdot = ListedEntry {
            name: (*b"..").into(),
            fileid: e.parent.0,
            cookie: 2,
            plus: None,
        };
        let run = Run {
            export,
            dir: *dir,
            dir_at: stamp,
            expect: stamp,
            base: stamp.gen,
            verf: e.verf,
            entries: vec![(dot, stamp), (dotdot, UNKNOWN)],
            eof: true,
            // Nothing NFSv4 shows yet ("." and ".." are not shown): what the creates
            // insert decides (`made`, `lookup`).
            v4: true,
            made: false,
            exports_gen: None,
            parent: Some(e.parent.1),
            at: Instant::now(),
            revalidating: false,
        };
        self.insert(fh, run);
    }

    /// A CREATE or MKDIR made `name` in the directory with handle `fh` (module
    /// docs): its run, if any, gets the entry in key order and expects the two
    /// reports the create made on the directory's stamp. A create the run cannot
    /// account for (its worker read the directory's stamp before the run's start:
    /// the start's listing may hold the name) is left out, and so is its count: the
    /// run then never answers again. A name already in the run under another file
    /// id, or a run holding an entry of unknown kind (gone when listed: its key's
    /// place is unknown), ends the run.
    pub fn made(&mut self, fh: &FhKey, name: &[u8], m: &Made) {
        let Some(run) = self.runs.get_mut(fh) else {
            return;
        };
        if m.before.epoch != run.expect.epoch || m.before.gen < run.base {
            return;
        }
        let dir = m.attr.kind == FileKind::Dir;
        let dots = dots(&run.entries);
        let mut unknown = false;
        let found = run.entries[dots..].binary_search_by(|(e, _)| match &e.plus {
            Some((a, _)) => key_cmp(&e.name, a.kind == FileKind::Dir, name, dir),
            None => {
                unknown = true;
                std::cmp::Ordering::Less
            }
        });
        if unknown {
            self.drop_run(fh);
            return;
        }
        let fileid = m.attr.fileid;
        match found {
            Ok(i) if run.entries[dots + i].0.fileid == fileid => {}
            Ok(_) => {
                self.drop_run(fh);
                return;
            }
            // Past the end of a run that stops short of the directory's end: the
            // name is in the part a worker lists.
            Err(i) if dots + i == run.entries.len() && !run.eof => {}
            Err(i) => {
                let e = ListedEntry {
                    name: name.into(),
                    fileid,
                    // `fs::imp::listing::entry_cookie`: cookies 0-2 are taken.
                    cookie: fileid.max(3),
                    plus: Some((m.attr, m.fh)),
                };
                run.entries.insert(dots + i, (e, UNKNOWN));
                self.entries += 1;
                if run.entries.len() > RUN_MAX {
                    run.entries.truncate(RUN_MAX);
                    run.eof = false;
                    self.entries -= 1;
                }
                // Its attributes come from the attribute table at the first hit
                // that shows it, where inexact ones (a fattr3's) end NFSv4.1's
                // answers; its name was checked against no export's root.
                run.made = true;
            }
        }
        run.expect = run.expect.after_bumps(2);
        self.evict();
    }

    fn drop_run(&mut self, fh: &FhKey) {
        if let Some(old) = self.runs.remove(fh) {
            self.entries -= old.entries.len();
            self.order.retain(|k| k != fh);
        }
    }

    /// A page resuming inside the run of `fh` (same directory state and verifier):
    /// the run ends with it.
    fn extend(&mut self, fh: FhKey, dir: Attr, dir_stamp: Stamp, page: Page) {
        let Some(run) = self.runs.get_mut(&fh) else {
            return;
        };
        if run.at.elapsed() >= ATTR_TTL || run.expect != dir_stamp || run.verf != page.verf {
            return;
        }
        let Some(i) = run
            .entries
            .iter()
            .position(|(e, _)| e.cookie == page.cookie)
        else {
            return;
        };
        let n = page.entries.len();
        // A page inside a complete run, of the very entries the run holds there
        // (names, ids, cookies, and its end where the run's is): their attributes
        // are refreshed and the run stays whole (a run renewed by `renew`, whose
        // entries' attributes the table no longer holds young enough).
        let same = run.eof
            && run.entries.len() > i + n
            && page.eof == (run.entries.len() == i + 1 + n)
            && same_entries(&page.entries, &run.entries[i + 1..]);
        if same {
            for (slot, fresh) in run.entries[i + 1..].iter_mut().zip(page.entries) {
                *slot = fresh;
            }
            run.v4 &= page.v4 && run.exports_gen.is_none_or(|g| g == page.exports_gen);
            run.exports_gen = Some(page.exports_gen);
            run.dir = dir;
            run.dir_at = dir_stamp;
            run.at = run.at.min(page.at);
            return;
        }
        let before = run.entries.len();
        run.entries.truncate(i + 1);
        let room = RUN_MAX - run.entries.len();
        run.entries.extend(page.entries.into_iter().take(room));
        run.eof = page.eof && n <= room;
        run.v4 &= page.v4 && run.exports_gen.is_none_or(|g| g == page.exports_gen);
        run.exports_gen = Some(page.exports_gen);
        run.dir = dir;
        run.dir_at = dir_stamp;
        // The run shows this page's entries now: it is as old as the older of the two.
        run.at = run.at.min(page.at);
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

    /// The run of directory `req.fh` when it answers a call from `cookie` with
    /// `verf`: young, the directory's stamp the one the run expects, the caller
    /// admitted to the export and allowed to read the directory (as a worker checks
    /// it), the verifier the directory's (or zero) and the cookie the start or one
    /// of its entries. The directory's attributes and those of the (at most `max`)
    /// entries after the cookie are made current first: an entry whose stamp moved
    /// since its attributes were noted (a created entry never had any) takes the
    /// attribute table's (`attrs`: an entry's attributes by handle, when current and
    /// younger than `ATTR_TTL` — or than `ATTR_TTL + STALE_MAX` when its second
    /// argument says the run is past its TTL, answered while revalidated, as cached
    /// attributes are — with their stamp and whether they are the model's own,
    /// `Fill::exact`: others end the run's NFSv4.1 answers); the hit ends before one
    /// the table does not know, except ".." (shown without attributes, as RFC 1813
    /// §3.3.17 allows; clients take nothing from it). The hit's `v4` says whether NFSv4.1 may show it
    /// (`ListingHit::v4`; created entries only with one export in `exports`).
    /// `dir_shown`: the reply shows the directory's attributes (NFSv3's
    /// READDIRPLUS), which must then be current (`ListingHit::dir`); NFSv4.1's
    /// READDIR shows none, and its access check may read them from an older state
    /// of the run. A run past `ATTR_TTL` answers for `STALE_MAX` more, its first
    /// such hit asking for a revalidation (`ListingHit::revalidate`, which the
    /// caller starts: `revalidating`), as cached attributes do. Counts nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn lookup(
        &mut self,
        gens: &Generations,
        exports: &Exports,
        req: &super::Request,
        (cookie, verf, max): (u64, [u8; 8], usize),
        dir_shown: bool,
        attrs: impl Fn(&[u8], bool) -> Option<(Attr, Stamp, bool)>,
    ) -> Option<ListingHit<'_>> {
        let run = self.runs.get_mut(&FhKey::new(req.fh)?)?;
        let age = run.at.elapsed();
        let stale = age >= ATTR_TTL;
        if age >= ATTR_TTL + STALE_MAX || gens.stamp(run.dir.fileid) != run.expect {
            return None;
        }
        if run.dir_at != run.expect {
            match attrs(req.fh, stale) {
                Some((a, s, _))
                    if s == run.expect && a.fileid == run.dir.fileid && a.kind == FileKind::Dir =>
                {
                    (run.dir, run.dir_at) = (a, s)
                }
                // Only the access check below reads them: the mode and owners of
                // `run.dir`, current although its times are not. The stamp is the
                // one the run expects, so every change since `run.dir` was read is
                // a create the run applied (`made`), and a create changes the
                // directory's times, size and link count, never its mode or
                // owners. (Concurrent creates, bench md's QD8, leave the table no
                // current attributes of the directory: a create's post-operation
                // attributes are kept only when no other change raced with it,
                // `cache_names::EntrySeen::learned`.)
                _ if !dir_shown => {}
                _ => return None,
            }
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
        let mut to = from.saturating_add(max).min(run.entries.len());
        for i in from..to {
            let (e, s) = &mut run.entries[i];
            let now = gens.stamp(e.fileid);
            if now == *s {
                continue;
            }
            match (&*e.name, e.cookie) {
                // NFSv3 shows "." with the directory's current attributes; when an
                // NFSv4.1 hit has only older ones (`dir_shown`), "." stays as it
                // was for a later NFSv3 hit to refresh (NFSv4 shows no dots).
                (b".", 1) if run.dir_at == now => {
                    let (_, fh) = e.plus.as_ref()?;
                    e.plus = Some((run.dir, *fh));
                    *s = now;
                }
                (b".", 1) => {}
                (b"..", 2) => {
                    let fh = run.parent?;
                    e.plus = attrs(fh.as_bytes(), stale)
                        .filter(|(a, s, _)| a.fileid == e.fileid && *s == now)
                        .map(|(a, _, _)| (a, fh));
                    *s = now;
                }
                _ => {
                    // Gone when listed, changed since, or attributes this reactor
                    // does not hold young (a file another reactor's connection
                    // wrote): the hit ends before it, and a reply that needs it is
                    // a worker's. The entries before it still answer a reply that
                    // shows no more (`ListingHit::eof` is false then).
                    let fresh = e.plus.as_ref().and_then(|(_, fh)| {
                        let (a, got, exact) = attrs(fh.as_bytes(), stale)?;
                        (got == now && a.fileid == e.fileid).then_some((a, *fh, exact))
                    });
                    let Some((a, fh, exact)) = fresh else {
                        to = i;
                        break;
                    };
                    e.plus = Some((a, fh));
                    *s = now;
                    // Not the model's own (a fattr3's): NFSv4.1 is not shown them.
                    run.v4 &= exact;
                }
            }
        }
        // A created name may be another export's root (a directory made at the
        // path of a nested export, `nfs4::pseudo::export_child`), which NFSv4.1's
        // READDIR shows with that root's attributes. Which export a client crosses
        // into depends on its address, and a reload may add one: as NFSv4.1's names
        // (`nfs4::fast_names`), created entries are shown only on a server with one
        // export, judged from the table loaded for this call.
        // Pages a worker's NFSv4.1 READDIR checked hold no other export's root under
        // the table it checked with; a reload since may have added one.
        let v4 = run.v4
            && (!run.made || exports.all().len() < 2)
            && run.exports_gen.is_none_or(|g| g == exports.gen());
        Some(ListingHit {
            dir: &run.dir,
            verf: run.verf,
            entries: &run.entries[from..to],
            eof: run.eof && to == run.entries.len(),
            v4,
            revalidate: stale && !run.revalidating,
        })
    }

    /// A hit that asked for a revalidation (`ListingHit::revalidate`) was answered
    /// and its revalidation started: no other hit asks until the run is renewed or
    /// replaced (a revalidation lost on the way leaves the run answering until
    /// `STALE_MAX`, then the workers list).
    pub fn revalidating(&mut self, fh: &FhKey) {
        if let Some(run) = self.runs.get_mut(fh) {
            run.revalidating = true;
        }
    }

    /// Whether every entry of `used` is as it was listed (no change through the
    /// gateway since): a reply may show them.
    pub fn current(gens: &Generations, used: &[(ListedEntry, Stamp)]) -> bool {
        used.iter().all(|(e, s)| gens.stamp(e.fileid) == *s)
    }

    /// `current` for a reply that shows no "." or ".." (NFSv4.1's READDIR): their
    /// attributes may be older than the directory's state (`lookup`'s `dir_shown`).
    pub fn current_shown(gens: &Generations, used: &[(ListedEntry, Stamp)]) -> bool {
        used.iter()
            .all(|(e, s)| is_dot(&e.name) || gens.stamp(e.fileid) == *s)
    }

    /// Entries held (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries
    }
}

/// The digest of a run's names (`fs::NamesDigest`, as `DirPage::names` gives the
/// directory's); `None` when an entry was gone when listed (its kind, so its key, is
/// unknown).
fn digest(entries: &[(ListedEntry, Stamp)]) -> Option<u64> {
    let mut d = NamesDigest::new();
    for (e, _) in &entries[dots(entries)..] {
        let (a, _) = e.plus.as_ref()?;
        d.add(&e.name, a.kind == FileKind::Dir);
    }
    Some(d.finish())
}

/// How many of a run's first entries are "." and ".." (cookies 1 and 2): the named
/// entries, ordered by key, follow them.
fn dots(entries: &[(ListedEntry, Stamp)]) -> usize {
    entries
        .iter()
        .take(2)
        .take_while(|(e, _)| e.cookie <= 2)
        .count()
}

/// Whether `page`'s entries are the first of `run`'s, one for one: the same names,
/// file ids and cookies (their attributes and stamps may differ).
fn same_entries(page: &[(ListedEntry, Stamp)], run: &[(ListedEntry, Stamp)]) -> bool {
    page.iter()
        .zip(run)
        .all(|((a, _), (b, _))| a.cookie == b.cookie && a.fileid == b.fileid && a.name == b.name)
}

/// The order of two entries' keys in the listing (`fs::imp::listing`: the store's
/// key order, where a directory's key is its name and '/').
fn key_cmp(a: &[u8], a_dir: bool, b: &[u8], b_dir: bool) -> std::cmp::Ordering {
    let slash = |d: bool| d.then_some(&b'/').into_iter();
    a.iter()
        .chain(slash(a_dir))
        .cmp(b.iter().chain(slash(b_dir)))
}

#[cfg(test)]
#[path = "cache_dirs_tests.rs"]
mod tests;
