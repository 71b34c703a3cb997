//! `EtcdCas` against a real etcd (tests/common/etcd.rs starts one on loopback; the
//! tests skip, saying so, only when the binary is absent outside CI).

use super::*;
use crate::backend::conformance;

#[path = "../../tests/common/etcd.rs"]
mod real;

fn client(e: &real::Etcd, prefix: &str) -> EtcdCas {
    learnt(
        EtcdCas::new(
            std::slice::from_ref(&e.url),
            prefix,
            Duration::from_millis(1500),
        )
        .unwrap(),
    )
}

/// `c` once it has learnt its cluster id, as `ha::setup` does before the probe.
fn learnt(c: EtcdCas) -> EtcdCas {
    c.learn_cluster().unwrap();
    c
}

/// An answer is read only with its header's revision and the cluster id learnt at
/// start: a proxy's `{}` is neither "absent" nor "condition failed" (review of issue
/// 28, findings 2 and 4).
#[test]
fn an_answer_without_the_learnt_header_is_an_error() {
    let c = EtcdCas::new(
        &["http://127.0.0.1:1".into()],
        "p/",
        Duration::from_millis(100),
    )
    .unwrap();
    let ok = json!({"header": {"cluster_id": "14841639068965178418", "revision": "7"}});
    assert_eq!(header_of(&ok), Ok((14841639068965178418, 7)));
    assert!(c.check_header(&ok).is_err(), "nothing learnt yet");
    c.cluster.set(14841639068965178418).unwrap();
    assert_eq!(c.check_header(&ok), Ok(()));
    for bad in [
        json!({}),
        json!({"succeeded": false}),
        json!({"header": {"revision": "7"}}),
        json!({"header": {"cluster_id": "1484"}}),
        json!({"header": {"cluster_id": "0", "revision": "7"}}),
        json!({"header": {"cluster_id": "x", "revision": "7"}}),
        json!({"header": {"cluster_id": "1484", "revision": "7"}}),
    ] {
        assert!(c.check_header(&bad).is_err(), "{bad}");
    }
}

/// Endpoints of two clusters are refused at start; a client that learnt one cluster
/// (an etcd since wiped and made again, or a rotation onto another) takes no answer
/// of another: an absent lease there is an error, never "absent", and a write there
/// never a success.
#[test]
fn another_cluster_is_never_believed() {
    let Some(a) = real::start() else { return };
    let Some(b) = real::start() else { return };
    let both = EtcdCas::new(
        &[a.url.clone(), b.url.clone()],
        "w/",
        Duration::from_millis(1500),
    )
    .unwrap();
    let e = both.learn_cluster().unwrap_err().to_string();
    assert!(e.contains("not one cluster"), "{e}");
    let on_a = client(&a, "w/");
    on_a.cas_put("ha/t/lease", b"held", None).unwrap();
    let wiped = EtcdCas::new(
        std::slice::from_ref(&b.url),
        "w/",
        Duration::from_millis(1500),
    )
    .unwrap();
    wiped.cluster.set(*on_a.cluster.get().unwrap()).unwrap();
    assert!(matches!(
        wiped.cas_get("ha/t/lease"),
        Err(BackendError::Retryable(_))
    ));
    assert!(matches!(
        wiped.cas_put("ha/t/lease", b"mine", None),
        Err(BackendError::Retryable(_))
    ));
    assert!(crate::ha::probe(&wiped, "t", "h").is_err());
}

#[test]
fn base64_round_trips() {
    for n in 0..20 {
        let d: Vec<u8> = (0..n).map(|i| (i * 37 + 5) as u8).collect();
        assert_eq!(unb64(&b64(&d)), Some(d));
    }
    assert_eq!(b64(b"foo"), "Zm9v");
    assert_eq!(b64(b"fo"), "Zm8=");
    assert_eq!(unb64("Zm8"), Some(b"fo".to_vec()));
    assert_eq!(unb64("Zm!v"), None);
}

#[test]
fn a_hostile_answer_is_an_error_not_a_panic() {
    let long = json!({"x": "é".repeat(400), "kvs": 5});
    assert!(matches!(bad("w", &long), BackendError::Retryable(_)));
}

