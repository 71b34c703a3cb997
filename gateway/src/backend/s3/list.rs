//! The s3 backend's listing: ListObjectsV2 pages with the gateway's own objects left
//! out, and each listed object completed where the backend knows its metadata
//! (`known.rs`); and the probe of a name a CREATE expects to be new.

use super::{is_own, S3Backend};
use crate::backend::{BResult, BackendError, ListPage, ObjectMeta};

/// Entries a name's probe asks for: enough to reach past `name/` when a few names
/// extend it (`name.bak`, `name-1`) without paying for a large page.
const PROBE_KEYS: usize = 16;

impl S3Backend {
    /// `Backend::list` at the store: pages of `max` entries (after the gateway's own
    /// objects are left out).
    pub(super) fn list_store(
        &self,
        prefix: &str,
        delimiter: Option<char>,
        start_after: Option<&str>,
        max: usize,
    ) -> BResult<ListPage> {
        let c = self.core.clone();
        let sp = c.skey(prefix);
        // After a rolled-up prefix, skip everything under it (S3 would roll it up again).
        // Not after the listed prefix itself (a directory's marker `dir/`, the first
        // key of its listing, never a rolled-up prefix): a page that ended on it goes
        // on with what is under it.
        let after = start_after.map(|s| {
            let mut s = c.skey(s);
            if delimiter.is_some_and(|d| s.ends_with(d)) && s != sp {
                s.push(char::MAX);
            }
            s
        });
        let want = max.clamp(1, 1000);
        let mut page = ListPage::default();
        let mut cursor = after;
        loop {
            let (c2, sp2, cur) = (c.clone(), sp.clone(), cursor.clone());
            let got = c.block(async move {
                c2.pool
                    .run(|ep| ep.rest.list(&sp2, delimiter, cur.as_deref(), want))
                    .await
            })?;
            let strip = |k: &str| k[c.prefix.len()..].to_string();
            let mut last: Option<String> = None;
            let mut merged: Vec<(String, Option<ObjectMeta>)> = got
                .objects
                .into_iter()
                .map(|o| (o.key.clone(), Some(o)))
                .chain(got.prefixes.into_iter().map(|p| (p, None)))
                .collect();
            merged.sort_by(|a, b| a.0.cmp(&b.0));
            for (k, o) in merged {
                last = Some(k.clone());
                if is_own(&k) || !k.starts_with(&c.prefix) || k.len() == c.prefix.len() {
                    continue;
                }
                match o {
                    Some(mut o) => {
                        o.key = strip(&k);
                        page.objects.push(self.listed(o));
                    }
                    None => page.prefixes.push(strip(&k)),
                }
            }
            if !got.truncated {
                page.next = None;
                return Ok(page);
            }
            let last = last.ok_or_else(|| {
                BackendError::Permanent("list: truncated page without entries".into())
            })?;
            if page.objects.len() + page.prefixes.len() > 0 {
                let n = strip(&last);
                page.next = Some(n);
                return Ok(page);
            }
            // Everything on this page was ours (temporaries) or the listed prefix's
            // own object (a marker, or an object at exactly the bucket prefix: an S3
            // console folder): keep going, skipping under the last entry only when it
            // is a rolled-up prefix, as above.
            let mut l = last;
            if delimiter.is_some_and(|d| l.ends_with(d)) && l != sp {
                l.push(char::MAX);
            }
            cursor = Some(l);
        }
    }

    /// `Backend::probe_absent`: whether nothing is at `name` — no object `name`, no
    /// marker `name/`, nothing under `name/` — in one ListObjectsV2 of prefix `name`
    /// with delimiter '/', which shows `name` as an object and everything under
    /// `name/` rolled up into that one prefix. The look-up it replaces costs two HEADs
    /// and a listing of `name/` (`fs::imp` `find`). Only a page that shows neither and
    /// reaches past `name/` in key order (complete, or its last entry after it; names
    /// such as `name.txt` sort before) says absent; anything else is "perhaps", and
    /// the caller looks as before — a listed ghost (Garage lists deleted objects for a
    /// while) costs those HEADs, never a wrong answer. An empty listing is believed as
    /// the look-up believes one of `name/` (read-after-write listings: AWS, Garage,
    /// moto, MinIO). Noted for `ATTR_TTL` unless a change of this gateway at the name
    /// overlapped it (`Known::is_absent`): the exclusive PUT on a store that ignores
    /// `If-None-Match` then needs no HEAD of its own (`put`). Only this listing
    /// notes, and every probe first forgets what an earlier one noted: the note `put`
    /// reads is the probe of the same request, never one left by an operation that
    /// failed after its probe (a LINK refused with EMLINK) — another gateway may have
    /// made the name since.
    pub(super) fn probe_absent_at_store(&self, name: &str) -> BResult<bool> {
        let known = &self.core.ra.known;
        known.forget_absent(name);
        let dir = format!("{name}/");
        let ra = &self.core.ra;
        let cached = |k: &str| ra.attr(k).flatten().is_some() || self.wb.overlay(k).is_some();
        if cached(name) || cached(&dir) {
            // Known present: the look-up answers from the cache.
            return Ok(false);
        }
        let gone = |k: &str| matches!(ra.attr(k), Some(None));
        if gone(name) && gone(&dir) && known.is_empty(&dir) {
            // The look-up just before (a client's LOOKUP of the new name) found
            // nothing, and the look-up would answer from what it cached.
            return Ok(true);
        }
        let token = known.listing(name);
        let page = self.list_store(name, Some('/'), None, PROBE_KEYS)?;
        let absent = !page.objects.iter().any(|o| o.key == name)
            && !page.prefixes.contains(&dir)
            && page.next.as_deref().is_none_or(|last| last > dir.as_str());
        known.listed(name, token, absent);
        Ok(absent)
    }

    /// A listed object as a HEAD would give it, where that needs no request: staged
    /// writes over it, or the metadata this gateway wrote (`known.rs`), which then
    /// also answers the HEADs a READDIRPLUS of the page makes (the attribute cache).
    fn listed(&self, mut o: ObjectMeta) -> ObjectMeta {
        if self.wb.overlay(&o.key).is_some() {
            return self.overlay(o);
        }
        let ra = &self.core.ra;
        if ra.known.complete(&mut o) && ra.attr(&o.key).is_none() {
            ra.remember_attr(&o);
        }
        o
    }
}
