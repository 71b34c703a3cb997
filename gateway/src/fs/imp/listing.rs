//! Directory listings, streamed a page at a time: NFSv3 READDIR and READDIRPLUS
//! (RFC 1813 §3.3.16, §3.3.17) and NFSv4.1 READDIR (RFC 8881 §18.23).
//!
//! Order: a directory lists in its keys' order as the backend lists them (`list`
//! with the '/' delimiter: a file "d/name", a subdirectory "d/name/"), "." and ".."
//! first. Nothing is materialised: every call lists one page from the backend with
//! `start_after` = the key of the entry the cookie names, so memory is one page plus
//! the bounded cursor table below, whatever the directory's size.
//!
//! Cookies: "." = 1, ".." = 2 (NFSv4.1 never sees these two, `nfs4::dir_ops`), an
//! entry's cookie = its file id (the id the handle table gives its key, never 0 or 1;
//! one of 2 is answered as 3, [`entry_cookie`]). A cookie names the entry the listing
//! resumes *after*; its key comes from
//! - the cursor table ([`Cursors`]): the (cookie, name) pairs of the pages handed out
//!   recently, per directory, bounded in bytes ([`CURSOR_BYTES`]) — any entry of a
//!   page resumes, so a client that kept only part of a reply goes on from there;
//! - failing that, the handle table: the key of any id someone got a handle for
//!   (every READDIRPLUS entry, every LOOKUP), if it is an entry of this directory.
//!
//! A cookie neither resolves is `BadCookie` (NFS3ERR_BAD_COOKIE, NFS4ERR_NOT_SAME):
//! the only case where the server truly cannot resume. Because keys are totally
//! ordered and each page starts strictly after the last key handed out, a name
//! present for a whole listing is returned exactly once and none twice, whatever is
//! created or removed meanwhile (a name created behind the resume point is not
//! returned, one created ahead of it is). The cookie verifier therefore does not move
//! with changes: it is fixed per directory (a keyed hash of its id,
//! `Inner::cookie_verf`), and a resumed listing whose verifier is neither it nor zero
//! is refused as a cookie this server never issued for the directory.
//!
//! READDIRPLUS ([`Inner::readdir_plus`]) takes each entry's attributes from the same
//! listing on stores whose listings carry full metadata (`list_meta_complete`: `fs`,
//! `memory`), so a page costs one backend listing; elsewhere (S3) it warms the
//! page's HEADs concurrently (`Backend::warm`) and reads them.

use super::*;
use std::sync::{Arc, Condvar};
use std::time::{Duration, Instant};

/// Bytes the cursor table holds at most (all directories together), counted as
/// allocated: about 25 bytes per entry of 13-byte names, so some 160,000 entries.
pub(super) const CURSOR_BYTES: usize = 4 << 20;
/// Pages the cursor table keeps.
const CURSOR_PAGES: usize = 4096;

/// Entries a READDIRPLUS-class page lists at least (`Inner::plus_count`): a
/// directory of 1,000 files (mdtest's trees) in one worker page, about five 32 KiB
/// NFSv3 replies of short names. Each listed entry costs a metadata read
/// (`backend/fs/list.rs` `listed_head`: an `fstatat` on `fs`, and the xattrs of a file
/// written less than 50 ms before it was last read), which the pages after would
/// have paid anyway; but one worker pays them in a row, so the first page waits for
/// all of them: no more than NFSv4.1's READDIR already listed per page (`maxcount /
/// 32`, 1,024), so the slowest page is no slower than it was.
pub const LIST_AHEAD: usize = 1024;

/// The cookie of an entry with file id `id`: cookies 0, 1 and 2 are taken (start,
/// ".", "..").
pub(super) fn entry_cookie(id: u64) -> u64 {
    id.max(3)
}

/// Recently handed-out pages: (directory id, [(cookie, name)]). Shared by the
/// workers; the lock is held for in-memory work only.
#[derive(Default)]
pub(super) struct Cursors {
    state: Mutex<CursorState>,
    made: Mutex<MadeCursors>,
}

