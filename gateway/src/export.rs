//! STUB: export access control and squashing.
