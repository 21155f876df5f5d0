//! One diagnosis tick over the sliding window, in R-Pingmesh's order: host down,
//! agent restart (QPN reset), anomalous RNICs from ToR-mesh probes, host noise
//! ([`classify`]), then tomography of what is left, loss then latency ([`localize`]).

mod classify;
mod localize;

use super::fabric::FabricMap;
use super::intake::Liveness;
use super::paths::PathStore;
use crate::config::DiagnosisConfig;
use crate::registry::Registry;
use rocemesh_proto::api::{ComponentKind, Evidence, ProblemKind};
use rocemesh_proto::{ProbeClass, ProbeResult, ProbeStatus};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// Timeouts sent this long before a restarting agent's last old-epoch upload
/// still count as the restart's (the agent may have died right after uploading).
const RESTART_SLACK_MS: i64 = 1_000;
/// How fast a flow's RTT baseline follows a higher (but not anomalous) window minimum.
const BASELINE_DRIFT: f64 = 0.002;

/// What one tick finds about one component.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Category.
    pub kind: ProblemKind,
    /// Kind of component.
    pub component_kind: ComponentKind,
    /// Component name.
    pub component: String,
    /// Confidence in [0, 1].
    pub confidence: f64,
    /// The numbers behind it.
    pub evidence: Evidence,
}

/// One component of R-Pingmesh's Algorithm 1 baseline with its votes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BaselineVote {
    /// Kind of component (`link` or `rnic`).
    pub component_kind: ComponentKind,
    /// Component name.
    pub component: String,
    /// Failed probes whose paths cross it.
    pub votes: u64,
}

/// Everything one tick found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Problems present now.
    pub candidates: Vec<Candidate>,
    /// Algorithm 1 votes on the same data, most first.
    pub baseline: Vec<BaselineVote>,
}

/// What a tick reads.
pub struct Inputs<'a> {
    /// Tick time, ms since the Unix epoch.
    pub now_ms: i64,
    /// When the analyzer started (a host never heard from counts as silent since then).
    pub started_ms: i64,
    /// Recent results.
    pub records: &'a [Arc<Vec<ProbeResult>>],
    /// Upload liveness per host id.
    pub hosts: &'a HashMap<u32, Liveness>,
    /// RNIC registry.
    pub registry: &'a Registry,
    /// Fabric map.
    pub map: &'a FabricMap,
    /// Traced paths.
    pub paths: &'a PathStore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FlowKey {
    prober: u32,
    target: u32,
    sport: u16,
    dport: u16,
}

/// Per-flow counts of the current window plus the flow's RTT baseline.
#[derive(Debug, Default, Clone)]
struct FlowAgg {
    class: Option<ProbeClass>,
    ok: u32,
    timeouts: u32,
    ack2_lost: u32,
    slow: u32,
    min_rtt: u32,
    baseline: Option<f64>,
}

/// Diagnosis state kept across ticks: sticky RNIC and switch verdicts, flow baselines.
#[derive(Debug)]
pub struct Engine {
    cfg: DiagnosisConfig,
    sticky: HashMap<u32, (i64, Evidence)>,
    /// Switches found down, until when a single failing link of theirs is still theirs
    /// (the switch's last failures leave the window link by link).
    down_switches: HashMap<String, i64>,
    flows: HashMap<FlowKey, FlowAgg>,
}

#[derive(Default)]
struct HostTally {
    silent_timeouts: u64,
    restart_timeouts: u64,
    delays: u32,
    slow_delays: u32,
}

impl Engine {
    /// Fresh state.
    pub fn new(cfg: DiagnosisConfig) -> Self {
        Self {
            cfg,
            sticky: HashMap::new(),
            down_switches: HashMap::new(),
            flows: HashMap::new(),
        }
    }

    /// Runs the whole pipeline once.
    pub fn run(&mut self, inp: &Inputs) -> Outcome {
        let mut out = Outcome::default();
        let hosts = self.aggregate(inp);
        self.host_verdicts(inp, &hosts, &mut out);
        let noisy = self.noisy_hosts(&hosts);
        let (anomalous, noisy, vouched) = self.rnic_verdicts(inp, noisy, &mut out);
        self.tomography(inp, &noisy, &anomalous, &vouched, &mut out);
        self.update_baselines();
        out
    }

    fn last_upload(&self, inp: &Inputs, host: u32) -> i64 {
        inp.hosts
            .get(&host)
            .map_or(inp.started_ms, |l| l.last_upload_ms.max(inp.started_ms))
    }

