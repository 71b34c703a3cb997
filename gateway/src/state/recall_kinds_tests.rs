//! Each kind's give-up rule, from RFC 8881 §20 and RFC 7862 §16.1 in our words: a
//! recall is resent whatever is lost (only the lease ends it) and heeds its answer, a
//! layout recall too (NOMATCHING_LAYOUT ends it), a notice is told by any answer and
//! dropped after `NOTIFY_TRIES` lost attempts, a question is never asked twice. The
//! last test drives a CB_NOTIFY_DEVICEID through the whole table.

use super::*;
use crate::state::layouts::{DataServer, Devices, Probe};
use crate::state::recall::Inbox;

/// The outcome of `events` in turn for one callback of `kind` (its strikes carried).
fn run(kind: Kind, events: &[Event], now: Instant) -> Vec<Next> {
    let mut strikes = 0;
    events
        .iter()
        .map(|e| kind.decide(&mut strikes, *e, now))
        .collect()
}

const ALL: [Kind; 5] = [
    Kind::Recall,
    Kind::Offload,
    Kind::LayoutRecall,
    Kind::Getattr,
    Kind::Notify,
];

#[test]
fn lost_attempts_resend_except_a_question_and_a_notice_out_of_tries() {
    let now = Instant::now();
    let at = now + RETRY;
    let lost = [Event::Lost(at); 1000];
    for kind in [Kind::Recall, Kind::LayoutRecall, Kind::Offload] {
        // Nothing but the lease (or the copy's KEEP_FINISHED) ends these.
        let got = run(kind, &lost, now);
        assert!(got.iter().all(|n| *n == Next::Resend(at)), "{kind:?}");
    }
    let got = run(Kind::Notify, &lost[..NOTIFY_TRIES as usize], now);
    let (last, before) = got.split_last().unwrap();
    assert!(before.iter().all(|n| *n == Next::Resend(at)));
    assert_eq!(*last, Next::GiveUp, "dropped at the last try");
    assert_eq!(NOTIFY_TRIES, 30);
    assert_eq!(run(Kind::Getattr, &lost[..1], now), [Next::GiveUp]);
    // A misordered slot is a resend, never a strike.
    let mut notify = vec![Event::Misordered; 100];
    notify.extend([Event::Lost(at); NOTIFY_TRIES as usize - 1]);
    let got = run(Kind::Notify, &notify, now);
    assert!(!got.contains(&Next::GiveUp));
    assert_eq!(got[0], Next::Resend(now + RETRY));
    assert_eq!(
        run(Kind::Getattr, &[Event::Misordered], now),
        [Next::GiveUp]
    );
}

#[test]
fn answers_end_resend_or_give_up_by_kind() {
    use RecallAnswer::*;
    let now = Instant::now();
    let again = Next::Resend(now + RETRY);
    let said = |a| Event::Answered(a);
    for kind in ALL {
        assert_eq!(run(kind, &[said(Accepted)], now), [Next::Done], "{kind:?}");
    }
    // Notices: told, whatever they answered.
    for kind in [Kind::Offload, Kind::Notify] {
        for a in [Unknown, Later, Refused(10006), Refused(10060)] {
            assert_eq!(run(kind, &[said(a)], now), [Next::Done], "{kind:?} {a:?}");
        }
    }
    // Requests: DELAY resent for ever, BAD_STATEID twice, a refusal gives up.
    let n = BAD_STATEID_RETRIES as usize;
    assert_eq!(n, 2);
    for kind in [Kind::Recall, Kind::LayoutRecall] {
        assert!(run(kind, &[said(Later); 100], now)
            .iter()
            .all(|x| *x == again));
        let got = run(kind, &vec![said(Unknown); n + 1], now);
        assert_eq!(
            got,
            [vec![again; n], vec![Next::GiveUp]].concat(),
            "{kind:?}"
        );
        assert_eq!(run(kind, &[said(Refused(10006))], now), [Next::GiveUp]);
    }
    // NOMATCHING_LAYOUT: the client holds none, which ends a layout recall only.
    assert_eq!(
        run(Kind::LayoutRecall, &[said(Refused(10060))], now),
        [Next::Done]
    );
    assert_eq!(
        run(Kind::Recall, &[said(Refused(10060))], now),
        [Next::GiveUp]
    );
    // A question: anything but the attributes gives up (and recalls).
    for a in [Unknown, Later, Refused(10006)] {
        assert_eq!(run(Kind::Getattr, &[said(a)], now), [Next::GiveUp], "{a:?}");
    }
}

/// A CB_NOTIFY_DEVICEID whose client has no back channel: tried every `RETRY`,
/// dropped from the callback table and then from the layout table after
/// `NOTIFY_TRIES` attempts; no record is ever sent.
#[test]
fn an_unreachable_notice_is_dropped_after_its_tries() {
    let servers = (1..=2)
        .map(|i| DataServer {
            addr: format!("10.0.0.{i}:2049").parse().unwrap(),
            rdma: false,
            probe: None,
        })
        .collect();
    let layouts = Layouts::new(Some(Devices {
        servers,
        stripe_unit: 1 << 20,
        rsize: 1 << 20,
        wsize: 1 << 20,
        read_mirrors: 1,
        stripe: Default::default(),
        probe: Probe::default(),
    }));
    assert_eq!(
        layouts.watch(9, 1, 0, 0b100),
        crate::state::layouts::NOTIFY_DELETE
    );
    for _ in 0..3 {
        layouts.health().probed(1, false);
    }
    layouts.recall_server(1, &Inbox::default());
    let dl = Delegations::default();
    let mut table = RecallTable::default();
    let nobody = |_: u64| None;
    let wire = crate::nfs4::callback::Wire;
    let mut now = Instant::now();
    for n in 1..NOTIFY_TRIES {
        let out = table.step_layouts(&wire, &dl, &layouts, &nobody, now);
        assert!(out.is_empty());
        assert_eq!(table.notices(), 1, "still tried after {n} misses");
        now += RETRY;
    }
    table.step_layouts(&wire, &dl, &layouts, &nobody, now);
    assert_eq!(table.notices(), 0, "given up");
    assert_eq!(
        layouts.notices(),
        1,
        "until the next pass tells the layouts"
    );
    table.step_layouts(&wire, &dl, &layouts, &nobody, now + RETRY);
    assert_eq!(layouts.notices(), 0);
}
