//! Campaign 1: structurally valid ONC RPC calls with hostile argument values, for
//! every NFSv3 procedure (RFC 1813 §3.3.0-21) and every MOUNT v3 procedure (RFC 1813
//! §5.2.0-5), plus a few calls to procedures, versions and programs that do not exist.
//! Arguments are encoded exactly as the XDR says (so they pass the RPC layer) but their
//! values are drawn from [`super::values`].

use super::rng::Rng;
use super::values::{self as v, u32v, u64v};
use super::wire::{Cred, Enc, MOUNT_PROG, NFS_PROG};

/// One generated call, before record marking.
#[derive(Debug, Clone)]
pub struct Call {
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: Cred,
    pub args: Vec<u8>,
}

pub const NFS_PROCS: [&str; 22] = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "LOOKUP",
    "ACCESS",
    "READLINK",
    "READ",
    "WRITE",
    "CREATE",
    "MKDIR",
    "SYMLINK",
    "MKNOD",
    "REMOVE",
    "RMDIR",
    "RENAME",
    "LINK",
    "READDIR",
    "READDIRPLUS",
    "FSSTAT",
    "FSINFO",
    "PATHCONF",
    "COMMIT",
];
pub const MOUNT_PROCS: [&str; 6] = ["NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"];

impl Call {
    /// Whether the server's state is the same whether or not it runs this call
    /// (lookups, reads, attributes, listings; MOUNT only changes its mount list).
    pub fn changes_nothing(&self) -> bool {
        match (self.prog, self.vers) {
            (NFS_PROG, 3) => matches!(self.proc_, 0 | 1 | 3..=6 | 16..=20),
            _ => true,
        }
    }

    /// "NFS3 READ", "MOUNT3 MNT", "prog 100003 v4 proc 1", ...
    pub fn label(&self) -> String {
        match (self.prog, self.vers) {
            (NFS_PROG, 3) if (self.proc_ as usize) < NFS_PROCS.len() => {
                format!("NFS3 {}", NFS_PROCS[self.proc_ as usize])
            }
            (MOUNT_PROG, 3) if (self.proc_ as usize) < MOUNT_PROCS.len() => {
                format!("MOUNT3 {}", MOUNT_PROCS[self.proc_ as usize])
            }
            _ => format!("prog {} v{} proc {}", self.prog, self.vers, self.proc_),
        }
    }
}

/// The generator: a seeded stream and the real handles learned so far.
pub struct Gen {
    pub rng: Rng,
    /// Handles of files, symlinks and removed files the server gave out (and LOOKUP
    /// results, whatever they are).
    pub files: Vec<Vec<u8>>,
    /// Handles of directories (the work area, its subdirectories, MKDIR results).
    pub dirs: Vec<Vec<u8>>,
    /// Handles fuzz calls may not modify or remove through (the export root), used only
    /// by read-only procedures so a fuzz call cannot lock the checks out.
    pub readonly: Vec<Vec<u8>>,
    /// Handles learned so far (a full list is overwritten round-robin, without using
    /// the random stream, so replies do not shift the calls that follow).
    learned: usize,
    /// This call is "sane": real handles of the right kind, plain names and a root
    /// credential, so its hostile numbers reach the code past the argument checks.
    sane: bool,
    n: usize,
}

/// Most handles kept per kind; beyond this a learned handle replaces an older one.
const MAX_HANDLES: usize = 64;

impl Gen {
    pub fn new(seed: u64, files: Vec<Vec<u8>>, dirs: Vec<Vec<u8>>, readonly: Vec<Vec<u8>>) -> Gen {
        Gen {
            rng: Rng::new(seed),
            files,
            dirs,
            readonly,
            learned: 0,
            sane: false,
            n: 0,
        }
    }

    /// Remembers a handle the server returned (LOOKUP, CREATE, MKDIR, ...).
    pub fn learn(&mut self, fh: &[u8], is_dir: bool) {
        let known = |l: &Vec<Vec<u8>>| l.iter().any(|h| h == fh);
        if fh.is_empty() || known(&self.files) || known(&self.dirs) || known(&self.readonly) {
            return;
        }
        self.learned += 1;
        let list = if is_dir {
            &mut self.dirs
        } else {
            &mut self.files
        };
        if list.len() < MAX_HANDLES {
            list.push(fh.to_vec());
        } else {
            list[self.learned % MAX_HANDLES] = fh.to_vec();
        }
    }

