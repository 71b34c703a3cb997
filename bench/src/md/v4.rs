//! The metadata ops over NFSv4.1 (RFC 8881), one COMPOUND each, after SEQUENCE on the
//! connection's own session: mkdir = PUTFH, CREATE (NF4DIR), GETFH; create = PUTFH,
//! OPEN (create, UNCHECKED4), WRITE of the content FILE_SYNC4 with the current
//! stateid (§16.2.3.1.2), CLOSE; stat = PUTFH, LOOKUP, GETATTR (size); read = PUTFH,
//! OPEN (no create, read), READ, CLOSE; readdir = PUTFH, READDIR pages; remove and
//! rmdir = PUTFH, REMOVE.

use super::exec::{later, OpState, Proto, Step, Work};
use super::plan::Phase;
use super::v3::page_step;
use super::verify;
use crate::jukebox::JUKEBOX;
use crate::nfs4::reply::{self, status_name, Decoded};
use crate::nfs4::session::Client4;
use crate::nfs4::{Op4, Stateid, FATTR4_SIZE};

pub struct V4 {
    pub client: Client4,
    write_size: usize,
    verify: bool,
    jukebox: u64,
    retry: crate::jukebox::Policy,
}

impl V4 {
    pub fn new(
        client: Client4,
        write_size: usize,
        verify: bool,
        retry: crate::jukebox::Policy,
    ) -> V4 {
        V4 {
            client,
            write_size,
            verify,
            jukebox: 0,
            retry,
        }
    }

    fn checked(&self, r: Result<(), String>) -> Step {
        match r {
            Err(e) if self.verify => Step::Wrong(e),
            _ => Step::Done,
        }
    }

    fn took(&self, phase: Phase, w: &Work, st: &mut OpState, d: Decoded) -> Step {
        match phase {
            Phase::Mkdir => match d.fh {
                Some(fh) => {
                    st.fh = fh.to_vec();
                    Step::Done
                }
                None => Step::Failed(format!("mkdir {}: GETFH returned no handle", w.name)),
            },
            Phase::Create => {
                st.bytes = self.write_size as u64;
                Step::Done
            }
            Phase::Stat => {
                self.checked(verify::check_size(&w.name, self.write_size as u64, d.size))
            }
            Phase::Read => {
                let data = d.data.unwrap_or_default();
                st.bytes = data.len() as u64;
                self.checked(verify::check_content(&w.name, self.write_size, data))
            }
            Phase::Readdir => match d.dir {
                Some(page) => page_step(st, page),
                None => Step::Failed(format!("readdir {}: no listing in the reply", w.name)),
            },
            Phase::Remove | Phase::Rmdir => Step::Done,
        }
    }
}

impl Proto for V4 {
    fn depth(&self) -> usize {
        self.client.slots()
    }

    fn send(&mut self, phase: Phase, w: &Work, st: &mut OpState) -> anyhow::Result<u32> {
        let (dir, name) = (w.dir.as_slice(), w.name.as_str());
        let (clientid, owner) = (self.client.clientid, self.client.owner.clone());
        let cur = Stateid::CURRENT;
        let data = match phase {
            Phase::Create => verify::content(name, self.write_size),
            _ => Vec::new(),
        };
        let mut ops = vec![Op4::Putfh(dir)];
        match phase {
            Phase::Mkdir => ops.extend([Op4::Mkdir(name), Op4::Getfh]),
            Phase::Create => {
                ops.push(Op4::OpenCreate {
                    clientid,
                    owner: &owner,
                    name,
                });
                if !data.is_empty() {
                    ops.push(Op4::WriteSync(cur, 0, &data));
                }
                ops.push(Op4::Close(cur));
            }
            Phase::Stat => ops.extend([Op4::Lookup(name), Op4::Getattr(&[FATTR4_SIZE])]),
            Phase::Read => ops.extend([
                Op4::OpenRead {
                    clientid,
                    owner: &owner,
                    name,
                },
                // One byte more than was written: a longer file shows.
                Op4::Read(cur, 0, self.write_size as u32 + 1),
                Op4::Close(cur),
            ]),
            Phase::Readdir => ops.push(Op4::ReaddirAt(st.cookie, st.verf)),
            Phase::Remove | Phase::Rmdir => ops.push(Op4::Remove(name)),
        }
        let (xid, seq) = self.client.send(&ops)?;
        st.seq = Some(seq);
        Ok(xid)
    }

    fn recv(&mut self) -> anyhow::Result<(u32, anyhow::Result<Vec<u8>>)> {
        self.client.recv()
    }

    fn reply(
        &mut self,
        phase: Phase,
        w: &Work,
        st: &mut OpState,
        body: anyhow::Result<Vec<u8>>,
    ) -> Step {
        let seq = st.seq.take();
        let body = match body {
            Ok(b) => b,
            Err(e) => {
                if let Some(s) = seq {
                    self.client.release(&s, false);
                }
                return Step::Failed(format!("{phase} {}: {e:#}", w.name));
            }
        };
        let d = match reply::decode(&body) {
            Ok(d) => d,
            Err(e) => {
                if let Some(s) = seq {
                    self.client.release(&s, false);
                }
                return Step::Failed(format!("{phase} {}: {e}", w.name));
            }
        };
        if let Some(s) = seq {
            self.client.release(&s, d.seq_done);
        }
        match d.status {
            0 => self.took(phase, w, st, d),
            JUKEBOX => {
                self.jukebox += 1;
                later(st, &self.retry, phase.name())
            }
            s => Step::Failed(format!(
                "{phase} {}: {} (op {})",
                w.name,
                status_name(s),
                d.failed_op
            )),
        }
    }

    fn jukebox(&self) -> u64 {
        self.jukebox
    }

    fn finish(self: Box<Self>) -> anyhow::Result<()> {
        self.client.finish()
    }
}
