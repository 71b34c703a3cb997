//! STUB: the `fs` backend (directory of objects).
