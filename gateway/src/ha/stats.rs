//! What `/metrics` shows of `[ha]` (docs/ha.md, docs/operations.md "High availability"):
//! whether this gateway holds its identity, who holds it (as this gateway last read the
//! lease), takeovers, lost identities, fenced stops, torn records; and the grace periods
//! and reclaims the client table counts (`state::recovery`).

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

static HELD: AtomicBool = AtomicBool::new(false);
static IMMINENT: AtomicBool = AtomicBool::new(false);
static TAKEOVERS: AtomicU64 = AtomicU64::new(0);
static LOST: AtomicU64 = AtomicU64::new(0);
static FENCED: AtomicU64 = AtomicU64::new(0);
static TORN: AtomicU64 = AtomicU64::new(0);

/// Who holds the identity, as the keeper last read the lease: (identity, holder, this
/// gateway's own name). Unset until the first look; the holder is `None` while the
/// lease is absent (nobody holds the identity yet).
struct Holder {
    identity: String,
    holder: Option<String>,
    gateway: String,
}
static HOLDER: Mutex<Option<Holder>> = Mutex::new(None);

/// Records who holds `identity` (`None`: nobody) as this gateway (`gateway`) saw it.
pub(super) fn set_holder(identity: &str, holder: Option<&str>, gateway: &str) {
    let mut h = HOLDER.lock().unwrap_or_else(|e| e.into_inner());
    *h = Some(Holder {
        identity: identity.to_string(),
        holder: holder.map(str::to_string),
        gateway: gateway.to_string(),
    });
}

/// A label value as the text format requires it: backslash, quote and newline escaped
/// (a holder name comes from the store, written by another gateway).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub(super) fn set_held(on: bool) {
    HELD.store(on, Ordering::Relaxed);
}
pub(super) fn set_imminent(on: bool) {
    IMMINENT.store(on, Ordering::Relaxed);
}
pub(super) fn count_takeover() {
    TAKEOVERS.fetch_add(1, Ordering::Relaxed);
}
pub(super) fn count_lost() {
    LOST.fetch_add(1, Ordering::Relaxed);
}
pub(super) fn count_fenced() {
    FENCED.fetch_add(1, Ordering::Relaxed);
}
pub(super) fn count_torn() {
    TORN.fetch_add(1, Ordering::Relaxed);
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
    );
}

/// The `nfsgw_ha_*` metrics (`stats::exposition::render`).
pub fn render(out: &mut String) {
    metric(
        out,
        "nfsgw_ha_identity_held",
        "gauge",
        "1 while this gateway serves its [ha] identity: it holds the lease, has read the record and renewed within 3/4 of the lease.",
        HELD.load(Ordering::Relaxed) as u64,
    );
    metric(
        out,
        "nfsgw_ha_takeover_imminent",
        "gauge",
        "1 while this gateway expects to take its [ha] identity over soon: the holder's lease has not been renewed for longer than a live holder's renewal takes, or this gateway holds the lease and is taking over. COMPOUNDs then park until the fence opens.",
        IMMINENT.load(Ordering::Relaxed) as u64,
    );
    let holder = HOLDER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = &*holder {
        let _ = writeln!(out, "# HELP nfsgw_ha_identity_holder Who holds the [ha] identity (host/instance), as this gateway (gateway) last read its lease; holder is empty while nobody does.\n# TYPE nfsgw_ha_identity_holder gauge");
        let _ = writeln!(
            out,
            "nfsgw_ha_identity_holder{{identity=\"{}\",holder=\"{}\",gateway=\"{}\"}} 1",
            escape(&h.identity),
            escape(h.holder.as_deref().unwrap_or("")),
            escape(&h.gateway)
        );
    }
    drop(holder);
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    metric(
        out,
        "nfsgw_ha_takeovers_total",
        "counter",
        "Times this gateway took its identity over (record read, grace period started).",
        c(&TAKEOVERS),
    );
    metric(
        out,
        "nfsgw_ha_identity_lost_total",
        "counter",
        "Times another gateway took this gateway's identity (a renewal failed its condition).",
        c(&LOST),
    );
    metric(out, "nfsgw_ha_fenced_total", "counter", "Times this gateway stopped serving NFSv4 because it could not renew its identity lease in time.", c(&FENCED));
    metric(
        out,
        "nfsgw_ha_records_torn_total",
        "counter",
        "Recovery records found torn at a takeover (no client could reclaim).",
        c(&TORN),
    );
    let (refused, dropped) = crate::backend::gate::counts();
    metric(
        out,
        "nfsgw_ha_store_writes_refused_total",
        "counter",
        "Requests that change the store not sent because they came past the identity lease's deadline (answered NFS4ERR_DELAY / NFS3ERR_JUKEBOX).",
        refused,
    );
    metric(
        out,
        "nfsgw_ha_staged_dropped_total",
        "counter",
        "Staged UNSTABLE writes dropped, never uploaded, because the identity lease's deadline passed first (the write verifier moved; clients resend).",
        dropped,
    );
    let (parked, served, full) = crate::state::park::counts();
    let _ = writeln!(out, "# HELP nfsgw_ha_parked_total NFSv4 COMPOUNDs that came while the fence was shut: parked, of those run once the fence opened (the rest got NFS4ERR_DELAY at their bound), and not parked because the bounds were full (NFS4ERR_DELAY at once).\n# TYPE nfsgw_ha_parked_total counter");
    let _ = writeln!(out, "nfsgw_ha_parked_total{{how=\"parked\"}} {parked}");
    let _ = writeln!(out, "nfsgw_ha_parked_total{{how=\"served\"}} {served}");
    let _ = writeln!(out, "nfsgw_ha_parked_total{{how=\"full\"}} {full}");
    let (started, early) = crate::state::recovery::grace_periods();
    let _ = writeln!(out, "# HELP nfsgw_ha_grace_periods_total NFSv4.1 grace periods started, and ended early once every client had reclaimed.\n# TYPE nfsgw_ha_grace_periods_total counter");
    let _ = writeln!(
        out,
        "nfsgw_ha_grace_periods_total{{how=\"started\"}} {started}"
    );
    let _ = writeln!(
        out,
        "nfsgw_ha_grace_periods_total{{how=\"ended_early\"}} {early}"
    );
    let (ok, refused) = crate::state::recovery::reclaims();
    let _ = writeln!(out, "# HELP nfsgw_ha_reclaims_total NFSv4.1 reclaims (OPEN CLAIM_PREVIOUS, LOCK reclaim, LAYOUTCOMMIT loca_reclaim), accepted, or refused (during the grace period or after it).\n# TYPE nfsgw_ha_reclaims_total counter");
    let _ = writeln!(out, "nfsgw_ha_reclaims_total{{result=\"accepted\"}} {ok}");
    let _ = writeln!(
        out,
        "nfsgw_ha_reclaims_total{{result=\"refused\"}} {refused}"
    );
}
