//! Unit tests of the configuration: parsing, defaults, and an error naming the key for
//! every invalid value.

#[test]
fn cpu_lists_give_their_highest_id() {
    assert_eq!(super::parse_cpu_list_max("0-3\n"), Some(3));
    assert_eq!(super::parse_cpu_list_max("0,2-5"), Some(5));
    assert_eq!(super::parse_cpu_list_max("0"), Some(0));
    assert_eq!(super::parse_cpu_list_max("x"), None);
}

use super::*;

const MIN: &str = "[[exports]]\npath = \"/\"\n";

#[test]
fn defaults_from_minimal_file() {
    let c = Config::parse(MIN).unwrap();
    assert_eq!(c.engine.cores, vec![0]);
    assert_eq!(c.engine.idle, Idle::Adaptive);
    assert_eq!(c.tcp.listen, "127.0.0.1:2049");
    assert_eq!(c.backend.kind, BackendKind::Fs);
    let x = c.exports().unwrap();
    assert_eq!(x[0].prefix, "");
    assert_eq!(x[0].squash, Squash::Root);
    assert_eq!(c.state.handle_cache_entries, 1_000_000);
}

#[test]
fn rdma_send_timeout_defaults_to_30_s_and_is_bounded() {
    let c = Config::parse(MIN).unwrap();
    assert_eq!(c.rdma.send_timeout_s, 30);
    let c = Config::parse(&format!("[rdma]\nsend_timeout_s = 1\n{MIN}")).unwrap();
    assert_eq!(c.rdma.send_timeout_s, 1);
    for bad in ["0", "86401", "18446744073709551615"] {
        let e = Config::parse(&format!("[rdma]\nsend_timeout_s = {bad}\n{MIN}"))
            .err()
            .unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(e.to_string().contains("send_timeout_s"), "{bad}: {e}");
    }
}

#[test]
fn rdma_stall_reclaim_defaults_to_1_s_and_is_bounded() {
    let c = Config::parse(MIN).unwrap();
    assert_eq!(c.rdma.stall_reclaim_ms, 1000);
    let c = Config::parse(&format!("[rdma]\nstall_reclaim_ms = 10\n{MIN}")).unwrap();
    assert_eq!(c.rdma.stall_reclaim_ms, 10);
    for bad in ["0", "9", "3600001", "18446744073709551615"] {
        let e = Config::parse(&format!("[rdma]\nstall_reclaim_ms = {bad}\n{MIN}"))
            .err()
            .unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(e.to_string().contains("stall_reclaim_ms"), "{bad}: {e}");
    }
}

