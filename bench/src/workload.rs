//! What bench asks for: workload ops (the names users give to `--workload` and
//! `--mix`), the op types results are recorded under, and weighted mixes.

use std::fmt;

/// One workload op, as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Op {
    Null,
    Getattr,
    Lookup,
    Readdirplus,
    /// CREATE of a unique name, then REMOVE of it (two recorded ops).
    Createremove,
    /// MKDIR of a unique name, then RMDIR of it (two recorded ops; NFSv4.1: CREATE
    /// of an NF4DIR, then REMOVE).
    Mkdirrmdir,
    Randread,
    Seqread,
    Randwrite,
    Seqwrite,
    /// A whole file of the set copied to a new name: COPY inside the server (NFSv4.2,
    /// RFC 7862 §15.2), or READ + WRITE through bench with `--copy-through-client`.
    /// A run of its own (`copy.rs`), never part of a mix.
    Copy,
}

pub const ALL_OPS: [Op; 11] = [
    Op::Null,
    Op::Getattr,
    Op::Lookup,
    Op::Readdirplus,
    Op::Createremove,
    Op::Mkdirrmdir,
    Op::Randread,
    Op::Seqread,
    Op::Randwrite,
    Op::Seqwrite,
    Op::Copy,
];

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Null => "null",
            Op::Getattr => "getattr",
            Op::Lookup => "lookup",
            Op::Readdirplus => "readdirplus",
            Op::Createremove => "createremove",
            Op::Mkdirrmdir => "mkdirrmdir",
            Op::Randread => "randread",
            Op::Seqread => "seqread",
            Op::Randwrite => "randwrite",
            Op::Seqwrite => "seqwrite",
            Op::Copy => "copy",
        }
    }

    pub fn reads(self) -> bool {
        matches!(self, Op::Randread | Op::Seqread)
    }

    pub fn writes(self) -> bool {
        matches!(self, Op::Randwrite | Op::Seqwrite)
    }

    /// Ops that touch the file set's handles.
    pub fn uses_files(self) -> bool {
        !matches!(
            self,
            Op::Null | Op::Readdirplus | Op::Createremove | Op::Mkdirrmdir
        )
    }

    /// The op types this op is recorded under.
    pub fn kinds(self) -> &'static [Kind] {
        match self {
            Op::Null => &[Kind::Null],
            Op::Getattr => &[Kind::Getattr],
            Op::Lookup => &[Kind::Lookup],
            Op::Readdirplus => &[Kind::Readdirplus],
            Op::Createremove => &[Kind::Create, Kind::Remove],
            Op::Mkdirrmdir => &[Kind::Mkdir, Kind::Rmdir],
            Op::Randread | Op::Seqread => &[Kind::Read],
            Op::Randwrite | Op::Seqwrite => &[Kind::Write],
            // Reported by the copy run itself (MiB/s and copies/s), not per procedure.
            Op::Copy => &[Kind::Write],
        }
    }

    fn parse(s: &str) -> Option<Op> {
        ALL_OPS.into_iter().find(|o| o.name() == s)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The op types results are recorded under (one NFS procedure each): the keys of
/// `per_op` in the JSON output and the tags of the interval log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Read,
    Write,
    Getattr,
    Lookup,
    Readdirplus,
    Create,
    Remove,
    Null,
    Mkdir,
    Rmdir,
}

pub const KINDS: usize = 10;

pub const ALL_KINDS: [Kind; KINDS] = [
    Kind::Read,
    Kind::Write,
    Kind::Getattr,
    Kind::Lookup,
    Kind::Readdirplus,
    Kind::Create,
    Kind::Remove,
    Kind::Null,
    Kind::Mkdir,
    Kind::Rmdir,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Getattr => "getattr",
            Kind::Lookup => "lookup",
            Kind::Readdirplus => "readdirplus",
            Kind::Create => "create",
            Kind::Remove => "remove",
            Kind::Null => "null",
            Kind::Mkdir => "mkdir",
            Kind::Rmdir => "rmdir",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// The op type of the call a successful reply of this type owes on the same name
    /// (the REMOVE after a CREATE, the RMDIR after a MKDIR), if any.
    pub fn followed_by(self) -> Option<Kind> {
        match self {
            Kind::Create => Some(Kind::Remove),
            Kind::Mkdir => Some(Kind::Rmdir),
            _ => None,
        }
    }
}

