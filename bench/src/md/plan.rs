//! What an `md` run does, decided before any call goes out: the phases in their fixed
//! order, the tree (one directory per connection, IO500 mdtest-easy; or one directory
//! all connections share, mdtest-hard), and the names every connection works on.

use std::fmt;

/// The phases, in the order they run (mdtest's: make the tree, create, stat, read,
/// list, remove, remove the tree).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Mkdir,
    Create,
    Stat,
    Read,
    Readdir,
    Remove,
    Rmdir,
}

pub const ALL_PHASES: [Phase; 7] = [
    Phase::Mkdir,
    Phase::Create,
    Phase::Stat,
    Phase::Read,
    Phase::Readdir,
    Phase::Remove,
    Phase::Rmdir,
];

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Mkdir => "mkdir",
            Phase::Create => "create",
            Phase::Stat => "stat",
            Phase::Read => "read",
            Phase::Readdir => "readdir",
            Phase::Remove => "remove",
            Phase::Rmdir => "rmdir",
        }
    }

    /// Phases that build or tear down the tree run whether reported or not: the
    /// others need the tree, and a run leaves the export as it found it.
    pub fn always_runs(self) -> bool {
        matches!(
            self,
            Phase::Mkdir | Phase::Create | Phase::Remove | Phase::Rmdir
        )
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The phases to report, from `--phases a,b,...`: known names, each once; they run
/// in the fixed order whatever order they are given in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phases(Vec<Phase>);

impl Phases {
    pub fn parse(s: &str) -> Result<Phases, String> {
        let mut v = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let p = ALL_PHASES
                .into_iter()
                .find(|p| p.name() == part)
                .ok_or_else(|| {
                    let names: Vec<&str> = ALL_PHASES.iter().map(|p| p.name()).collect();
                    format!("unknown phase {part:?} (phases: {})", names.join(","))
                })?;
            if v.contains(&p) {
                return Err(format!("phase {part} given twice"));
            }
            v.push(p);
        }
        if v.is_empty() {
            return Err("no phase given".into());
        }
        v.sort();
        Ok(Phases(v))
    }

    pub fn reported(&self, p: Phase) -> bool {
        self.0.contains(&p)
    }

    /// The phases that run, in order: the reported ones and those that always run.
    pub fn to_run(&self) -> Vec<Phase> {
        ALL_PHASES
            .into_iter()
            .filter(|&p| p.always_runs() || self.reported(p))
            .collect()
    }
}

impl Default for Phases {
    fn default() -> Self {
        Phases(ALL_PHASES.to_vec())
    }
}

/// `--tree`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Tree {
    /// Each connection in a directory of its own (IO500 mdtest-easy).
    Easy,
    /// All connections in one shared directory, names unique per connection
    /// (mdtest-hard).
    Hard,
}

/// The names of a run under its top directory.
#[derive(Clone, Debug)]
pub struct Plan {
    pub tree: Tree,
    pub conns: usize,
    pub files: usize,
}

impl Plan {
    /// The work directories, under the top directory: one per connection (easy) or
    /// one shared (hard).
    pub fn dirs(&self) -> Vec<String> {
        match self.tree {
            Tree::Easy => (0..self.conns).map(|c| format!("conn.{c}")).collect(),
            Tree::Hard => vec!["shared".into()],
        }
    }

    /// Which of [`Plan::dirs`] connection `c` works in.
    pub fn dir_of(&self, c: usize) -> usize {
        match self.tree {
            Tree::Easy => c,
            Tree::Hard => 0,
        }
    }

    /// The directories connection `c` makes and removes (mkdir, rmdir): its own
    /// (easy); the shared one is connection 0's (hard).
    pub fn dirs_made_by(&self, c: usize) -> Vec<usize> {
        match self.tree {
            Tree::Easy => vec![c],
            Tree::Hard if c == 0 => vec![0],
            Tree::Hard => Vec::new(),
        }
    }

    /// File `i` of connection `c`: unique across connections, so the hard tree's
    /// shared directory holds every connection's files.
    pub fn file(&self, c: usize, i: usize) -> String {
        format!("f.{c}.{i}")
    }

    pub fn files_of(&self, c: usize) -> Vec<String> {
        (0..self.files).map(|i| self.file(c, i)).collect()
    }

    /// The names a listing of directory `d` must show after the create phase: the
    /// files of every connection working in it.
    pub fn expected_in(&self, d: usize) -> Vec<String> {
        (0..self.conns)
            .filter(|&c| self.dir_of(c) == d)
            .flat_map(|c| self.files_of(c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_parse_and_run_in_order() {
        let p = Phases::parse("stat, create").unwrap();
        assert!(p.reported(Phase::Stat) && !p.reported(Phase::Read));
        assert_eq!(
            p.to_run(),
            vec![
                Phase::Mkdir,
                Phase::Create,
                Phase::Stat,
                Phase::Remove,
                Phase::Rmdir
            ]
        );
        assert_eq!(Phases::default().to_run(), ALL_PHASES.to_vec());
        assert!(Phases::parse("stat,stat").unwrap_err().contains("twice"));
        assert!(Phases::parse("open").unwrap_err().contains("unknown phase"));
        assert!(Phases::parse(" , ").is_err());
    }

    #[test]
    fn easy_gives_each_connection_its_directory() {
        let p = Plan {
            tree: Tree::Easy,
            conns: 2,
            files: 3,
        };
        assert_eq!(p.dirs(), vec!["conn.0", "conn.1"]);
        assert_eq!((p.dir_of(1), p.dirs_made_by(1)), (1, vec![1]));
        assert_eq!(p.expected_in(1), vec!["f.1.0", "f.1.1", "f.1.2"]);
    }

    #[test]
    fn hard_shares_one_directory_with_unique_names() {
        let p = Plan {
            tree: Tree::Hard,
            conns: 3,
            files: 2,
        };
        assert_eq!(p.dirs(), vec!["shared"]);
        assert_eq!((p.dir_of(2), p.dirs_made_by(2)), (0, vec![]));
        assert_eq!(p.dirs_made_by(0), vec![0]);
        let all = p.expected_in(0);
        assert_eq!(all.len(), 6);
        let mut uniq = all.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), 6);
    }
}
