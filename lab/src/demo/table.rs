//! Plain-text rendering of SLA rows for the demo's live output.

use rocemesh_proto::api::{Quantiles, SlaRow};

/// Formats nanoseconds as µs with one decimal, or "-" without data.
pub(super) fn us(v: Option<u64>) -> String {
    v.map_or_else(
        || "-".to_string(),
        |ns| format!("{:.1}", ns as f64 / 1000.0),
    )
}

fn q(q: &Quantiles) -> String {
    format!("{:>8} {:>8}", us(q.p50), us(q.p99))
}

/// Header line matching [`row`].
pub(super) fn header() -> String {
    format!(
        "{:<22} {:>7} {:>8}  {:>17}  {:>17}  {:>17}  {:>17}",
        "scope",
        "probes",
        "timeout",
        "net RTT p50/p99µs",
        "app RTT p50/p99µs",
        "prober p50/p99µs",
        "resp. p50/p99µs"
    )
}

/// One row of the live table.
pub(super) fn row(r: &SlaRow) -> String {
    format!(
        "{:<22} {:>7} {:>7.1}%  {}  {}  {}  {}",
        r.key,
        r.probes,
        r.timeout_rate * 100.0,
        q(&r.network_rtt_ns),
        q(&r.app_rtt_ns),
        q(&r.prober_delay_ns),
        q(&r.responder_delay_ns)
    )
}
