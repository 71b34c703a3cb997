//! NFSv4.1 state gauges, read from `state::State::gauges` at each scrape (no counter
//! kept anywhere for them): `nfsgw_nfs4_clients{state}`, `nfsgw_nfs4_sessions`,
//! `nfsgw_nfs4_opens`, `nfsgw_nfs4_lock_stateids`, `nfsgw_nfs4_locked_ranges`.

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
