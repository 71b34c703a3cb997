//! The metadata ops over NFSv3 (RFC 1813), as any NFSv3 server answers them:
//! mkdir = MKDIR; create = CREATE (UNCHECKED, mode 0644) then WRITE of the content,
//! FILE_SYNC (§3.3.7: durable when answered, so no COMMIT follows); stat = LOOKUP,
//! whose object attributes carry the size (GETATTR when a server leaves them out);
//! read = LOOKUP then READ; readdir = READDIRPLUS pages; remove = REMOVE;
//! rmdir = RMDIR.

use super::exec::{later, OpState, Proto, Step, Work};
use super::plan::Phase;
use super::verify;
use crate::client::Conn;
use crate::jukebox::JUKEBOX;
use nfs_wire::v3call::{self, Call};

pub struct V3 {
    conn: Conn,
    depth: usize,
    write_size: usize,
    verify: bool,
}

impl V3 {
    pub fn new(conn: Conn, depth: usize, write_size: usize, verify: bool) -> V3 {
        V3 {
            conn,
            depth,
            write_size,
            verify,
        }
    }

    fn call<'a>(&self, phase: Phase, w: &'a Work, st: &'a OpState, data: &'a [u8]) -> Call<'a> {
        let (dir, name) = (w.dir.as_slice(), w.name.as_str());
        match (phase, st.step) {
            (Phase::Mkdir, _) => Call::Mkdir(dir, name),
            (Phase::Create, 0) => Call::Create(dir, name),
            (Phase::Create, _) => Call::WriteSync(&st.fh, 0, data),
            (Phase::Stat | Phase::Read, 0) => Call::Lookup(dir, name),
            (Phase::Stat, _) => Call::Getattr(&st.fh),
            // One byte more than was written: a longer file shows.
            (Phase::Read, _) => Call::Read(&st.fh, 0, self.write_size as u32 + 1),
            (Phase::Readdir, _) => Call::ReaddirplusAt(dir, st.cookie, st.verf),
            (Phase::Remove, _) => Call::Remove(dir, name),
            (Phase::Rmdir, _) => Call::Rmdir(dir, name),
        }
    }

    /// A successful reply's meaning.
    fn took(&self, phase: Phase, w: &Work, st: &mut OpState, body: &[u8]) -> Result<Step, String> {
        let e = |e: v3call::ReplyError| format!("{} {}: {e}", phase, w.name);
        let size = self.write_size as u64;
        Ok(match (phase, st.step) {
            (Phase::Mkdir, _) => {
                st.fh = v3call::parse_mkdir(body).map_err(e)?;
                Step::Done
            }
            (Phase::Create, 0) => {
                st.fh = v3call::parse_create(body).map_err(e)?;
                if self.write_size == 0 {
                    Step::Done
                } else {
                    Step::Next
                }
            }
            (Phase::Stat | Phase::Read, 0) => {
                let (fh, attr_size) = v3call::parse_lookup_size(body)
                    .map_err(e)?
                    .ok_or_else(|| format!("{phase} {}: no such file", w.name))?;
                st.fh = fh;
                match (phase, attr_size) {
                    (Phase::Stat, Some(s)) => {
                        self.checked(verify::check_size(&w.name, size, Some(s)))
                    }
                    _ => Step::Next,
                }
            }
            (Phase::Stat, _) => {
                let s = v3call::parse_getattr_size(body).map_err(e)?;
                self.checked(verify::check_size(&w.name, size, Some(s)))
            }
            (Phase::Read, _) => {
                let data = v3call::parse_read(body).map_err(e)?;
                st.bytes = data.len() as u64;
                self.checked(verify::check_content(&w.name, self.write_size, data))
            }
            (Phase::Readdir, _) => {
                let page = v3call::parse_readdirplus(body).map_err(e)?;
                page_step(st, page)
            }
            (Phase::Create, _) => {
                st.bytes = size;
                Step::Done
            }
            (Phase::Remove | Phase::Rmdir, _) => Step::Done,
        })
    }

    fn checked(&self, r: Result<(), String>) -> Step {
        match r {
            Err(e) if self.verify => Step::Wrong(e),
            _ => Step::Done,
        }
    }
}

/// A listing page taken in: the names kept, the next cookie, and whether the listing
/// is done. A page that ends nothing yet says nothing new would loop forever: that
/// is the server's error.
pub fn page_step(st: &mut OpState, page: v3call::DirPage) -> Step {
    if page.eof {
        st.names.extend(page.entries.into_iter().map(|e| e.name));
        return Step::Done;
    }
    let Some(last) = page.entries.last() else {
        return Step::Failed("a listing page with no entry and no eof".into());
    };
    st.cookie = last.cookie;
    st.verf = page.verf;
    st.names.extend(page.entries.into_iter().map(|e| e.name));
    Step::Page
}

impl Proto for V3 {
    fn depth(&self) -> usize {
        self.depth
    }

    fn send(&mut self, phase: Phase, w: &Work, st: &mut OpState) -> anyhow::Result<u32> {
        let data = if phase == Phase::Create && st.step > 0 {
            verify::content(&w.name, self.write_size)
        } else {
            Vec::new()
        };
        let call = self.call(phase, w, st, &data);
        self.conn.send(&call)
    }

    fn recv(&mut self) -> anyhow::Result<(u32, anyhow::Result<Vec<u8>>)> {
        self.conn.recv()
    }

    fn reply(
        &mut self,
        phase: Phase,
        w: &Work,
        st: &mut OpState,
        body: anyhow::Result<Vec<u8>>,
    ) -> Step {
        let body = match body {
            Ok(b) => b,
            Err(e) => return Step::Failed(format!("{phase} {}: {e:#}", w.name)),
        };
        if v3call::status(&body) == JUKEBOX {
            self.conn.jukebox += 1;
            return later(st, &self.conn.retry, phase.name());
        }
        self.took(phase, w, st, &body).unwrap_or_else(Step::Failed)
    }

    fn jukebox(&self) -> u64 {
        self.conn.jukebox
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs_wire::v3call::{DirEntry, DirPage};

    fn page(names: &[(&str, u64)], eof: bool) -> DirPage {
        DirPage {
            entries: names
                .iter()
                .map(|&(n, cookie)| DirEntry {
                    name: n.as_bytes().to_vec(),
                    cookie,
                    size: None,
                })
                .collect(),
            verf: [4; 8],
            eof,
        }
    }

    #[test]
    fn listing_pages_follow_the_last_cookie_until_eof() {
        let mut st = OpState::default();
        assert_eq!(
            page_step(&mut st, page(&[("a", 3), ("b", 7)], false)),
            Step::Page
        );
        assert_eq!((st.cookie, st.verf), (7, [4; 8]));
        assert_eq!(page_step(&mut st, page(&[("c", 9)], true)), Step::Done);
        assert_eq!(st.names, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        // An empty page that does not end the listing would loop forever.
        let mut st = OpState::default();
        assert!(matches!(
            page_step(&mut st, page(&[], false)),
            Step::Failed(_)
        ));
        assert_eq!(page_step(&mut st, page(&[], true)), Step::Done);
    }
}