/// Entries this gateway created (CREATE, MKDIR, OPEN-create …) since its last
/// [`MADE_CURSORS`] creates: a reactor may list them from a run the creates kept
/// (`cache::dirs` `Listings::made`) before any worker page recorded their cookies, and
/// a client that removes such an entry and then resumes after its cookie (what `rm
/// -rf` does page by page) must still resume: the handle table forgets a removed
/// file's id, so without this the next page is NFS3ERR_BAD_COOKIE.
#[derive(Default)]
struct MadeCursors {
    order: VecDeque<(u64, u64)>,
    names: std::collections::HashMap<(u64, u64), Box<str>>,
}

/// Created entries remembered for resuming (about 80 bytes each, 5 MiB at most): more than the runs
/// of one second of creates can list (`cache::dirs` keeps 32,768 entries per reactor,
/// answered for `ATTR_TTL`).
const MADE_CURSORS: usize = 65_536;

#[derive(Default)]
struct CursorState {
    pages: VecDeque<CursorPage>,
    bytes: usize,
}

/// One page in three allocations whatever its length: a page held for minutes among
/// pages freed at once would otherwise pin one small block per entry, and the
/// allocator's arenas would keep the holes between them (RSS that grows with the
/// directories listed, docs/performance.md "Big directories and trees").
struct CursorPage {
    dir: u64,
    /// The entries' cookies, in page order.
    cookies: Box<[u64]>,
    /// Where each entry's name ends in `names`.
    ends: Box<[u32]>,
    /// The entries' names (keys without the directory's key), back to back: a
    /// directory renamed since still resumes, under its new key.
    names: Box<str>,
}

impl CursorPage {
    /// Heap and bookkeeping bytes, as the table counts them.
    fn bytes(&self) -> usize {
        const BLOCK: usize = 16; // an allocator's per-block overhead, about
        std::mem::size_of::<CursorPage>()
            + self.cookies.len() * 8
            + self.ends.len() * 4
            + self.names.len()
            + 3 * BLOCK
    }

    fn name(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.names[start..self.ends[i] as usize]
    }
}

impl Cursors {
    /// Remembers a page handed out for directory `dir`: each entry's cookie and
    /// name (its key without the directory's key). The oldest pages go first past
    /// [`CURSOR_BYTES`] or [`CURSOR_PAGES`].
    pub(super) fn remember<'a>(&self, dir: u64, entries: impl Iterator<Item = (u64, &'a str)>) {
        let mut cookies = Vec::new();
        let mut ends = Vec::new();
        let mut names = String::new();
        for (c, name) in entries {
            let Ok(end) = u32::try_from(names.len() + name.len()) else {
                break; // past 4 GiB of names: the rest resolves through the handle table
            };
            cookies.push(c);
            names.push_str(name);
            ends.push(end);
        }
        if cookies.is_empty() {
            return;
        }
        let page = CursorPage {
            dir,
            cookies: cookies.into_boxed_slice(),
            ends: ends.into_boxed_slice(),
            names: names.into_boxed_str(),
        };
        let bytes = page.bytes();
        let mut s = lock(&self.state);
        while !s.pages.is_empty()
            && (s.bytes + bytes > CURSOR_BYTES || s.pages.len() >= CURSOR_PAGES)
        {
            if let Some(p) = s.pages.pop_front() {
                s.bytes -= p.bytes();
            }
        }
        s.bytes += bytes;
        s.pages.push_back(page);
    }

    /// The name of the entry `cookie` names in directory `dir`, newest page first,
    /// then the entries created here (`MadeCursors`).
    pub(super) fn resolve(&self, dir: u64, cookie: u64) -> Option<String> {
        let s = lock(&self.state);
        let paged = s.pages.iter().rev().filter(|p| p.dir == dir).find_map(|p| {
            let i = p.cookies.iter().position(|c| *c == cookie)?;
            Some(p.name(i).to_string())
        });
        drop(s);
        paged.or_else(|| {
            lock(&self.made)
                .names
                .get(&(dir, cookie))
                .map(|n| n.to_string())
        })
    }

    /// Remembers an entry created in directory `dir` (its cookie and its key without
    /// the directory's key), the oldest going first past [`MADE_CURSORS`].
    pub(super) fn made(&self, dir: u64, cookie: u64, name: &str) {
        let mut m = lock(&self.made);
        if m.names.insert((dir, cookie), name.into()).is_none() {
            m.order.push_back((dir, cookie));
        }
        while m.order.len() > MADE_CURSORS {
            if let Some(k) = m.order.pop_front() {
                m.names.remove(&k);
            }
        }
    }

    /// Bytes held (tests).
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        lock(&self.state).bytes
    }
}

