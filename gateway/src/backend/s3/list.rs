//! The s3 backend's listing: ListObjectsV2 pages with the gateway's own objects left
//! out, and each listed object completed where the backend knows its metadata
//! (`known.rs`).

use super::{is_own, S3Backend};
use crate::backend::{BResult, BackendError, ListPage, ObjectMeta};

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
        let after = start_after.map(|s| {
            let mut s = c.skey(s);
            if delimiter.is_some_and(|d| s.ends_with(d)) {
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
            // Everything on this page was ours (temporaries): keep going.
            let mut l = last;
            if delimiter.is_some_and(|d| l.ends_with(d)) {
                l.push(char::MAX);
            }
            cursor = Some(l);
        }
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
