//! STUB: per-reactor server glue.
