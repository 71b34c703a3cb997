//! NFSv4.1 argument values a client puts in operations (RFC 8881, XDR of RFC 5662):
//! share access and deny bits, create modes, claim types, object types, lock types,
//! stable_how4, session flags and the special stateids. The operation numbers are in
//! [`crate::nfs4`].

/// OPEN4_SHARE_ACCESS_* (RFC 8881 §18.16.1).
pub const OPEN4_SHARE_ACCESS_READ: u32 = 1;
pub const OPEN4_SHARE_ACCESS_WRITE: u32 = 2;
pub const OPEN4_SHARE_ACCESS_BOTH: u32 = 3;
/// OPEN4_SHARE_ACCESS_WANT_NO_DELEG (RFC 8881 §18.16.1).
pub const OPEN4_SHARE_ACCESS_WANT_NO_DELEG: u32 = 0x0400;
/// OPEN4_SHARE_DENY_* (RFC 8881 §18.16.1).
pub const OPEN4_SHARE_DENY_NONE: u32 = 0;
pub const OPEN4_SHARE_DENY_READ: u32 = 1;
pub const OPEN4_SHARE_DENY_WRITE: u32 = 2;
pub const OPEN4_SHARE_DENY_BOTH: u32 = 3;

/// opentype4 (RFC 8881 §18.16.1).
pub const OPEN4_NOCREATE: u32 = 0;
pub const OPEN4_CREATE: u32 = 1;
/// createmode4 (RFC 8881 §18.16.1).
pub const UNCHECKED4: u32 = 0;
pub const GUARDED4: u32 = 1;
pub const EXCLUSIVE4: u32 = 2;
pub const EXCLUSIVE4_1: u32 = 3;

/// open_claim_type4 (RFC 8881 §18.16.1).
pub const CLAIM_NULL: u32 = 0;
pub const CLAIM_PREVIOUS: u32 = 1;
pub const CLAIM_DELEGATE_CUR: u32 = 2;
pub const CLAIM_DELEGATE_PREV: u32 = 3;
pub const CLAIM_FH: u32 = 4;
pub const CLAIM_DELEG_CUR_FH: u32 = 5;
pub const CLAIM_DELEG_PREV_FH: u32 = 6;

/// open_delegation_type4 (RFC 8881 §18.16.2).
pub const OPEN_DELEGATE_NONE: u32 = 0;
pub const OPEN_DELEGATE_READ: u32 = 1;
pub const OPEN_DELEGATE_WRITE: u32 = 2;
pub const OPEN_DELEGATE_NONE_EXT: u32 = 3;
/// limit_by4 of a write delegation's nfs_space_limit4 (RFC 8881 §18.16.2).
pub const NFS_LIMIT_SIZE: u32 = 1;
pub const NFS_LIMIT_BLOCKS: u32 = 2;
/// why_no_delegation4 values that carry a bool (RFC 8881 §18.16.2).
pub const WND4_CONTENTION: u32 = 1;
pub const WND4_RESOURCE: u32 = 2;

/// nfs_ftype4 (RFC 8881 §5.8.1.2).
pub const NF4REG: u32 = 1;
pub const NF4DIR: u32 = 2;
pub const NF4LNK: u32 = 5;

/// nfs_lock_type4 (RFC 8881 §18.10.1).
pub const READ_LT: u32 = 1;
pub const WRITE_LT: u32 = 2;
pub const READW_LT: u32 = 3;
pub const WRITEW_LT: u32 = 4;

/// stable_how4 (RFC 8881 §18.32.1).
pub const UNSTABLE4: u32 = 0;
pub const DATA_SYNC4: u32 = 1;
pub const FILE_SYNC4: u32 = 2;

/// channel_dir_from_client4 (RFC 8881 §18.34.1).
pub const CDFC4_FORE: u32 = 0x1;
pub const CDFC4_BACK: u32 = 0x2;
pub const CDFC4_FORE_OR_BOTH: u32 = 0x3;
pub const CDFC4_BACK_OR_BOTH: u32 = 0x7;

/// CREATE_SESSION4_FLAG_* (RFC 8881 §18.36.1).
pub const CREATE_SESSION4_FLAG_PERSIST: u32 = 0x1;
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x2;
pub const CREATE_SESSION4_FLAG_CONN_RDMA: u32 = 0x4;

/// SEQ4_STATUS_CB_PATH_DOWN (RFC 8881 §18.46.3).
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x1;
/// EXCHGID4_FLAG_UPD_CONFIRMED_REC_A (RFC 8881 §18.35.1).
pub const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
/// EXCHGID4_FLAG_CONFIRMED_R (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;

/// state_protect_how4 SP4_NONE (RFC 8881 §18.35.1).
pub const SP4_NONE: u32 = 0;

/// The nfs_impl_id4 (RFC 8881 §18.35.1, eia_client_impl_id) `bench` sends: its
/// nii_domain and nii_name. The gateway's `pnfs.stripe_clients` names this by
/// default: striped layouts go to the clients known to take them (README "Scaling
/// out with pNFS").
pub const BENCH_IMPL_DOMAIN: &str = "nfs-gateway";
pub const BENCH_IMPL_NAME: &str = "nfsgw-bench";

/// NFS4_OK (RFC 8881 §15.1).
pub const NFS4_OK: u32 = 0;

/// The anonymous stateid: all zero (RFC 8881 §8.2.3).
pub const ANONYMOUS_STATEID: [u8; 16] = [0; 16];
/// The READ bypass stateid: all ones (RFC 8881 §8.2.3).
pub const BYPASS_STATEID: [u8; 16] = [0xff; 16];
/// The current stateid: seqid 1, other all zero (RFC 8881 §8.2.3).
pub const CURRENT_STATEID: [u8; 16] = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// Attribute numbers a client asks for (RFC 8881 §5.8.1, §5.8.2): type, size, mode;
/// [`crate::v4op::Bitmap`] makes bitmap4 words of them.
pub const FATTR4_TYPE: u32 = 1;
pub const FATTR4_SIZE: u32 = 4;
pub const FATTR4_MODE: u32 = 33;

/// layouttype4 LAYOUT4_FLEX_FILES (RFC 8435 §5, IANA "pNFS layout types").
pub const LAYOUT4_FLEX_FILES: u32 = 4;
/// layoutiomode4 (RFC 8881 §3.3.20).
pub const LAYOUTIOMODE4_READ: u32 = 1;
pub const LAYOUTIOMODE4_RW: u32 = 2;
pub const LAYOUTIOMODE4_ANY: u32 = 3;
/// notify_deviceid_type4 (RFC 8881 §20.12.1): bit numbers of GETDEVICEINFO's
/// gdia_notify_types / gdir_notification bitmaps and of CB_NOTIFY_DEVICEID's masks.
pub const NOTIFY_DEVICEID4_CHANGE: u32 = 1;
pub const NOTIFY_DEVICEID4_DELETE: u32 = 2;
/// layoutreturn_type4 (RFC 8881 §18.44.1).
pub const LAYOUTRETURN4_FILE: u32 = 1;
pub const LAYOUTRETURN4_FSID: u32 = 2;
pub const LAYOUTRETURN4_ALL: u32 = 3;
/// EXCHGID4_FLAG_USE_NON_PNFS / USE_PNFS_MDS (RFC 8881 §18.35.1).
pub const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x1_0000;
pub const EXCHGID4_FLAG_USE_PNFS_MDS: u32 = 0x2_0000;