/// How long a READDIRPLUS page is reused (`PageMemo`): what changes behind the
/// gateway's back is seen after it, as with the reactors' attributes
/// (`cache::ATTR_TTL`).
const MEMO_TTL: Duration = Duration::from_secs(1);
/// Pages the memo keeps before it drops the ones no longer reusable.
const MEMO_PAGES: usize = 256;

/// (export, directory id, cookie, entries asked for).
type MemoKey = (u16, u64, u64, usize);

/// READDIRPLUS pages listed recently, reused by identical calls: clients listing one
/// directory together (a shared directory, `ls -l` on several clients) ask for the
/// same pages at about the same time, and each would otherwise read the directory and
/// every entry's metadata again. A page is reused only while no change was made
/// through the gateway since its listing began (`observe::Observer::changes`, which
/// moves with every change the caches hear of) and for [`MEMO_TTL`]; a call arriving
/// while the page is being listed waits for it rather than listing it again. Shared
/// by the workers; the lock is held for map work only, never while listing.
#[derive(Default)]
pub(super) struct PageMemo {
    slots: Mutex<HashMap<MemoKey, Arc<MemoSlot>>>,
}

/// A listed page as the memo and every call that waited for it share it: one
/// reference count, not a copy of every entry's name, key and attributes per call
/// (docs/performance.md "Cold listings, shared": eight identical calls at once each
/// copied the page).
type SharedPage = FsResult<Arc<PlusPage>>;

struct MemoSlot {
    /// `Observer::changes` before the listing began.
    changes: u64,
    at: Instant,
    page: Mutex<Option<SharedPage>>,
    ready: Condvar,
}

impl MemoSlot {
    fn reusable(&self, changes: u64) -> bool {
        self.changes == changes && self.at.elapsed() < MEMO_TTL
    }

    fn wait(&self) -> SharedPage {
        let mut g = lock(&self.page);
        loop {
            if let Some(p) = g.as_ref() {
                return p.clone();
            }
            g = self.ready.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn set(&self, p: &SharedPage) {
        *lock(&self.page) = Some(p.clone());
        self.ready.notify_all();
    }
}

impl PageMemo {
    /// The page for `key` when one listed since `changes` is reusable (waiting for
    /// it if it is being listed); else `Err` with the slot this call now lists into.
    fn get_or_claim(&self, key: MemoKey, changes: u64) -> Result<SharedPage, Claim<'_>> {
        let slot = {
            let mut m = lock(&self.slots);
            match m.get(&key) {
                Some(s) if s.reusable(changes) => s.clone(),
                _ => {
                    if m.len() >= MEMO_PAGES {
                        m.retain(|_, s| s.reusable(changes));
                    }
                    let s = Arc::new(MemoSlot {
                        changes,
                        at: Instant::now(),
                        page: Mutex::new(None),
                        ready: Condvar::new(),
                    });
                    m.insert(key, s.clone());
                    return Err(Claim {
                        memo: self,
                        key,
                        slot: Some(s),
                    });
                }
            }
        };
        Ok(slot.wait())
    }
}

/// A page this call lists for the memo: set when listed, or (dropped unset, a panic)
/// removed so waiting calls list it themselves.
struct Claim<'a> {
    memo: &'a PageMemo,
    key: MemoKey,
    slot: Option<Arc<MemoSlot>>,
}