    /// Steps 1-2 on single records, then per-flow counts of the rest.
    fn aggregate(&mut self, inp: &Inputs) -> HashMap<u32, HostTally> {
        for f in self.flows.values_mut() {
            *f = FlowAgg {
                baseline: f.baseline,
                ..FlowAgg::default()
            };
        }
        let c = &self.cfg;
        let start = inp.now_ms - c.window_ms as i64;
        let mut hosts: HashMap<u32, HostTally> = HashMap::new();
        let last_upload: HashMap<u32, i64> = inp
            .registry
            .host_ids()
            .map(|h| (h, self.last_upload(inp, h)))
            .collect();
        for r in inp.records.iter().flat_map(|c| c.iter()) {
            let send_ms = (r.send_unix_ns / 1_000_000) as i64;
            if send_ms < start || send_ms > inp.now_ms {
                continue;
            }
            let (Some(p), Some(t)) = (
                inp.registry.get(r.prober_rnic),
                inp.registry.get(r.target_rnic),
            ) else {
                continue;
            };
            if r.status.is_timeout() {
                let last = last_upload
                    .get(&t.host_id)
                    .copied()
                    .unwrap_or(inp.started_ms);
                let tally = hosts.entry(t.host_id).or_default();
                if inp.now_ms - last > c.host_silent_ms as i64 {
                    tally.silent_timeouts += 1;
                    continue;
                }
                let stale_qpn = inp
                    .registry
                    .meta(r.target_rnic)
                    .is_some_and(|m| m.qpn != r.target_qpn);
                let restarting = inp.hosts.get(&t.host_id).is_some_and(|l| {
                    l.restarts.iter().any(|&(old, new)| {
                        send_ms >= old - RESTART_SLACK_MS
                            && send_ms <= new + c.restart_grace_ms as i64
                    })
                });
                if stale_qpn || restarting {
                    tally.restart_timeouts += 1;
                    continue;
                }
                // Sent before the target's agent was first heard of (plus the pinglist
                // grace): start-up, not a fault, and not worth a problem either.
                let starting = inp
                    .hosts
                    .get(&t.host_id)
                    .is_none_or(|l| send_ms <= l.first_upload_ms + c.restart_grace_ms as i64);
                if starting {
                    continue;
                }
                if last < send_ms + c.liveness_margin_ms as i64 {
                    continue; // not yet known whether the target host was alive
                }
            } else {
                for (host, delay) in [
                    (p.host_id, r.prober_delay_ns),
                    (t.host_id, r.responder_delay_ns),
                ] {
                    let tally = hosts.entry(host).or_default();
                    tally.delays += 1;
                    if u64::from(delay) > c.noise_delay_ns {
                        tally.slow_delays += 1;
                    }
                }
            }
            let key = FlowKey {
                prober: r.prober_rnic,
                target: r.target_rnic,
                sport: r.src_port,
                dport: r.dst_port,
            };
            let f = self.flows.entry(key).or_default();
            f.class = Some(r.class);
            match r.status {
                ProbeStatus::Ok => {
                    f.ok += 1;
                    f.min_rtt = if f.ok == 1 {
                        r.network_rtt_ns
                    } else {
                        f.min_rtt.min(r.network_rtt_ns)
                    };
                    if let Some(b) = f.baseline {
                        let rtt = f64::from(r.network_rtt_ns);
                        if rtt > b * c.latency_factor as f64 && rtt - b > c.latency_min_ns as f64 {
                            f.slow += 1;
                        }
                    }
                }
                ProbeStatus::Timeout => f.timeouts += 1,
                ProbeStatus::Ack2Lost => f.ack2_lost += 1,
            }
        }
        hosts
    }

    /// Moves each flow's baseline towards its window minimum (down at once, up slowly,
    /// never towards an anomalous value) and forgets flows without results.
    fn update_baselines(&mut self) {
        let c = &self.cfg;
        self.flows
            .retain(|_, f| f.ok + f.timeouts + f.ack2_lost > 0);
        for f in self.flows.values_mut().filter(|f| f.ok > 0) {
            let m = f64::from(f.min_rtt);
            f.baseline = Some(match f.baseline {
                None => m,
                Some(b) if m <= b => m,
                Some(b) if m > b * c.latency_factor as f64 && m - b > c.latency_min_ns as f64 => b,
                Some(b) => b + (m - b) * BASELINE_DRIFT,
            });
        }
    }
}

fn rnic_name(inp: &Inputs, r: u32) -> String {
    inp.registry
        .meta(r)
        .map_or_else(|| format!("rnic-{r}"), |m| m.name.clone())
}

#[cfg(test)]
mod tests;
