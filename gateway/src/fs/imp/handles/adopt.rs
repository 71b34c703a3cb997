//! Mapping a key to the file id its own name carries: a hard-linked file's inode
//! object (`fs::imp::links`) is named after the id the file had when it was first
//! linked, so every handle made for the file, before or after its LINK, keeps
//! resolving to it: on this gateway the LINK moved the id with `rename`; here it is
//! found again where the table did not see that move (another gateway on a shared
//! store, or a LINK a crash cut short between the store's move and the table's).

use super::journal::{self, Rec};
use super::{now_secs, Db, HandleTable, Touched, UNRESOLVABLE};

impl HandleTable {
    /// Maps `key` to `id` and returns (id, generation), and what the change unmapped
    /// or moved (for the reactors' caches). Nothing changes when `key` has `id`
    /// already (the common case: one cache lookup). When another key holds `id` (the
    /// file's name before its LINK) the mapping moves to `key` keeping its generation,
    /// so version-1 handles stay valid; when none does, `key` gets `id` with a
    /// generation above its tombstone's. On a journal or index failure: an id that
    /// resolves to nothing, as `assign` hands out.
    pub(in crate::fs::imp) fn adopt(&self, key: &str, id: u64) -> ((u64, u32), Touched) {
        if let Some((i, g)) = self.cache().by_key(key) {
            if i == id {
                return ((id, g), Some(Vec::new()));
            }
        }
        let mut db = self.db();
        match self.adopt_locked(&mut db, key, id) {
            Ok((gen, touched)) => {
                self.cache_mut().insert(id, gen, key);
                self.maybe_fold(&mut db, false);
                ((id, gen), touched)
            }
            Err(e) => {
                self.warn("adopt", &e);
                ((UNRESOLVABLE, now_secs()), None)
            }
        }
    }

    /// `adopt` under the index lock: the generation and what changed.
    fn adopt_locked(&self, db: &mut Db, key: &str, id: u64) -> anyhow::Result<(u32, Touched)> {
        if let Some((i, g)) = self.find_key(&db.conn, key)? {
            if i == id {
                return Ok((g, Some(Vec::new())));
            }
        }
        match self.find_id(&db.conn, id)? {
            Some((Some(old), gen)) => {
                // The file's earlier name: move it as RENAME does (whatever `key`
                // held is forgotten).
                let touched = self.change_now(db, journal::T_RENAME, format!("{old}\0{key}"));
                let mut c = self.cache_mut();
                c.remove_key(&old);
                c.remove_key(key);
                c.bump();
                Ok((gen, touched))
            }
            tomb => {
                let mut touched = self.forget_locked(db, key);
                {
                    let mut c = self.cache_mut();
                    c.remove_key(key);
                    c.bump();
                }
                let floor = tomb.map_or(0, |(_, g)| g.saturating_add(1));
                let gen = floor.max(now_secs());
                let rec = Rec {
                    tag: journal::T_ASSIGN,
                    id,
                    gen,
                    payload: key.to_string(),
                };
                db.journal.append(&rec)?;
                self.pending().assign(id, gen, key);
                db.recs.push(rec);
                if let Some(t) = touched.as_mut() {
                    t.push(id);
                }
                Ok((gen, touched))
            }
        }
    }
}