impl Claim<'_> {
    fn set(mut self, p: &SharedPage) {
        if let Some(s) = self.slot.take() {
            s.set(p);
        }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.slot.take() {
            let mut m = lock(&self.memo.slots);
            if m.get(&self.key).is_some_and(|x| Arc::ptr_eq(x, &s)) {
                m.remove(&self.key);
            }
            drop(m);
            // Waiting calls get an error they answer as a server fault rather than
            // waiting for ever.
            s.set(&Err(Status::ServerFault));
        }
    }
}

/// One entry of a page, in key order.
pub(super) struct Listed {
    /// "dir/name" for a file, "dir/name/" for a directory.
    pub(super) key: String,
    pub(super) fileid: u64,
    /// Its metadata as `head` reads it, when the listing carried it.
    pub(super) meta: Option<ObjectMeta>,
    /// For a name of a linked file, its inode's key and file id (`links`): what the
    /// entry shows.
    pub(super) inode: Option<(String, u64)>,
}

/// A page: how many of "." and ".." lead it, then entries.
pub(super) struct Paged {
    /// Cookie of the first dot entry shown (0: both, 1: only "..", 2: none).
    first_dot: u64,
    dots: usize,
    entries: Vec<Listed>,
    eof: bool,
}

/// The name of the entry with key `key` in the directory with key length `plen`.
fn name_of(key: &str, plen: usize) -> &str {
    let n = &key[plen..];
    n.strip_suffix('/').unwrap_or(n)
}

impl Inner {
    /// The key to resume after for `cookie` (> 2) in `dir` (module docs).
    fn resume_key(&self, dir: &Node, cookie: u64) -> Option<String> {
        if let Some(name) = self.cursors.resolve(dir.fileid, cookie) {
            return Some(format!("{}{name}", dir.key));
        }
        let (key, _) = self.table.get(cookie)?;
        let name = key.strip_prefix(dir.key.as_str())?;
        let body = name.strip_suffix('/').unwrap_or(name);
        (!body.is_empty() && !body.contains('/')).then_some(key)
    }

    /// Up to `max` entries of `dir` after key `after`, and whether the directory ends
    /// with them.
    fn list_page(
        &self,
        dir: &Node,
        after: Option<String>,
        max: usize,
    ) -> FsResult<(Vec<Listed>, bool)> {
        let plen = dir.key.len();
        let gone = self.gone.under(&dir.key);
        let full = self.backend.list_meta_complete();
        let mut out: Vec<Listed> = Vec::new();
        let mut after = after;
        loop {
            let want = max - out.len();
            let page = self
                .backend
                .list(&dir.key, Some('/'), after.as_deref(), want)
                .map_err(|e| self.nerr(e, &dir.key))?;
            let mut items: Vec<(String, Option<ObjectMeta>)> = page
                .objects
                .into_iter()
                .map(|o| (o.key.clone(), Some(o)))
                .chain(page.prefixes.into_iter().map(|p| (p, None)))
                .collect();
            items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            let first = out.len();
            for (k, meta) in items {
                let is_prefix = meta.is_none();
                if k.len() <= plen || !k.starts_with(dir.key.as_str()) {
                    continue;
                }
                let name = name_of(&k, plen);
                if name.is_empty()
                    || name.contains('/')
                    || name.len() > 255
                    || name.starts_with(orphans::ORPHAN_PREFIX)
                    || name.starts_with(links::INODE_PREFIX)
                {
                    continue;
                }
                // A file and a directory of one name (S3 written by other tools):
                // the file is shown, as LOOKUP finds it first.
                let file_key = &k[..k.len() - 1];
                if is_prefix
                    && out[first..]
                        .binary_search_by(|l| l.key.as_str().cmp(file_key))
                        .is_ok()
                {
                    continue;
                }
                if gone.contains(&k) && !self.listed_still_there(&k, is_prefix)? {
                    // Removed here, still listed by a lagging replica (`gone`).
                    continue;
                }
                let inode = meta.as_ref().and_then(links::link_target);
                let inode = inode.map(|i| (i.to_string(), 0));
                out.push(Listed {
                    key: k,
                    fileid: 0,
                    meta: if full { meta } else { None },
                    inode,
                });
            }
            match page.next {
                Some(n) if out.len() < max => after = Some(n),
                Some(_) => break,
                None => return Ok((out, true)),
            }
        }
        Ok((out, false))
    }

