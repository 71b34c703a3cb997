//! STUB: NFSv3.
