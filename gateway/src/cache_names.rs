//! Directory entries on the reactor: what recently looked-up or created names refer
//! to, so the next NFSv3 LOOKUP of one (RFC 1813 §3.3.3) is answered without a
//! worker round trip (docs/architecture.md §5, "Names").
//!
//! An entry maps (directory handle, name) to the object's handle and file id. It is
//! filled from what workers already return: a LOOKUP's reply (the object found), a
//! CREATE's or MKDIR's (the object made). It holds no attributes: a hit answers with
//! the object's and the directory's attributes from the attribute cache, each under
//! its own stamp, so a WRITE to the object (which moves the object's stamp, not the
//! name's) costs the next LOOKUP nothing once the write's reply taught the new
//! attributes.
//!
//! Validity is per name, not per directory: creating other names in the directory
//! leaves the entry answering (mdtest creates every file, then stats them; `ls -l`
//! and data loaders stat names while others are created). Each change of what a name
//! refers to — create, remove, rmdir, rename (both names), link — is reported by the
//! file model by (directory id, name) before and after it runs
//! (`fs::ChangeObserver::name`), bumping that name's generation slot
//! (`Generations::name_stamp`: names hashed with a per-process random SipHash key, since
//! clients choose them; a slot collision only invalidates more). The rule is the
//! attributes' (`cache.rs`): a LOOKUP's worker snapshots the name's stamp before it
//! runs and the reactor keeps the entry only under that stamp; a CREATE's worker
//! keeps its name only when the stamp moved by exactly the create's own two reports
//! (no other change of the name raced with it). Changes behind the gateway's back:
//! an entry older than `ATTR_TTL` is not used, the promise cached GETATTR makes.
//!
//! NFSv4.1 `SEQUENCE, PUTFH, LOOKUP[, GETFH], GETATTR` is answered from the same
//! entries (`nfs4::fast_names`), and its worker's LOOKUP teaches them as NFSv3's does.
//!
//! Only names a worker answered NFS3_OK (NFS4_OK) for are kept, and only for regular files and
//! directories in the directory's export; "." and "..", names a worker would refuse
//! (too long, empty, with '/' or NUL) never hit (`cacheable`). No negative entries.

use super::{FhKey, Fill, FillData, Generations, Stamp, ATTR_TTL};
use crate::call::Named as Noted;
use crate::fs::FileModel;
use crate::outcome::EntryAsk;
use rustc_hash::FxHashMap as HashMap;
use std::time::Instant;

/// The longest name a cached LOOKUP answers (NFSv3's and the file model's limit:
/// longer ones are the worker's NAMETOOLONG).
pub const NAME_MAX: usize = 255;
/// Entries per reactor before the map is cleared (about 400 bytes each).
const MAX_NAMES: usize = 65_536;

/// Whether a name may be answered from the cache at all: one the worker's LOOKUP
/// resolves as an entry of the directory (RFC 1813 §3.3.3; "." and ".." are the
/// directory and its parent, not entries; the rest is `nfs3::names::check_name`).
pub fn cacheable(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name != b"."
        && name != b".."
        && !name.iter().any(|&b| b == b'/' || b == 0)
}

/// What a worker taught about one directory entry (`FillData::Name`, in a `Fill`
/// whose handle, export and attributes are the directory's).
#[derive(Debug, Clone)]
pub struct NameFill {
    pub name: Box<[u8]>,
    /// The name's stamp the entry is valid under (`Generations::name_stamp`).
    pub stamp: Stamp,
    /// The object the name refers to: its handle (as the worker returned it) and id.
    pub obj: FhKey,
    pub obj_id: u64,
    /// The object's attributes a LOOKUP read, and `Generations::changes` before the
    /// worker ran: kept if nothing changed anywhere since (the object's id was not
    /// known before the look-up, so its stamp could not be snapshotted).
    pub obj_attr: Option<(crate::fs::Attr, u64)>,
    /// The fill's attributes (the directory's) are valid under its stamp.
    pub dir_attr: bool,
    /// Taught by an NFSv4.1 LOOKUP (`EntrySeen::v4`): the name is no other export's
    /// root (the worker's LOOKUP crosses there, RFC 8881 §7.7, and notes nothing),
    /// and `obj_attr` is the file model's own (`Fill::exact`).
    pub v4: bool,
    /// A CREATE's or MKDIR's: the name it made, for the directory's listing run
    /// (`cache_dirs::Listings::made`).
    pub made: Option<super::dirs::Made>,
}

