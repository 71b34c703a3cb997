//! NFSv4.1 numbers: the NFS program's procedures (RFC 8881 §16), COMPOUND operation
//! numbers (`nfs_opnum4`, RFC 8881 §16.2.1, each operation in §18), the callback
//! program and its procedures (RFC 8881 §19, §18.36) and callback operation numbers
//! (`nfs_cb_opnum4`, RFC 8881 §19.2.1, each operation in §20). Names and values are
//! those of the XDR in RFC 5662.

/// NULL procedure (RFC 8881 §16.1).
pub const NFSPROC4_NULL: u32 = 0;
/// COMPOUND procedure (RFC 8881 §16.2).
pub const NFSPROC4_COMPOUND: u32 = 1;

/// The callback program number in RFC 5662's XDR (`NFS4_CALLBACK`). The number a
/// server actually calls is the client's `csa_cb_program` (RFC 8881 §18.36.1), which
/// Linux clients set to this value.
pub const NFS4_CALLBACK: u32 = 0x4000_0000;
/// The callback program's only version (RFC 5662 `NFS_CB`).
pub const NFS_CB: u32 = 1;
/// CB_NULL procedure (RFC 8881 §19.1).
pub const CB_NULL: u32 = 0;
/// CB_COMPOUND procedure (RFC 8881 §19.2).
pub const CB_COMPOUND: u32 = 1;

// nfs_opnum4. 0-2 are unused; OPEN_CONFIRM, RENEW, SETCLIENTID,
// SETCLIENTID_CONFIRM and RELEASE_LOCKOWNER are NFSv4.0 only (RFC 8881 §18.52).
pub const OP_ACCESS: u32 = 3;
pub const OP_CLOSE: u32 = 4;
pub const OP_COMMIT: u32 = 5;
pub const OP_CREATE: u32 = 6;
pub const OP_DELEGPURGE: u32 = 7;
pub const OP_DELEGRETURN: u32 = 8;
pub const OP_GETATTR: u32 = 9;
pub const OP_GETFH: u32 = 10;
pub const OP_LINK: u32 = 11;
pub const OP_LOCK: u32 = 12;
pub const OP_LOCKT: u32 = 13;
pub const OP_LOCKU: u32 = 14;
pub const OP_LOOKUP: u32 = 15;
pub const OP_LOOKUPP: u32 = 16;
pub const OP_NVERIFY: u32 = 17;
pub const OP_OPEN: u32 = 18;
pub const OP_OPENATTR: u32 = 19;
pub const OP_OPEN_CONFIRM: u32 = 20;
pub const OP_OPEN_DOWNGRADE: u32 = 21;
pub const OP_PUTFH: u32 = 22;
pub const OP_PUTPUBFH: u32 = 23;
pub const OP_PUTROOTFH: u32 = 24;
pub const OP_READ: u32 = 25;
pub const OP_READDIR: u32 = 26;
pub const OP_READLINK: u32 = 27;
pub const OP_REMOVE: u32 = 28;
pub const OP_RENAME: u32 = 29;
pub const OP_RENEW: u32 = 30;
pub const OP_RESTOREFH: u32 = 31;
pub const OP_SAVEFH: u32 = 32;
pub const OP_SECINFO: u32 = 33;
pub const OP_SETATTR: u32 = 34;
pub const OP_SETCLIENTID: u32 = 35;
pub const OP_SETCLIENTID_CONFIRM: u32 = 36;
pub const OP_VERIFY: u32 = 37;
pub const OP_WRITE: u32 = 38;
pub const OP_RELEASE_LOCKOWNER: u32 = 39;
pub const OP_BACKCHANNEL_CTL: u32 = 40;
pub const OP_BIND_CONN_TO_SESSION: u32 = 41;
pub const OP_EXCHANGE_ID: u32 = 42;
pub const OP_CREATE_SESSION: u32 = 43;
pub const OP_DESTROY_SESSION: u32 = 44;
pub const OP_FREE_STATEID: u32 = 45;
pub const OP_GET_DIR_DELEGATION: u32 = 46;
pub const OP_GETDEVICEINFO: u32 = 47;
pub const OP_GETDEVICELIST: u32 = 48;
pub const OP_LAYOUTCOMMIT: u32 = 49;
pub const OP_LAYOUTGET: u32 = 50;
pub const OP_LAYOUTRETURN: u32 = 51;
pub const OP_SECINFO_NO_NAME: u32 = 52;
pub const OP_SEQUENCE: u32 = 53;
pub const OP_SET_SSV: u32 = 54;
pub const OP_TEST_STATEID: u32 = 55;
pub const OP_WANT_DELEGATION: u32 = 56;
pub const OP_DESTROY_CLIENTID: u32 = 57;
pub const OP_RECLAIM_COMPLETE: u32 = 58;
// NFSv4.2 (RFC 7862 §11.1, RFC 8276 §8.3): minor version 2 only.
pub const OP_ALLOCATE: u32 = 59;
pub const OP_COPY: u32 = 60;
pub const OP_COPY_NOTIFY: u32 = 61;
pub const OP_DEALLOCATE: u32 = 62;
pub const OP_IO_ADVISE: u32 = 63;
pub const OP_LAYOUTERROR: u32 = 64;
pub const OP_LAYOUTSTATS: u32 = 65;
pub const OP_OFFLOAD_CANCEL: u32 = 66;
pub const OP_OFFLOAD_STATUS: u32 = 67;
pub const OP_READ_PLUS: u32 = 68;
pub const OP_SEEK: u32 = 69;
pub const OP_WRITE_SAME: u32 = 70;
pub const OP_CLONE: u32 = 71;
pub const OP_GETXATTR: u32 = 72;
pub const OP_SETXATTR: u32 = 73;
pub const OP_LISTXATTRS: u32 = 74;
pub const OP_REMOVEXATTR: u32 = 75;
pub const OP_ILLEGAL: u32 = 10044;

// nfs_cb_opnum4. 0-2 are unused.
pub const OP_CB_GETATTR: u32 = 3;
pub const OP_CB_RECALL: u32 = 4;
pub const OP_CB_LAYOUTRECALL: u32 = 5;
pub const OP_CB_NOTIFY: u32 = 6;
pub const OP_CB_PUSH_DELEG: u32 = 7;
pub const OP_CB_RECALL_ANY: u32 = 8;
pub const OP_CB_RECALLABLE_OBJ_AVAIL: u32 = 9;
pub const OP_CB_RECALL_SLOT: u32 = 10;
pub const OP_CB_SEQUENCE: u32 = 11;
pub const OP_CB_WANTS_CANCELLED: u32 = 12;
pub const OP_CB_NOTIFY_LOCK: u32 = 13;
pub const OP_CB_NOTIFY_DEVICEID: u32 = 14;
/// NFSv4.2 (RFC 7862 §16.1).
pub const OP_CB_OFFLOAD: u32 = 15;
pub const OP_CB_ILLEGAL: u32 = 10044;
