//! NFSv4.1 state (DESIGN §12): client records and leases, sessions with their slot
//! tables and reply caches, stateids, opens with share reservations, byte-range locks
//! and delegations. Shared by every worker; each table says how it is protected.
//!
//! Who owns what (parallel work, keep to your files):
//! - `clients.rs`, `sessions.rs`, `grace.rs`: client records, leases, sessions, slots,
//!   reply cache, persistence in `state.dir`, the grace period.
//! - `stateid.rs`, `opens.rs`, `locks.rs`: stateids, opens and share reservations,
//!   byte-range locks.
//! - `delegations.rs`: delegations, recalls, conflicts from v3 and v4.

pub mod stateid;

/// All NFSv4.1 state of one gateway.
#[derive(Default)]
pub struct State {}

impl State {
    pub fn new() -> State {
        State {}
    }
}
