//! pNFS layouts (RFC 8881 §12) of the flexible files type (RFC 8435) this gateway
//! grants as a metadata server: which data servers exist (`Devices`, from `[pnfs]`),
//! where a file's data goes (placement by file id), and per client the layouts held
//! and their layout stateids (kind `Layout`, §12.5.3).
//!
//! Every layout covers the whole file (offset 0, length NFS4_UINT64_MAX): the data
//! servers are loosely coupled NFSv3 servers on the same store (RFC 8435 §2.1) that
//! any byte of any file can go through, so nothing is gained by cutting ranges. A
//! client holds at most one layout stateid per file, with a READ and an RW iomode
//! bit. The table is bounded (`MAX_LAYOUTS`, `MAX_PER_CLIENT`) and a client's layouts
//! go with the client (lease expiry, DESTROY_CLIENTID: `State::purge`). Recalls and
//! fencing do not exist yet (README "Scaling out with pNFS").
//!
//! One mutex; never held across file I/O or another table's lock.

use super::error::StateError;
use super::opens::stateids::{self, Kind};
use super::stateid::Stateid;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};

/// Layouts kept in all, and per client (a LAYOUTGET past either gets
/// NFS4ERR_LAYOUTTRYLATER: `StateError::Resource` here).
pub const MAX_LAYOUTS: usize = 1 << 16;
pub const MAX_PER_CLIENT: usize = 4096;

/// One data server: a gateway on the same store serving NFSv3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataServer {
    pub addr: SocketAddr,
    /// Reached over RPC-over-RDMA (netid "rdma") rather than TCP.
    pub rdma: bool,
}

impl DataServer {
    /// na_r_netid (RFC 5665 §4): "tcp"/"rdma", "tcp6"/"rdma6" for IPv6.
    pub fn netid(&self) -> &'static str {
        match (self.rdma, self.addr.is_ipv6()) {
            (false, false) => "tcp",
            (false, true) => "tcp6",
            (true, false) => "rdma",
            (true, true) => "rdma6",
        }
    }

    /// na_r_addr, the universal address (RFC 5665 §5.2.3.3/§5.2.3.4): the IP
    /// address then the port's two bytes, dot-separated.
    pub fn uaddr(&self) -> String {
        let p = self.addr.port();
        format!("{}.{}.{}", self.addr.ip(), p >> 8, p & 0xff)
    }

    /// deviceid4: a hash of the address and transport, so a data server keeps its
    /// id across restarts and reorderings of the list.
    pub fn device_id(&self) -> [u8; 16] {
        let h = blake3::hash(format!("nfsgw-ds {} {}", self.netid(), self.addr).as_bytes());
        let mut id = [0u8; 16];
        id.copy_from_slice(&h.as_bytes()[..16]);
        id
    }
}

/// The data servers and layout parameters of `[pnfs]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devices {
    pub servers: Vec<DataServer>,
    pub stripe_unit: u32,
    pub rsize: u32,
    pub wsize: u32,
    pub read_mirrors: u32,
}

impl Devices {
    /// The data server a device id names.
    pub fn find(&self, id: &[u8; 16]) -> Option<&DataServer> {
        self.servers.iter().find(|d| d.device_id() == *id)
    }

    /// The data servers a layout of `fileid` names, one per mirror: a write layout
    /// one (RFC 8435 §8.1: a client writes every mirror, so one mirror never makes
    /// it write twice), a read layout up to `read_mirrors` distinct ones. The first
    /// is chosen by a hash of the file id, so files spread over the data servers and
    /// every client writes a file through the same one.
    pub fn placement(&self, fileid: u64, write: bool) -> impl Iterator<Item = &DataServer> {
        let n = self.servers.len();
        let want = if write { 1 } else { self.read_mirrors as usize };
        let h = blake3::hash(&fileid.to_le_bytes());
        let first = (u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
            % n.max(1) as u64) as usize;
        (0..want.min(n)).map(move |k| &self.servers[(first + k) % n])
    }
}

/// layoutiomode4 (RFC 8881 §3.3.20).
pub const IOMODE_READ: u32 = 1;
pub const IOMODE_RW: u32 = 2;
pub const IOMODE_ANY: u32 = 3;

#[derive(Debug, Clone, Copy)]
struct Layout {
    clientid: u64,
    fileid: u64,
    fsid: u64,
    seqid: u32,
    read: bool,
    rw: bool,
}

impl Layout {
    fn stateid(&self, other: [u8; 12]) -> Stateid {
        Stateid {
            seqid: self.seqid,
            other,
        }
    }
}

#[derive(Default)]
struct Table {
    by_other: HashMap<[u8; 12], Layout>,
    by_file: HashMap<(u64, u64), [u8; 12]>,
    per_client: HashMap<u64, usize>,
}

impl Table {
    fn remove(&mut self, other: &[u8; 12]) {
        if let Some(l) = self.by_other.remove(other) {
            self.by_file.remove(&(l.clientid, l.fileid));
            if let Some(n) = self.per_client.get_mut(&l.clientid) {
                *n -= 1;
                if *n == 0 {
                    self.per_client.remove(&l.clientid);
                }
            }
        }
    }
}

/// The file a layout operation is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutFile {
    pub clientid: u64,
    pub fileid: u64,
    pub fsid: u64,
}

/// The layouts of every client, and the devices they name (`None`: pNFS is off).
#[derive(Default)]
pub struct Layouts {
    devices: Option<Devices>,
    table: Mutex<Table>,
}

impl Layouts {
    pub fn new(devices: Option<Devices>) -> Layouts {
        Layouts {
            devices,
            table: Mutex::default(),
        }
    }