    /// The entries' file ids. READDIR shows the id a key would get without
    /// recording it (`ids_for_listing`: listing a large directory does not grow the
    /// handle table); READDIRPLUS hands out handles, so it records them (`assign`),
    /// and the next listing finds them in the table's cache.
    fn fill_ids(&self, out: &mut [Listed], record: bool) {
        for (ikey, id) in out.iter_mut().filter_map(|l| l.inode.as_mut()) {
            *id = self.file_id(ikey);
        }
        if record {
            for l in out.iter_mut() {
                l.fileid = self.table.assign(&l.key).0;
            }
            return;
        }
        let ids = self
            .table
            .ids_for_listing(out.iter().map(|l| l.key.as_str()));
        for (l, id) in out.iter_mut().zip(ids) {
            l.fileid = id;
        }
    }

    /// The page of `dir` that follows `cookie`: at most `max` entries (`record`: see
    /// `fill_ids`).
    fn paged(&self, dir: &Node, cookie: u64, max: usize, record: bool) -> FsResult<Paged> {
        self.dir_of(dir)?;
        let max = max.max(1);
        let (first_dot, after) = match cookie {
            0..=2 => (cookie, None),
            c => (2, Some(self.resume_key(dir, c).ok_or(Status::BadCookie)?)),
        };
        let dots = ((2 - first_dot) as usize).min(max);
        if dots == max {
            return Ok(Paged {
                first_dot,
                dots,
                entries: Vec::new(),
                eof: false,
            });
        }
        let (mut entries, eof) = self.list_page(dir, after, max - dots)?;
        self.fill_ids(&mut entries, record);
        let plen = dir.key.len();
        self.cursors.remember(
            dir.fileid,
            entries
                .iter()
                .map(|l| (entry_cookie(l.fileid), &l.key[plen..])),
        );
        Ok(Paged {
            first_dot,
            dots,
            entries,
            eof,
        })
    }

    /// The nodes of "." and ".." a page shows.
    fn dot_nodes(&self, dir: &Node, p: &Paged) -> Vec<(&'static [u8], Node)> {
        let mut v = Vec::new();
        for c in p.first_dot..p.first_dot + p.dots as u64 {
            if c == 0 {
                v.push((&b"."[..], dir.clone()));
            } else {
                let parent = self.parent_key(dir.export, &dir.key);
                v.push((&b".."[..], self.node(dir.export, &parent)));
            }
        }
        v
    }