struct Entry {
    dir: FhKey,
    name: Box<[u8]>,
    obj: FhKey,
    obj_id: u64,
    stamp: Stamp,
    at: Instant,
    /// See `NameFill::v4`.
    v4: bool,
}

/// A call naming one directory entry (LOOKUP, CREATE, MKDIR) as its worker saw it
/// before running it: the stamps its answer is judged by (`learned`).
pub struct EntrySeen {
    dir: FhKey,
    export: u16,
    dir_id: u64,
    name: Box<[u8]>,
    makes: bool,
    name_stamp: Stamp,
    dir_stamp: Stamp,
    /// `Generations::changes` before the call: a LOOKUP's object attributes are
    /// kept if nothing changed since (`ReadCache::fill`).
    changes: u64,
    /// An NFSv4.1 LOOKUP (`NameFill::v4`).
    v4: bool,
}

impl EntrySeen {
    /// Snapshots the stamps before the call runs (the cache's rule: before it reads).
    pub fn before(gens: &Generations, ask: &EntryAsk) -> Option<EntrySeen> {
        let (export, dir_id) = FileModel::peek_handle(ask.dir)?;
        let changes = gens.changes();
        let hash = gens.name_hash(dir_id, ask.name);
        Some(EntrySeen {
            dir: FhKey::new(ask.dir)?,
            export,
            dir_id,
            name: ask.name.into(),
            makes: ask.makes,
            name_stamp: gens.name_stamp(hash),
            dir_stamp: gens.stamp(dir_id),
            changes,
            v4: false,
        })
    }

    /// The call is an NFSv4.1 `SEQUENCE, PUTFH, LOOKUP[, GETFH], GETATTR`, `SEQUENCE,
    /// PUTFH, OPEN ...` or `SEQUENCE, PUTFH, CREATE ...` (`fast_names`): its LOOKUP
    /// notes only a name that crosses into no other export, an OPEN only a regular
    /// file it created, a CREATE only a directory (`NameFill::v4`; a created name is
    /// checked against no export's root: NFSv4.1 answers from names only on a server
    /// with one export, `nfs4::fast_names`).
    pub fn v4(self) -> EntrySeen {
        EntrySeen { v4: true, ..self }
    }

    /// An NFSv4.1 OPEN creating the name: the file's attributes after the whole
    /// COMPOUND (its WRITE, CLOSE) are worth reading for the reactor
    /// (`server::worker`), since nothing else in a create workload teaches them.
    pub fn made_v4(&self) -> bool {
        self.v4 && self.makes
    }

