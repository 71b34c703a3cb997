//! The per-client and per-export tables: slots by connection and address, the fold
//! into "other" when full, the peek at call records, and the top-N exposition.

use super::*;
use crate::export::{Export, Exports};
use crate::stats::exposition::{render, ReactorSource, Source};
use crate::stats::histogram::bucket_of;
use crate::stats::tenants_peek::Class;
use nfs_wire::rpccall::{call, sys};
use nfs_wire::v4call::Ops;
use std::net::Ipv4Addr;

/// A handle as the file model lays it out (version 1, export id little-endian at
/// byte 1, 31 bytes; `fs::imp::handles`), for `peek` only: the MAC is not checked
/// there.
fn handle(export: u16) -> Vec<u8> {
    let mut fh = vec![0u8; 31];
    fh[0] = 1;
    fh[1..3].copy_from_slice(&export.to_le_bytes());
    fh
}

fn fh_args(fh: &[u8]) -> Vec<u8> {
    let mut a = (fh.len() as u32).to_be_bytes().to_vec();
    a.extend_from_slice(fh);
    a.resize(4 + fh.len().next_multiple_of(4), 0);
    a
}

fn export_table(ids: &[u16]) -> Arc<ExportTable> {
    let list = ids
        .iter()
        .map(|&id| {
            let cfg = format!("[[exports]]\npath = \"/e{id}\"\nid = {id}\n");
            let c = crate::config::Config::parse(&cfg).unwrap();
            c.exports().unwrap().remove(0)
        })
        .collect::<Vec<Export>>();
    Arc::new(ExportTable::new(Exports::new(list)))
}

fn ip(a: u8, b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, a, b))
}

#[test]
fn a_connection_keeps_its_slot_and_addresses_share_one() {
    let mut t = Tenants::new(Arc::new(TenantTable::new(16)), export_table(&[]), true);
    let a = t.client(7, false, ip(0, 2));
    assert_eq!(a, 1);
    assert_eq!(t.client(7, false, ip(0, 2)), a);
    // Another connection from the same address: the same slot.
    assert_eq!(t.client(8, false, ip(0, 2)), a);
    // The same connection number on RDMA is another connection, same address.
    assert_eq!(t.client(7, true, ip(0, 2)), a);
    // A later connection in the same transport slot has another generation, so
    // another id: it resolves its own address.
    let b = t.client(7 + (1 << 32), false, ip(0, 3));
    assert_eq!(b, 2);
    let held: Vec<_> = t.table().clients().into_iter().map(|(k, _)| k).collect();
    assert_eq!(held, vec![None, Some(ip(0, 2)), Some(ip(0, 3))]);
    let v6: IpAddr = "::1".parse().unwrap();
    assert_eq!(t.client(9, false, v6), 3);
    assert_eq!(t.table().clients().last().unwrap().0, Some(v6));
}

/// What `classify` leaves in `Hot::seen` for `rec`: nothing for a record it cannot
/// decode or answers before a handle (NULL, MOUNT); for an NFSv3 GETATTR or READ the
/// handle the cache's parse took, for other procedures `Seen::v3`; for a COMPOUND the
/// handle of its cache shape, or `Seen::v4` from its plan. `Seen::v4` is also checked
/// against the shape's answer, so both ways agree.
fn seen_of(rec: &[u8]) -> Seen {
    use crate::front::{Plan, V4Last, V3_CACHE};
    let Ok((h, at)) = engine::rpc::decode_call(rec) else {
        return Seen::NONE;
    };
    let args = &rec[at..];
    match (h.prog, h.vers, h.proc_) {
        (_, _, 0) => Seen::NONE,
        (100003, 3, p) => match (V3_CACHE.parse)(p, args) {
            Some(ask) => Seen::handle(ask.read.is_some(), ask.fh),
            None => Seen::v3(p, args),
        },
        (100003, 4, 1) => {
            let (plan, shape) = Plan::with_shape(args);
            let walked = Seen::v4(args, &plan);
            if let Some(s) = shape {
                let read = matches!(s.last, V4Last::Read { .. });
                assert_eq!(Seen::handle(read, s.fh), walked, "shape and plan");
            }
            walked
        }
        _ => Seen::NONE,
    }
}