/// A weighted mix of ops. Weights are relative (70/20/10 and 7/2/1 are the same mix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mix {
    entries: Vec<(Op, u32)>,
    total: u32,
}

impl Mix {
    /// A mix of one op.
    pub fn single(op: Op) -> Mix {
        Mix {
            entries: vec![(op, 100)],
            total: 100,
        }
    }

    /// Parses `op:weight,op:weight,...` (e.g. `randread:70,randwrite:20,getattr:10`).
    /// A bare `op` has weight 1; an op named twice adds up; weight 0 leaves it out.
    pub fn parse(s: &str) -> Result<Mix, String> {
        let mut entries: Vec<(Op, u32)> = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = match part.split_once(':') {
                Some((n, w)) => (
                    n.trim(),
                    w.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("weight of {n:?} must be a whole number: {w:?}"))?,
                ),
                None => (part, 1),
            };
            let op = Op::parse(name).ok_or_else(|| {
                format!(
                    "unknown op {name:?} in the mix (ops: {})",
                    ALL_OPS.map(Op::name).join(", ")
                )
            })?;
            if op == Op::Copy {
                return Err("copy is a run of its own (--workload copy), not part of a mix".into());
            }
            match entries.iter_mut().find(|(o, _)| *o == op) {
                Some((_, w)) => *w = w.saturating_add(weight),
                None => entries.push((op, weight)),
            }
        }
        entries.retain(|&(_, w)| w > 0);
        let total = entries
            .iter()
            .try_fold(0u32, |t, &(_, w)| t.checked_add(w))
            .ok_or("mix weights add up to more than 2^32")?;
        if total == 0 {
            return Err(format!("the mix {s:?} has no op with a positive weight"));
        }
        Ok(Mix { entries, total })
    }

    pub fn entries(&self) -> &[(Op, u32)] {
        &self.entries
    }

    pub fn ops(&self) -> impl Iterator<Item = Op> + '_ {
        self.entries.iter().map(|&(o, _)| o)
    }

    pub fn any(&self, f: impl Fn(Op) -> bool) -> bool {
        self.ops().any(f)
    }

    /// The op for a uniformly random `r` (any u64): op `i` is chosen with probability
    /// `weight_i / total`.
    pub fn pick(&self, r: u64) -> Op {
        let mut x = (r % self.total as u64) as u32;
        for &(op, w) in &self.entries {
            if x < w {
                return op;
            }
            x -= w;
        }
        self.entries[self.entries.len() - 1].0
    }

    /// The op types this mix records, in report order.
    pub fn kinds(&self) -> Vec<Kind> {
        let mut k: Vec<Kind> = self.ops().flat_map(|o| o.kinds().iter().copied()).collect();
        k.sort();
        k.dedup();
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse() {
        let m = Mix::parse("randread:70,randwrite:20,getattr:10").unwrap();
        assert_eq!(
            m.entries(),
            &[(Op::Randread, 70), (Op::Randwrite, 20), (Op::Getattr, 10)]
        );
        assert_eq!(m.kinds(), vec![Kind::Read, Kind::Write, Kind::Getattr]);
        let m = Mix::parse(" createremove , lookup:3,lookup:2,null:0 ").unwrap();
        assert_eq!(m.entries(), &[(Op::Createremove, 1), (Op::Lookup, 5)]);
        assert_eq!(m.kinds(), vec![Kind::Lookup, Kind::Create, Kind::Remove]);
        for bad in [
            "",
            "null:0",
            "randread:x",
            "randread:-1",
            "bogus:1",
            "randread:4294967295,getattr:1",
            "copy",
            "randread:1,copy:1",
        ] {
            assert!(Mix::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Mix::parse("bogus").unwrap_err().contains("randread"));
    }

    #[test]
    fn picks_follow_the_weights() {
        let m = Mix::parse("randread:70,randwrite:20,getattr:10").unwrap();
        let mut n = [0u32; 3];
        for r in 0..1000u64 {
            match m.pick(r) {
                Op::Randread => n[0] += 1,
                Op::Randwrite => n[1] += 1,
                Op::Getattr => n[2] += 1,
                o => panic!("{o}"),
            }
        }
        assert_eq!(n, [700, 200, 100]);
        assert_eq!(Mix::single(Op::Null).pick(u64::MAX), Op::Null);
    }
}
