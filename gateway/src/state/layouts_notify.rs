//! Device id notifications (RFC 8881 §20.12 CB_NOTIFY_DEVICEID, §18.40 GETDEVICEINFO's
//! gdia_notify_types, §12.2.10): which clients asked to hear of a data server's device
//! id going away, and the deletions the callback thread sends them.
//!
//! Why DELETE and not CHANGE: a data server the probes declare down keeps its address
//! (the mapping of its id did not change: a CHANGE would only make the client ask
//! GETDEVICEINFO again and get the same dead address). Its id is *deleted*: retired
//! for good (`Health::retire`; GETDEVICEINFO of it is NFS4ERR_NOENT from then on), and
//! when the server answers again it is placed under the next generation's id
//! (`DataServer::device_id_at`), since §20.12.3 forbids reusing a deleted id for the
//! client. The server promises DELETE only (gdir_notification), and keeps the rule of
//! §20.12.3 that no DELETE goes to a client still holding a layout that names the id:
//! the layouts naming the server are recalled first (`recall_server`), and each
//! client's deletion waits until every one of them is returned, forgotten or revoked.

use super::{Layouts, Table};

/// Watches and notices kept at most (past them GETDEVICEINFO promises nothing).
const MAX_WATCHES: usize = 1 << 16;
const MAX_NOTICES: usize = 4096;

/// notify_deviceid_type4 NOTIFY_DEVICEID4_DELETE (RFC 8881 §20.12.1), as a bit.
pub const NOTIFY_DELETE: u32 = 1 << 2;

/// One deletion to tell a client of.
#[derive(Debug, Clone)]
pub(crate) struct Notice {
    clientid: u64,
    deviceid: [u8; 16],
    /// The client's layouts naming the device when it was deleted: none may be left
    /// when the notice goes (§20.12.3).
    blockers: Vec<[u8; 12]>,
    /// Handed to the callback thread.
    taken: bool,
}

impl Layouts {
    /// Data server `i`'s device id now (`None`: no such server).
    pub fn device_id(&self, i: usize) -> Option<[u8; 16]> {
        let d = self.devices()?.servers.get(i)?;
        Some(d.device_id_at(self.health.generation(i)))
    }

    /// The device ids of the data servers up now, in configuration order: what
    /// GETDEVICELIST lists (RFC 8881 §18.41; `nfs4/device_list.rs`).
    pub fn listed_devices(&self) -> Vec<[u8; 16]> {
        let Some(d) = self.devices() else {
            return Vec::new();
        };
        let up = self.health();
        (0..d.servers.len())
            .filter(|i| up.is_up(*i))
            .filter_map(|i| self.device_id(i))
            .collect()
    }

    /// The data server a device id names now, and the generation of the id; a
    /// deleted id names none.
    pub fn find_device(&self, id: &[u8; 16]) -> Option<(usize, u32)> {
        let d = self.devices()?;
        d.servers.iter().enumerate().find_map(|(i, s)| {
            let g = self.health.generation(i);
            (s.device_id_at(g) == *id).then_some((i, g))
        })
    }

    /// The data server a client's error report names: by its id now or the one just
    /// deleted (a client reports what failed under the layout it held).
    pub fn find_reported(&self, id: &[u8; 16]) -> Option<usize> {
        let d = self.devices()?;
        self.find_device(id).map(|(i, _)| i).or_else(|| {
            (0..d.servers.len()).find(|i| {
                let g = self.health.generation(*i);
                g > 0 && d.servers[*i].device_id_at(g - 1) == *id
            })
        })
    }

    /// GETDEVICEINFO asked for `types` (gdia_notify_types' first word) about data
    /// server `i`, whose id the client was given at generation `gen`: the
    /// notification types the server will send (gdir_notification), DELETE or none.
    /// None when the id was deleted meanwhile or the table is full.
    pub fn watch(&self, clientid: u64, i: usize, gen: u32, types: u32) -> u32 {
        if types & NOTIFY_DELETE == 0 {
            return 0;
        }
        let mut t = self.lock();
        // Under the lock `recall_server` retires ids under: registered before the
        // retirement (and told), or refused after it.
        if self.health.generation(i) != gen {
            return 0;
        }
        if t.watches.len() >= MAX_WATCHES && !t.watches.contains_key(&(clientid, i)) {
            return 0;
        }
        t.watches.insert((clientid, i), gen);
        NOTIFY_DELETE
    }

    /// Retires data server `i`'s device id (it went down; under the table's lock,
    /// after its layouts were marked recalled) and queues a deletion for each client
    /// that watches it, held back by that client's layouts naming it.
    pub(super) fn retire_device(&self, t: &mut Table, i: usize) {
        let Some(d) = self.devices().and_then(|d| d.servers.get(i)) else {
            return;
        };
        let old = self.health.retire(i);
        let deviceid = d.device_id_at(old);
        let watchers: Vec<u64> = t
            .watches
            .iter()
            .filter(|((_, k), _)| *k == i)
            .map(|((c, _), _)| *c)
            .collect();
        let bit = if i < 64 { 1u64 << i } else { 0 };
        for clientid in watchers {
            let gen = t.watches.remove(&(clientid, i));
            if gen != Some(old) || t.notices.len() >= MAX_NOTICES {
                continue;
            }
            let blockers = t
                .by_other
                .iter()
                .filter(|(_, l)| l.clientid == clientid && l.servers & bit != 0)
                .map(|(o, _)| *o)
                .collect();
            t.notice_seq = t.notice_seq.wrapping_add(1);
            let mut key = [0u8; 12];
            key[..8].copy_from_slice(&clientid.to_be_bytes());
            key[8..].copy_from_slice(&t.notice_seq.to_be_bytes());
            let n = Notice {
                clientid,
                deviceid,
                blockers,
                taken: false,
            };
            t.notices.insert(key, n);
        }
    }

    /// The deletions that may go now (their blockers gone), for the callback thread;
    /// each is handed over once.
    pub(crate) fn take_notices(&self) -> Vec<[u8; 12]> {
        let mut t = self.lock();
        if t.notices.is_empty() {
            return Vec::new();
        }
        let Table {
            notices, by_other, ..
        } = &mut *t;
        let mut ready = Vec::new();
        for (k, n) in notices.iter_mut() {
            if !n.taken && n.blockers.iter().all(|o| !by_other.contains_key(o)) {
                n.taken = true;
                ready.push(*k);
            }
        }
        ready
    }

    /// What CB_NOTIFY_DEVICEID `key` says: its client and the deleted device id.
    /// `None`: told, or the client is gone (stop sending).
    pub(crate) fn notice_target(&self, key: &[u8; 12]) -> Option<(u64, [u8; 16])> {
        let t = self.lock();
        t.notices.get(key).map(|n| (n.clientid, n.deviceid))
    }

    /// Deletion `key` was told (or given up on).
    pub(crate) fn notified(&self, key: &[u8; 12]) {
        self.lock().notices.remove(key);
    }

    /// Deletions waiting, all clients (tests, the stats of a later day).
    pub fn notices(&self) -> usize {
        self.lock().notices.len()
    }

    /// A client went: its watches and deletions with it.
    pub(super) fn forget_watches(&self, clientid: u64) {
        let mut t = self.lock();
        t.watches.retain(|(c, _), _| *c != clientid);
        t.notices.retain(|_, n| n.clientid != clientid);
    }
}
