//! NFSv4.1 state (docs/architecture.md §8): client records and leases, sessions with their slot
//! tables and reply caches, stateids, opens with share reservations, byte-range locks
//! and delegations. Shared by every worker; each table says how it is protected.
//!
//! Who owns what (parallel work, keep to your files):
//! - `clients.rs` (+ files it adds, e.g. `sessions.rs`, `grace.rs`): client records,
//!   leases, sessions, slots, reply cache, persistence in `state.dir`, grace period.
//! - `opens.rs` (+ `locks.rs`): stateids of opens and locks, share reservations,
//!   byte-range locks.
//! - `delegations.rs`: delegations, recalls, conflicts from v3 and v4.
//!
//! The cross-table API below (signatures of `Clients::lookup_backchannel`,
//! `Clients::in_grace`, `Opens::check_io`, `Opens::purge_client`,
//! `Delegations::break_conflicts`, ...) is fixed; bodies belong to their owners.

pub mod backchannel;
pub mod clients;
pub mod delegations;
pub mod error;
mod expiry;
mod grace;
pub mod layouts;
pub mod offload;
pub mod opens;
pub mod park;
pub mod recall;
pub mod recovery;
pub mod sessions;
pub mod stateid;

pub use error::{Checked, StateError};

/// All NFSv4.1 state of one gateway.
#[derive(Default)]
pub struct State {
    pub clients: clients::Clients,
    pub opens: opens::Opens,
    pub delegations: delegations::Delegations,
    /// pNFS layouts and the data servers they name (`[pnfs]`; empty when off).
    pub layouts: layouts::Layouts,
}

impl State {
    /// State with default limits and nothing persisted (tests).
    pub fn new() -> State {
        State::default()
    }

    /// State with the configured limits; client records persist in `dir`.
    pub fn with_config(limits: clients::Limits, dir: Option<&std::path::Path>) -> State {
        State {
            clients: clients::Clients::new(limits, dir),
            ..Default::default()
        }
    }

    /// This state as a pNFS metadata server naming `devices` (`[pnfs]`).
    pub fn with_layouts(mut self, devices: Option<layouts::Devices>) -> State {
        self.layouts = layouts::Layouts::new(devices);
        self
    }

    /// Layout stateids bound to their client and file under `key`, so that they can
    /// be reclaimed after a restart (`layouts::load_key`; `None`: not bound).
    pub fn with_layout_key(self, key: Option<[u8; 32]>) -> State {
        self.layouts.set_key(key);
        self
    }

    /// Revoked layouts' files fenced through `fence` (`crate::fence`; `None`: off).
    pub fn with_fence(mut self, fence: Option<std::sync::Arc<crate::fence::Fence>>) -> State {
        self.layouts.set_fence(fence);
        self
    }

    /// What the stats endpoint shows of NFSv4.1 state (`nfsgw_nfs4_clients`, ...),
    /// read at each scrape: one short lock of the client table, one of the open table.
    pub fn gauges(&self) -> Gauges {
        let (opens, lock_stateids, locked_ranges) = self.opens.counts();
        Gauges {
            clients: self.clients.counts(),
            opens,
            lock_stateids,
            locked_ranges,
            layouts: self.layouts.counts(),
            data_servers: self.layouts.server_counts(),
        }
    }

    /// Frees the opens, locks and delegations of clients the client table purged
    /// (courtesy expiry, DESTROY_CLIENTID, a replaced client record), and tells the
    /// delegation table which clients became courtesy clients or came back (a
    /// returning one that lost a delegation meanwhile is expired: `expiry.rs`).
    /// Called after the client table's lock is released.
    pub fn purge(&self, p: clients::Purged) {
        let stats = self.delegations.stats();
        if let Some(n) = p.courtesy_clients {
            stats.set_courtesy_clients(n);
        }
        stats.courtesy_expired(p.expired_conflict);
        for id in p.gone {
            self.opens.purge_client(id);
            self.delegations.purge_client(id);
            self.layouts.purge_client(id);
        }
        self.delegations.mark_courtesy(&p.courtesy);
        for id in p.revived {
            self.revive(id);
        }
    }
}

/// NFSv4.1 state by the numbers (`State::gauges`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Gauges {
    pub clients: clients::ClientCounts,
    pub opens: u64,
    pub lock_stateids: u64,
    pub locked_ranges: u64,
    /// pNFS layouts: held now, and what happened to them (`layouts::LayoutCounts`).
    pub layouts: layouts::LayoutCounts,
    /// pNFS data servers (a metadata server's): address, up, errors reported.
    pub data_servers: Vec<(std::net::SocketAddr, layouts::health::ServerCounts)>,
}

/// Where and how to send a client's callbacks: recorded by CREATE_SESSION (with
/// CONN_BACK_CHAN), BIND_CONN_TO_SESSION and BACKCHANNEL_CTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackChannelInfo {
    pub session: [u8; 16],
    pub conn: crate::conn::ConnRef,
    /// csa_cb_program.
    pub cb_program: u32,
    /// The back channel's ca_maxrequestsize: no callback may be larger.
    pub max_request: u32,
    /// The back channel's ca_maxrequests (slots).
    pub max_slots: u32,
    /// The session's minor version, which its CB_COMPOUNDs carry (`Session::minor`).
    pub minor: u32,
}

/// Why a file's delegations must be recalled before an operation proceeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// An OPEN for reading (conflicts with write delegations of others).
    OpenRead,
    /// A READ or GETATTR by another client or NFSv3 (conflicts with write
    /// delegations of others: RFC 8881 §10.4.3).
    Read,
    /// An OPEN for writing, WRITE, SETATTR (conflicts with every delegation of others).
    Write,
    /// REMOVE or RENAME of the file, or a change to the name it was opened by.
    Namespace,
}
