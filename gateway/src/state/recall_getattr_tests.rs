//! CB_GETATTR from the tables' API with a real file model (memory backend) and the
//! real codec (RFC 8881 §10.4.3, §20.1): a reader of a write-delegated file's
//! attributes starts one CB_GETATTR; an unchanged answer leaves the server's
//! attributes, a changed one presents the holder's size with the file's times moved
//! to now (once per answer); a garbled reply or a timeout turns into the recall.

use crate::backend::memory::MemoryBackend;
use crate::conn::{ConnKind, ConnRef};
use crate::fs::{CreateMode, ExportRoot, FileModel, Node, Owner, SetAttr};
use crate::nfs4::callback::RecallDriver;
use crate::state::backchannel::CbAttrs;
use crate::state::delegations::{AttrVerdict, Delegations};
use crate::state::recall::{Outcall, CB_TIMEOUT};
use crate::state::stateid::Stateid;
use crate::state::BackChannelInfo;
use std::sync::Arc;
use std::time::{Duration, Instant};

const HOLDER: u64 = 0xa;
const READER: Option<u64> = Some(0xb);

fn info() -> BackChannelInfo {
    BackChannelInfo {
        session: [3; 16],
        conn: ConnRef {
            reactor: 0,
            kind: ConnKind::Rdma(engine::rdma::server::ConnId::from_raw(1, 1)),
        },
        cb_program: nfs_wire::nfs4::NFS4_CALLBACK,
        max_request: 4096,
        max_slots: 1,
        minor: 1,
    }
}

struct Rig {
    model: FileModel,
    d: Delegations,
    drv: RecallDriver,
    _dir: tempfile::TempDir,
}

fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let roots = [ExportRoot {
        id: 0,
        prefix: String::new(),
    }];
    let model = FileModel::open(Arc::new(MemoryBackend::new()), dir.path(), &roots).unwrap();
    let d = Delegations::default();
    d.set_callback_up(HOLDER, true);
    Rig {
        model,
        d,
        drv: RecallDriver::default(),
        _dir: dir,
    }
}

impl Rig {
    /// A new empty file `name` and the holder's write delegation on it (sc 77).
    fn delegated(&self, name: &[u8]) -> (Node, Stateid) {
        let root = self.model.root(0).unwrap();
        let how = CreateMode::Unchecked(SetAttr::default());
        let node = self
            .model
            .create(&root, name, &how, Owner { uid: 0, gid: 0 })
            .unwrap();
        let (s, write) = self
            .d
            .try_grant_fh(HOLDER, node.fileid, name, true)
            .unwrap();
        assert!(write);
        self.d.note_grant_change(&s, 77);
        (node, s)
    }

    fn settle(&self, node: &Node) -> AttrVerdict {
        self.d
            .settle_attrs(&self.model, node, READER, Duration::ZERO)
    }

    fn step(&mut self, now: Instant) -> Vec<Outcall> {
        let lookup = |_: u64| Some(info());
        self.drv.step(&self.d, &lookup, now)
    }

    /// The one CB_GETATTR sent at `now`: its xid and what it asks.
    fn cb_getattr(&mut self, now: Instant) -> (u32, nfs_wire::v4cb::CbGetattr) {
        let out = self.step(now);
        assert_eq!(out.len(), 1, "one callback");
        nfs_wire::v4cb::decode_getattr(&out[0].record).unwrap()
    }
}

