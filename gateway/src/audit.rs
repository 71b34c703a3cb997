//! The audit log (`[audit]`, off by default; docs/operations.md "Audit log"): one JSON
//! line per namespace or permission change — create, mkdir, symlink, mknod, remove,
//! rmdir, rename, a SETATTR of mode, owner or size — and one per call refused for
//! access (PERM, ACCES, ROFS), over NFSv3, NFSv4.x and MOUNT alike.
//!
//! Who writes what:
//! - A backend worker opens a [`Scope`] around each call it runs ([`begin`]): the
//!   client, its AUTH_SYS credential, the protocol and version. Reactors never open
//!   one: a reactor that refuses an access only hands the call to a worker, which
//!   refuses it again inside a scope, so each refusal is logged once.
//! - The file model reports each change it made ([`changed`], from `fs::FileModel`);
//!   a change made outside a call (orphan cleanup, start-up) has no scope and no line.
//! - The access policy notes why it refused ([`note_refusal`]); the line is written at
//!   the end of the call only if the call's answer was a refusal ([`Scope::end`]).
//!
//! Lines go through a bounded lock-free queue to one writer thread that appends to the
//! file and rotates it by size. A full queue drops the line and counts it
//! (`nfsgw_audit_dropped_total`); a worker never waits for the log and a reactor never
//! touches it. Lines are formatted (one allocation) only while the log is on.

mod sink;

pub use sink::{configure, flush, totals};

use crate::backend::meta_xattr::hex;
use crate::export::Exports;
use crate::fs::{FileHandle, Node, SetAttr};
use engine::rpc::{CallHeader, Cred};
use serde::Serialize;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Whether the log is on (`[audit] enabled`): the only thing a call reads when it is off.
static ON: AtomicBool = AtomicBool::new(false);

/// Whether lines are being recorded.
pub fn active() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The call a worker is running, while the log is on.
struct Current {
    client: SocketAddr,
    cred: Cred,
    proto: String,
    proc_: &'static str,
    exports: Arc<Exports>,
    /// The access policy's last refusal in this call: the file (when the rule names
    /// one) and the right missing.
    refusal: Option<(Option<u64>, &'static str)>,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// A call being audited; [`Scope::end`] (or drop, if the call panicked) closes it.
pub struct Scope(());

/// Opens the scope of a call a worker is about to run (`None` while the log is off).
/// `args` are the call's arguments: an NFSv4 COMPOUND's minor version is read from them.
pub fn begin(
    client: SocketAddr,
    h: &CallHeader,
    args: &[u8],
    exports: &Arc<Exports>,
) -> Option<Scope> {
    if !active() {
        return None;
    }
    let (proto, proc_) = names::of(h, args);
    CURRENT.with(|c| {
        *c.borrow_mut() = Some(Current {
            client,
            cred: h.cred,
            proto,
            proc_,
            exports: exports.clone(),
            refusal: None,
        })
    });
    Some(Scope(()))
}

impl Scope {
    /// Closes the scope. `status` is the first word of the call's results (nfsstat3,
    /// the COMPOUND's nfsstat4 or mountstat3, which agree on the numbers that mean a
    /// refusal: RFC 1813 §2.6, RFC 8881 §15.1, RFC 1813 Appendix I): a refusal writes
    /// the line, naming what the access policy refused if it noted it.
    pub fn end(self, status: Option<u32>) {
        let Some(cur) = CURRENT.with(|c| c.borrow_mut().take()) else {
            return;
        };
        let Some(why) = status.and_then(names::refusal) else {
            return;
        };
        let mut r = Record::new(&cur, "refused");
        r.status = Some(why);
        if let Some((fileid, right)) = cur.refusal {
            r.fileid = fileid;
            r.right = Some(right);
        }
        sink::push(r.line());
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().take());
    }
}

/// The access policy refused `right` ("read", "write", "modify directory", ...) on
/// file `fileid` (`crate::fs::access`). Nothing outside a worker's scope.
pub fn note_refusal(fileid: Option<u64>, right: &'static str) {
    if !active() {
        return;
    }
    CURRENT.with(|c| {
        if let Some(cur) = c.borrow_mut().as_mut() {
            cur.refusal = Some((fileid, right));
        }
    });
}

/// A change the file model made.
pub enum Change<'a> {
    /// A new object: `what` is "create", "mkdir", "symlink" or "mknod".
    Create {
        what: &'static str,
        dir: &'a Node,
        name: &'a [u8],
        fh: FileHandle,
    },
    /// A name removed: `what` is "remove" or "rmdir"; `fh` is the directory's.
    Remove {
        what: &'static str,
        dir: &'a Node,
        name: &'a [u8],
        fh: FileHandle,
    },
    Rename {
        from: &'a Node,
        from_name: &'a [u8],
        to: &'a Node,
        to_name: &'a [u8],
        fh: FileHandle,
    },
    /// Only a change of mode, owner, group or size is logged (times are not).
    SetAttr {
        node: &'a Node,
        set: &'a SetAttr,
        fh: FileHandle,
    },
}

