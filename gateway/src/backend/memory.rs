//! STUB: the `memory` backend.
