//! Hard links (RFC 1813 §3.3.15 LINK, RFC 8881 §18.9) on an object store.
//!
//! A file is the object at its name's key, and the handle table maps its file id to
//! that key (docs/architecture.md §7, §10). A file given a second name becomes a
//! hidden *inode object*, `<root>.nfsgw-inode.<fileid hex>` in the deepest export
//! root holding it (as orphans are placed: `orphans::orphan_root`), holding the data
//! and metadata and its link count (`nfsgw-nlink`); each of its names becomes an empty
//! *link object* whose metadata names the inode's key (`nfsgw-link`). The handle
//! table moves the file id to the inode key, so every handle of the file, made
//! before or after the LINK, keeps resolving to it (the table's journal keeps the
//! move across restarts); every other file stays one object at its name. The inode's
//! name carries that id, so the table finds it again where it did not see the move
//! (`Inner::adopt_inode`): another gateway on a shared store, or a LINK a crash cut
//! short. On shared stores (version-2 handles, which carry the key) the inode keeps
//! the name the file had when first linked (`nfsgw-origin`), and its handles carry
//! that name: the handle a client got before the LINK is the one it gets after.
//!
//! LOOKUP and READDIR of a link name answer the inode: its file id, handle and
//! attributes, `nlink` = the count stored on it. READ, WRITE, SETATTR go to the
//! inode through the handle, whichever name gave it. REMOVE of a link name deletes
//! the link object and lowers the count; the last name's REMOVE deletes the inode
//! (kept as an orphan while NFSv4 opens hold it, `orphans`). RENAME moves a link
//! object like any file; RENAME over a link name lowers its inode's count; RENAME of
//! one name of a file onto another of the same file does nothing (POSIX rename(2)).
//!
//! Crash safety: the stored count is never lower than the names pointing to the
//! inode, so no REMOVE can delete an inode a name still needs: LINK raises the count
//! before it writes the new name, REMOVE deletes the name before it lowers the count.
//! The first LINK of a file writes, in order: the count on the file, the new link
//! object (pointing to an inode key not there yet), the file's move to the inode key
//! (the backend's rename), then the link object at its old name. A kill -9 between
//! two steps leaves either the file at its name with a new name that LOOKUP does not
//! find yet (its inode is missing: NOENT, and REMOVE deletes it), or the file at the
//! inode reachable through the new name while the old name is missing; never a file
//! reachable by no name. What a crash can leave is a count too high: the inode then
//! outlives its last name (space, not data, lost). Link counts are changed under one
//! lock (`Inner::links`), so concurrent LINKs and REMOVEs of names count right.

use super::{check_name, is_dir_key, lock, Found, Inner, Node, Status};
use crate::backend::{BackendError, ObjectMeta, UserMeta};
use crate::fs::{FsResult, LINK_MAX};

/// Names of inode objects (a sibling of `orphans::ORPHAN_PREFIX`): hidden.
pub(super) const INODE_PREFIX: &str = ".nfsgw-inode.";
/// Metadata of a link object: the key of its inode.
const M_LINK: &str = "nfsgw-link";
/// Metadata of an inode object: its link count.
const M_NLINK: &str = "nfsgw-nlink";
/// Metadata of an inode object: the key the file had when it was first linked (what
/// its shared-store handles carry).
const M_ORIGIN: &str = "nfsgw-origin";

/// Whether `key` names an inode object (its last component has the prefix).
pub(super) fn is_inode_key(key: &str) -> bool {
    key.rsplit('/')
        .next()
        .is_some_and(|n| n.starts_with(INODE_PREFIX))
}

/// The file id an inode key carries (`<root>.nfsgw-inode.<16 hex digits>`); `None`
/// for any other key.
pub(super) fn inode_id(key: &str) -> Option<u64> {
    let name = key.rsplit('/').next()?;
    let hex = name.strip_prefix(INODE_PREFIX)?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok().filter(|id| *id > 1)
}

/// The key an inode's file had when it was first linked, from the inode's metadata.
pub(super) fn origin(user: &UserMeta) -> Option<&str> {
    user.get(M_ORIGIN).map(String::as_str)
}

/// The inode a link object points to; `None` for any other object. Only an empty
/// object can be a link object, and only an inode key its target, so a client's
/// object with such metadata written behind the gateway's back names nothing else.
pub(super) fn link_target(m: &ObjectMeta) -> Option<&str> {
    let t = m.user.get(M_LINK)?;
    (m.size == 0 && is_inode_key(t) && !is_dir_key(t)).then_some(t.as_str())
}

/// The link count stored on an inode object (at least 1 while it is shown).
pub(super) fn nlink_of(user: &UserMeta) -> u32 {
    user.get(M_NLINK)
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1)
}

