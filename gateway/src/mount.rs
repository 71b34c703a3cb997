//! STUB: MOUNT v3.
