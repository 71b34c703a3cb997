//! MOUNT v3 procedure numbers (RFC 1813 Appendix I, §5.2.0–§5.2.5, program
//! [`crate::MOUNT_PROGRAM`] version [`crate::MOUNT_V3`]).

pub const MOUNTPROC3_NULL: u32 = 0;
pub const MOUNTPROC3_MNT: u32 = 1;
pub const MOUNTPROC3_DUMP: u32 = 2;
pub const MOUNTPROC3_UMNT: u32 = 3;
pub const MOUNTPROC3_UMNTALL: u32 = 4;
pub const MOUNTPROC3_EXPORT: u32 = 5;
