//! NFSv4.1 state gauges, read from `state::State::gauges` at each scrape (no counter
//! kept anywhere for them): `nfsgw_nfs4_clients{state}`, `nfsgw_nfs4_sessions`,
//! `nfsgw_nfs4_opens`, `nfsgw_nfs4_lock_stateids`, `nfsgw_nfs4_locked_ranges`; and
//! the pNFS metadata server's layouts (`render_layouts`), whose counters the layout
//! table keeps (`state::layouts::LayoutCounts`).

use crate::state::Gauges;
use std::fmt::Write;
use std::sync::Arc;

/// How the endpoint reads the gauges (the server's state; absent in tests without one).
pub type Reader = Arc<dyn Fn() -> Gauges + Send + Sync>;

/// Renders the gauges (zeros without a reader, so every series always exists).
pub fn render(reader: Option<&Reader>, out: &mut String) {
    let g = reader.map(|r| r()).unwrap_or_default();
    let gauge = |out: &mut String, name: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
    };
    gauge(
        out,
        "nfsgw_nfs4_clients",
        "NFSv4.1 client records: confirmed (lease live), courtesy (lease run out, state kept), unconfirmed (EXCHANGE_ID without CREATE_SESSION yet).",
    );
    let c = g.clients;
    for (state, n) in [
        ("confirmed", c.confirmed),
        ("courtesy", c.courtesy),
        ("unconfirmed", c.unconfirmed),
    ] {
        let _ = writeln!(out, "nfsgw_nfs4_clients{{state=\"{state}\"}} {n}");
    }
    for (name, help, n) in [
        ("nfsgw_nfs4_sessions", "NFSv4.1 sessions.", c.sessions),
        (
            "nfsgw_nfs4_opens",
            "NFSv4.1 open stateids (one per open owner and file).",
            g.opens,
        ),
        (
            "nfsgw_nfs4_lock_stateids",
            "NFSv4.1 lock stateids (one per lock owner and file).",
            g.lock_stateids,
        ),
        (
            "nfsgw_nfs4_locked_ranges",
            "Byte ranges held by NFSv4.1 locks, all files.",
            g.locked_ranges,
        ),
    ] {
        gauge(out, name, help);
        let _ = writeln!(out, "{name} {n}");
    }
    render_layouts(&g.layouts, out);
    render_data_servers(&g, out);
}

