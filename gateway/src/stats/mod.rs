//! Gateway statistics: per-reactor counters and latency histograms written by the
//! reactors (single writer, relaxed atomics, no locks), and the Prometheus endpoint
//! that reads them (`[stats] listen`). Metric reference and measured cost:
//! docs/stats.md.

pub mod backend_ops;
pub mod callbacks;
pub mod clock;
pub mod counters;
pub mod data_jobs;
pub mod exposition;
pub mod fs_flushes;
pub mod histogram;
pub mod http;
pub mod nfs4_state;
pub mod revalidations;
pub mod status;
pub mod tenants;
mod tenants_expo;
mod tenants_peek;
pub mod uring_failures;

pub use clock::Clock;
pub use counters::{slot_of, CallStat, ReactorStats, Transport};
pub use exposition::{ReactorSource, Source};
pub use http::{Bound, Endpoint};
pub use tenants::{TenantTable, Tenants};
pub use tenants_expo::set_top;
