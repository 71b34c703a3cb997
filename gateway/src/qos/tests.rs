//! The rules and the gate without a server: matching, holding in order, releasing as
//! buckets refill, an unlimited client never held, and a reload.

use super::*;
use crate::config::Config;
use std::time::Duration;

fn cfg(qos: &str) -> Config {
    Config::parse(&format!(
        "[[exports]]\npath = \"/\"\nclients = [\"127.0.0.0/8\"]\n\
         [[exports]]\npath = \"/data\"\nclients = [\"127.0.0.0/8\"]\n{qos}"
    ))
    .unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn table(qos: &str) -> Arc<Table> {
    Arc::new(Table::new(Rules::build(&cfg(qos), None).unwrap()))
}

const LIMITED: &str = "[[qos.client]]\nmatch = \"127.0.0.2\"\nops_per_s = 20\n";

#[test]
fn no_rule_gate_is_off() {
    let g: Gate<u32> = Gate::new(table(""));
    assert!(!g.on);
}

#[test]
fn limited_client_is_held_unlimited_is_not() {
    let mut g: Gate<u32> = Gate::new(table(LIMITED));
    assert!(g.on);
    let limited = ip("127.0.0.2");
    // 20/s: the 100 ms burst admits 2 calls, then 1 more (tat within the burst).
    let admitted = (0..10)
        .filter(|&i| g.offer(limited, Cost::default(), i).is_some())
        .count();
    assert_eq!(admitted, 3);
    assert!(g.holding());
    // Another client is never held, whatever the limited one does.
    for i in 0..1000 {
        assert_eq!(g.offer(ip("127.0.0.3"), Cost::default(), i), Some(i));
    }
    let rules = g.rules.clone();
    assert_eq!(rules.all[0].delayed.load(Ordering::Relaxed), 7);
}

#[test]
fn held_calls_go_in_order_as_the_bucket_refills() {
    let mut g: Gate<u32> = Gate::new(table(LIMITED));
    let limited = ip("127.0.0.2");
    for i in 0..6 {
        let _ = g.offer(limited, Cost::default(), i);
    }
    let mut out = Vec::new();
    assert_eq!(g.release(&mut |i| out.push(i)), 0, "nothing refilled yet");
    assert!(g.sleep_ns() > 0 && g.sleep_ns() <= 50_000_000);
    std::thread::sleep(Duration::from_millis(160));
    g.release(&mut |i| out.push(i));
    // 160 ms at 20/s: three more calls, in arrival order.
    assert_eq!(out, [3, 4, 5]);
    assert!(!g.holding());
    assert!(g.rules.all[0].delay_ns.load(Ordering::Relaxed) >= 3 * 100_000_000);
}

#[test]
fn new_calls_queue_behind_held_ones() {
    let mut g: Gate<u32> = Gate::new(table(LIMITED));
    let limited = ip("127.0.0.2");
    for i in 0..4 {
        let _ = g.offer(limited, Cost::default(), i);
    }
    std::thread::sleep(Duration::from_millis(60));
    // The bucket has room again, but call 3 waits: 4 must not overtake it.
    assert_eq!(g.offer(limited, Cost::default(), 4), None);
    let mut out = Vec::new();
    g.release(&mut |i| out.push(i));
    // 3 first; 4 too when the sleep overran to 100 ms (a second token at 20/s), as a
    // loaded machine's does: never 4 alone or ahead of 3.
    assert!(out == [3] || out == [3, 4], "released {out:?}");
}

#[test]
fn bytes_charge_after_the_call_and_debt_holds_the_next() {
    let mut g: Gate<u32> = Gate::new(table(
        "[[qos.client]]\nmatch = \"127.0.0.0/8\"\nread_bytes_per_s = \"1MiB\"\n",
    ));
    let peer = ip("127.0.0.9");
    let read = |n| Cost {
        export: None,
        read: n,
        write: 0,
    };
    // A 1 MiB READ starts (full bucket) and leaves 0.9 s of debt.
    assert_eq!(g.offer(peer, read(1 << 20), 0), Some(0));
    assert_eq!(g.offer(peer, read(4096), 1), None);
    assert!(g.sleep_ns() > 800_000_000);
    // Writes and operations are not limited by a read rate.
    let write = Cost {
        export: None,
        read: 0,
        write: 1 << 20,
    };
    assert_eq!(g.offer(ip("10.0.0.1"), write, 2), Some(2));
}

#[test]
fn export_rule_charges_calls_on_that_export_only() {
    let cfg = cfg("[[qos.export]]\npath = \"/data\"\nops_per_s = 10\n");
    let rules = Rules::build(&cfg, None).unwrap();
    let data = cfg
        .exports()
        .unwrap()
        .iter()
        .find(|e| e.path == "/data")
        .unwrap()
        .id;
    let root = cfg
        .exports()
        .unwrap()
        .iter()
        .find(|e| e.path == "/")
        .unwrap()
        .id;
    let peer = ip("127.0.0.5");
    assert_eq!(rules.matched(peer, Some(data)).export, Some(0));
    assert_eq!(rules.matched(peer, Some(root)), Matched::default());
    assert_eq!(rules.matched(peer, None), Matched::default());
    // A client the export does not admit is not charged to it (forged handle).
    assert_eq!(
        rules.matched(ip("10.1.1.1"), Some(data)),
        Matched::default()
    );
}

#[test]
fn first_matching_client_rule_wins() {
    let t = table(
        "[[qos.client]]\nmatch = \"127.0.0.2/32\"\nops_per_s = 5\n\
         [[qos.client]]\nmatch = \"127.0.0.0/8\"\nops_per_s = 50\n",
    );
    let r = t.load();
    assert_eq!(r.matched(ip("127.0.0.2"), None).client, Some(0));
    assert_eq!(r.matched(ip("127.0.0.3"), None).client, Some(1));
    assert_eq!(r.matched(ip("::ffff:127.0.0.3"), None).client, Some(1));
    assert_eq!(r.matched(ip("10.0.0.1"), None).client, None);
}

#[test]
fn reload_changes_the_limit_and_releases_what_no_rule_covers() {
    let t = table(LIMITED);
    let mut g: Gate<u32> = Gate::new(t.clone());
    let limited = ip("127.0.0.2");
    for i in 0..10 {
        let _ = g.offer(limited, Cost::default(), i);
    }
    g.rules.all[0].delayed.fetch_add(100, Ordering::Relaxed);
    // Raise the limit: a fresh bucket, the counters carried over.
    let raised = Rules::build(
        &cfg("[[qos.client]]\nmatch = \"127.0.0.2\"\nops_per_s = 100000\n"),
        Some(&t.load()),
    )
    .unwrap();
    t.publish(raised);
    g.refresh();
    assert_eq!(g.rules.all[0].delayed.load(Ordering::Relaxed), 107);
    let mut out = Vec::new();
    g.release(&mut |i| out.push(i));
    assert_eq!(out, [3, 4, 5, 6, 7, 8, 9]);
    // Remove every rule: the gate turns off.
    let _ = g.offer(limited, Cost::default(), 0);
    t.publish(Rules::build(&cfg(""), Some(&t.load())).unwrap());
    g.refresh();
    assert!(!g.on);
}

#[test]
fn config_errors_name_the_key() {
    let bad = |q: &str| {
        Config::parse(&format!("[[exports]]\npath = \"/\"\n{q}"))
            .unwrap_err()
            .to_string()
    };
    assert!(
        bad("[[qos.client]]\nmatch = \"10.0.0.0/33\"\nops_per_s = 1\n")
            .starts_with("qos.client[0].match")
    );
    assert!(bad("[[qos.client]]\nmatch = \"10.0.0.1\"\n").contains("sets no limit"));
    assert!(bad("[[qos.client]]\nmatch = \"10.0.0.1\"\nops_per_s = 0\n")
        .starts_with("qos.client[0].ops_per_s"));
    assert!(
        bad("[[qos.client]]\nmatch = \"10.0.0.1\"\nread_bytes_per_s = \"5 parsecs\"\n")
            .starts_with("qos.client[0].read_bytes_per_s")
    );
    assert!(
        bad("[[qos.export]]\npath = \"/nope\"\nops_per_s = 1\n").starts_with("qos.export[0].path")
    );
    assert!(bad("[[qos.client]]\nmatch = \"10.0.0.1\"\nops_per_s = 1\n\
         [[qos.client]]\nmatch = \"10.0.0.1\"\nops_per_s = 2\n")
    .contains("two rules"));
    assert!(bad("[[qos.client]]\nmatch = \"10.0.0.1\"\nburst = 1\n").contains("burst"));
}

#[test]
fn byte_rates_parse() {
    use crate::config::ByteRate;
    let t = |s: &str| ByteRate::Text(s.into()).bytes();
    assert_eq!(t("100MiB"), Ok(100 << 20));
    assert_eq!(t("2GB"), Ok(2_000_000_000));
    assert_eq!(t("512"), Ok(512));
    assert_eq!(t("1 KiB"), Ok(1024));
    assert!(t("MiB").is_err() && t("1 TiB").is_err() && t("99999999999GiB").is_err());
    assert_eq!(ByteRate::Bytes(7).bytes(), Ok(7));
}

#[test]
fn peek_reads_v3_counts_and_caps_them() {
    use engine::xdr::XdrWriter;
    let call = |proc_: u32, count: u32| {
        let mut b = vec![0u8; 256];
        let mut w = XdrWriter::new(&mut b);
        for v in [1u32, 0, 2, 100003, 3, proc_, 0, 0, 0, 0] {
            w.u32(v).unwrap();
        }
        w.opaque_var(&[9u8; 31]).unwrap();
        w.u64(0).unwrap();
        w.u32(count).unwrap();
        let n = w.position();
        b.truncate(n);
        b
    };
    assert_eq!(peek(&call(6, 4096)).read, 4096);
    assert_eq!(peek(&call(7, 8192)).write, 8192);
    assert_eq!(peek(&call(6, u32::MAX)).read, crate::limits::MAX_IO as u32);
    assert_eq!(
        peek(&call(1, 4096)),
        Cost::default(),
        "a GETATTR has no count"
    );
    assert_eq!(peek(&[1, 2, 3]), Cost::default());
    let mut short = call(6, 4096);
    short.truncate(60);
    assert_eq!(peek(&short).read, 0);
}

#[test]
fn print_config_round_trips_the_rules() {
    let c = cfg(
        "[[qos.client]]\nmatch = \"10.0.0.0/24\"\nops_per_s = 1000\n\
         read_bytes_per_s = \"100MiB\"\nwrite_bytes_per_s = 4096\n\
         [[qos.export]]\npath = \"/data\"\nops_per_s = 5000\n",
    );
    let text = crate::effective::render(&c).unwrap();
    let back = Config::parse(&text).unwrap();
    assert_eq!(back.qos, c.qos);
    // No rule: no [qos] table printed.
    assert!(!crate::effective::render(&cfg("")).unwrap().contains("qos"));
}

#[test]
fn peek_reads_v4_data_compounds() {
    use nfs_wire::v4call::{compound_call, Ops};
    let sid = [7u8; 16];
    let st = [0u8; 16];
    let fh = [9u8; 31];
    let call = |ops: Ops| compound_call(1, &nfs_wire::rpccall::sys(0), &ops);
    let read = call(Ops::new().sequence(sid, 1).putfh(&fh).read(&st, 0, 65536));
    assert_eq!(peek(&read).read, 65536);
    let write = call(
        Ops::new()
            .sequence(sid, 1)
            .putfh(&fh)
            .write(&st, 0, &[1u8; 5000]),
    );
    assert_eq!(peek(&write).write, 5000);
    let huge = call(
        Ops::new()
            .sequence(sid, 1)
            .putfh(&fh)
            .read(&st, 0, u32::MAX),
    );
    assert_eq!(peek(&huge).read, crate::limits::MAX_IO as u32);
    // Other shapes: one operation, no bytes.
    let getattr = call(Ops::new().sequence(sid, 1).putfh(&fh).getattr(&[1]));
    assert_eq!(peek(&getattr), Cost::default());
    let lookup = call(Ops::new().sequence(sid, 1).putrootfh().lookup(b"a"));
    assert_eq!(peek(&lookup), Cost::default());
    let mut cut = read.clone();
    cut.truncate(read.len() - 6);
    assert_eq!(peek(&cut).read, 0);
}