/// A metadata server's view of its data servers (README "Scaling out with pNFS",
/// "When a data server dies"): `nfsgw_pnfs_data_server_up{address}` (gauge),
/// `nfsgw_pnfs_data_server_errors_total{address}` (errors clients reported with it),
/// `nfsgw_pnfs_data_server_probe_failures_total{address}`, and the layouts recalled
/// because a data server went down. No series per server without `[pnfs]`.
fn render_data_servers(g: &Gauges, out: &mut String) {
    let head = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
    };
    type Value = fn(&crate::state::layouts::health::ServerCounts) -> u64;
    let series: [(&str, &str, &str, Value); 3] = [
        (
            "nfsgw_pnfs_data_server_up",
            "gauge",
            "1 while the metadata server's probes (an NFSv3 NULL every pnfs.probe_ms) find the data server up, 0 once pnfs.probe_failures in a row failed (it is then left out of new layouts).",
            |c| u64::from(c.up),
        ),
        (
            "nfsgw_pnfs_data_server_errors_total",
            "counter",
            "Errors clients reported with the data server (LAYOUTERROR, ff_ioerr4 in LAYOUTRETURN); each makes the metadata server probe it at once.",
            |c| c.reported,
        ),
        (
            "nfsgw_pnfs_data_server_probe_failures_total",
            "counter",
            "Probes of the data server that got no answer in pnfs.probe_timeout_ms.",
            |c| c.probe_failures,
        ),
    ];
    for (name, kind, help, value) in series {
        head(out, name, kind, help);
        for (addr, c) in &g.data_servers {
            let _ = writeln!(out, "{name}{{address=\"{addr}\"}} {}", value(c));
        }
    }
    // The I/O clients report through each data server (LAYOUTRETURN's ff_iostats4).
    type Io = fn(&crate::state::layouts::health::Io) -> (u64, u64);
    let io: [(&str, &str, Io); 2] = [
        (
            "nfsgw_pnfs_data_server_reported_ops_total",
            "READ and WRITE operations clients reported doing through the data server (LAYOUTSTATS, RFC 7862 §15.7, and ff_iostats4 in LAYOUTRETURN, RFC 8435 §9.2.1; each layout's increase over its last report).",
            |i| (i.read_ops, i.write_ops),
        ),
        (
            "nfsgw_pnfs_data_server_reported_bytes_total",
            "Bytes clients reported reading and writing through the data server (LAYOUTSTATS, RFC 7862 §15.7, and ff_iostats4 in LAYOUTRETURN, RFC 8435 §9.2.1; each layout's increase over its last report).",
            |i| (i.read_bytes, i.write_bytes),
        ),
    ];
    for (name, help, value) in io {
        head(out, name, "counter", help);
        for (addr, c) in &g.data_servers {
            let (r, w) = value(&c.io);
            let _ = writeln!(out, "{name}{{address=\"{addr}\",op=\"read\"}} {r}");
            let _ = writeln!(out, "{name}{{address=\"{addr}\",op=\"write\"}} {w}");
        }
    }
    head(
        out,
        "nfsgw_pnfs_layouts_recalled_ds_down_total",
        "counter",
        "pNFS layouts recalled (CB_LAYOUTRECALL) because a data server they named went down.",
    );
    let l = &g.layouts;
    let _ = writeln!(
        out,
        "nfsgw_pnfs_layouts_recalled_ds_down_total {}",
        l.recalled_ds_down
    );
    head(
        out,
        "nfsgw_pnfs_layouts_released_ds_down_total",
        "counter",
        "pNFS layouts recalled because a data server went down that the metadata server let go unreturned when their holder asked for a new layout of the file (no conflicting operation waited on them).",
    );
    let _ = writeln!(
        out,
        "nfsgw_pnfs_layouts_released_ds_down_total {}",
        l.released_ds_down
    );
    head(
        out,
        "nfsgw_pnfs_unknown_device_reports_total",
        "counter",
        "Client reports (LAYOUTERROR, ff_ioerr4, LAYOUTSTATS, ff_iostats4) naming a device id no configured data server has (ignored).",
    );
    let _ = writeln!(
        out,
        "nfsgw_pnfs_unknown_device_reports_total {}",
        l.unknown_device_reports
    );
    head(
        out,
        "nfsgw_pnfs_layoutstats_ignored_total",
        "counter",
        "Client I/O reports (LAYOUTSTATS, ff_iostats4) ignored for a count of 2^63 or more.",
    );
    let _ = writeln!(
        out,
        "nfsgw_pnfs_layoutstats_ignored_total {}",
        l.stats_ignored
    );
    head(
        out,
        "nfsgw_pnfs_fence_refused_total",
        "counter",
        "Calls this gateway refused as a pNFS data server (NFS3ERR_ACCES) for a synthetic id that is not the file's current one: a fenced layout still in use, a forged id, or a gateway computing ids otherwise (logged at most every 10 s).",
    );
    let _ = writeln!(out, "nfsgw_pnfs_fence_refused_total {}", l.fence_refused);
    head(
        out,
        "nfsgw_pnfs_fence_epoch_backwards_total",
        "counter",
        "Fence epoch values (a file's, or the store's boot epoch) this gateway saw go back in the store: restored from a backup, or the object rewritten (logged at most every 60 s).",
    );
    let _ = writeln!(
        out,
        "nfsgw_pnfs_fence_epoch_backwards_total {}",
        l.fence_backwards
    );
}

