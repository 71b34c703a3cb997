//! The numbers NFS speaks on the wire, defined once for the whole workspace: ONC RPC
//! program and version numbers, NFSv3 and MOUNT v3 procedure numbers (RFC 1813),
//! NFSv4.1 procedure, operation and callback operation numbers (RFC 8881, with the
//! XDR of RFC 5662), NFSv4.1 argument values ([`nfs4args`]), and — with the `client`
//! feature — the workspace's one client encoder: RPC call headers and record marking
//! ([`rpccall`]), NFSv3/MOUNT calls ([`v3call`], [`v3more`], MOUNT EXPORT in
//! [`v3mount`]), NFSv4.1 COMPOUNDs
//! ([`v4call`], each operation written by [`v4op`] into a caller's buffer), the
//! COMPOUND reply walker ([`v4reply`]) and the callback program's
//! client side ([`v4cb`]); pNFS's operations and flexfiles bodies ([`v4pnfs`]); RFC
//! 9754's OPEN flags, delegation types and attributes ([`delstid`]).
//!
//! Servers, clients, tests and fuzzers `use` these instead of repeating the literals,
//! so a number is checked against its RFC in one place.

pub mod delstid;
pub mod mount3;
pub mod nfs3;
pub mod nfs4;
pub mod nfs4args;
#[cfg(feature = "client")]
pub mod rpccall;
#[cfg(feature = "client")]
pub mod v3call;
#[cfg(feature = "client")]
pub mod v3more;
#[cfg(feature = "client")]
pub mod v3mount;
#[cfg(feature = "client")]
pub mod v4call;
#[cfg(feature = "client")]
pub mod v4cb;
#[cfg(feature = "client")]
pub mod v4op;
#[cfg(feature = "client")]
pub mod v4pnfs;
#[cfg(feature = "client")]
pub mod v4reply;

/// The NFS program (RFC 1813 §3 and RFC 8881 §16; RFC 5662 `NFS4_PROGRAM`).
pub const NFS_PROGRAM: u32 = 100003;
/// NFS version 3 (RFC 1813 §3).
pub const NFS_V3: u32 = 3;
/// NFS version 4; the minor version travels in COMPOUND4args (RFC 8881 §16.2.1).
pub const NFS_V4: u32 = 4;

/// The MOUNT program (RFC 1813 Appendix I, §5.0).
pub const MOUNT_PROGRAM: u32 = 100005;
/// MOUNT version 3, the one that goes with NFSv3 (RFC 1813 §5.0).
pub const MOUNT_V3: u32 = 3;

/// The portmapper / rpcbind program (RFC 1833 §3). The gateway does not serve it; the
/// fuzzers send it as a program a server must refuse with PROG_UNAVAIL.
pub const PORTMAP_PROGRAM: u32 = 100000;
/// Portmapper version 2 (RFC 1833 §3).
pub const PORTMAP_V2: u32 = 2;
/// PMAPPROC_GETPORT (RFC 1833 §3.2).
pub const PMAPPROC_GETPORT: u32 = 3;

#[cfg(test)]
mod tests;
#[cfg(all(test, feature = "client"))]
mod v4optests;
#[cfg(all(test, feature = "client"))]
mod v4pnfs_tests;
#[cfg(all(test, feature = "client"))]
mod v4tests;
