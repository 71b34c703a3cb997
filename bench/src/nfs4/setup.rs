//! A `--nfs 4.1` run's setup and end: the client and its setup session, the export's
//! root, the file set OPENed (created where missing, filled with the pattern when the
//! workload reads), one session per load connection; after the load COMMIT and the
//! read-back of `--verify`; then CLOSE, DESTROY_SESSION and DESTROY_CLIENTID.

use super::session::{Client4, Opened};
use super::SessionId;
use crate::fileset::{file_name, BlockSet, FileSet};
use crate::pattern::Pattern;
use crate::stats::Stats;
use crate::transport::Target;
use crate::workload::Kind;

/// Slots bench asks for its own setup session (pipelined fill and read-back).
const SETUP_SLOTS: u32 = 8;

pub struct Setup4 {
    pub client: Client4,
    pub opened: Vec<Opened>,
    /// One per load connection.
    pub sessions: Vec<SessionId>,
    /// Fore slots of every load session: the queue depth, capped at the fewest granted.
    pub slots: u32,
}

impl Setup4 {
    /// Connects, opens the set (`n` files named after `base`, `size` bytes; filled when
    /// `fill`) and creates `conns` sessions of `qd` slots. Returns the set too.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare(
        target: &Target,
        export: &str,
        base: &str,
        n: usize,
        size: u64,
        fill: bool,
        uses_files: bool,
        conns: usize,
        qd: usize,
    ) -> anyhow::Result<(Setup4, FileSet)> {
        anyhow::ensure!(
            matches!(target, Target::Tcp(_)),
            "--nfs 4.1 runs over tcp:// only (NFSv4.1 over RPC-over-RDMA is not supported yet)"
        );
        let mut client = Client4::connect(target, SETUP_SLOTS)?;
        let root = client.root(export)?;
        let mut set = FileSet {
            dir: root.clone(),
            names: Vec::new(),
            handles: Vec::new(),
            size,
            stateids: Vec::new(),
        };
        let mut opened = Vec::new();
        let mut announced = false;
        for i in 0..if uses_files { n } else { 0 } {
            let name = file_name(base, i, n);
            let f = client.open(&root, &name)?;
            if fill && size > 0 && f.size < size {
                if !announced {
                    eprintln!("bench: writing the pattern into {n} file(s) of {size} bytes");
                    announced = true;
                }
                client
                    .write_pattern(&f, size, &Pattern::for_file(i as u64))
                    .map_err(|e| anyhow::anyhow!("preparing {name}: {e:#}"))?;
            }
            set.names.push(name);
            set.handles.push(f.fh.clone());
            set.stateids.push(f.stateid);
            opened.push(f);
        }
        let want = u32::try_from(qd).unwrap_or(u32::MAX);
        let mut sessions = Vec::with_capacity(conns);
        let mut slots = want;
        for _ in 0..conns {
            let s = client.create_session(want)?;
            slots = slots.min(s.slots);
            sessions.push(s.id);
        }
        if slots < want {
            eprintln!("bench: the server granted {slots} slot(s) per session: --qd {qd} is capped at {slots}");
        }
        Ok((
            Setup4 {
                client,
                opened,
                sessions,
                slots,
            },
            set,
        ))
    }

    /// After a load that wrote: COMMIT every file written (a failure counts as a write
    /// error), then with `verify` read every written block back and check it.
    pub fn finish_writes(
        &mut self,
        files: &FileSet,
        bs: u32,
        written: &BlockSet,
        track: bool,
        stats: &mut Stats,
    ) {
        let bs = u64::from(bs);
        for (i, f) in self.opened.iter().enumerate() {
            if track && !written.touched(i) {
                continue;
            }
            if let Err(e) = self.client.commit(&f.fh) {
                eprintln!("bench: COMMIT of {}: {e:#}", files.names[i]);
                stats.kind(Kind::Write).errors += 1;
            }
        }
        if !track {
            return;
        }
        for (i, f) in self.opened.iter().enumerate() {
            let blocks: Vec<(u64, u32)> = written
                .blocks_of(i)
                .map(|b| {
                    let off = b * bs;
                    (off, bs.min(files.size.saturating_sub(off)).max(1) as u32)
                })
                .collect();
            let pat = Pattern::for_file(i as u64);
            let w = stats.kind(Kind::Write);
            match self.client.read_back(f, &blocks, &pat, &files.names[i]) {
                Ok((good, bad)) => {
                    w.verified_bytes += good;
                    w.verify_failures += bad;
                }
                Err(e) => {
                    eprintln!("bench: reading {} back: {e:#}", files.names[i]);
                    w.verify_failures += 1;
                }
            }
        }
    }

    /// CLOSE every file, DESTROY_SESSION every session, DESTROY_CLIENTID. Problems
    /// are reported on stderr and returned as one error.
    pub fn teardown(mut self) -> anyhow::Result<()> {
        let mut bad = Vec::new();
        for f in std::mem::take(&mut self.opened) {
            if let Err(e) = self.client.close(&f) {
                bad.push(format!("{e:#}"));
            }
        }
        for s in std::mem::take(&mut self.sessions) {
            if let Err(e) = self.client.destroy_session(&s) {
                bad.push(format!("{e:#}"));
            }
        }
        if let Err(e) = self.client.finish() {
            bad.push(format!("{e:#}"));
        }
        anyhow::ensure!(bad.is_empty(), "ending the NFSv4.1 client: {}", bad.join("; "));
        Ok(())
    }
}
