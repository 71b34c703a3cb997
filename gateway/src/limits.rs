//! The gateway's protocol limits in one place, with the couplings between them checked
//! at compile time. Per-module limits that nothing else depends on stay with their
//! module; a limit two modules must agree on lives here.

/// Largest READ/WRITE payload, both protocols (NFSv3 FSINFO rtmax/wtmax, RFC 1813
/// §3.3.19; NFSv4 maxread/maxwrite, RFC 8881 §5.8.2.20–21). The pools' large class
/// (`[pools]`, 1 MiB + 4 KiB by default) holds one such payload plus its headers.
pub const MAX_IO: usize = 1 << 20;
/// Largest directory reply built (NFSv3 READDIR count / READDIRPLUS maxcount cap).
pub const MAX_DIR_REPLY: usize = 64 << 10;

/// The reactor cache's page and the largest READ it serves: a cached READ's reply
/// carries its data as one external piece per page (plus one when unaligned), and the
/// engine carries at most `engine::rdma::server::MAX_EXT` pieces per reply.
pub const CACHE_PAGE: usize = 4096;
/// Largest READ the reactor cache serves or fills (bigger reads stream from the backend).
pub const MAX_CACHED_READ: usize = 64 << 10;

const _: () = assert!(MAX_CACHED_READ.is_multiple_of(CACHE_PAGE));
// One piece per page, plus one when the READ does not start on a page boundary.
const _: () = assert!(MAX_CACHED_READ / CACHE_PAGE < engine::rdma::server::MAX_EXT);
const _: () = assert!(MAX_CACHED_READ <= MAX_IO);
const _: () = assert!(MAX_DIR_REPLY <= MAX_IO);
const _: () = assert!(MAX_IO <= u32::MAX as usize);