/// A call as the reactor counts it: `Router::count_in` (`slot_of`, then
/// `Tenants::call_in`) on arrival, `Router::classified` once `classify` decoded it.
fn cin(t: &mut Tenants, conn: u64, peer: IpAddr, rec: &[u8], qos: bool) -> (u16, Peek) {
    let slot = crate::stats::slot_of(rec);
    let peer = std::net::SocketAddr::new(peer, 0);
    let (mut pair, p) = t.call_in(conn, false, &peer, rec, slot, qos);
    t.classified(&mut pair, conn, false, &peer, seen_of(rec), rec.len());
    (pair, p)
}

fn v3_call(proc_: u32, export: u16) -> Vec<u8> {
    call(1, 100003, 3, proc_, &sys(0), &fh_args(&handle(export)))
}

/// The per-call path finds the connection's pair in its line: the address and pair
/// lookups run once per connection and once per change of export, never per call.
#[test]
fn a_settled_connection_looks_nothing_up() {
    let mut t = Tenants::new(Arc::new(TenantTable::new(16)), export_table(&[3, 4]), true);
    let (getattr, read) = (v3_call(1, 3), v3_call(6, 3));
    let (p, _) = cin(&mut t, 7, ip(0, 2), &getattr, false);
    assert_eq!(t.lookups(), 1);
    for i in 0..1000 {
        let rec = if i % 2 == 0 { &getattr } else { &read };
        assert_eq!(cin(&mut t, 7, ip(0, 2), rec, false).0, p);
        t.answered(p, bucket_of(1500), 1500, 10);
    }
    assert_eq!(t.lookups(), 1, "a lookup per call");
    // Another export: one lookup, then settled again; back: one more.
    let other = v3_call(1, 4);
    let (q, _) = cin(&mut t, 7, ip(0, 2), &other, false);
    assert_ne!(q, p);
    cin(&mut t, 7, ip(0, 2), &other, false);
    assert_eq!(t.lookups(), 2);
    assert_eq!(cin(&mut t, 7, ip(0, 2), &getattr, false).0, p);
    assert_eq!(t.lookups(), 3);
    // Sums: one client, its calls split over the two exports.
    let clients = t.table().clients();
    assert_eq!(clients[1].1.ops, [500, 0, 504]);
    assert_eq!(clients[1].1.bytes.1, 10_000);
    let exports = t.table().exports();
    let by_id = |id| {
        exports
            .iter()
            .find(|(k, _)| *k == Some(id))
            .unwrap()
            .1
            .total()
    };
    assert_eq!((by_id(3), by_id(4)), (1002, 2));
}

#[test]
fn a_full_table_folds_new_addresses_into_other_and_counts_them() {
    let mut t = Tenants::new(Arc::new(TenantTable::new(16)), export_table(&[]), true);
    for i in 0..16u8 {
        assert_eq!(t.client(u64::from(i), false, ip(1, i)), u16::from(i) + 1);
    }
    assert_eq!(t.table().full(), 0);
    for i in 16..40u8 {
        assert_eq!(t.client(u64::from(i), false, ip(1, i)), 0, "folded");
    }
    assert_eq!(t.table().full(), 24);
    assert_eq!(t.table().clients_held(), 16);
    // Addresses already held keep their slot.
    assert_eq!(t.client(100, false, ip(1, 5)), 6);
}

