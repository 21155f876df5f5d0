//! Probe results, SLA rows and problems for the tests of other crates (feature `testing`),
//! so each test file does not spell out every field of a [`ProbeResult`], [`SlaRow`] or
//! [`Problem`] again.

use crate::api::{
    ComponentKind, Evidence, Problem, ProblemKind, ProblemState, Quantiles, SlaRow, SlaScope,
};
use crate::{ProbeClass, ProbeResult, ProbeStatus, TimestampSource};

/// A ToR-mesh probe of `prober` → `target` sent at `send_ms`: ok with network RTT `rtt_ns`
/// (prober delay 4 µs, responder delay 2 µs, application RTT 6 µs above the network's),
/// or a timeout without RTT when `!ok`. Tests set other fields with `..probe_result(…)`.
pub fn probe_result(prober: u32, target: u32, send_ms: i64, ok: bool, rtt_ns: u32) -> ProbeResult {
    ProbeResult {
        prober_rnic: prober,
        target_rnic: target,
        seq: 0,
        target_qpn: 7,
        send_unix_ns: send_ms as u64 * 1_000_000,
        network_rtt_ns: if ok { rtt_ns } else { 0 },
        prober_delay_ns: 4_000,
        responder_delay_ns: 2_000,
        app_rtt_ns: rtt_ns + 6_000,
        src_port: 50_000,
        dst_port: 4791,
        class: ProbeClass::TorMesh,
        status: if ok {
            ProbeStatus::Ok
        } else {
            ProbeStatus::Timeout
        },
        ts_source: TimestampSource::Software,
    }
}

/// A 20 s RNIC-scope SLA period of RNIC `key` from `start_ms`, as the analyzer persists
/// it: `probes` probes, none lost, every delay quantile `ns`, no endpoint labels.
pub fn rnic_sla_row(key: &str, start_ms: i64, probes: i64, ns: u64) -> SlaRow {
    let q = Quantiles {
        p50: Some(ns),
        p90: Some(ns),
        p99: Some(ns),
        p999: Some(ns),
    };
    SlaRow {
        period_start_ms: start_ms,
        period_ms: 20_000,
        scope: SlaScope::Rnic,
        key: key.into(),
        probes,
        timeouts: 0,
        timeout_rate: 0.0,
        rnic_drops: 0,
        switch_drops: 0,
        rnic_drop_rate: 0.0,
        switch_drop_rate: 0.0,
        network_rtt_ns: q,
        prober_delay_ns: q,
        responder_delay_ns: q,
        app_rtt_ns: q,
        labels: Vec::new(),
    }
}

/// An active problem `id` of `kind` on `component` with evidence `detail`, first and last
/// seen at 0, unassessed.
pub fn active_problem(
    id: i64,
    kind: ProblemKind,
    component_kind: ComponentKind,
    component: &str,
    detail: &str,
) -> Problem {
    Problem {
        id,
        kind,
        component_kind,
        component: component.into(),
        state: ProblemState::Active,
        confidence: 0.9,
        network: kind.is_network(),
        first_seen_ms: 0,
        last_seen_ms: 0,
        resolved_ms: None,
        evidence: Evidence {
            detail: detail.into(),
            ..Default::default()
        },
        priority: None,
        affected_tasks: Vec::new(),
    }
}