    /// The data servers, when this gateway is a pNFS metadata server.
    pub fn devices(&self) -> Option<&Devices> {
        self.devices.as_ref()
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding it leaves only whole entries (each change is one
        // insert or remove): the table stays usable.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `s` is a layout stateid (by its kind byte; it may be unknown).
    pub fn owns(s: &Stateid) -> bool {
        Kind::of(&s.other) == Some(Kind::Layout)
    }

    /// LAYOUTGET's state (RFC 8881 §18.43.3, §12.5.3): grants `iomode` on `f`.
    /// `presented` is the layout stateid the client sent, or `None` when it sent an
    /// open, lock or delegation stateid (checked by the caller): then the client's
    /// layout stateid of the file is reused, or a new one made. Returns the layout
    /// stateid with its seqid advanced.
    pub fn grant(
        &self,
        f: LayoutFile,
        presented: Option<&Stateid>,
        iomode: u32,
    ) -> Result<Stateid, StateError> {
        let mut t = self.lock();
        let other = match presented {
            Some(s) => {
                Self::find(&t, f, s)?;
                s.other
            }
            None => match t.by_file.get(&(f.clientid, f.fileid)) {
                Some(o) => *o,
                None => Self::insert(&mut t, f)?,
            },
        };
        let l = t.by_other.get_mut(&other).ok_or(StateError::Inconsistent)?;
        l.seqid = stateids::next_seqid(l.seqid);
        match iomode {
            IOMODE_RW => l.rw = true,
            _ => l.read = true,
        }
        Ok(l.stateid(other))
    }

    fn insert(t: &mut Table, f: LayoutFile) -> Result<[u8; 12], StateError> {
        let mine = t.per_client.get(&f.clientid).copied().unwrap_or(0);
        if t.by_other.len() >= MAX_LAYOUTS || mine >= MAX_PER_CLIENT {
            return Err(StateError::Resource);
        }
        let other = stateids::fresh_other(stateids::boot_verifier(), Kind::Layout);
        let l = Layout {
            clientid: f.clientid,
            fileid: f.fileid,
            fsid: f.fsid,
            seqid: 0,
            read: false,
            rw: false,
        };
        t.by_other.insert(other, l);
        t.by_file.insert((f.clientid, f.fileid), other);
        *t.per_client.entry(f.clientid).or_default() += 1;
        Ok(other)
    }

    /// The layout a presented layout stateid names: this client's, this file's, and
    /// not from the future (§8.2.2; seqid 0 means the current one, §8.2.2).
    fn find(t: &Table, f: LayoutFile, s: &Stateid) -> Result<Layout, StateError> {
        let l = t.by_other.get(&s.other).ok_or(StateError::BadStateid)?;
        if l.clientid != f.clientid || l.fileid != f.fileid {
            return Err(StateError::BadStateid);
        }
        if s.seqid != 0 && s.seqid > l.seqid {
            return Err(StateError::BadStateid);
        }
        if s.seqid != 0 && s.seqid < l.seqid {
            return Err(StateError::OldStateid);
        }
        Ok(*l)
    }

    /// LAYOUTRETURN4_FILE (RFC 8881 §18.44.3) of `iomode` (READ, RW or ANY) under
    /// layout stateid `s`. Returning what is not held is not an error (a return is
    /// idempotent, §12.5.5.1). The new layout stateid while layouts remain; `None`
    /// once none does (the stateid is freed: lrs_present false).
    pub fn give_back(
        &self,
        f: LayoutFile,
        s: &Stateid,
        iomode: u32,
    ) -> Result<Option<Stateid>, StateError> {
        let mut t = self.lock();
        if !t.by_other.contains_key(&s.other) && !t.by_file.contains_key(&(f.clientid, f.fileid)) {
            return Err(StateError::NoMatchingLayout);
        }
        Self::find(&t, f, s)?;
        let l = t
            .by_other
            .get_mut(&s.other)
            .ok_or(StateError::Inconsistent)?;
        match iomode {
            IOMODE_READ => l.read = false,
            IOMODE_RW => l.rw = false,
            _ => (l.read, l.rw) = (false, false),
        }
        if l.read || l.rw {
            l.seqid = stateids::next_seqid(l.seqid);
            return Ok(Some(l.stateid(s.other)));
        }
        t.remove(&s.other);
        Ok(None)
    }

    /// LAYOUTRETURN4_FSID / _ALL (§18.44.3): every layout of the client (in one file
    /// system when `fsid` is given). Nothing held is not an error.
    pub fn give_back_all(&self, clientid: u64, fsid: Option<u64>) {
        let mut t = self.lock();
        let gone: Vec<[u8; 12]> = t
            .by_other
            .iter()
            .filter(|(_, l)| l.clientid == clientid && fsid.is_none_or(|x| x == l.fsid))
            .map(|(o, _)| *o)
            .collect();
        for o in gone {
            t.remove(&o);
        }
    }

    /// LAYOUTCOMMIT's state check (§18.42.3): `s` must be the client's layout
    /// stateid of the file and hold an RW layout (else NFS4ERR_BADLAYOUT).
    pub fn check_commit(&self, f: LayoutFile, s: &Stateid) -> Result<(), StateError> {
        let t = self.lock();
        let l = Self::find(&t, f, s)?;
        if !l.rw {
            return Err(StateError::BadLayout);
        }
        Ok(())
    }

    /// Frees every layout of a client (lease expiry, DESTROY_CLIENTID).
    pub fn purge_client(&self, clientid: u64) {
        self.give_back_all(clientid, None);
    }

    /// Layouts held, all clients together.
    pub fn count(&self) -> usize {
        self.lock().by_other.len()
    }
}

#[cfg(test)]
#[path = "layouts_tests.rs"]
mod tests;
