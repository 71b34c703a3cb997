//! The object-store backend interface and its implementations.
//!
//! A backend is an object store: ranged get, put, multipart put, head, list with
//! prefix and delimiter, copy, delete. Calls block and run only on backend worker
//! threads, never on a reactor. Keys are '/'-separated paths; a key ending in '/' is a
//! directory marker (a zero-byte object that makes an empty directory exist).
//!
//! `RandomWrite` is an optional capability for stores that can update an object in
//! place (a local directory, memory); the file model stages UNSTABLE writes through it
//! and makes them durable with `sync`.

pub mod fs;
pub mod memory;

use std::collections::BTreeMap;

/// Object user metadata (S3 `x-amz-meta-*` without the prefix): mode, uid, gid,
/// mtime, ... using the names s3fs and rclone use.
pub type UserMeta = BTreeMap<String, String>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub key: String,
    pub size: u64,
    /// Last modification, nanoseconds since the epoch.
    pub mtime_ns: u64,
    pub etag: String,
    pub user: UserMeta,
}

/// One page of a listing. With a delimiter, keys sharing a next path component are
/// rolled up into `prefixes` (each ending in the delimiter).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListPage {
    pub objects: Vec<ObjectMeta>,
    pub prefixes: Vec<String>,
    /// Pass as `start_after` to continue; `None` at the end.
    pub next: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    NotFound,
    /// A conditional put found the key present.
    AlreadyExists,
    /// Out of space or quota.
    NoSpace,
    /// Worth retrying later (throttling, timeouts, 5xx): NFS3ERR_JUKEBOX.
    Retryable(String),
    /// Will not succeed on retry: NFS3ERR_IO.
    Permanent(String),
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendError::NotFound => f.write_str("object not found"),
            BackendError::AlreadyExists => f.write_str("object already exists"),
            BackendError::NoSpace => f.write_str("no space left in backend"),
            BackendError::Retryable(s) => write!(f, "temporary backend failure: {s}"),
            BackendError::Permanent(s) => write!(f, "backend failure: {s}"),
        }
    }
}

impl std::error::Error for BackendError {}

pub type BResult<T> = Result<T, BackendError>;

/// An in-progress multipart upload.
pub trait Upload: Send {
    /// Appends the next part (parts are written in order).
    fn put_part(&mut self, data: &[u8]) -> BResult<()>;
    /// Makes the object visible with all parts, durably.
    fn complete(self: Box<Self>) -> BResult<ObjectMeta>;
    /// Discards the parts.
    fn abort(self: Box<Self>);
}

pub trait Backend: Send + Sync {
    /// Short name for logs ("fs", "memory").
    fn name(&self) -> &'static str;

    fn head(&self, key: &str) -> BResult<ObjectMeta>;

    /// Reads from `offset` into `dst`; returns bytes read (short at end of object).
    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize>;

    /// Creates or replaces an object durably. With `if_absent`, fails with
    /// `AlreadyExists` when the key exists (conditional put).
    fn put(&self, key: &str, data: &[u8], meta: &UserMeta, if_absent: bool) -> BResult<ObjectMeta>;

    fn multipart(&self, key: &str, meta: &UserMeta) -> BResult<Box<dyn Upload>>;

    /// Lists keys starting with `prefix`, in key order, after `start_after`.
    fn list(
        &self,
        prefix: &str,
        delimiter: Option<char>,
        start_after: Option<&str>,
        max: usize,
    ) -> BResult<ListPage>;

    /// Server-side copy, metadata included.
    fn copy(&self, from: &str, to: &str) -> BResult<()>;

    /// Deletes; deleting a missing key is `NotFound`.
    fn delete(&self, key: &str) -> BResult<()>;

    /// Replaces the user metadata of an existing object (S3: copy onto itself).
    fn set_meta(&self, key: &str, meta: &UserMeta) -> BResult<()>;

    /// Total and free bytes and objects, when the store knows them.
    fn capacity(&self) -> BResult<(u64, u64, u64, u64)>;

    /// In-place updates, if this store supports them.
    fn random_write(&self) -> Option<&dyn RandomWrite> {
        None
    }
}

/// In-place object updates for stores that can do them.
pub trait RandomWrite: Send + Sync {
    /// Writes `data` at `offset`, extending the object (zero-filled) as needed. Not
    /// durable until `sync`.
    fn write_at(&self, key: &str, offset: u64, data: &[u8]) -> BResult<()>;
    /// Sets the object size (truncate or zero-extend). Not durable until `sync`.
    fn set_size(&self, key: &str, size: u64) -> BResult<()>;
    /// Makes every earlier `write_at`/`set_size` on `key` durable.
    fn sync(&self, key: &str) -> BResult<()>;
}
