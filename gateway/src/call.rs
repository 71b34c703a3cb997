//! What every front end's procedure runs with, and what it tells its caller: the
//! per-call context (file model, export table, client address, credential, connection)
//! and the outcome the worker turns into an RPC reply. Protocol-neutral, so NFSv3,
//! MOUNT and NFSv4.1 share it without importing each other (docs/architecture.md §2).

use crate::export::Exports;
use crate::fs::FileModel;

/// Everything a call needs besides its arguments.
pub struct Ctx<'a> {
    pub model: &'a FileModel,
    pub exports: &'a Exports,
    pub mounts: &'a crate::mount::MountTable,
    pub client: std::net::SocketAddr,
    pub cred: engine::rpc::Cred,
    /// The connection the call arrived on (NFSv4.1 binds back channels to it).
    pub conn: Option<crate::conn::ConnRef>,
    /// pNFS fencing (`crate::fence`), when this gateway's store allows it.
    pub fence: Option<&'a crate::fence::Fence>,
}

/// What the caller should send (RFC 5531 §9: accept_stat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The results are in `out`.
    Done,
    /// Rewind and reply GARBAGE_ARGS.
    GarbageArgs,
    /// Rewind and reply PROC_UNAVAIL.
    ProcUnavail,
}

/// What a worker's GETATTR, READ or WRITE learned for the reactor's caches, noted by
/// the front end as it encodes the reply (its attributes as the file model gave them,
/// and a READ's data in the reply buffer), so the worker's completion carries them
/// and nothing decodes reply bytes again (`server::worker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    pub attr: crate::fs::Attr,
    /// A READ's data: its position in the reply buffer and its length.
    pub data: Option<(usize, usize)>,
}

thread_local! {
    /// The last successful GETATTR, READ or WRITE this worker thread encoded.
    static LEARNED: std::cell::Cell<Option<Learned>> = const { std::cell::Cell::new(None) };
}

/// Notes what the call being encoded on this thread learned (replacing any note).
pub fn note_learned(l: Learned) {
    LEARNED.with(|c| c.set(Some(l)));
}

/// Takes (and clears) this thread's note: taken before and after every call, so no
/// note outlives its call.
pub fn take_learned() -> Option<Learned> {
    LEARNED.with(|c| c.take())
}

thread_local! {
    /// The last directory page this worker thread listed and encoded (READDIRPLUS).
    static LISTING: std::cell::RefCell<Option<crate::cache::ListedPage>> =
        const { std::cell::RefCell::new(None) };
}

/// Notes the page the call being encoded on this thread listed, for the reactor's
/// listings (`cache_dirs`), beside its directory's attributes (`note_learned`).
pub fn note_listing(p: crate::cache::ListedPage) {
    LISTING.with(|c| *c.borrow_mut() = Some(p));
}

/// Takes (and clears) this thread's listing note, as `take_learned`.
pub fn take_listing() -> Option<crate::cache::ListedPage> {
    LISTING.with(|c| c.borrow_mut().take())
}

/// What an NFSv3 LOOKUP, CREATE or MKDIR answered NFS3_OK for (a regular file or
/// directory in the directory's export), or an NFSv4.1 LOOKUP or OPEN that created
/// its file, noted as it runs or encodes, for the reactor's names (`cache_names`):
/// the object's handle, its attributes and the directory's (post-operation).
#[derive(Debug, Clone, Copy)]
pub struct Named {
    pub obj: crate::cache::FhKey,
    pub obj_attr: Option<crate::fs::Attr>,
    pub dir_attr: Option<crate::fs::Attr>,
    /// The call made the entry (CREATE, MKDIR, OPEN creating), rather than found it.
    pub made: bool,
}

thread_local! {
    /// The last directory entry this worker thread answered (`Named`), and how many
    /// entries the call noted: a COMPOUND may name several, and then teaches none
    /// (`take_named`), so an entry is never paired with another operation's name.
    static NAMED: std::cell::Cell<(Option<Named>, u8)> = const { std::cell::Cell::new((None, 0)) };
}

/// Notes the entry the call being encoded on this thread answered (`Named`).
pub fn note_named(n: Named) {
    NAMED.with(|c| {
        let (_, count) = c.get();
        c.set((Some(n), count.saturating_add(1)));
    });
}

/// Takes (and clears) this thread's entry note, as `take_learned`: `None` unless the
/// call noted exactly one entry.
pub fn take_named() -> Option<Named> {
    match NAMED.with(|c| c.take()) {
        (n, 1) => n,
        _ => None,
    }
}

thread_local! {
    /// The call running on this worker thread answers no client: a revalidation
    /// behind a reply the reactor already gave (`server::dispatch`).
    static BEHIND_REPLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Says whether the call about to run on this thread is a revalidation (set by the
/// worker before each call).
pub fn set_behind_reply(on: bool) {
    BEHIND_REPLY.with(|c| c.set(on));
}

/// Whether the running call answers no client: a listing may then read ahead of its
/// reply (`fs::FileModel::plus_count`), since no one waits for its page.
pub fn behind_reply() -> bool {
    BEHIND_REPLY.with(|c| c.get())
}

thread_local! {
    /// The size a write delegation's holder reported (CB_GETATTR, RFC 8881 §10.4.3)
    /// for the file whose attributes this worker's call reads: (fileid, size).
    static HOLDERS_SIZE: std::cell::Cell<Option<(u64, u64)>> = const { std::cell::Cell::new(None) };
}

/// Notes the size the holder of `fileid`'s write delegation reported, for the call
/// about to run on this thread (`server::v3_recall`); `None` clears the note.
pub fn note_holders_size(note: Option<(u64, u64)>) {
    HOLDERS_SIZE.with(|c| c.set(note));
}

/// Takes (and clears) the holder's size of `fileid`, if noted for this call: the
/// front end answers it instead of the server's.
pub fn take_holders_size(fileid: u64) -> Option<u64> {
    let note = HOLDERS_SIZE.with(|c| c.take())?;
    (note.0 == fileid).then_some(note.1)
}

/// A file a call names that may conflict with another client's NFSv4.1 delegation
/// (RFC 8881 §10.2): by handle, or as a directory entry (directory handle, name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    File(&'a [u8]),
    Entry(&'a [u8], &'a [u8]),
}

/// How a call touches the files it names (`Touches`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// Reads their data (READ): conflicts with write delegations only (RFC 8881
    /// §10.4.3).
    Read,
    /// Reads their attributes (GETATTR): a write delegation's holder is asked for
    /// them (CB_GETATTR, §10.4.3) rather than recalled.
    Attrs,
    /// Writes them (WRITE, SETATTR).
    Write,
    /// Changes the namespace around them (REMOVE, RENAME, CREATE over a name).
    Namespace,
}

/// What a call would read or change that a delegation covers, decoded by its front
/// end (`FrontEnd::touches`): its files, and how it touches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touches<'a> {
    pub how: Touch,
    /// It changes what a pNFS layout maps (SETATTR, CREATE over a name, REMOVE,
    /// RENAME): other clients' layouts are recalled first (RFC 8881 §12.5.5). WRITE
    /// alone does not: it is a data server's own traffic; reads do not either.
    pub layout: bool,
    pub targets: [Option<Target<'a>>; 2],
}