#[test]
fn urls_are_checked() {
    assert_eq!(
        parse_url("http://127.0.0.1:2379").unwrap(),
        ("127.0.0.1:2379".into(), "127.0.0.1".into())
    );
    assert!(parse_url("http://etcd-1.example:2379/").is_ok());
    assert!(parse_url("http://[::1]:2379").is_ok());
    for bad in [
        "https://h:2379",
        "h:2379",
        "http://h",
        "http://h:0",
        "http://h:99999",
        "http://h:2379/v3",
        "http://u@h:2379",
        "http://:2379",
        "http://h h:2379",
    ] {
        assert!(parse_url(bad).is_err(), "{bad}");
    }
}

#[test]
fn chunked_and_error_answers() {
    let ok = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n";
    assert_eq!(parse_answer(ok).unwrap(), json!({"a": 1}));
    let e = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 40\r\n\r\n{\"error\":\"no leader\",\"message\":\"no leader\"}";
    assert!(parse_answer(e).unwrap_err().contains("no leader"));
    assert!(parse_answer(b"HTTP/1.1 200 OK\r\n\r\nnot json").is_err());
    assert!(parse_answer(b"garbage").is_err());
    let huge =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{}\r\n0\r\n\r\n";
    assert!(parse_answer(huge).is_err());
}

/// The `Cas` contract every store keeps (`backend::conformance::cas`), on etcd; and
/// the probe `[ha]` runs at start passes.
#[test]
fn etcd_keeps_the_cas_contract() {
    let Some(e) = real::start() else { return };
    let c = client(&e, "nfsgw/test-a/");
    conformance::cas(&c);
    crate::ha::probe(&c, "t", "h").unwrap();
    crate::ha::probe(&c, "t", "h2").unwrap();
    // Versions are mod_revisions: a non-number, zero or a padded number is never
    // current (and never reaches etcd as a compare against an absent key's 0).
    let (_, v) = c.cas_get("ha/x/lease").unwrap().unwrap();
    for bad in ["", "0", "-1", "abc", &format!("0{v}"), &format!("{v} ")] {
        assert_eq!(
            c.cas_put("ha/x/lease", b"no", Some(bad)),
            Err(BackendError::AlreadyExists),
            "{bad:?}"
        );
    }
    assert_eq!(
        c.cas_put("ha/y", b"no", Some("0")),
        Err(BackendError::AlreadyExists)
    );
    assert_eq!(c.cas_get("ha/y"), Ok(None));
    // An empty value is a value, not an absent key.
    let v0 = c.cas_put("ha/empty", b"", None).unwrap();
    assert_eq!(c.cas_get("ha/empty"), Ok(Some((Vec::new(), v0))));
    // Another prefix (another deployment on the same etcd) sees none of it.
    let other = client(&e, "nfsgw/test-b/");
    assert_eq!(other.cas_get("ha/x/lease"), Ok(None));
    other.cas_put("ha/x/lease", b"b's", None).unwrap();
    assert_eq!(c.cas_get("ha/x/lease").unwrap().unwrap().0, b"n4".to_vec());
    assert!(e.count("nfsgw/test-a/") >= 4);
}

/// Two writers expecting one version: exactly one wins, many times over.
#[test]
fn one_of_two_racing_writers_wins() {
    let Some(e) = real::start() else { return };
    let (a, b) = (client(&e, "p/"), client(&e, "p/"));
    let mut v = a.cas_put("race", b"0", None).unwrap();
    for i in 0..30 {
        let (ra, rb) = std::thread::scope(|s| {
            let ta = s.spawn(|| a.cas_put("race", format!("a{i}").as_bytes(), Some(&v)));
            let tb = s.spawn(|| b.cas_put("race", format!("b{i}").as_bytes(), Some(&v)));
            (ta.join().unwrap(), tb.join().unwrap())
        });
        let won: Vec<_> = [&ra, &rb].into_iter().filter(|r| r.is_ok()).collect();
        assert_eq!(won.len(), 1, "{ra:?} {rb:?}");
        let lost = if ra.is_ok() { &rb } else { &ra };
        assert_eq!(lost, &Err(BackendError::AlreadyExists));
        v = won[0].clone().unwrap();
        assert_eq!(a.cas_get("race").unwrap().unwrap().1, v);
    }
}

/// An endpoint that refuses connections is skipped for the next; with none
/// answering, a call fails within its timeout (a frozen etcd: no hang).
#[test]
fn dead_endpoints_are_skipped_and_a_frozen_etcd_times_out() {
    let Some(e) = real::start() else { return };
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let c = learnt(
        EtcdCas::new(
            &[dead.clone(), e.url.clone()],
            "s/",
            Duration::from_millis(800),
        )
        .unwrap(),
    );
    c.cas_put("k", b"1", None).unwrap();
    assert_eq!(c.cas_get("k").unwrap().unwrap().0, b"1".to_vec());
    e.freeze();
    let t0 = Instant::now();
    let r = c.cas_get("k");
    let took = t0.elapsed();
    e.resume();
    assert!(matches!(r, Err(BackendError::Retryable(_))), "{r:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    let gone = EtcdCas::new(&[dead], "s/", Duration::from_millis(500)).unwrap();
    let err = crate::ha::probe(&gone, "t", "h").unwrap_err();
    assert!(
        format!("{err:#}").contains("no endpoint answered"),
        "{err:#}"
    );
}

/// A member that takes connections and never answers (cut off from its majority, or
/// hung): the call fails within its bound and the next one goes to the next member;
/// one that answers an error is followed, within the same read, by the next member.
#[test]
fn a_member_that_does_not_answer_is_left_for_the_next() {
    let Some(e) = real::start() else { return };
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_url = format!("http://{}", hung.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in hung.incoming().flatten() {
            held.push(s);
        }
    });
    let err = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let err_url = format!("http://{}", err.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut s in err.incoming().flatten() {
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b);
            let body = r#"{"error":"etcdserver: no leader","code":14}"#;
            let _ = write!(
                s,
                "HTTP/1.1 503 Service Unavailable\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let c =
        learnt(EtcdCas::new(&[hung_url, e.url.clone()], "m/", Duration::from_millis(600)).unwrap());
    let t0 = Instant::now();
    assert!(matches!(
        c.cas_put("k", b"1", None),
        Err(BackendError::Retryable(_))
    ));
    assert!(
        t0.elapsed() < Duration::from_millis(1000),
        "{:?}",
        t0.elapsed()
    );
    let v = crate::ha::put_checked(&c, "k", b"1", None).unwrap();
    assert_eq!(c.cas_get("k").unwrap(), Some((b"1".to_vec(), v)));
    let c =
        learnt(EtcdCas::new(&[err_url, e.url.clone()], "m/", Duration::from_millis(600)).unwrap());
    assert_eq!(c.cas_get("k").unwrap().unwrap().0, b"1".to_vec());
}

/// A peer that drains the request slowly: every write makes progress within the
/// socket's timeout, yet the whole request must still end at the call's deadline
/// (SO_SNDTIMEO is per system call; review of issue 28, finding 4).
#[test]
fn a_slowly_drained_request_ends_at_the_deadline() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut b = [0u8; 16384];
            while matches!(s.read(&mut b), Ok(k) if k > 0) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    let c = EtcdCas::new(&[url], "s/", Duration::from_millis(500)).unwrap();
    let body = "x".repeat(16 << 20);
    let t0 = Instant::now();
    let mut s = connect(&c.endpoints[0], t0 + Duration::from_secs(1)).unwrap();
    let r = exchange(
        &mut s,
        &c.endpoints[0],
        "/v3/kv/txn",
        &body,
        t0 + Duration::from_millis(500),
    );
    assert!(r.is_err());
    assert!(
        t0.elapsed() < Duration::from_millis(1200),
        "{:?}",
        t0.elapsed()
    );
}

/// etcd's "request is too large" is a permanent error, not a retry forever
/// (review of issue 28, finding 5).
#[test]
fn a_request_over_the_limit_is_permanent() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b);
            let body = r#"{"error":"etcdserver: request is too large","code":3,"message":"etcdserver: request is too large"}"#;
            let _ = write!(
                s,
                "HTTP/1.1 400 Bad Request\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let c = EtcdCas::new(&[url], "s/", Duration::from_millis(500)).unwrap();
    c.cluster.set(1).unwrap();
    let r = c.cas_put("ha/t/record", b"big", None);
    assert!(
        matches!(&r, Err(BackendError::Permanent(m)) if m.contains("too large")),
        "{r:?}"
    );
}
