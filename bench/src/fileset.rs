//! The file set read and write workloads spread over: `--files N` files of
//! `--file-size` bytes in the export's root, named `--file` (one file) or
//! `<--file>.<i>` (several). Created if missing; filled with the pattern when the
//! workload reads (a file at least `--file-size` long is used as it is).

use crate::client::Conn;
use crate::pattern::Pattern;
use crate::pnfs::stripe::View;

pub struct FileSet {
    /// The directory holding the set (the export's root).
    pub dir: Vec<u8>,
    pub names: Vec<String>,
    pub handles: Vec<Vec<u8>>,
    /// Bytes per file.
    pub size: u64,
    /// NFSv4.1: each file's open stateid (empty for NFSv3).
    pub stateids: Vec<crate::nfs4::Stateid>,
    /// Each file's index in the whole set, when this is a part of it (`--pnfs`: the
    /// files one data server holds); empty: the file's own index. The pattern depends
    /// on it, so a part reads and writes what the whole set would.
    pub seeds: Vec<u64>,
    /// NFSv3 only: each file's credential, when not bench's AUTH_SYS root (`--pnfs`:
    /// the synthetic ids of the file's layout, RFC 8435 §5.1); empty: root for all.
    pub creds: Vec<engine::rpc::Cred>,
    /// `--pnfs` with striped layouts: each file's share on this set's data server
    /// (`pnfs::stripe::View`; `None`, or empty: the whole file).
    pub stripes: Vec<Option<View>>,
}

impl FileSet {
    /// The verification pattern of file `i` of this set.
    pub fn pattern(&self, i: usize) -> Pattern {
        Pattern::for_file(self.seeds.get(i).copied().unwrap_or(i as u64))
    }

    fn view(&self, i: usize) -> Option<&View> {
        self.stripes.get(i).and_then(Option::as_ref)
    }

    /// What of block `block` of file `i` goes to this set's server: (offset, length);
    /// the whole block unless the file is striped (`None`: none of it).
    pub fn piece(&self, i: usize, bs: u32, block: u64) -> Option<(u64, u32)> {
        match self.view(i) {
            None => Some((block.saturating_mul(u64::from(bs)), bs)),
            Some(v) => v.piece(bs, block),
        }
    }

    /// The first block of file `i` from `block` on with a piece here (`piece`).
    pub fn next_block(&self, i: usize, bs: u32, blocks: u64, block: u64) -> Option<u64> {
        match self.view(i) {
            None => (block < blocks).then_some(block),
            Some(v) => v.next_block(bs, blocks, block),
        }
    }

    /// A block of file `i` with a piece here, chosen by `r` (any block of a file
    /// that is not striped; block 0 of a striped file with none here, which a load
    /// never meets: a data server's set holds only files it has a piece of).
    pub fn pick_block(&self, i: usize, bs: u32, blocks: u64, r: u64) -> u64 {
        match self.view(i) {
            None => r % blocks.max(1),
            Some(v) => v.pick(bs, blocks, r).unwrap_or(0),
        }
    }
}

/// The name of file `i` of a set of `n` named `base`.
pub fn file_name(base: &str, i: usize, n: usize) -> String {
    if n == 1 {
        base.to_string()
    } else {
        format!("{base}.{i}")
    }
}

impl FileSet {
    /// Looks up (creating where missing) the `n` files; with `fill`, writes the pattern
    /// into every file shorter than `size`.
    pub fn prepare(
        c: &mut Conn,
        dir: &[u8],
        base: &str,
        n: usize,
        size: u64,
        fill: bool,
    ) -> anyhow::Result<FileSet> {
        let mut names = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        let mut announced = false;
        for i in 0..n {
            let name = file_name(base, i, n);
            let existing = match c.lookup(dir, &name)? {
                Some(fh) => {
                    let len = c.size(&fh)?;
                    Some((fh, len))
                }
                None => None,
            };
            let fh = match existing {
                Some((fh, len)) if !fill || len >= size => fh,
                other => {
                    let fh = match other {
                        Some((fh, _)) => fh,
                        None => c.create(dir, &name)?,
                    };
                    if fill && size > 0 {
                        if !announced {
                            eprintln!(
                                "bench: writing the pattern into {} file(s) of {} bytes",
                                n, size
                            );
                            announced = true;
                        }
                        c.write_pattern(&fh, size, &Pattern::for_file(i as u64), 8)
                            .map_err(|e| anyhow::anyhow!("preparing {name}: {e:#}"))?;
                    }
                    fh
                }
            };
            names.push(name);
            handles.push(fh);
        }
        Ok(FileSet {
            dir: dir.to_vec(),
            names,
            handles,
            size,
            stateids: Vec::new(),
            seeds: Vec::new(),
            creds: Vec::new(),
            stripes: Vec::new(),
        })
    }

    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Whole blocks of `bs` per file (at least 1: a file smaller than a block is read
    /// and written as one short block at offset 0).
    pub fn blocks(&self, bs: u32) -> u64 {
        (self.size / bs as u64).max(1)
    }
}

/// Which blocks of which files were written (for reading them back with `--verify`).
#[derive(Clone, Debug, Default)]
pub struct BlockSet {
    bits: Vec<Vec<u64>>,
}

impl BlockSet {
    pub fn new(files: usize, blocks: u64) -> BlockSet {
        BlockSet {
            bits: vec![vec![0u64; blocks.div_ceil(64) as usize]; files],
        }
    }

    pub fn insert(&mut self, file: usize, block: u64) {
        if let Some(w) = self
            .bits
            .get_mut(file)
            .and_then(|f| f.get_mut((block / 64) as usize))
        {
            *w |= 1 << (block % 64);
        }
    }

    pub fn union(&mut self, o: &BlockSet) {
        if self.bits.is_empty() {
            self.bits = o.bits.clone();
            return;
        }
        for (a, b) in self.bits.iter_mut().zip(&o.bits) {
            for (x, y) in a.iter_mut().zip(b) {
                *x |= y;
            }
        }
    }

    /// The written blocks of `file`, in order.
    pub fn blocks_of(&self, file: usize) -> impl Iterator<Item = u64> + '_ {
        self.bits
            .get(file)
            .into_iter()
            .flat_map(|f| f.iter().enumerate())
            .flat_map(|(w, &bits)| {
                (0..64u64)
                    .filter(move |b| bits & (1 << b) != 0)
                    .map(move |b| w as u64 * 64 + b)
            })
    }

    pub fn touched(&self, file: usize) -> bool {
        self.bits
            .get(file)
            .is_some_and(|f| f.iter().any(|&w| w != 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_written_blocks() {
        assert_eq!(file_name("bench.dat", 0, 1), "bench.dat");
        assert_eq!(file_name("f", 3, 10), "f.3");
        let mut a = BlockSet::new(2, 130);
        a.insert(0, 0);
        a.insert(0, 129);
        a.insert(7, 1); // out of range: ignored
        let mut b = BlockSet::new(2, 130);
        b.insert(1, 64);
        let mut u = BlockSet::default();
        u.union(&a);
        u.union(&b);
        assert_eq!(u.blocks_of(0).collect::<Vec<_>>(), vec![0, 129]);
        assert_eq!(u.blocks_of(1).collect::<Vec<_>>(), vec![64]);
        assert!(u.touched(1) && !BlockSet::new(2, 10).touched(0));
        assert_eq!(u.blocks_of(5).count(), 0);
    }
}
