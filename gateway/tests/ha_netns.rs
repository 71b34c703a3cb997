//! `[ha]` as operators deploy it (docs/ha.md "Moving the address"): two gateways in
//! network namespaces of their own, each with its own address on one bridge, sharing
//! an `fs` directory (`backend.shared = true`), each beside a keepalived that runs the
//! reference configuration of tools/ha/ (its track script reads the local gateway's
//! `nfsgw_ha_identity_held` and `nfsgw_ha_takeover_imminent`). The client lives in the
//! root namespace and knows only the service address.
//!
//! - The address sits with the active; a cut between the two hosts that leaves both
//!   on the store (their link to the bridge down) makes no second active: the standby
//!   neither takes the identity nor gets the address.
//! - `kill -9` of the active: the standby takes the identity, keepalived moves the
//!   address, and the client, still dialling the same address, reclaims its open and
//!   its byte-range lock, finishes its write in progress by the verifier rule, and
//!   finds every COMMITted byte; a second client's conflicting lock is refused during
//!   the grace period and after it.
//! - The active cut off from the store but not from its peers (its view of the shared
//!   directory read-only): it stops serving NFSv4 and says so before the standby takes
//!   the identity, and the address follows the standby.
//!
//! Prints the time from the kill to the address on the peer and to the reclaimed
//! lock. `HA_NETNS_ROUNDS=N` repeats the takeover N times (the killed gateway comes
//! back as the standby each time) and `HA_NETNS_LEASE_S` sets `ha.lease_s` (default 2;
//! 10 is the gateway's default): docs/performance.md "Takeover time" uses both.
//!
//! Needs root, `ip` and keepalived (tests/setup.sh installs it). Without root the test
//! says so and passes; as root a missing keepalived is a failure.

mod common;
#[path = "common/ha.rs"]
mod ha;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use ha::*;
use nfs4_client::*;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `ip ARGS`, which must succeed.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip(8)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bridge in the root namespace and two namespaces hanging off it by veth pairs:
/// host `i` is 10.77.N.(2+i), the service address 10.77.N.100, the root namespace
/// 10.77.N.1 (N from the process id, so two runs do not collide).
struct Net {
    tag: String,
    net: u8,
}