/// `stats.per_client = false`: a call claims no slot and counts nothing, in or out;
/// QoS still gets its peek, and only QoS peeks.
#[test]
fn per_client_off_counts_nothing() {
    let rec = v3_call(6, 3);
    for on in [true, false] {
        for qos in [true, false] {
            let mut t = Tenants::new(Arc::new(TenantTable::new(16)), export_table(&[3]), on);
            let (pair, p) = cin(&mut t, 7, ip(0, 2), &rec, qos);
            t.answered(pair, bucket_of(1500), 1500, 10);
            let held = t.table().clients_held();
            let ops: u64 = t.table().clients().iter().map(|(_, s)| s.total()).sum();
            let out: u64 = t.table().exports().iter().map(|(_, s)| s.bytes.1).sum();
            let want = u64::from(on);
            assert_eq!((held as u64, ops, out / 10), (want, want, want));
            assert_eq!(pair != UNCOUNTED, on);
            assert_eq!(p.export.is_some(), qos, "peeked only under a rule");
            assert_eq!(t.table().peeks(), u64::from(qos));
        }
    }
}

/// The per-call path reads no record: without a QoS rule a call is counted from what
/// `classify` decoded (`Seen`), never peeked; under a rule the one peek on arrival
/// counts it and `classified` does not count it again. Fails if counting peeks the
/// record (walks a COMPOUND a second time) or looks a settled connection up again.
#[test]
fn counting_reads_no_record_without_a_rule_and_counts_once_with_one() {
    let fh = handle(3);
    let sid = [5u8; 16];
    let v4 = |ops: Ops| call(1, 100003, 4, 1, &sys(0), &ops.args());
    let recs = [
        v3_call(1, 3),
        v3_call(6, 3),
        v4(Ops::new().sequence(sid, 1).putfh(&fh).getattr(&[1])),
        v4(Ops::new()
            .sequence(sid, 1)
            .putfh(&fh)
            .read(&[0; 16], 0, 4096)),
    ];
    for qos in [false, true] {
        let mut t = Tenants::new(Arc::new(TenantTable::new(16)), export_table(&[3]), true);
        for i in 0..1000 {
            cin(&mut t, 7, ip(0, 2), &recs[i % recs.len()], qos);
        }
        let peeks = if qos { 1000 } else { 0 };
        assert_eq!(t.table().peeks(), peeks, "record peeks, rule: {qos}");
        assert_eq!(t.lookups(), 1, "lookups, rule: {qos}");
        let clients = t.table().clients();
        assert_eq!(clients[1].1.ops, [500, 0, 500], "counted once, rule: {qos}");
    }
}

/// `Seen` (from `classify`'s decode and the COMPOUND's plan) names the class and
/// export the record peek names, on every shape the peek knows and on hostile ones.
#[test]
fn seen_agrees_with_the_record_peek() {
    let cred = sys(0);
    let fh = handle(9);
    let sid = [5u8; 16];
    let v4 = |ops: Ops| call(1, 100003, 4, 1, &cred, &ops.args());
    let base = || Ops::new().sequence(sid, 1).putfh(&fh);
    let mut recs: Vec<Vec<u8>> = (0..22).map(|p| v3_call(p, 9)).collect();
    recs.extend([
        v4(base().getattr(&[1])),
        v4(base().read(&[0; 16], 0, 4096)),
        v4(base().write(&[0; 16], 0, b"abc")),
        v4(base().commit(0, 0)),
        v4(base().write(&[0; 16], 0, b"abc").getattr(&[1])),
        v4(base()),
        v4(Ops::new().sequence(sid, 1).putrootfh().getattr(&[1])),
        v4(Ops::new().putfh(&fh).read(&[0; 16], 0, 1)),
        v4(Ops::new()
            .sequence(sid, 1)
            .putfh(&[0xff; 200])
            .getattr(&[1])),
        call(1, 100005, 3, 1, &cred, &fh_args(&fh)),
    ]);
    for rec in &recs {
        let (p, s) = (peek(rec), seen_of(rec));
        assert_eq!((s.class, s.export), (p.class, p.export), "{rec:02x?}");
    }
    // Cut records: never an export from a handle that is not all there.
    let whole = v4(base().read(&[0; 16], 0, 4096));
    let fh_end = whole.len() - 4 - 16 - 8 - 4 - 4;
    for n in 0..fh_end {
        assert_eq!(seen_of(&whole[..n]).export, None, "cut at {n}");
    }
}

