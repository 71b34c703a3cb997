//! Whether the `fs` backend's root is on a network file system (`fstatfs`'s type), for
//! `[ha]`'s rule on how long a store call may last (docs/ha.md "Lease and clocks"):
//! a system call into a network file system has no timeout the gateway can set.

use super::sys;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;

/// `*_SUPER_MAGIC` of the network (or user-space) file systems Linux mounts, and
/// their names (linux/magic.h; GPFS and BeeGFS from their drivers). 32-bit values:
/// `f_type` is compared as `u32`, so a magic with the top bit set (SMB2, CIFS) matches
/// on targets where `f_type` is a signed 32-bit `long` too.
const REMOTE: &[(u32, &str)] = &[
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFE53_4D42, "SMB2"),
    (0xFF53_4D42, "CIFS"),
    (0x00C3_6400, "CephFS"),
    (0x6573_5546, "FUSE"),
    (0x0102_1997, "9p"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "AFS"),
    (0x0BD0_0BD0, "Lustre"),
    (0x4750_4653, "GPFS"),
    (0x1983_0326, "BeeGFS"),
    (0x0116_1970, "GFS2"),
    (0x7461_636F, "OCFS2"),
];

/// The kind of network file system `root` is on; `None` for a local one.
pub fn network_kind(root: &Path) -> io::Result<Option<&'static str>> {
    let dir = std::fs::File::open(root)?;
    let sf = sys::fstatfs(dir.as_fd())?;
    Ok(kind_of(sf.f_type as u32))
}

fn kind_of(magic: u32) -> Option<&'static str> {
    REMOTE.iter().find(|(m, _)| *m == magic).map(|(_, k)| *k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_magics_are_named_and_local_ones_are_not() {
        assert_eq!(kind_of(0x6969), Some("NFS"));
        assert_eq!(kind_of(0x00C3_6400), Some("CephFS"));
        assert_eq!(kind_of(0xFF53_4D42), Some("CIFS"));
        assert_eq!(kind_of(0x4750_4653), Some("GPFS"));
        assert_eq!(kind_of(0xEF53), None, "ext4");
        assert_eq!(kind_of(0x5846_5342), None, "XFS");
        // The test's own temporary directory is local (tmpfs or a disk).
        let d = tempfile::tempdir().unwrap();
        assert_eq!(network_kind(d.path()).unwrap(), None);
    }
}