impl Net {
    fn new() -> Net {
        let pid = std::process::id();
        let net = Net {
            tag: format!("nha{}", pid % 100_000),
            net: 100 + (pid % 100) as u8,
        };
        net.teardown();
        let br = net.bridge();
        ip(&["link", "add", &br, "type", "bridge", "mcast_snooping", "0"]);
        ip(&[
            "addr",
            "add",
            &format!("10.77.{}.1/24", net.net),
            "dev",
            &br,
        ]);
        ip(&["link", "set", &br, "up"]);
        for i in 0..2 {
            let (ns, host) = (net.ns(i), net.veth(i));
            ip(&["netns", "add", &ns]);
            ip(&[
                "link", "add", &host, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            ip(&["link", "set", &host, "master", &br, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", net.host(i)),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        net
    }

    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    fn ns(&self, i: usize) -> String {
        format!("{}-{i}", self.tag)
    }

    fn veth(&self, i: usize) -> String {
        format!("{}v{i}", self.tag)
    }

    fn host(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.net, 2 + i as u8)
    }

    fn vip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.net, 100)
    }

    /// Whether host `i` carries the service address now.
    fn has_vip(&self, i: usize) -> bool {
        let out = Command::new("ip")
            .args(["-n", &self.ns(i), "-4", "addr", "show", "dev", "eth0"])
            .output()
            .expect("ip(8)");
        String::from_utf8_lossy(&out.stdout).contains(&format!("{}/", self.vip()))
    }

    /// Host `i` on the bridge or off it (a partition between the hosts that leaves
    /// both on the store, a directory on this machine). Its link stays up: a link
    /// down is an interface fault to keepalived, which gives the address up at once.
    fn attach(&self, i: usize, on: bool) {
        let veth = self.veth(i);
        if on {
            ip(&["link", "set", &veth, "master", &self.bridge()]);
        } else {
            ip(&["link", "set", &veth, "nomaster"]);
        }
    }

    fn teardown(&self) {
        for i in 0..2 {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(i)])
                .output();
            let _ = Command::new("ip")
                .args(["link", "del", &self.veth(i)])
                .output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge()])
            .output();
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// The active cut off from the store but not from its peers: its view of the shared
/// directory turns read-only (in its own mount namespace, so the standby's stays
/// writable). It must stop serving NFSv4 (and say so) before the standby takes the
/// identity, then give the address up; the client reclaims on the standby through the
/// same address.
fn cut_from_the_store(
    net: &Net,
    gw: &[Option<Gw>; 2],
    active: usize,
    root: &Path,
    lease_s: u64,
    held: &Held,
    logs: impl Fn() -> String,
) {
    let (a, b) = (
        gw[active].as_ref().unwrap(),
        gw[1 - active].as_ref().unwrap(),
    );
    let r = root.display().to_string();
    let ok = Command::new("nsenter")
        .args(["-t", &a.child.id().to_string(), "-m", "--", "sh", "-c"])
        .arg(format!(
            "mount --bind '{r}' '{r}' && mount -o remount,bind,ro '{r}'"
        ))
        .status()
        .expect("nsenter(1)")
        .success();
    assert!(ok, "could not make the active's store read-only");
    wait_for(
        "the address on the standby after the store cut",
        Duration::from_secs(lease_s * 3 + 20),
        &logs,
        || net.has_vip(1 - active),
    );
    let vip = SocketAddr::from((net.vip(), 2049));
    let (mut c1, _) = session_when_served(vip, b"client-one", Duration::from_secs(30), &logs);
    reclaim_state(&mut c1, held);
    assert!(!net.has_vip(active), "the address on both hosts");
    let when = |log: &str, what: &str| {
        log.lines()
            .find(|l| l.contains(what))
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .unwrap_or_else(|| panic!("no \"{what}\" in:\n{log}"))
    };
    let stopped = when(&a.log(), "stopped serving NFSv4");
    let took = when(&b.log(), "ha: took the identity");
    // Both logs stamp RFC 3339 UTC times of the same clock: text order is time order.
    assert!(
        stopped < took,
        "the standby took the identity ({took}) before the cut active stopped ({stopped})"
    );
    eprintln!(
        "store cut: the active stopped serving at {stopped}, the standby took over at {took}"
    );
}

/// keepalived in host `i`'s namespace on tools/ha/keepalived.conf, with only what is
/// site-specific changed: the service address and where the scripts are.
struct Keepalived {
    child: Child,
}

impl Keepalived {
    fn start(net: &Net, i: usize, work: &Path) -> Keepalived {
        let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/ha");
        let tools = tools.canonicalize().unwrap();
        let reference = std::fs::read_to_string(tools.join("keepalived.conf")).unwrap();
        assert!(reference.contains("192.0.2.10/24") && reference.contains("/usr/lib/nfsgw/ha/"));
        let conf = reference
            .replace("192.0.2.10/24", &format!("{}/24", net.vip()))
            .replace("/usr/lib/nfsgw/ha/", &format!("{}/", tools.display()));
        let path = work.join(format!("keepalived-{i}.conf"));
        std::fs::write(&path, conf).unwrap();
        let pid = |what: &str| work.join(format!("keepalived-{i}.{what}.pid"));
        let log = work.join(format!("keepalived-{i}.log"));
        let child = Command::new("ip")
            .args(["netns", "exec", &net.ns(i), "keepalived"])
            .args([
                "--dont-fork",
                "--log-console",
                "--log-detail",
                "--no-syslog",
            ])
            .arg("--use-file")
            .arg(&path)
            .arg("--pid")
            .arg(pid("main"))
            .arg("--vrrp_pid")
            .arg(pid("vrrp"))
            .arg("--checkers_pid")
            .arg(pid("checkers"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("keepalived");
        Keepalived { child }
    }
}

impl Drop for Keepalived {
    fn drop(&mut self) {
        // TERM: keepalived stops its VRRP child and gives the address up.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` until it holds; past `within`, fails with `logs()` (the gateways' and
/// keepalived's logs: a CI failure must say why, the temporary directory is gone).
fn wait_for(
    what: &str,
    within: Duration,
    logs: &dyn Fn() -> String,
    mut f: impl FnMut() -> bool,
) -> Duration {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() >= within {
            panic!("{what}: not within {within:?}\n{}", logs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    t0.elapsed()
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runnable() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        eprintln!("ha_netns: needs root (network namespaces); not run");
        return false;
    }
    let has = |bin: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {bin}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    assert!(has("ip"), "ip(8) missing (iproute2)");
    assert!(has("keepalived"), "keepalived missing: run tests/setup.sh");
    true
}

#[test]
fn the_address_follows_the_identity_and_clients_reclaim_through_it() {
    if !runnable() {
        return;
    }
    let rounds = env_u64("HA_NETNS_ROUNDS", 1).max(1);
    let lease_s = env_u64("HA_NETNS_LEASE_S", 2);
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("objects");
    std::fs::create_dir_all(&root).unwrap();
    let net = Net::new();
    let vip = SocketAddr::from((net.vip(), 2049));
    let start = |i: usize, role: &str, life: u64| {
        spawn(&Spec {
            root: &root,
            work: work.path(),
            name: &format!("gw{i}-{life}"),
            role,
            lease_s,
            listen: SocketAddr::from(([0, 0, 0, 0], 2049)),
            reach: vip,
            netns: Some(&net.ns(i)),
            rdma: None,
            extra: "",
            ha: "",
        })
    };
    let mut gw = [Some(start(0, "active", 0)), None];
    let _ka0 = Keepalived::start(&net, 0, work.path());
    // The standby only once the active holds the identity: a standby finding the lease
    // absent takes it at once, and an active that then sees it renewed refuses to start
    // (a slow start of the active under load made this test fail that way).
    wait_for(
        "the active holds the identity",
        Duration::from_secs(60),
        &|| gw[0].as_ref().unwrap().log(),
        || {
            gw[0]
                .as_ref()
                .unwrap()
                .log()
                .contains("ha: took the identity")
        },
    );
    gw[1] = Some(start(1, "standby", 0));
    let _ka1 = Keepalived::start(&net, 1, work.path());
    let logs = |gw: &[Option<Gw>; 2]| {
        let mut s = String::new();
        for g in gw.iter().flatten() {
            s += &g.log();
        }
        for i in 0..2 {
            s += &std::fs::read_to_string(work.path().join(format!("keepalived-{i}.log")))
                .unwrap_or_default();
        }
        s
    };
    wait_for(
        "the address on the active",
        Duration::from_secs(60),
        &|| logs(&gw),
        || net.has_vip(0),
    );
    assert!(!net.has_vip(1));

    let (mut c1, _) =
        session_when_served(vip, b"client-one", Duration::from_secs(20), || logs(&gw));
    let held = hold_state(&mut c1);

    // Cut the hosts apart (both still reach the store): no second active.
    net.attach(0, false);
    std::thread::sleep(Duration::from_secs(lease_s * 3));
    assert!(
        !net.has_vip(1),
        "the standby got the address while the active renews"
    );
    let standby_log = gw[1].as_ref().unwrap().log();
    assert!(
        !standby_log.contains("ha: took the identity"),
        "a second active:\n{standby_log}"
    );
    net.attach(0, true);
    assert!(net.has_vip(0), "the active keeps the address");

    let mut active = 0;
    let mut times = Vec::new();
    for round in 0..rounds {
        let standby = 1 - active;
        let mut dead = gw[active].take().unwrap();
        dead.child.kill().unwrap(); // SIGKILL
        dead.child.wait().unwrap();
        let killed = Instant::now();
        let successor = gw[standby].as_ref().unwrap();
        let mut took = None;
        let moved = wait_for(
            "the address on the standby",
            Duration::from_secs(lease_s * 3 + 20),
            &|| logs(&gw),
            || {
                if took.is_none() && successor.log().contains("ha: took the identity") {
                    took = Some(killed.elapsed());
                }
                net.has_vip(standby)
            },
        );
        let took = took.unwrap_or(moved);
        let (c, waited) =
            session_when_served(vip, b"client-one", Duration::from_secs(30), || logs(&gw));
        c1 = c;
        let open = reclaim_state(&mut c1, &held);
        let first_op = killed.elapsed();
        assert!(!net.has_vip(active), "the address on both hosts");
        eprintln!(
            "round {round}: kill -9 -> identity taken {took:?}, -> address on the peer \
             {moved:?}, -> lock reclaimed {first_op:?} (the session took {waited:?} of dialling)"
        );
        times.push((first_op, took, moved));
        if round == 0 {
            finish_write(&mut c1, &held, &open);
            let (mut c2, _) =
                session_when_served(vip, b"client-two", Duration::from_secs(5), || logs(&gw));
            second_client_conflicts(&mut c1, &mut c2, &held.fh);
            read_back(&mut c1, &held.fh, &open);
        } else {
            let (st, _) = c1.seq_run(|o| o.reclaim_complete());
            assert_eq!(st, NFS4_OK);
        }
        drop(dead);
        // The killed host comes back as the standby for the next round.
        let back = start(active, "standby", round + 1);
        wait_for(
            "the restarted standby",
            Duration::from_secs(60),
            &|| back.log() + &logs(&gw),
            || back.log().contains("identity held by another gateway"),
        );
        gw[active] = Some(back);
        active = standby;
    }
    cut_from_the_store(&net, &gw, active, &root, lease_s, &held, || logs(&gw));

    let spread = |mut v: Vec<Duration>| {
        v.sort();
        format!(
            "{:.2?} / {:.2?} / {:.2?}",
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        )
    };
    eprintln!(
        "takeovers at ha.lease_s = {lease_s}, {} rounds, min / median / max: kill -9 -> \
         identity taken {}; -> address moved {}; -> lock reclaimed {}",
        times.len(),
        spread(times.iter().map(|t| t.1).collect()),
        spread(times.iter().map(|t| t.2).collect()),
        spread(times.iter().map(|t| t.0).collect()),
    );
}