    /// A handle: in a sane call a real one from `dir`s or files; otherwise anything
    /// [`v::handle`] makes of any real handle.
    fn fh_of(&mut self, dir: bool, e: &mut Enc) {
        let list = if dir { &self.dirs } else { &self.files };
        let h = if self.sane && !list.is_empty() {
            self.rng.pick(list).clone()
        } else {
            let all: Vec<Vec<u8>> = self.files.iter().chain(&self.dirs).cloned().collect();
            v::handle(&mut self.rng, &all)
        };
        e.var(&h);
    }

    fn fh(&mut self, e: &mut Enc) {
        self.fh_of(false, e);
    }

    fn dir(&mut self, e: &mut Enc) {
        self.fh_of(true, e);
    }

    /// A handle for a procedure that changes nothing: may also be the export root.
    fn fh_ro(&mut self, dir: bool, e: &mut Enc) {
        if !self.readonly.is_empty() && self.rng.chance(1, 4) {
            let h = self.rng.pick(&self.readonly).clone();
            e.var(&h);
        } else {
            self.fh_of(dir, e);
        }
    }

    fn name(&mut self) -> Vec<u8> {
        if self.sane {
            self.rng.pick(v::PLAIN_NAMES).to_vec()
        } else {
            v::name(&mut self.rng)
        }
    }

    fn dirop(&mut self, e: &mut Enc) {
        self.dir(e);
        let n = self.name();
        e.var(&n);
    }

    fn sattr(&mut self, e: &mut Enc) {
        self.n += 1;
        v::sattr(&mut self.rng, self.n, e);
    }

    /// The next call. The first 28 calls visit every NFSv3 and MOUNT procedure once in
    /// order; after that procedures are drawn at random, with 1 in 40 calls aimed at a
    /// procedure, version or program that does not exist. Half the calls are sane
    /// (see [`Gen::sane`]); their numbers are as hostile as the others'.
    pub fn next(&mut self, index: usize) -> Call {
        let r = &mut self.rng;
        let pick = if index < 28 { index } else { r.below(28) };
        self.sane = r.chance(1, 2);
        let cred = if self.sane { Cred::root() } else { v::cred(r) };
        if index >= 28 && r.chance(1, 40) {
            let (prog, vers, proc_) = *r.pick(&[
                (NFS_PROG, 3, 22),
                (NFS_PROG, 3, u32::MAX),
                (NFS_PROG, 2, 1),
                (NFS_PROG, 4, 1),
                (MOUNT_PROG, 3, 6),
                (MOUNT_PROG, 1, 1),
                (100000, 2, 3),
                (0, 0, 0),
            ]);
            let n = 4 * r.below(16);
            let args = r.bytes(n);
            return Call {
                prog,
                vers,
                proc_,
                cred,
                args,
            };
        }
        let (prog, proc_) = if pick < 22 {
            (NFS_PROG, pick as u32)
        } else {
            (MOUNT_PROG, (pick - 22) as u32)
        };
        let mut e = Enc::default();
        if prog == MOUNT_PROG {
            if proc_ == 1 || proc_ == 3 {
                let p = v::path(&mut self.rng);
                e.var(&p);
            }
        } else {
            self.nfs_args(proc_, &mut e);
        }
        Call {
            prog,
            vers: 3,
            proc_,
            cred,
            args: e.0,
        }
    }

    fn nfs_args(&mut self, proc_: u32, e: &mut Enc) {
        match proc_ {
            0 => {}
            1 | 5 | 18 | 19 | 20 => {
                let dir = self.rng.chance(1, 3);
                self.fh_ro(dir, e)
            }
            2 => {
                self.fh(e);
                self.sattr(e);
                let guard = self.rng.chance(1, 2);
                e.bool(guard);
                if guard {
                    e.u32(self.rng.u32())
                        .u32(*self.rng.pick(&[0, 999_999_999, 1_000_000_000]));
                }
            }
            3 => {
                self.fh_ro(true, e);
                let n = self.name();
                e.var(&n);
            }
            4 => {
                let dir = self.rng.chance(1, 3);
                self.fh_ro(dir, e);
                e.u32(u32v(&mut self.rng));
            }
            6 => {
                self.fh_ro(false, e);
                e.u64(u64v(&mut self.rng)).u32(u32v(&mut self.rng));
            }
            7 => self.write_args(e),
            8 => {
                self.dirop(e);
                let how = *self.rng.pick(&[0u32, 1, 2, 3]);
                e.u32(how);
                match how {
                    0 | 1 => self.sattr(e),
                    2 => {
                        let verf = self.rng.bytes(8);
                        e.fixed(&verf);
                    }
                    _ => {}
                }
            }
            9 => {
                self.dirop(e);
                self.sattr(e);
            }
            10 => {
                self.dirop(e);
                self.sattr(e);
                let p = v::path(&mut self.rng);
                e.var(&p);
            }
            11 => {
                self.dirop(e);
                let t = *self.rng.pick(&[1u32, 2, 3, 4, 5, 6, 7, 8, 0, u32::MAX]);
                e.u32(t);
                match t {
                    3 | 4 => {
                        self.sattr(e);
                        e.u32(u32v(&mut self.rng)).u32(u32v(&mut self.rng));
                    }
                    6 | 7 => self.sattr(e),
                    _ => {}
                }
            }
            12 | 13 => self.dirop(e),
            14 => {
                self.dirop(e);
                self.dirop(e);
            }
            15 => {
                self.fh(e);
                self.dirop(e);
            }
            16 | 17 => {
                self.fh_ro(true, e);
                e.u64(u64v(&mut self.rng));
                let verf = if self.rng.chance(1, 2) {
                    [0u8; 8].to_vec()
                } else {
                    self.rng.bytes(8)
                };
                e.fixed(&verf);
                e.u32(u32v(&mut self.rng));
                if proc_ == 17 {
                    e.u32(u32v(&mut self.rng));
                }
            }
            _ => {
                // 21 COMMIT
                self.fh_ro(false, e);
                e.u64(u64v(&mut self.rng)).u32(u32v(&mut self.rng));
            }
        }
    }