#[test]
fn store_path_names_the_served_directory() {
    let c = Config::parse(
        "[[exports]]\npath = \"/data\"\nstore_path = \"/\"\n\
         [[exports]]\npath = \"/p\"\nstore_path = \"//proj/a/\"\n[[exports]]\npath = \"/q/r\"\n",
    )
    .unwrap();
    let x = c.exports().unwrap();
    assert_eq!((x[0].path.as_str(), x[0].prefix.as_str()), ("/data", ""));
    assert_eq!(x[0].id, export_id("/data"));
    assert_eq!(x[1].prefix, "proj/a/");
    assert_eq!(x[2].prefix, "q/r/");
    for bad in ["\"rel\"", "\"/a/../b\""] {
        let e = Config::parse(&format!("[[exports]]\npath = \"/x\"\nstore_path = {bad}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("exports[0].store_path"), "{e}");
    }
}

#[test]
fn s3_endpoints_and_retry_budget() {
    let s3 = |extra: &str| {
        Config::parse(&format!(
            "[backend]\nkind = \"s3\"\n[backend.s3]\nbucket = \"b\"\nallow_http = true\n{extra}\n{MIN}"
        ))
    };
    let c = s3("endpoints = [\"http://a:3900\", \"http://b:3900\"]").unwrap();
    let b = c.backend.s3.unwrap();
    assert_eq!(b.endpoints.len(), 2);
    assert_eq!((b.retries, b.retry_budget_s), (10, 10.0));
    assert_eq!((b.multipart_copy_over_mib, b.copy_part_mib), (256, 64));
    assert!(b.handle_key_file.is_none());
    for (bad, key) in [
        (
            "endpoint = \"http://a\"\nendpoints = [\"http://b\"]",
            "backend.s3.endpoints",
        ),
        ("endpoints = [\"ftp://a\"]", "backend.s3.endpoints"),
        ("retry_budget_s = 0.0", "backend.s3.retry_budget_s"),
        ("retry_budget_s = nan", "backend.s3.retry_budget_s"),
        ("retry_budget_s = 1e9", "backend.s3.retry_budget_s"),
        (
            "multipart_copy_over_mib = 0",
            "backend.s3.multipart_copy_over_mib",
        ),
        (
            "multipart_copy_over_mib = 5121",
            "backend.s3.multipart_copy_over_mib",
        ),
        ("copy_part_mib = 4", "backend.s3.copy_part_mib"),
        ("copy_part_mib = 5121", "backend.s3.copy_part_mib"),
    ] {
        let e = s3(bad).err().unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(e.to_string().contains(key), "{bad}: {e}");
    }
    let many: Vec<String> = (0..65).map(|i| format!("\"http://h{i}\"")).collect();
    assert!(s3(&format!("endpoints = [{}]", many.join(","))).is_err());
}

#[test]
fn shipped_default_config_is_valid() {
    let text = include_str!("../../../configs/default.toml");
    let c = Config::parse(text).unwrap();
    assert_eq!(c.backend.root, PathBuf::from("./data"));
    // README "Two commands": the whole store is mounted as /data.
    let x = c.exports().unwrap();
    assert_eq!((x[0].path.as_str(), x[0].prefix.as_str()), ("/data", ""));
    assert_eq!(c.listen_addr(), "127.0.0.1:2049".parse().unwrap());
}

#[test]
fn shipped_small_config_is_valid() {
    // configs/small.toml (docs/tuning.md "Small machines"): one adaptive reactor
    // with the measured spin, data I/O on io_uring.
    let c = Config::parse(include_str!("../../../configs/small.toml")).unwrap();
    assert_eq!(c.engine.cores, vec![0]);
    assert_eq!(c.engine.idle, Idle::Adaptive);
    assert_eq!(c.engine.idle_spin_us, 200);
    assert_eq!(c.backend.io, IoMode::Auto);
}

#[test]
fn errors_name_the_key() {
    let cases = [
        (
            "[engine]\ncores = []\n[[exports]]\npath=\"/\"",
            "engine.cores",
        ),
        ("[engine]\nidle = \"lazy\"\n[[exports]]\npath=\"/\"", "idle"),
        (
            "[tcp]\nlisten = \"nowhere\"\n[[exports]]\npath=\"/\"",
            "tcp.listen",
        ),
        (
            "[backend]\nkind = \"tape\"\n[[exports]]\npath=\"/\"",
            "kind",
        ),
        ("[[exports]]\npath = \"rel\"", "exports[0].path"),
        (
            "[[exports]]\npath = \"/\"\nclients = [\"10.0.0.0/33\"]",
            "exports[0].clients",
        ),
        ("[[exports]]\npath = \"/\"\nsquash = \"some\"", "squash"),
        ("", "exports"),
        (
            "[state]\nhandle_cache_entries = 10\n[[exports]]\npath=\"/\"",
            "state.handle_cache_entries",
        ),
        ("[engine]\nbogus = 1\n[[exports]]\npath=\"/\"", "bogus"),
        (
            "[nfs4]\nlease_time_s = 20\ngrace_max_s = 19\n[[exports]]\npath=\"/\"",
            "nfs4.grace_max_s",
        ),
        (
            "[nfs4]\nmax_minor_version = 3\n[[exports]]\npath=\"/\"",
            "nfs4.max_minor_version",
        ),
        (
            "[nfs4]\nmax_minor_version = 0\n[[exports]]\npath=\"/\"",
            "nfs4.max_minor_version",
        ),
    ];
    for (text, key) in cases {
        let e = Config::parse(text).unwrap_err().to_string();
        assert!(e.contains(key), "{text:?}: error {e:?} does not name {key}");
    }
}

/// `backend.fs.flush`: "auto" by default; the three modes by name; anything else is
/// refused at parse time (whether "journal" fits the root is decided at start).
#[test]
fn backend_fs_flush_is_auto_by_default_and_takes_three_modes() {
    assert_eq!(
        Config::parse(MIN).unwrap().backend.fs.flush,
        FlushMode::Auto
    );
    for (name, mode) in [
        ("auto", FlushMode::Auto),
        ("per-directory", FlushMode::PerDirectory),
        ("journal", FlushMode::Journal),
    ] {
        let c = Config::parse(&format!("[backend.fs]\nflush = \"{name}\"\n{MIN}")).unwrap();
        assert_eq!(c.backend.fs.flush, mode, "{name}");
    }
    assert!(Config::parse(&format!("[backend.fs]\nflush = \"never\"\n{MIN}")).is_err());
    assert!(Config::parse(&format!("[backend.fs]\nfsync = \"auto\"\n{MIN}")).is_err());
}

/// `[backend.fs]` belongs to the fs backend: set for s3 or memory it is refused, naming
/// the key (it would do nothing there); the default (`auto`) passes for every kind.
#[test]
fn backend_fs_flush_is_refused_for_other_kinds() {
    let mem = "[backend]\nkind = \"memory\"\n";
    assert!(Config::parse(&format!("{mem}{MIN}")).is_ok());
    let e = Config::parse(&format!(
        "{mem}[backend.fs]\nflush = \"per-directory\"\n{MIN}"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("backend.fs.flush") && e.contains("kind = \"fs\""),
        "{e}"
    );
    let fs = Config::parse(&format!("[backend.fs]\nflush = \"per-directory\"\n{MIN}"));
    assert_eq!(fs.unwrap().backend.fs.flush, FlushMode::PerDirectory);
}

/// `backend.shared`: off by default (today's handles); fs and s3 take it, memory, which
/// lives in one process, refuses it naming the key.
#[test]
fn backend_shared_is_off_by_default_and_refused_on_memory() {
    assert!(!Config::parse(MIN).unwrap().backend.shared);
    let on = Config::parse(&format!("[backend]\nshared = true\n{MIN}")).unwrap();
    assert!(on.backend.shared);
    let e = Config::parse(&format!(
        "[backend]\nkind = \"memory\"\nshared = true\n{MIN}"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("backend.shared") && e.contains("cannot be shared"),
        "{e}"
    );
}

/// `[ha]`: off by default; on, it needs a shared store, a plain identity and a lease
/// within bounds, each error naming its key; `--print-config` shows it.
#[test]
fn ha_is_off_by_default_and_checked_when_on() {
    let c = Config::parse(MIN).unwrap();
    assert_eq!(c.ha.on(), None);
    let shared = "[backend]\nshared = true\n";
    let on = Config::parse(&format!(
        "{shared}[ha]\nidentity = \"nfs-a\"\nrole = \"active\"\n{MIN}"
    ))
    .unwrap();
    assert_eq!(on.ha.on(), Some("nfs-a"));
    assert_eq!((on.ha.lease_s, on.ha.role), (10, HaRole::Active));
    let text = crate::effective::render(&on).unwrap();
    assert!(
        text.contains("[ha]") && text.contains("identity = \"nfs-a\""),
        "{text}"
    );
    for (extra, key, what) in [
        ("identity = \"a/b\"", "ha.identity", "1 to 64"),
        ("identity = \"\"", "ha.identity", "1 to 64"),
        ("identity = \"a\"\nlease_s = 1", "ha.lease_s", "2 to 300"),
        ("identity = \"a\"\nlease_s = 301", "ha.lease_s", "2 to 300"),
    ] {
        let e = Config::parse(&format!("{shared}[ha]\n{extra}\n{MIN}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(key) && e.contains(what), "{extra}: {e}");
    }
    for backend in ["", "[backend]\nkind = \"memory\"\n"] {
        let e = Config::parse(&format!("{backend}[ha]\nidentity = \"a\"\n{MIN}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ha.identity") && e.contains("several gateways share"),
            "{e}"
        );
    }
    let e = Config::parse(&format!("[ha]\nidentity = \"a\"\nrole = \"boss\"\n{MIN}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("role"), "{e}");
}

/// `[ha] etcd`: URLs (plain http, a port), at most 9, a prefix of printable ASCII,
/// and one etcd call bounded below `lease_s / 4` (default `lease_s / 5`, at most 2 s);
/// `etcd` without an identity is an error; the default prefix is the same for every
/// gateway of a store, whatever endpoints it reaches it at, and differs between stores.
#[test]
fn ha_etcd_is_checked() {
    let cfg = |ha: &str| {
        Config::parse(&format!(
            "[backend]\nshared = true\n[ha]\nidentity = \"a\"\n{ha}\n{MIN}"
        ))
    };
    let ok = cfg("etcd = [\"http://127.0.0.1:2379\", \"http://etcd-2:2379/\"]").unwrap();
    assert_eq!(ok.ha.etcd.len(), 2);
    assert_eq!(ok.ha.etcd_timeout(), std::time::Duration::from_millis(2000));
    let short = cfg("lease_s = 2\netcd = [\"http://127.0.0.1:2379\"]").unwrap();
    assert_eq!(
        short.ha.etcd_timeout(),
        std::time::Duration::from_millis(400)
    );
    let text = crate::effective::render(&ok).unwrap();
    assert!(text.contains("etcd = ["), "{text}");
    let many = format!("etcd = [{}]", ["\"http://h:1\""; 10].join(","));
    for (ha, key, what) in [
        ("etcd = [\"https://h:2379\"]", "ha.etcd", "http://"),
        ("etcd = [\"http://h\"]", "ha.etcd", "no port"),
        (many.as_str(), "ha.etcd", "at most 9"),
        (
            "etcd = [\"http://h:1\"]\netcd_prefix = \"a b\"",
            "ha.etcd_prefix",
            "printable",
        ),
        (
            "etcd = [\"http://h:1\"]\netcd_timeout_ms = 10",
            "ha.etcd_timeout_ms",
            "at least 50",
        ),
        (
            "etcd = [\"http://h:1\"]\netcd_timeout_ms = 2500",
            "ha.lease_s",
            "ha.etcd_timeout_ms",
        ),
        // Review of issue 28, finding 6: never silently ignored, never twice.
        ("etcd_prefix = \"p/\"", "ha.etcd_prefix", "needs ha.etcd"),
        (
            "etcd_timeout_ms = 500",
            "ha.etcd_timeout_ms",
            "needs ha.etcd",
        ),
        (
            "etcd = [\"http://h:1\", \"http://H:1/\"]",
            "ha.etcd",
            "listed twice",
        ),
    ] {
        let e = cfg(ha).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains(what), "{ha}: {e}");
    }
    let e = Config::parse(&format!("[ha]\netcd = [\"http://h:1\"]\n{MIN}"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ha.etcd") && e.contains("needs ha.identity"),
        "{e}"
    );
    let s3 = |endpoint: &str, bucket: &str| {
        Config::parse(&format!(
            "[backend]\nkind = \"s3\"\n[backend.s3]\nbucket = \"{bucket}\"\nendpoint = \"{endpoint}\"\nallow_http = true\n{MIN}"
        ))
        .unwrap()
        .backend
    };
    let p = crate::ha::etcd_default_prefix;
    assert_eq!(p(&s3("http://a:3900", "b")), p(&s3("http://b:3900", "b")));
    assert_ne!(p(&s3("http://a:3900", "b")), p(&s3("http://a:3900", "c")));
    assert!(p(&s3("http://a:3900", "b")).starts_with("nfsgw/"));
    // One fs root however it is spelt (review of issue 28, finding 2).
    let fs = |root: &str| {
        Config::parse(&format!(
            "[backend]\nkind = \"fs\"\nroot = \"{root}\"\n{MIN}"
        ))
        .unwrap()
        .backend
    };
    let d = tempfile::tempdir().unwrap();
    let r = d.path().display().to_string();
    assert_eq!(p(&fs(&r)), p(&fs(&format!("{r}/"))));
    assert_eq!(p(&fs(&r)), p(&fs(&format!("{r}/./"))));
    assert_eq!(p(&fs("/no/such/x")), p(&fs("/no/such/x/")));
    assert_ne!(p(&fs(&r)), p(&fs("/no/such/x")));
}

/// `[ha]` on s3: the longest store call (the larger of `timeout_s` and
/// `retry_budget_s`) must be below `lease_s / 4` (docs/ha.md "Lease and clocks"); the
/// error names the settings on both sides. The defaults (30 s, 10 s) need a lease over
/// 120 s.
#[test]
fn ha_on_s3_needs_store_calls_shorter_than_a_quarter_lease() {
    let cfg = |s3: &str, lease: u64| {
        Config::parse(&format!(
            "[backend]\nkind = \"s3\"\n[backend.s3]\nbucket = \"b\"\n{s3}\n\
             [ha]\nidentity = \"a\"\nlease_s = {lease}\n{MIN}"
        ))
    };
    let ok = cfg("timeout_s = 2\nretry_budget_s = 2.4", 10).unwrap();
    assert_eq!(ok.ha.lease_s, 10);
    cfg("", 121).unwrap();
    for (s3, lease, longest) in [
        ("", 10, "30 s"),
        ("", 120, "30 s"),
        ("timeout_s = 2\nretry_budget_s = 2.5", 10, "2.5 s"),
        ("timeout_s = 3\nretry_budget_s = 1", 10, "3 s"),
        ("timeout_s = 1\nretry_budget_s = 1", 4, "1 s"),
    ] {
        let e = cfg(s3, lease).unwrap_err().to_string();
        for want in [
            "ha.lease_s",
            "backend.s3.timeout_s",
            "backend.s3.retry_budget_s",
            longest,
            "Lease and clocks",
        ] {
            assert!(e.contains(want), "{s3} / {lease}: no {want:?} in {e}");
        }
    }
    // Without [ha] nothing changes.
    Config::parse(&format!(
        "[backend]\nkind = \"s3\"\n[backend.s3]\nbucket = \"b\"\n{MIN}"
    ))
    .unwrap();
}

/// `[ha]` on `fs`: a root on a network file system has no call bound and is refused
/// (naming the root and its kind); a local one is not subject to the rule.
#[test]
fn ha_on_fs_is_refused_on_a_network_file_system() {
    let c = Config::parse(&format!(
        "[backend]\nshared = true\n[ha]\nidentity = \"a\"\n{MIN}"
    ))
    .unwrap();
    let root = std::path::Path::new("/mnt/store");
    c.ha.check_fs_root(root, None).unwrap();
    let e =
        c.ha.check_fs_root(root, Some("NFS"))
            .unwrap_err()
            .to_string();
    for want in [
        "ha.identity",
        "/mnt/store",
        "NFS",
        "nothing bounds",
        "Lease and clocks",
    ] {
        assert!(e.contains(want), "no {want:?} in {e}");
    }
    Config::parse(MIN)
        .unwrap()
        .ha
        .check_fs_root(root, Some("NFS"))
        .unwrap();
}

/// `nfs4.max_minor_version`: NFSv4.2 by default, 1 turns it off.
#[test]
fn max_minor_version_defaults_to_42() {
    let c = Config::parse("[[exports]]\npath=\"/\"").unwrap();
    assert_eq!(c.nfs4.limits().max_minor, 2);
    let c = Config::parse("[nfs4]\nmax_minor_version = 1\n[[exports]]\npath=\"/\"").unwrap();
    assert_eq!(c.nfs4.limits().max_minor, 1);
}

/// `nfs4.grace_max_s`: 0 is twice the grace time (knfsd's cap), else the cap.
#[test]
fn grace_max_is_the_cap_or_twice_the_grace_time() {
    let c = Config::parse("[nfs4]\nlease_time_s = 20\n[[exports]]\npath=\"/\"").unwrap();
    assert_eq!(c.nfs4.limits().grace_max().as_secs(), 40);
    let c = Config::parse("[nfs4]\nlease_time_s = 20\ngrace_max_s = 120\n[[exports]]\npath=\"/\"")
        .unwrap();
    assert_eq!(c.nfs4.limits().grace_max().as_secs(), 120);
}

#[test]
fn prefixes_from_paths() {
    let c = Config::parse("[[exports]]\npath = \"/a//b/\"\n[[exports]]\npath=\"/c\"").unwrap();
    let x = c.exports().unwrap();
    assert_eq!((x[0].path.as_str(), x[0].prefix.as_str()), ("/a/b", "a/b/"));
    assert_eq!(x[1].prefix, "c/");
    assert_eq!(x[1].id, export_id("/c"));
}

#[test]
fn export_ids_are_stable_and_unique() {
    let one = Config::parse("[[exports]]\npath = \"/b\"\n[[exports]]\npath = \"/\"").unwrap();
    let two = Config::parse(
        "[[exports]]\npath = \"/a\"\n[[exports]]\npath = \"/\"\n[[exports]]\npath = \"/b/\"",
    )
    .unwrap();
    let ids = |c: &Config| -> Vec<(String, u16)> {
        c.exports()
            .unwrap()
            .into_iter()
            .map(|e| (e.path, e.id))
            .collect()
    };
    let (one, two) = (ids(&one), ids(&two));
    // Inserting "/a" in front changes no other export's id.
    for (p, id) in &one {
        assert!(two.contains(&(p.clone(), *id)), "{p}: {one:?} vs {two:?}");
    }
    assert!(one.contains(&("/".to_string(), 0)));
    assert_ne!(export_id("/a"), 0);
    // An explicit id wins, and a clash names both exports and the fix.
    let c = Config::parse("[[exports]]\npath = \"/x\"\nid = 7").unwrap();
    assert_eq!(c.exports().unwrap()[0].id, 7);
    let e = Config::parse("[[exports]]\npath = \"/x\"\nid = 0\n[[exports]]\npath = \"/\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("exports[1].id") && e.contains("\"/x\"") && e.contains("id = N"),
        "{e}"
    );
}

#[test]
fn cidr_matching() {
    let n = Cidr::parse("10.1.0.0/16").unwrap();
    assert!(n.contains("10.1.2.3".parse().unwrap()));
    assert!(!n.contains("10.2.0.1".parse().unwrap()));
    assert!(n.contains("::ffff:10.1.9.9".parse().unwrap()));
    let h = Cidr::parse("127.0.0.1").unwrap();
    assert!(h.contains("127.0.0.1".parse().unwrap()));
    assert!(!h.contains("127.0.0.2".parse().unwrap()));
    assert!(Cidr::parse("*").unwrap().contains("::1".parse().unwrap()));
    let v6 = Cidr::parse("::1/128").unwrap();
    assert!(v6.contains("::1".parse().unwrap()));
    assert!(!v6.contains("127.0.0.1".parse().unwrap()));
}

#[test]
fn stats_endpoint_off_by_default_and_loopback_only() {
    let c = Config::parse(MIN).unwrap();
    assert_eq!(c.stats.addr(), None);
    let on = format!("[stats]\nlisten = \"127.0.0.1:9108\"\n{MIN}");
    assert_eq!(
        Config::parse(&on).unwrap().stats.addr(),
        Some("127.0.0.1:9108".parse().unwrap())
    );
    let remote = format!("[stats]\nlisten = \"0.0.0.0:9108\"\n{MIN}");
    let e = Config::parse(&remote).unwrap_err().to_string();
    assert!(
        e.contains("stats.listen") && e.contains("allow_remote"),
        "{e}"
    );
    let allowed = format!("[stats]\nlisten = \"0.0.0.0:9108\"\nallow_remote = true\n{MIN}");
    assert!(Config::parse(&allowed).is_ok());
    let bad = format!("[stats]\nlisten = \"localhost\"\n{MIN}");
    assert!(Config::parse(&bad)
        .unwrap_err()
        .to_string()
        .contains("stats.listen"));
}

#[test]
fn per_client_series_bounds_default_and_are_checked() {
    let c = Config::parse(MIN).unwrap();
    assert_eq!(
        (
            c.stats.top_clients,
            c.stats.top_exports,
            c.stats.client_slots
        ),
        (20, 20, 1024)
    );
    for (line, key) in [
        ("top_clients = 1001", "stats.top_clients"),
        ("top_exports = 5000", "stats.top_exports"),
        ("client_slots = 8", "stats.client_slots"),
        ("client_slots = 65536", "stats.client_slots"),
    ] {
        let e = Config::parse(&format!("[stats]\n{line}\n{MIN}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{line}: {e}");
    }
    let ok = format!("[stats]\ntop_clients = 0\nclient_slots = 16\n{MIN}");
    assert_eq!(Config::parse(&ok).unwrap().stats.top_clients, 0);
}
