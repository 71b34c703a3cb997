//! STUB: replaced by the file model implementation.
use super::*;
use std::path::Path;

pub(super) struct Inner;

#[allow(unused_variables)]
impl Inner {
    pub fn open(backend: Arc<dyn Backend>, state_dir: &Path, exports: &[ExportRoot]) -> anyhow::Result<Inner> { todo!() }
    pub fn write_verifier(&self) -> [u8; 8] { todo!() }
    pub fn root(&self, export: u16) -> FsResult<Node> { todo!() }
    pub fn handle(&self, node: &Node) -> FileHandle { todo!() }
    pub fn resolve(&self, fh: &[u8]) -> FsResult<Node> { todo!() }
    pub fn getattr(&self, node: &Node) -> FsResult<Attr> { todo!() }
    pub fn setattr(&self, node: &Node, set: &SetAttr) -> FsResult<()> { todo!() }
    pub fn lookup(&self, dir: &Node, name: &[u8]) -> FsResult<Node> { todo!() }
    pub fn readlink(&self, node: &Node) -> FsResult<Vec<u8>> { todo!() }
    pub fn read(&self, node: &Node, offset: u64, dst: &mut [u8]) -> FsResult<(usize, bool)> { todo!() }
    pub fn write(&self, node: &Node, offset: u64, data: &[u8], stable: Stable) -> FsResult<Stable> { todo!() }
    pub fn create(&self, dir: &Node, name: &[u8], how: &CreateMode, owner: Owner) -> FsResult<Node> { todo!() }
    pub fn mkdir(&self, dir: &Node, name: &[u8], set: &SetAttr, owner: Owner) -> FsResult<Node> { todo!() }
    pub fn symlink(&self, dir: &Node, name: &[u8], target: &[u8], set: &SetAttr, owner: Owner) -> FsResult<Node> { todo!() }
    pub fn remove(&self, dir: &Node, name: &[u8]) -> FsResult<()> { todo!() }
    pub fn rmdir(&self, dir: &Node, name: &[u8]) -> FsResult<()> { todo!() }
    pub fn rename(&self, from: &Node, from_name: &[u8], to: &Node, to_name: &[u8]) -> FsResult<()> { todo!() }
    pub fn readdir(&self, dir: &Node, cookie: u64, verf: [u8; 8], max: usize) -> FsResult<DirPage> { todo!() }
    pub fn commit(&self, node: &Node) -> FsResult<()> { todo!() }
    pub fn fsstat(&self, node: &Node) -> FsResult<FsStat> { todo!() }
    pub fn flush_all(&self) -> FsResult<()> { todo!() }
}