impl Inner {
    /// The node the object `m` found at `key` stands for: itself, or for a link
    /// object its inode (NOENT when the inode is missing: a LINK cut short, module
    /// doc).
    pub(super) fn named_node(&self, export: u16, key: &str, m: &ObjectMeta) -> FsResult<Node> {
        let Some(ikey) = link_target(m) else {
            return Ok(self.node(export, key));
        };
        if self.file_meta(ikey)?.is_none() {
            return Err(Status::NoEnt);
        }
        Ok(self.node(export, ikey))
    }

    /// `named_node`, with the metadata of the node's own key: `m` itself, or the
    /// inode's, read to prove it exists.
    pub(super) fn named_node_meta(
        &self,
        export: u16,
        key: &str,
        m: ObjectMeta,
    ) -> FsResult<(Node, Option<ObjectMeta>)> {
        let Some(ikey) = link_target(&m) else {
            return Ok((self.node(export, key), Some(m)));
        };
        let im = self.file_meta(ikey)?.ok_or(Status::NoEnt)?;
        Ok((self.node(export, ikey), Some(im)))
    }

    /// See `FileModel::link`.
    pub fn link(&self, src: &Node, dir: &Node, name: &[u8]) -> FsResult<Node> {
        self.dir_of(dir)?;
        if src.export != dir.export {
            return Err(Status::XDev);
        }
        if is_dir_key(&src.key) {
            return Err(Status::IsDir);
        }
        if super::orphans::is_orphan_key(&src.key) {
            // Removed while open (`orphans`): no name left to link to, as link(2)
            // refuses a file whose link count is 0 (ENOENT).
            return Err(Status::NoEnt);
        }
        if name == b"." || name == b".." {
            return Err(Status::Exist);
        }
        let name = check_name(name)?;
        let key = format!("{}{name}", dir.key);
        let _links = lock(&self.links);
        let names = [(dir.fileid, name.as_bytes())];
        let _named = self.naming(&names);
        self.changing(&[Some(dir.fileid), Some(src.fileid)], || {
            if self.find_new(&key)?.is_some() {
                return Err(Status::Exist);
            }
            let (skey, m) = self.linked_now(src)?;
            let n = if is_inode_key(&skey) {
                nlink_of(&m.user)
            } else {
                1
            };
            if n >= LINK_MAX {
                return Err(Status::MLink);
            }
            let ikey = if is_inode_key(&skey) {
                self.set_nlink(&skey, &m.user, n + 1)?;
                self.put_link(&key, &skey)?;
                skey
            } else {
                self.promote(src, &m.user, &key)?
            };
            self.bump(dir.fileid);
            Ok(Node {
                export: src.export,
                fileid: src.fileid,
                key: ikey,
            })
        })
    }

    /// Where `src` is now and its metadata, read under the links lock: a node
    /// resolved before another LINK of the same file moved it to its inode (two
    /// first LINKs at once) finds a link object at its key, and follows it, so the
    /// second LINK counts on the inode instead of moving a link object over it.
    fn linked_now(&self, src: &Node) -> FsResult<(String, ObjectMeta)> {
        let m = self.file_meta(&src.key)?.ok_or(Status::Stale)?;
        let Some(ikey) = link_target(&m) else {
            return Ok((src.key.clone(), m));
        };
        if inode_id(ikey) != Some(src.fileid) {
            return Err(Status::Stale);
        }
        let ikey = ikey.to_string();
        let im = self.file_meta(&ikey)?.ok_or(Status::Stale)?;
        Ok((ikey, im))
    }

    /// The first LINK of the plain file `src`: it moves to its inode key, `new` and
    /// its old name become link objects (module doc: the order is the crash rule).
    fn promote(&self, src: &Node, user: &UserMeta, new: &str) -> FsResult<String> {
        let ikey = self.inode_key(&src.key, src.fileid);
        if inode_id(&ikey) != Some(src.fileid) {
            // The table could not give the file an id (`UNRESOLVABLE`).
            return Err(Status::ServerFault);
        }
        let mut user = user.clone();
        user.insert(M_ORIGIN.into(), src.key.clone());
        self.set_nlink(&src.key, &user, 2)?;
        self.put_link(new, &ikey)?;
        self.move_dirty(&src.key, &ikey);
        if let Err(e) = self.backend.rename(&src.key, &ikey) {
            let _ = self.backend.delete(new);
            return Err(self.berr(e, &src.key));
        }
        let moved = self.table.rename(&src.key, &ikey);
        self.observer.touched(&moved);
        lock(&self.clean).remove(&src.key);
        match self.backend.put(&src.key, b"", &link_meta(&ikey), false) {
            Ok(_) => Ok(ikey),
            Err(e) => Err(self.berr(e, &src.key)),
        }
    }

    /// The inode key of the file `fileid` whose name was `key` when first linked: in
    /// the deepest export root holding `key`, as orphans are placed, so every export
    /// that reaches the file reaches its inode.
    fn inode_key(&self, key: &str, fileid: u64) -> String {
        format!("{}{INODE_PREFIX}{fileid:016x}", self.orphan_root(key))
    }