/// `nfsgw_pnfs_layouts` (gauge), `nfsgw_pnfs_layouts_total{event}` and
/// `nfsgw_pnfs_layoutget_errors_total` (counters): zeros on a gateway that is no
/// metadata server. A data server's bytes and operations are its own
/// `nfsgw_bytes_in_total` / `nfsgw_ops_total` (docs/stats.md).
fn render_layouts(l: &crate::state::layouts::LayoutCounts, out: &mut String) {
    let head = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
    };
    head(
        out,
        "nfsgw_pnfs_layouts",
        "gauge",
        "pNFS layouts held by clients (one per client and file).",
    );
    let _ = writeln!(out, "nfsgw_pnfs_layouts {}", l.held);
    head(
        out,
        "nfsgw_pnfs_layouts_total",
        "counter",
        "pNFS layouts by event: granted (a LAYOUTGET that succeeded), recalled (CB_LAYOUTRECALL begun by a conflicting truncate, REMOVE or RENAME), returned (LAYOUTRETURN, or NOMATCHING_LAYOUT answered to a recall), revoked (not returned within the lease after a recall).",
    );
    for (event, n) in [
        ("granted", l.granted),
        ("recalled", l.recalled),
        ("returned", l.returned),
        ("revoked", l.revoked),
    ] {
        let _ = writeln!(out, "nfsgw_pnfs_layouts_total{{event=\"{event}\"}} {n}");
    }
    head(
        out,
        "nfsgw_pnfs_layoutget_errors_total",
        "counter",
        "LAYOUTGETs a metadata server answered with an error (NFS4ERR_LAYOUTTRYLATER, NFS4ERR_RECALLCONFLICT, ...).",
    );
    let _ = writeln!(out, "nfsgw_pnfs_layoutget_errors_total {}", l.get_errors);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::State;

    #[test]
    fn gauges_follow_the_state_tables() {
        let state = Arc::new(State::new());
        let s = state.clone();
        let reader: Reader = Arc::new(move || s.gauges());
        let mut text = String::new();
        render(Some(&reader), &mut text);
        assert!(text.contains("nfsgw_nfs4_clients{state=\"confirmed\"} 0\n"));
        assert!(text.contains("nfsgw_nfs4_sessions 0\n"));
        let mut none = String::new();
        render(None, &mut none);
        assert_eq!(text, none);
        assert!(text.contains("nfsgw_pnfs_layouts_recalled_ds_down_total 0\n"));
        assert!(
            !text.contains("nfsgw_pnfs_data_server_up{"),
            "no servers, no series"
        );
    }

    #[test]
    fn data_servers_show_up_down_and_their_reports() {
        use crate::state::layouts::{DataServer, Devices, Probe};
        let addr = |s: &str| s.parse().unwrap();
        let ds = |a: &str| DataServer {
            addr: addr(a),
            rdma: false,
            probe: None,
        };
        let d = Devices {
            servers: vec![ds("10.0.0.2:2049"), ds("10.0.0.3:2049")],
            stripe_unit: 1 << 20,
            rsize: 1 << 20,
            wsize: 1 << 20,
            read_mirrors: 1,
            stripe: Default::default(),
            probe: Probe::default(),
        };
        let id = d.servers[0].device_id();
        let state = Arc::new(State::new().with_layouts(Some(d)));
        state.layouts.health().probed(1, false);
        state.layouts.health().probed(1, false);
        state.layouts.health().probed(1, false);
        state.layouts.report_error(&id, 5, 38, "LAYOUTERROR");
        let io = crate::state::layouts::health::Io {
            read_ops: 1,
            read_bytes: 4096,
            write_ops: 2,
            write_bytes: 8192,
        };
        assert!(state.layouts.report_io(&id, &io));
        assert!(!state.layouts.report_io(&[0xee; 16], &io), "no such device");
        let s = state.clone();
        let reader: Reader = Arc::new(move || s.gauges());
        let mut text = String::new();
        render(Some(&reader), &mut text);
        for line in [
            "nfsgw_pnfs_data_server_up{address=\"10.0.0.2:2049\"} 1\n",
            "nfsgw_pnfs_data_server_up{address=\"10.0.0.3:2049\"} 0\n",
            "nfsgw_pnfs_data_server_errors_total{address=\"10.0.0.2:2049\"} 1\n",
            "nfsgw_pnfs_data_server_errors_total{address=\"10.0.0.3:2049\"} 0\n",
            "nfsgw_pnfs_data_server_probe_failures_total{address=\"10.0.0.3:2049\"} 3\n",
            "nfsgw_pnfs_data_server_reported_ops_total{address=\"10.0.0.2:2049\",op=\"read\"} 1\n",
            "nfsgw_pnfs_data_server_reported_ops_total{address=\"10.0.0.2:2049\",op=\"write\"} 2\n",
            "nfsgw_pnfs_data_server_reported_bytes_total{address=\"10.0.0.2:2049\",op=\"read\"} 4096\n",
            "nfsgw_pnfs_data_server_reported_bytes_total{address=\"10.0.0.2:2049\",op=\"write\"} 8192\n",
            "nfsgw_pnfs_data_server_reported_bytes_total{address=\"10.0.0.3:2049\",op=\"write\"} 0\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