    /// What the call, having answered NFS3_OK, teaches the reactor (`note`: what the
    /// procedure noted as it encoded, `call::note_named`), as a fill of the
    /// directory's attributes carrying the entry. A LOOKUP's entry and directory
    /// attributes are valid under the stamps taken before it ran (the reactor checks
    /// them at the fill). A create changed the name itself: its entry is valid only
    /// when the name's stamp moved by exactly the create's own two reports (the file
    /// model's `naming`: nothing else touched the name meanwhile; else only the
    /// directory's run takes it, `NameFill::made`), and the
    /// directory's post-operation attributes likewise under its two reports
    /// (`changing`), as a WRITE's are (`server::worker::learned_write`).
    pub fn learned(self, gens: &Generations, note: Option<Noted>) -> Option<Fill> {
        let n = note?;
        // A COMPOUND's note is its one naming operation's (`call::take_named`): a
        // found entry for a LOOKUP, a made one for a create.
        if n.made != self.makes {
            return None;
        }
        let (dir_attr, obj_attr) = (n.dir_attr?, n.obj_attr?);
        let (obj_export, obj_id) = FileModel::peek_handle(n.obj.bytes())?;
        if dir_attr.fileid != self.dir_id || obj_attr.fileid != obj_id || obj_export != self.export
        {
            return None;
        }
        // The directory's run takes the name whatever raced with the create: its
        // count of the directory's reports decides whether it answers
        // (`cache_dirs::Listings::made`).
        let made = self.makes.then(|| super::dirs::Made {
            before: self.dir_stamp,
            attr: obj_attr,
            fh: n.obj.handle(),
        });
        let (name_stamp, dir_stamp, dir_ok, obj) = if self.makes {
            // Another change in the name's generation slot meanwhile (65,536 slots
            // shared by every name of every directory, `Generations::name_hash`)
            // leaves the name uncached (`Names::fill` finds its stamp moved), never
            // the run without its create: a run missing one never answers again, and
            // with 32 creates in flight about one create in 2,000 met one (bench
            // md's 4,000-entry hard tree lost its run most times).
            let name_now = self.name_stamp.after_bumps(2);
            let dir_now = self.dir_stamp.after_bumps(2);
            (name_now, dir_now, gens.stamp(self.dir_id) == dir_now, None)
        } else {
            let obj = Some((obj_attr, self.changes));
            (self.name_stamp, self.dir_stamp, true, obj)
        };
        Some(Fill {
            fh: self.dir,
            export: self.export,
            attr: dir_attr,
            stamp: dir_stamp,
            data: Some(FillData::Name(Box::new(NameFill {
                name: self.name,
                stamp: name_stamp,
                obj: n.obj,
                obj_id,
                obj_attr: obj,
                dir_attr: dir_ok,
                v4: self.v4,
                made,
            }))),
            exact: false,
        })
    }
}

/// One reactor's names, by `Generations::name_hash` (verified against the entry's
/// directory handle and name, so a hash collision is a miss).
#[derive(Default)]
pub struct Names {
    map: HashMap<u64, Entry>,
}

/// The object a cached name refers to.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub obj: &'a FhKey,
    pub obj_id: u64,
    /// See `NameFill::v4`.
    pub v4: bool,
}

impl Names {
    /// Keeps what a worker taught about entry `f.name` of directory `dir` (handle
    /// `dir`, id `dir_id`), if the name has not changed since (its stamp).
    pub fn fill(&mut self, gens: &Generations, dir: FhKey, dir_id: u64, f: &NameFill) {
        if !cacheable(&f.name) {
            return;
        }
        let hash = gens.name_hash(dir_id, &f.name);
        if gens.name_stamp(hash) != f.stamp {
            return;
        }
        if self.map.len() >= MAX_NAMES && !self.map.contains_key(&hash) {
            self.map.clear();
        }
        self.map.insert(
            hash,
            Entry {
                dir,
                name: f.name.clone(),
                obj: f.obj,
                obj_id: f.obj_id,
                stamp: f.stamp,
                at: Instant::now(),
                v4: f.v4,
            },
        );
    }

    /// What entry `name` of the directory with handle `dir` and id `dir_id` refers
    /// to, when a worker taught it under the name's current stamp less than
    /// `ATTR_TTL` ago. Access is the caller's to check.
    pub fn get(
        &self,
        gens: &Generations,
        dir: &[u8],
        dir_id: u64,
        name: &[u8],
    ) -> Option<Named<'_>> {
        let hash = gens.name_hash(dir_id, name);
        let e = self.map.get(&hash)?;
        if e.dir.bytes() != dir || &*e.name != name {
            return None;
        }
        if e.at.elapsed() >= ATTR_TTL || gens.name_stamp(hash) != e.stamp {
            return None;
        }
        Some(Named {
            obj: &e.obj,
            obj_id: e.obj_id,
            v4: e.v4,
        })
    }
}