#[test]
fn exports_get_slots_only_when_the_export_table_holds_them() {
    let mut t = Tenants::new(Arc::new(TenantTable::new(16)), export_table(&[3, 9]), true);
    assert_eq!(t.export(None), 0);
    assert_eq!(t.export(Some(9)), 1);
    assert_eq!(t.export(Some(3)), 2);
    assert_eq!(t.export(Some(9)), 1);
    assert_eq!(t.export(Some(4)), 0, "unknown id: none");
    let ids: Vec<_> = t.table().exports().into_iter().map(|(k, _)| k).collect();
    assert_eq!(ids, vec![None, Some(9), Some(3)]);
}

#[test]
fn peek_classes_nfs3_calls_and_reads_their_handles_export() {
    let cred = sys(0);
    let fh = fh_args(&handle(0x1234));
    let rec = |p| call(1, 100003, 3, p, &cred, &fh);
    let got = |p| peek(&rec(p));
    assert_eq!(
        got(6),
        Peek {
            class: Class::Read,
            export: Some(0x1234),
            ..Peek::NONE
        }
    );
    assert_eq!(got(7).class, Class::Write);
    assert_eq!(got(21).class, Class::Write);
    assert_eq!(
        got(1),
        Peek {
            class: Class::Meta,
            export: Some(0x1234),
            ..Peek::NONE
        }
    );
    assert_eq!(got(0).export, None, "NULL has no handle");
    // MOUNT, other programs, a reply, cut records, a hostile opaque length.
    let none = Peek::NONE;
    assert_eq!(peek(&call(1, 100005, 3, 1, &cred, &fh)), none);
    let mut reply = rec(6);
    reply[7] = 1;
    assert_eq!(peek(&reply), none);
    let whole = rec(6);
    // Cut anywhere before the handle's last byte (its one pad byte is not needed).
    for n in 0..whole.len() - 1 {
        assert_eq!(peek(&whole[..n]).export, None, "cut at {n}");
    }
    let mut huge = whole.clone();
    let at = whole.len() - fh.len();
    huge[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(peek(&huge).export, None);
    let mut cred_len = whole;
    cred_len[28..32].copy_from_slice(&0xFFFF_FFF0u32.to_be_bytes());
    assert_eq!(peek(&cred_len), none);
}

#[test]
fn peek_classes_a_compound_by_the_operation_after_putfh() {
    let cred = sys(0);
    let fh = handle(7);
    let sid = [5u8; 16];
    let compound = |ops: Ops| peek(&call(1, 100003, 4, 1, &cred, &ops.args()));
    let base = || Ops::new().sequence(sid, 1).putfh(&fh);
    assert_eq!(
        compound(base().read(&[0; 16], 0, 4096)),
        Peek {
            class: Class::Read,
            export: Some(7),
            read: 4096,
            ..Peek::NONE
        }
    );
    assert_eq!(
        compound(base().write(&[0; 16], 0, b"abc")).class,
        Class::Write
    );
    assert_eq!(compound(base().commit(0, 0)).class, Class::Write);
    assert_eq!(
        compound(base().getattr(&[1])),
        Peek {
            class: Class::Meta,
            export: Some(7),
            ..Peek::NONE
        }
    );
    // No SEQUENCE, PUTFH: no export.
    assert_eq!(
        compound(Ops::new().sequence(sid, 1).putrootfh()).export,
        None
    );
    assert_eq!(compound(Ops::new().putfh(&fh)).export, None);
}

fn source(tables: Vec<Arc<TenantTable>>, exports: Arc<ExportTable>) -> Source {
    let pools = engine::mem::Pools::new(
        &[engine::mem::ClassSpec {
            size: 8192,
            count: 1,
        }],
        engine::mem::HugePolicy::Off,
    )
    .unwrap();
    Source {
        reactors: tables
            .into_iter()
            .map(|t| ReactorSource {
                counters: Default::default(),
                stats: Default::default(),
                pools: pools.clone(),
                tenants: t,
            })
            .collect(),
        rdma_credits: 0,
        callbacks: Default::default(),
        nfs4: None,
        qos: None,
        exports: Some(exports),
    }
}

fn value(text: &str, series: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .unwrap_or_else(|| panic!("no {series}"));
    line.rsplit_once(' ').unwrap().1.parse().unwrap()
}

/// Two reactors, 30 addresses (some on both), top 4: four clients by address, the
/// rest summed into "other" with what the tables folded; sums match what was counted.
#[test]
fn top_n_keeps_the_busiest_and_sums_the_rest_into_other() {
    let exports = export_table(&[1, 2]);
    let tables = vec![
        Arc::new(TenantTable::new(16)),
        Arc::new(TenantTable::new(16)),
    ];
    let mut r: Vec<_> = tables
        .iter()
        .map(|t| Tenants::new(t.clone(), exports.clone(), true))
        .collect();
    let mut total = 0u64;
    let read = [v3_call(6, 1), v3_call(6, 2)];
    for i in 0..30u8 {
        let calls = u64::from(i) + 1;
        let reactor = &mut r[usize::from(i % 2)];
        for _ in 0..calls {
            let rec = &read[usize::from(i % 2)];
            let (pair, _) = cin(reactor, u64::from(i), ip(2, i), rec, false);
            reactor.answered(pair, bucket_of(1500), 1500, 10);
        }
        total += calls;
    }
    // One address on the other reactor too: summed with its first; its handle names
    // an export the table does not hold ("none").
    cin(&mut r[1], 99, ip(2, 28), &v3_call(7, 5), false);
    crate::stats::set_top(&crate::config::StatsConfig {
        top_clients: 4,
        ..Default::default()
    });
    let mut out = String::new();
    render(&source(tables, exports), &mut out);
    let ops = |client: &str, class: &str| {
        value(
            &out,
            &format!("nfsgw_client_ops_total{{client=\"{client}\",class=\"{class}\"}}"),
        )
    };
    // 30 distinct addresses, 16 slots per reactor, 15 per reactor: none folded.
    assert_eq!(value(&out, "nfsgw_client_table_full_total"), 0);
    assert_eq!(value(&out, "nfsgw_clients"), 30);
    assert_eq!(ops("127.0.2.29", "read"), 30);
    assert_eq!(ops("127.0.2.28", "read"), 29);
    assert_eq!(ops("127.0.2.28", "write"), 1);
    assert_eq!(ops("127.0.2.27", "read"), 28);
    assert_eq!(ops("127.0.2.26", "read"), 27);
    assert!(!out.contains("client=\"127.0.2.25\""));
    assert_eq!(ops("other", "read"), total - 30 - 29 - 28 - 27);
    let labels: std::collections::HashSet<_> = out
        .lines()
        .filter(|l| l.starts_with("nfsgw_client_"))
        .filter_map(|l| l.split("client=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(labels.len(), 5, "{labels:?}");
    // Exports by path; the sums of both families are the calls counted.
    let e1 = value(
        &out,
        "nfsgw_export_ops_total{export=\"/e1\",class=\"read\"}",
    );
    let e2 = value(
        &out,
        "nfsgw_export_ops_total{export=\"/e2\",class=\"read\"}",
    );
    assert_eq!(e1 + e2, total);
    assert_eq!(
        value(
            &out,
            "nfsgw_export_ops_total{export=\"none\",class=\"write\"}"
        ),
        1
    );
    assert_eq!(
        value(
            &out,
            "nfsgw_export_bytes_total{export=\"/e1\",direction=\"in\"}"
        ),
        e1 * read[0].len() as u64
    );
    assert_eq!(
        value(
            &out,
            "nfsgw_client_request_duration_seconds_count{client=\"other\"}"
        ),
        total - 30 - 29 - 28 - 27
    );
    assert_eq!(
        value(
            &out,
            "nfsgw_client_request_duration_seconds_bucket{client=\"127.0.2.29\",le=\"0.000002\"}"
        ),
        30
    );
    crate::stats::set_top(&Default::default());
}
