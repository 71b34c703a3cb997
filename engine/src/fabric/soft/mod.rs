//! The `soft` provider (being written).
