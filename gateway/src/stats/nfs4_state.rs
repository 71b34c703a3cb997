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
    }
}
