//! The journaled changes not yet folded into the index: assignments and forgets (a
//! rename or prefix change folds everything at once, so none is ever pending). An
//! entry here overrides the index's row for the same id, live or tombstone.

use std::collections::HashMap;

#[derive(Default)]
pub(super) struct Pending {
    /// id → (key, generation); `None` key: forgotten (a tombstone).
    by_id: HashMap<u64, (Option<String>, u32)>,
    by_key: HashMap<String, u64>,
}

impl Pending {
    pub(super) fn assign(&mut self, id: u64, gen: u32, key: &str) {
        self.unkey(id);
        self.by_key.insert(key.to_string(), id);
        self.by_id.insert(id, (Some(key.to_string()), gen));
    }

    pub(super) fn forget(&mut self, id: u64, gen: u32) {
        self.unkey(id);
        self.by_id.insert(id, (None, gen));
    }

    fn unkey(&mut self, id: u64) {
        if let Some((Some(k), _)) = self.by_id.get(&id) {
            self.by_key.remove(k);
        }
    }

    /// What is pending for `id`, if anything: it overrides the index.
    pub(super) fn by_id(&self, id: u64) -> Option<(Option<String>, u32)> {
        self.by_id.get(&id).cloned()
    }

    /// Whether `id` has a pending change (its index row, if any, is superseded).
    pub(super) fn knows(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// (id, generation) of a key assigned since the last fold.
    pub(super) fn by_key(&self, key: &str) -> Option<(u64, u32)> {
        let id = *self.by_key.get(key)?;
        Some((id, self.by_id.get(&id)?.1))
    }

    /// Whether a key assigned since the last fold lies under the directory prefix
    /// `prefix`, other than `prefix` itself.
    pub(super) fn maps_under(&self, prefix: &str) -> bool {
        self.by_key
            .keys()
            .any(|k| k.len() > prefix.len() && k.starts_with(prefix))
    }

    pub(super) fn clear(&mut self) {
        self.by_id.clear();
        self.by_key.clear();
    }
}