impl Change<'_> {
    /// Whether this change is logged at all (a SETATTR of times alone is not).
    pub fn logged(&self) -> bool {
        match self {
            Change::SetAttr { set, .. } => {
                set.mode.is_some() || set.uid.is_some() || set.gid.is_some() || set.size.is_some()
            }
            _ => true,
        }
    }
}

/// Logs a change the file model made inside a worker's scope.
pub fn changed(ch: Change) {
    if !active() || !ch.logged() {
        return;
    }
    CURRENT.with(|c| {
        let cur = c.borrow();
        let Some(cur) = cur.as_ref() else { return };
        sink::push(record_of(cur, &ch).line());
    });
}

fn record_of(cur: &Current, ch: &Change) -> Record {
    match *ch {
        Change::Create {
            what,
            dir,
            name,
            fh,
        } => {
            let mut r = Record::new(cur, what);
            r.at(cur, dir, Some(name), fh);
            r
        }
        Change::Remove {
            what,
            dir,
            name,
            fh,
        } => {
            let mut r = Record::new(cur, what);
            r.at(cur, dir, Some(name), fh);
            r
        }
        Change::Rename {
            from,
            from_name,
            to,
            to_name,
            fh,
        } => {
            let mut r = Record::new(cur, "rename");
            r.at(cur, from, Some(from_name), fh);
            r.to = Some(path_of(to, Some(to_name)));
            r
        }
        Change::SetAttr { node, set, fh } => {
            let mut r = Record::new(cur, "setattr");
            r.at(cur, node, None, fh);
            r.mode = set.mode.map(|m| format!("{:04o}", m & 0o7777));
            r.owner = set.uid;
            r.group = set.gid;
            r.size = set.size;
            r
        }
    }
}

/// The store path of `name` in `dir` (or of `dir` itself): the backend key, lossy
/// UTF-8 with the exact bytes in hex beside it when the name is not UTF-8.
fn path_of(dir: &Node, name: Option<&[u8]>) -> String {
    let mut p = dir.key.clone();
    if let Some(n) = name {
        p.push_str(&String::from_utf8_lossy(n));
    }
    p
}

/// One line of the log (field order is the JSON's).
#[derive(Serialize)]
struct Record {
    time: String,
    event: &'static str,
    proto: String,
    proc: &'static str,
    client: String,
    uid: Option<u32>,
    gid: Option<u32>,
    gids: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    export: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name_hex: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fh: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    right: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fileid: Option<u64>,
}

impl Record {
    fn new(cur: &Current, event: &'static str) -> Record {
        let (uid, gid, gids) = match cur.cred {
            Cred::Sys(s) => (Some(s.uid), Some(s.gid), s.groups().to_vec()),
            Cred::None => (None, None, Vec::new()),
        };
        Record {
            time: chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now())
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            event,
            proto: cur.proto.clone(),
            proc: cur.proc_,
            client: cur.client.to_string(),
            uid,
            gid,
            gids,
            export: None,
            path: None,
            name_hex: None,
            to: None,
            fh: None,
            mode: None,
            owner: None,
            group: None,
            size: None,
            status: None,
            right: None,
            fileid: None,
        }
    }

    /// The export, path and handle of the object the line is about.
    fn at(&mut self, cur: &Current, dir: &Node, name: Option<&[u8]>, fh: FileHandle) {
        self.export = cur.exports.get(dir.export).map(|e| e.path.clone());
        self.path = Some(path_of(dir, name));
        if let Some(n) = name.filter(|n| std::str::from_utf8(n).is_err()) {
            self.name_hex = Some(hex(n));
        }
        self.fh = Some(hex(fh.as_bytes()));
    }

    fn line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

mod names;

#[cfg(test)]
mod tests;