    /// Maps the inode key `ikey` to the id it carries (`HandleTable::adopt`), telling
    /// the reactors' caches what moved; returns the id.
    ///
    /// The id is taken from the key that holds it only when that key is the file's
    /// earlier name: gone from the store, or a link object naming `ikey`. A store
    /// writer could otherwise plant `.nfsgw-inode.<id>` and take a live file's id (its
    /// handles would then reach the planted object); such an inode gets an id of its
    /// own, as any new name does, and a warning.
    pub(super) fn adopt_inode(&self, ikey: &str, id: u64) -> u64 {
        if let Some((old, _)) = self.table.get(id) {
            let earlier_name = old == ikey
                || match self.file_meta(&old) {
                    Ok(None) => true,
                    Ok(Some(m)) => link_target(&m) == Some(ikey),
                    Err(_) => false,
                };
            if !earlier_name {
                tracing::warn!(
                    inode = ikey,
                    holder = %old,
                    id,
                    "links: an inode object names the file id of another live file; not adopted"
                );
                return self.table.assign(ikey).0;
            }
        }
        let ((id, _), touched) = self.table.adopt(ikey, id);
        self.observer.touched(&touched);
        id
    }

    /// A handle of the file `fileid` led to `key` (object `m`), which is no longer
    /// the file: when the file was hard-linked since (on another gateway, or by a
    /// LINK a crash cut short), its inode: the one `key`'s link object names, or with
    /// the name gone the one the id and `key` derive. Adopted by the table. `None`:
    /// not a linked file.
    pub(super) fn linked_since(
        &self,
        key: &str,
        fileid: u64,
        m: Option<&ObjectMeta>,
    ) -> FsResult<Option<(String, ObjectMeta)>> {
        let ikey = match m {
            Some(m) => match link_target(m) {
                Some(t) => t.to_string(),
                None => return Ok(None),
            },
            None if is_dir_key(key) || is_inode_key(key) => return Ok(None),
            None => self.inode_key(key, fileid),
        };
        if inode_id(&ikey) != Some(fileid) {
            return Ok(None);
        }
        let Some(im) = self.file_meta(&ikey)? else {
            return Ok(None);
        };
        self.adopt_inode(&ikey, fileid);
        Ok(Some((ikey, im)))
    }

    /// Writes the link object `key` -> `ikey` (EXIST when the name was taken since).
    fn put_link(&self, key: &str, ikey: &str) -> FsResult<()> {
        match self.backend.put(key, b"", &link_meta(ikey), true) {
            Ok(_) => Ok(()),
            Err(BackendError::AlreadyExists) => Err(Status::Exist),
            Err(e) => Err(self.berr(e, key)),
        }
    }

    /// Stores link count `n` on the object `key` (metadata `user` as read) and moves
    /// its ctime (POSIX link/unlink mark the file's ctime).
    fn set_nlink(&self, key: &str, user: &UserMeta, n: u32) -> FsResult<()> {
        let mut u = user.clone();
        u.insert(M_NLINK.into(), n.to_string());
        u.insert(
            super::attrs::M_CTIME.into(),
            super::attrs::fmt_time(super::attrs::from_ns(super::now_ns())),
        );
        self.backend
            .set_meta(key, &u)
            .map_err(|e| self.nerr(e, key))
    }

    /// A name of the inode `ikey` went (its link object already deleted or
    /// replaced): lower its count, and delete it with its last name (an orphan
    /// instead while open over NFSv4).
    pub(super) fn unlink_inode(&self, ikey: &str) -> FsResult<()> {
        let _links = lock(&self.links);
        let Some(m) = self.file_meta(ikey)? else {
            return Ok(());
        };
        let n = nlink_of(&m.user).saturating_sub(1);
        if n > 0 {
            return self.set_nlink(ikey, &m.user, n);
        }
        if !self.orphan_if_open(ikey)? {
            match self.backend.delete(ikey) {
                Ok(()) | Err(BackendError::NotFound) => {}
                Err(e) => return Err(self.berr(e, ikey)),
            }
            self.forget_file(ikey);
        }
        Ok(())
    }

    /// `changing` for the count of the inode `ikey` (under its id, when it has one).
    pub(super) fn inode_changed(
        &self,
        ikey: &str,
        f: impl FnOnce() -> FsResult<()>,
    ) -> FsResult<()> {
        let id = self.table.id_of(ikey);
        self.changing(&[id], f)
    }

    /// The file a name found by `find` is: its inode key for a link object, else
    /// its own key (RENAME compares the two names' files with it).
    pub(super) fn file_of(key: &str, f: &Option<Found>) -> Option<String> {
        match f {
            Some(Found::File(m)) => Some(link_target(m).unwrap_or(key).to_string()),
            _ => None,
        }
    }
}

fn link_meta(ikey: &str) -> UserMeta {
    let mut u = UserMeta::new();
    u.insert(M_LINK.into(), ikey.to_string());
    u
}
