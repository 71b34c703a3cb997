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

/// The session and slots of one load connection.
#[derive(Clone, Copy, Debug)]
pub struct ConnSession {
    pub session: SessionId,
    /// Its slots are `base..base + slots` of the session.
    pub base: u32,
    pub slots: u32,
    /// The session's highest slot id (sa_highest_slotid).
    pub highest: u32,
}

pub struct Setup4 {
    pub client: Client4,
    pub opened: Vec<Opened>,
    /// The load sessions (destroyed at the end).
    pub sessions: Vec<SessionId>,
    /// Per load connection: its session and slot range.
    pub conns: Vec<ConnSession>,
    /// Slots of every connection: the queue depth, capped at what the server granted.
    pub slots: u32,
}

/// Spreads `conns` connections over sessions granted `granted[i]` slots each:
/// connection `c` uses session `c % sessions`, and a session's slots are split evenly
/// between its connections, at most `qd` each. Returns the per-connection ranges and
/// the slots each connection gets (the same for all: the fewest).
pub fn spread(ids: &[(SessionId, u32)], conns: usize, qd: u32) -> (Vec<ConnSession>, u32) {
    let m = ids.len().max(1);
    let mut per = qd;
    for (i, &(_, granted)) in ids.iter().enumerate() {
        let sharing = (conns + m - 1 - i) / m; // connections on session i
        if sharing > 0 {
            per = per.min(granted / sharing as u32);
        }
    }
    let out = (0..conns)
        .filter_map(|c| {
            let (id, granted) = *ids.get(c % m)?;
            Some(ConnSession {
                session: id,
                base: (c / m) as u32 * per,
                slots: per,
                highest: granted.saturating_sub(1),
            })
        })
        .collect();
    (out, per)
}

impl Setup4 {
    /// Connects, opens the set (`n` files named after `base`, `size` bytes; filled when
    /// `fill`) and creates `conns` sessions of `qd` slots. Returns the set too.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare(
        target: &Target,
        export: Option<&str>,
        base: &str,
        n: usize,
        size: u64,
        fill: bool,
        uses_files: bool,
        conns: usize,
        qd: usize,
        retry: crate::jukebox::Policy,
    ) -> anyhow::Result<(Setup4, FileSet)> {
        let mut client = Client4::connect(target, SETUP_SLOTS)?;
        client.set_retry(retry);
        let export = crate::exports::choose(export, || client.exports())?;
        let root = client.root(&export)?;
        let mut set = FileSet {
            dir: root.clone(),
            names: Vec::new(),
            handles: Vec::new(),
            size,
            stateids: Vec::new(),
            seeds: Vec::new(),
            creds: Vec::new(),
            stripes: Vec::new(),
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
        // One session per connection; when the server refuses more sessions (it may
        // limit them per client), connections share the ones made, each on its own
        // range of the session's slots.
        let want = u32::try_from(qd).unwrap_or(u32::MAX);
        let mut made = Vec::with_capacity(conns);
        for i in 0..conns {
            match client.create_session(want) {
                Ok(s) => made.push((s.id, s.slots)),
                Err(e) if i > 0 => {
                    eprintln!("bench: {i} session(s) made ({e:#}): {conns} connections share them");
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        let (conn_sessions, slots) = spread(&made, conns, want);
        anyhow::ensure!(
            slots > 0,
            "the server's sessions have fewer slots than the {conns} connections sharing them"
        );
        if slots < want {
            eprintln!("bench: session slots allow {slots} call(s) in flight per connection: --qd {qd} is capped at {slots}");
        }
        Ok((
            Setup4 {
                client,
                opened,
                sessions: made.into_iter().map(|(id, _)| id).collect(),
                conns: conn_sessions,
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
        anyhow::ensure!(
            bad.is_empty(),
            "ending the NFSv4.1 client: {}",
            bad.join("; ")
        );
        Ok(())
    }
}