#[test]
fn the_holders_answer_decides_what_a_reader_sees() {
    let mut r = rig();
    let (node, s) = r.delegated(b"f1");
    assert_eq!(
        r.settle(&node),
        AttrVerdict::Wait,
        "the holder is asked first"
    );
    assert_eq!(r.settle(&node), AttrVerdict::Wait, "once: still waiting");
    let now = Instant::now();
    let (xid, cb) = r.cb_getattr(now);
    assert_eq!(cb.fh, b"f1");
    assert!(r.step(now).is_empty(), "one CB_GETATTR, not one per reader");
    // Unchanged (cc = sc, the server's size): the server's attributes.
    let reply = nfs_wire::v4cb::getattr_reply(xid, &cb, 0, 77);
    r.d.callback_reply(xid, &reply);
    assert!(r.step(now).is_empty());
    assert_eq!(r.drv.getattrs(), 0);
    // Past a second but taken by no reader yet (the asker retries later: NFSv3 after
    // 5 s): still the answer, not a new CB_GETATTR.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(r.settle(&node), AttrVerdict::Go);
    assert!(r.step(now).is_empty(), "not asked again");
    // Changed: the holder's size, the times moved to now (the change attribute
    // with them), every time it is presented.
    let before = r.model.getattr(&node).unwrap().ctime;
    let changed = CbAttrs {
        size: 10,
        change: 78,
        ..CbAttrs::default()
    };
    r.d.getattr_answered(&s.other, changed);
    assert_eq!(r.settle(&node), AttrVerdict::Present { size: 10 });
    let after = r.model.getattr(&node).unwrap();
    assert!(
        after.ctime > before && after.mtime == after.ctime,
        "{after:?}"
    );
    assert_eq!(after.size, 0, "the holder's size is never written");
    // The same answer presented again: the same times (one metadata write each).
    assert_eq!(r.settle(&node), AttrVerdict::Present { size: 10 });
    assert_eq!(r.model.getattr(&node).unwrap().ctime, after.ctime);
    // Modified stays modified: even cc = sc again presents (and moves) it.
    r.d.getattr_answered(
        &s.other,
        CbAttrs {
            size: 10,
            change: 77,
            ..CbAttrs::default()
        },
    );
    assert_eq!(r.settle(&node), AttrVerdict::Present { size: 10 });
    assert!(r.model.getattr(&node).unwrap().ctime > after.ctime);
    // The holder itself is never asked.
    let holder =
        r.d.settle_attrs(&r.model, &node, Some(HOLDER), Duration::ZERO);
    assert_eq!(holder, AttrVerdict::Go);
}

#[test]
fn a_garbled_reply_or_a_timeout_recalls_instead() {
    let mut r = rig();
    let now = Instant::now();
    // Garbled: a size past the largest file.
    let (node, s) = r.delegated(b"f2");
    assert_eq!(r.settle(&node), AttrVerdict::Wait);
    let (xid, cb) = r.cb_getattr(now);
    r.d.callback_reply(xid, &nfs_wire::v4cb::getattr_reply(xid, &cb, u64::MAX, 1));
    let out = r.step(now);
    assert_eq!(out.len(), 1, "the recall, at once");
    let (rxid, recall) = nfs_wire::v4cb::decode_callback(&out[0].record).unwrap();
    let recall = recall.unwrap();
    assert_eq!(recall.stateid[4..], s.other);
    assert_eq!(r.settle(&node), AttrVerdict::Wait, "until it is returned");
    let ok = nfs_wire::v4cb::callback_reply(rxid, Some(&recall));
    r.d.callback_reply(rxid, &ok);
    assert!(r.step(now).is_empty(), "acknowledged: the slot is free");
    assert_eq!(r.d.delegreturn(HOLDER, &s, node.fileid), Ok(()));
    assert_eq!(r.settle(&node), AttrVerdict::Go);
    // Unanswered: the recall once CB_GETATTR timed out.
    let (node, s) = r.delegated(b"f3");
    assert_eq!(r.settle(&node), AttrVerdict::Wait);
    let _ = r.cb_getattr(now);
    assert!(r.step(now + CB_TIMEOUT / 2).is_empty(), "not yet");
    let out = r.step(now + CB_TIMEOUT);
    assert_eq!(out.len(), 1, "the recall");
    let (_, recall) = nfs_wire::v4cb::decode_callback(&out[0].record).unwrap();
    assert_eq!(recall.unwrap().stateid[4..], s.other);
    // A late answer changes nothing: the recall goes on.
    r.d.getattr_answered(
        &s.other,
        CbAttrs {
            size: 0,
            change: 77,
            ..CbAttrs::default()
        },
    );
    assert_eq!(r.settle(&node), AttrVerdict::Wait);
}

/// A question whose job was lost (a full callback queue drops jobs) is asked again
/// after `ASK_AGAIN`, not left unanswered with every reader waiting for ever.
#[test]
fn a_lost_question_is_asked_again() {
    let mut r = rig();
    let (node, _) = r.delegated(b"lost");
    assert_eq!(r.settle(&node), AttrVerdict::Wait);
    assert!(r.d.inbox.pop().is_some(), "the question's job");
    let now = Instant::now();
    assert!(r.step(now).is_empty(), "lost: nothing sent");
    assert_eq!(r.settle(&node), AttrVerdict::Wait);
    assert!(r.step(now).is_empty(), "not asked again at once");
    std::thread::sleep(crate::state::delegations::ASK_AGAIN + Duration::from_millis(50));
    assert_eq!(r.settle(&node), AttrVerdict::Wait);
    let (_, cb) = r.cb_getattr(Instant::now());
    assert_eq!(cb.fh, b"lost");
}