    /// WRITE3args: data mostly small, sometimes up to 1 MiB; `count` mostly equal to
    /// the data length, sometimes hostile; `stable` sometimes invalid.
    fn write_args(&mut self, e: &mut Enc) {
        self.fh(e);
        let r = &mut self.rng;
        let off = u64v(r);
        let len = match r.below(10) {
            0 => 0,
            1 => 1 << 20,
            2 => (1 << 20) + 1,
            3 => 65536,
            _ => r.below(9000),
        };
        let count = if r.chance(1, 4) { u32v(r) } else { len as u32 };
        let stable = *r.pick(&[0u32, 1, 2, 3, u32::MAX]);
        let data = vec![0x5a; len];
        e.u64(off).u32(count).u32(stable).var(&data);
    }
}

/// The handle in a successful LOOKUP, CREATE, MKDIR, SYMLINK or MKNOD result body.
pub fn returned_handle(proc_: u32, body: &[u8]) -> Option<Vec<u8>> {
    let mut d = super::wire::Dec::new(body);
    if d.u32()? != 0 {
        return None;
    }
    match proc_ {
        3 => Some(d.var(64)?.to_vec()),
        8..=11 => (d.u32()? == 1)
            .then(|| d.var(64).map(<[u8]>::to_vec))
            .flatten(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_calls_cover_every_procedure_and_seeds_repeat() {
        let mut g = Gen::new(5, vec![vec![1; 32]], vec![vec![3; 32]], vec![vec![2; 32]]);
        let labels: Vec<String> = (0..28).map(|i| g.next(i).label()).collect();
        assert_eq!(labels[0], "NFS3 NULL");
        assert_eq!(labels[21], "NFS3 COMMIT");
        assert_eq!(labels[23], "MOUNT3 MNT");
        assert_eq!(labels[27], "MOUNT3 EXPORT");
        let a: Vec<Vec<u8>> = (0..200)
            .map(|i| Gen::new(9, vec![vec![1; 8]], vec![], vec![]).next(i).args)
            .collect();
        let b: Vec<Vec<u8>> = (0..200)
            .map(|i| Gen::new(9, vec![vec![1; 8]], vec![], vec![]).next(i).args)
            .collect();
        assert_eq!(a, b);
        for c in (0..500).map(|i| g.next(i)) {
            assert_eq!(c.args.len() % 4, 0, "{}", c.label());
        }
    }

    #[test]
    fn handles_are_learned_from_create_and_lookup() {
        let mut e = Enc::default();
        e.u32(0).u32(1).var(&[3; 12]);
        assert_eq!(returned_handle(8, &e.0), Some(vec![3; 12]));
        let mut e = Enc::default();
        e.u32(0).var(&[4; 8]);
        assert_eq!(returned_handle(3, &e.0), Some(vec![4; 8]));
        assert_eq!(returned_handle(3, &[0, 0, 0, 2]), None);
        let mut g = Gen::new(1, vec![], vec![], vec![vec![9]]);
        g.learn(&[9], false);
        g.learn(&[8], false);
        g.learn(&[8], true);
        g.learn(&[7], true);
        assert_eq!((g.files, g.dirs), (vec![vec![8]], vec![vec![7]]));
    }
}
