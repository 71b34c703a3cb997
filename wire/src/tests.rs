use crate::nfs4::*;

/// nfs_opnum4 runs 3..=58 without gaps (RFC 8881 §16.2.1); a mistyped number shows
/// as a duplicate or a hole.
#[test]
fn nfs4_operation_numbers_are_dense_and_unique() {
    let mut ops = [
        OP_ACCESS,
        OP_CLOSE,
        OP_COMMIT,
        OP_CREATE,
        OP_DELEGPURGE,
        OP_DELEGRETURN,
        OP_GETATTR,
        OP_GETFH,
        OP_LINK,
        OP_LOCK,
        OP_LOCKT,
        OP_LOCKU,
        OP_LOOKUP,
        OP_LOOKUPP,
        OP_NVERIFY,
        OP_OPEN,
        OP_OPENATTR,
        OP_OPEN_CONFIRM,
        OP_OPEN_DOWNGRADE,
        OP_PUTFH,
        OP_PUTPUBFH,
        OP_PUTROOTFH,
        OP_READ,
        OP_READDIR,
        OP_READLINK,
        OP_REMOVE,
        OP_RENAME,
        OP_RENEW,
        OP_RESTOREFH,
        OP_SAVEFH,
        OP_SECINFO,
        OP_SETATTR,
        OP_SETCLIENTID,
        OP_SETCLIENTID_CONFIRM,
        OP_VERIFY,
        OP_WRITE,
        OP_RELEASE_LOCKOWNER,
        OP_BACKCHANNEL_CTL,
        OP_BIND_CONN_TO_SESSION,
        OP_EXCHANGE_ID,
        OP_CREATE_SESSION,
        OP_DESTROY_SESSION,
        OP_FREE_STATEID,
        OP_GET_DIR_DELEGATION,
        OP_GETDEVICEINFO,
        OP_GETDEVICELIST,
        OP_LAYOUTCOMMIT,
        OP_LAYOUTGET,
        OP_LAYOUTRETURN,
        OP_SECINFO_NO_NAME,
        OP_SEQUENCE,
        OP_SET_SSV,
        OP_TEST_STATEID,
        OP_WANT_DELEGATION,
        OP_DESTROY_CLIENTID,
        OP_RECLAIM_COMPLETE,
    ];
    ops.sort_unstable();
    assert_eq!(ops.to_vec(), (3..=58).collect::<Vec<u32>>());
    assert_eq!(OP_ILLEGAL, 10044);
}

/// nfs_cb_opnum4 runs 3..=14 (RFC 8881 §19.2.1).
#[test]
fn callback_operation_numbers_are_dense_and_unique() {
    let mut ops = [
        OP_CB_GETATTR,
        OP_CB_RECALL,
        OP_CB_LAYOUTRECALL,
        OP_CB_NOTIFY,
        OP_CB_PUSH_DELEG,
        OP_CB_RECALL_ANY,
        OP_CB_RECALLABLE_OBJ_AVAIL,
        OP_CB_RECALL_SLOT,
        OP_CB_SEQUENCE,
        OP_CB_WANTS_CANCELLED,
        OP_CB_NOTIFY_LOCK,
        OP_CB_NOTIFY_DEVICEID,
    ];
    ops.sort_unstable();
    assert_eq!(ops.to_vec(), (3..=14).collect::<Vec<u32>>());
    assert_eq!(OP_CB_ILLEGAL, 10044);
}

/// NFSv3 procedures run 0..=21 (RFC 1813 §3.3), MOUNT v3 0..=5 (§5.2).
#[test]
fn v3_procedure_numbers_are_dense_and_unique() {
    use crate::mount3::*;
    use crate::nfs3::*;
    let mut procs = [
        NFSPROC3_NULL,
        NFSPROC3_GETATTR,
        NFSPROC3_SETATTR,
        NFSPROC3_LOOKUP,
        NFSPROC3_ACCESS,
        NFSPROC3_READLINK,
        NFSPROC3_READ,
        NFSPROC3_WRITE,
        NFSPROC3_CREATE,
        NFSPROC3_MKDIR,
        NFSPROC3_SYMLINK,
        NFSPROC3_MKNOD,
        NFSPROC3_REMOVE,
        NFSPROC3_RMDIR,
        NFSPROC3_RENAME,
        NFSPROC3_LINK,
        NFSPROC3_READDIR,
        NFSPROC3_READDIRPLUS,
        NFSPROC3_FSSTAT,
        NFSPROC3_FSINFO,
        NFSPROC3_PATHCONF,
        NFSPROC3_COMMIT,
    ];
    procs.sort_unstable();
    assert_eq!(procs.to_vec(), (0..=21).collect::<Vec<u32>>());
    let mut mount = [
        MOUNTPROC3_NULL,
        MOUNTPROC3_MNT,
        MOUNTPROC3_DUMP,
        MOUNTPROC3_UMNT,
        MOUNTPROC3_UMNTALL,
        MOUNTPROC3_EXPORT,
    ];
    mount.sort_unstable();
    assert_eq!(mount.to_vec(), (0..=5).collect::<Vec<u32>>());
}