    /// `at`: when the listing began to read the directory (`DirPage::at`).
    fn dir_page(
        &self,
        dir: &Node,
        p: &Paged,
        dots: &[(&'static [u8], Node)],
        at: Instant,
    ) -> DirPage {
        let plen = dir.key.len();
        let mut entries = Vec::with_capacity(dots.len() + p.entries.len());
        for (i, (name, n)) in dots.iter().enumerate() {
            entries.push(DirEntry {
                name: name.to_vec(),
                fileid: n.fileid,
                cookie: p.first_dot + i as u64 + 1,
            });
        }
        for l in &p.entries {
            entries.push(DirEntry {
                name: name_of(&l.key, plen).as_bytes().to_vec(),
                fileid: l.inode.as_ref().map_or(l.fileid, |i| i.1),
                cookie: entry_cookie(l.fileid),
            });
        }
        DirPage {
            verf: self.cookie_verf(dir.fileid),
            entries,
            eof: p.eof,
            at,
            names: None,
        }
    }

    pub fn readdir(&self, dir: &Node, cookie: u64, verf: [u8; 8], max: usize) -> FsResult<DirPage> {
        self.check_cookie_verf(dir.fileid, cookie, verf)?;
        let at = Instant::now();
        let p = self.paged(dir, cookie, max, false)?;
        let dots = self.dot_nodes(dir, &p);
        Ok(self.dir_page(dir, &p, &dots, at))
    }

    /// See `FileModel::empty_start`: `holds_nothing` (where the store cannot tell in
    /// one look, a listing of at most one entry; a name the listing hides, an orphan
    /// or an inode, is skipped as `list_page` skips it).
    pub fn empty_start(&self, dir: &Node) -> FsResult<Option<([u8; 8], Node)>> {
        self.dir_of(dir)?;
        if !self.holds_nothing(dir)? {
            return Ok(None);
        }
        let parent = self.parent_key(dir.export, &dir.key);
        Ok(Some((
            self.cookie_verf(dir.fileid),
            self.node(dir.export, &parent),
        )))
    }

    /// Whether `dir` lists no entry: the store's one look at the directory where it
    /// can tell (`Backend::dir_is_empty`, which says "empty" only of a directory that
    /// holds nothing at all, so never of one whose listing would show an entry), else
    /// a page of one entry. After every MKDIR (`empty_start`), so on `fs` one walk to
    /// the directory and one readdir: no read of its xattrs, no look at the removed
    /// keys.
    fn holds_nothing(&self, dir: &Node) -> FsResult<bool> {
        match self.backend.dir_is_empty(&dir.key) {
            Some(r) => r.map_err(|e| self.nerr(e, &dir.key)),
            None => {
                let (entries, eof) = self.list_page(dir, None, 1)?;
                Ok(entries.is_empty() && eof)
            }
        }
    }

    /// A READDIR page with each entry's node and attributes (`None`: gone since it
    /// was listed, or unreadable), in one listing where the store allows (module
    /// docs).
    pub fn readdir_plus(
        &self,
        dir: &Node,
        cookie: u64,
        verf: [u8; 8],
        max: usize,
    ) -> FsResult<Arc<PlusPage>> {
        self.check_cookie_verf(dir.fileid, cookie, verf)?;
        let key = (dir.export, dir.fileid, cookie, max);
        match self.memo.get_or_claim(key, self.observer.changes()) {
            Ok(page) => page,
            Err(claim) => {
                let page = self.list_plus(dir, cookie, max).map(Arc::new);
                claim.set(&page);
                page
            }
        }
    }

    /// Entries a READDIRPLUS-class page lists when its reply shows about `page`: on
    /// stores whose listing carries full metadata (`list_meta_complete`), at least
    /// [`LIST_AHEAD`], so the pages that follow are the reactor's (its runs keep what
    /// a page listed beyond the reply, `cache_dirs`) and a first listing is one worker
    /// page, not one per reply; elsewhere (S3) each entry past the reply would be a
    /// HEAD no one asked for, so `page`.
    pub fn plus_count(&self, page: usize) -> usize {
        if self.backend.list_meta_complete() {
            page.max(LIST_AHEAD)
        } else {
            page
        }
    }

    /// A READDIRPLUS page listed now (`readdir_plus`).
    fn list_plus(&self, dir: &Node, cookie: u64, max: usize) -> FsResult<PlusPage> {
        let at = Instant::now();
        let mut p = self.paged(dir, cookie, max, true)?;
        let cold: Vec<String> = p
            .entries
            .iter()
            .filter(|l| l.meta.is_none())
            .map(|l| l.key.clone())
            .collect();
        if !cold.is_empty() {
            self.backend.warm(&cold);
            self.head_cold(&mut p.entries);
        }
        let dots = self.dot_nodes(dir, &p);
        let mut page = self.dir_page(dir, &p, &dots, at);
        // A first page that does not reach the end: the whole directory's names too,
        // where the store holds them (the scan just made for this page kept them).
        if cookie == 0 && !page.eof {
            page.names = self.names_seen(dir);
        }
        let mut plus = Vec::with_capacity(page.entries.len());
        for (_, n) in dots {
            let a = self.getattr(&n).ok();
            plus.push(a.map(|a| self.with_handle(n, a)));
        }
        for l in p.entries {
            if let Some((key, fileid)) = l.inode {
                // A name of a linked file shows its inode (`links`).
                let node = Node {
                    export: dir.export,
                    fileid,
                    key,
                };
                let a = self.getattr(&node).ok();
                plus.push(a.map(|a| self.with_handle(node, a)));
                continue;
            }
            let node = Node {
                export: dir.export,
                fileid: l.fileid,
                key: l.key,
            };
            let a = match &l.meta {
                Some(m) => Some(self.attr(node.fileid, &node.key, m)),
                None => self.getattr(&node).ok(),
            };
            plus.push(a.map(|a| self.with_handle(node, a)));
        }
        Ok((page, plus))
    }

    /// Every name of `dir` as a digest (`DirPage::names`), when the store tells them
    /// without listing (`Backend::each_dir_name`), skipped as `list_page` skips them
    /// (a name it would show and the digest not, or the other way, only makes the
    /// digest differ from a listing's: never a false match).
    fn names_seen(&self, dir: &Node) -> Option<NamesSeen> {
        let at = Instant::now();
        let mut d = NamesDigest::new();
        let mut add = |name: &str, is_dir: bool| {
            if name.is_empty()
                || name.len() > 255
                || name.starts_with(orphans::ORPHAN_PREFIX)
                || name.starts_with(links::INODE_PREFIX)
            {
                return;
            }
            d.add(name.as_bytes(), is_dir);
        };
        self.backend.each_dir_name(&dir.key, &mut add)?.ok()?;
        Some(NamesSeen {
            at,
            digest: d.finish(),
        })
    }

    /// A listed entry with its handle, made once per listing: every call the page
    /// is shared with (`PageMemo`) reads it instead of making its own, and it is the
    /// handle `handle` makes later too (the page is reused only while the gateway
    /// changed nothing, so no mapping moved).
    fn with_handle(&self, node: Node, a: Attr) -> (Node, Attr, FileHandle) {
        let fh = self.handle(&node);
        (node, a, fh)
    }

    /// The metadata of listed files the listing did not carry (the store's listing
    /// is not complete: s3), read now as their attributes need it anyway, so a name
    /// of a linked file shows its inode (`links`) in the page as in its attributes.
    fn head_cold(&self, entries: &mut [Listed]) {
        for l in entries
            .iter_mut()
            .filter(|l| l.meta.is_none() && !is_dir_key(&l.key))
        {
            l.meta = self.file_meta(&l.key).ok().flatten();
            if let Some(i) = l.meta.as_ref().and_then(links::link_target) {
                l.inode = Some((i.to_string(), self.file_id(i)));
            }
        }
    }

    /// READDIRPLUS is about to look up `names` in `dir`: let the backend fetch their
    /// metadata (as a file and as a directory marker) concurrently.
    pub fn warm_children(&self, dir: &Node, names: &[&[u8]]) {
        let keys: Vec<String> = names
            .iter()
            .filter(|n| **n != b"." && **n != b"..")
            .filter_map(|n| std::str::from_utf8(n).ok())
            .flat_map(|n| [format!("{}{n}", dir.key), format!("{}{n}/", dir.key)])
            .collect();
        self.backend.warm(&keys);
    }
}

#[cfg(test)]
#[path = "listing_tests.rs"]
mod tests;
