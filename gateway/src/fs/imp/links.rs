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
//! move across restarts); every other file stays one object at its name.
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
use crate::fs::FsResult;

/// Names of inode objects (a sibling of `orphans::ORPHAN_PREFIX`): hidden.
pub(super) const INODE_PREFIX: &str = ".nfsgw-inode.";
/// Metadata of a link object: the key of its inode.
const M_LINK: &str = "nfsgw-link";
/// Metadata of an inode object: its link count.
const M_NLINK: &str = "nfsgw-nlink";

/// Whether `key` names an inode object (its last component has the prefix).
pub(super) fn is_inode_key(key: &str) -> bool {
    key.rsplit('/')
        .next()
        .is_some_and(|n| n.starts_with(INODE_PREFIX))
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

    /// See `FileModel::link`.
    pub fn link(&self, src: &Node, dir: &Node, name: &[u8]) -> FsResult<Node> {
        self.dir_of(dir)?;
        if src.export != dir.export {
            return Err(Status::XDev);
        }
        if is_dir_key(&src.key) {
            return Err(Status::IsDir);
        }
        if name == b"." || name == b".." {
            return Err(Status::Exist);
        }
        let name = check_name(name)?;
        let key = format!("{}{name}", dir.key);
        let _links = lock(&self.links);
        self.changing(&[Some(dir.fileid), Some(src.fileid)], || {
            if self.find(&key)?.is_some() {
                return Err(Status::Exist);
            }
            let m = self.file_meta(&src.key)?.ok_or(Status::Stale)?;
            let ikey = if is_inode_key(&src.key) {
                self.set_nlink(&src.key, &m.user, nlink_of(&m.user) + 1)?;
                self.put_link(&key, &src.key)?;
                src.key.clone()
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

    /// The first LINK of the plain file `src`: it moves to its inode key, `new` and
    /// its old name become link objects (module doc: the order is the crash rule).
    fn promote(&self, src: &Node, user: &UserMeta, new: &str) -> FsResult<String> {
        let ikey = format!(
            "{}{INODE_PREFIX}{:016x}",
            self.orphan_root(&src.key),
            src.fileid
        );
        self.set_nlink(&src.key, user, 2)?;
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
