//! One diagnosis tick over the sliding window, in R-Pingmesh's order: host down,
//! agent restart (QPN reset), anomalous RNICs from ToR-mesh probes, host noise,
//! then tomography of what is left (loss, then latency).

use super::fabric::FabricMap;
use super::intake::Liveness;
use super::paths::{Element, End, PathStore, Route, Tuple, route};
use super::tomography::{
    Finding, FlowObs, Params, alg1_votes, chernoff_score, explain_away, located_suspects,
};
use crate::config::DiagnosisConfig;
use crate::registry::Registry;
use rocemesh_proto::api::{ComponentKind, Evidence, ProblemKind};
use rocemesh_proto::{ProbeClass, ProbeResult, ProbeStatus};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Timeouts sent this long before a restarting agent's last old-epoch upload
/// still count as the restart's (the agent may have died right after uploading).
const RESTART_SLACK_MS: i64 = 1_000;
/// Fewest delays above the noise threshold before a host is noisy.
const MIN_NOISY_DELAYS: u32 = 5;
/// Fewest slow probes through a component to blame it for latency.
const MIN_SLOW: f64 = 10.0;
/// Background share of slow probes assumed at least.
const SLOW_FLOOR: f64 = 0.01;
/// How fast a flow's RTT baseline follows a higher (but not anomalous) window minimum.
const BASELINE_DRIFT: f64 = 0.002;
/// Share of a switch's links that must be blamed to blame the switch.
const SWITCH_SHARE: f64 = 0.75;

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

/// Diagnosis state kept across ticks: sticky RNIC verdicts and flow baselines.
#[derive(Debug)]
pub struct Engine {
    cfg: DiagnosisConfig,
    sticky: HashMap<u32, (i64, Evidence)>,
    flows: HashMap<FlowKey, FlowAgg>,
}

#[derive(Default)]
struct HostTally {
    silent_timeouts: u64,
    restart_timeouts: u64,
    delays: u32,
    slow_delays: u32,
}

fn confidence(score: f64, min_score: f64) -> f64 {
    score / (score + min_score)
}

impl Engine {
    /// Fresh state.
    pub fn new(cfg: DiagnosisConfig) -> Self {
        Self {
            cfg,
            sticky: HashMap::new(),
            flows: HashMap::new(),
        }
    }

    /// Runs the whole pipeline once.
    pub fn run(&mut self, inp: &Inputs) -> Outcome {
        let mut out = Outcome::default();
        let hosts = self.aggregate(inp);
        self.host_verdicts(inp, &hosts, &mut out);
        let noisy = self.noisy_hosts(&hosts);
        let (anomalous, noisy) = self.rnic_verdicts(inp, noisy, &mut out);
        self.tomography(inp, &noisy, &anomalous, &mut out);
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

    fn host_name(inp: &Inputs, host: u32) -> String {
        inp.registry
            .host_name(host)
            .map_or_else(|| format!("host-{host}"), str::to_string)
    }

    /// Steps 1 and 2: host down, agent restart (informational, not the network);
    /// hosts no longer in the registry are forgotten.
    fn host_verdicts(&self, inp: &Inputs, hosts: &HashMap<u32, HostTally>, out: &mut Outcome) {
        let mut ids: Vec<u32> = inp.registry.host_ids().collect();
        ids.sort_unstable();
        for h in ids {
            let silent_ms = inp.now_ms - self.last_upload(inp, h);
            let tally = hosts.get(&h);
            // Only a host this analyzer has heard from can be declared down: a
            // registry entry that never uploaded may be stale (its timeouts are
            // still set aside as a silent host's).
            if silent_ms > self.cfg.host_down_after_ms as i64 && inp.hosts.contains_key(&h) {
                out.candidates.push(Candidate {
                    kind: ProblemKind::HostDown,
                    component_kind: ComponentKind::Host,
                    component: Self::host_name(inp, h),
                    confidence: 1.0,
                    evidence: Evidence {
                        timeouts: tally.map_or(0, |t| t.silent_timeouts),
                        detail: format!(
                            "host down: no upload for {silent_ms} ms (> {} ms); timeouts towards it explained",
                            self.cfg.host_down_after_ms
                        ),
                        ..Evidence::default()
                    },
                });
            }
            if let Some(t) = tally.filter(|t| t.restart_timeouts > 0) {
                out.candidates.push(Candidate {
                    kind: ProblemKind::AgentRestart,
                    component_kind: ComponentKind::Agent,
                    component: Self::host_name(inp, h),
                    confidence: 1.0,
                    evidence: Evidence {
                        timeouts: t.restart_timeouts,
                        detail:
                            "agent restart: timeouts named a stale QPN or fell into the agent's \
                                 restart gap (+ pinglist grace); not a network problem"
                                .into(),
                        ..Evidence::default()
                    },
                });
            }
        }
    }

    /// Step 4 (delay half): hosts whose processing delays are far above normal.
    fn noisy_hosts(&self, hosts: &HashMap<u32, HostTally>) -> HashMap<u32, Evidence> {
        hosts
            .iter()
            .filter(|(_, t)| {
                t.slow_delays >= MIN_NOISY_DELAYS
                    && u64::from(t.slow_delays) * 100 >= u64::from(self.cfg.noise_percent) * u64::from(t.delays)
            })
            .map(|(&h, t)| {
                let e = Evidence {
                    probes: u64::from(t.delays),
                    timeouts: u64::from(t.slow_delays),
                    detail: format!(
                        "host noise: {} of {} processing delays above {} ns (>= {} %): CPU, not the network",
                        t.slow_delays, t.delays, self.cfg.noise_delay_ns, self.cfg.noise_percent
                    ),
                    ..Evidence::default()
                };
                (h, e)
            })
            .collect()
    }

    /// Step 3 (+ step 4's several-RNICs rule): anomalous RNICs from ToR-mesh probes,
    /// found greedily so a dead RNIC's failed probes do not also blame its peers.
    /// Returns the anomalous RNICs and the noisy hosts.
    fn rnic_verdicts(
        &mut self,
        inp: &Inputs,
        mut noisy: HashMap<u32, Evidence>,
        out: &mut Outcome,
    ) -> (HashSet<u32>, HashSet<u32>) {
        let c = &self.cfg;
        let host_of = |r: u32| inp.registry.get(r).map(|e| e.host_id);
        let on_noisy = |r: u32| host_of(r).is_some_and(|h| noisy.contains_key(&h));
        // (probes to, fails to, probes from, fails from) per RNIC, and the ToR-mesh
        // flows (prober, target, ok, failed) touching it.
        let mut counts: HashMap<u32, [u32; 4]> = HashMap::new();
        let mut touching: HashMap<u32, Vec<(u32, u32, u32, u32)>> = HashMap::new();
        let mut all_class: HashMap<u32, (u32, u32)> = HashMap::new();
        for (k, f) in &self.flows {
            let fail = f.timeouts + f.ack2_lost;
            for r in [k.prober, k.target] {
                let e = all_class.entry(r).or_default();
                e.0 += f.ok + fail;
                e.1 += fail;
            }
            if f.class != Some(ProbeClass::TorMesh) || on_noisy(k.prober) || on_noisy(k.target) {
                continue;
            }
            let flow = (k.prober, k.target, f.ok, fail);
            add_mesh_flow(&mut counts, flow, true);
            touching.entry(k.prober).or_default().push(flow);
            touching.entry(k.target).or_default().push(flow);
        }
        let ratio = |(n, f): (u32, u32)| {
            if n == 0 {
                0.0
            } else {
                f64::from(f) / f64::from(n)
            }
        };
        // Background: the pooled ToR-mesh timeout ratio, at least the configured floor.
        let (probes, fails) = counts.values().fold((0u64, 0u64), |(n, f), x| {
            (n + u64::from(x[0]), f + u64::from(x[1]))
        });
        let floor = f64::from(c.background_loss_ppm) / 1e6;
        let p0 = if probes == 0 {
            floor
        } else {
            (fails as f64 / probes as f64).max(floor)
        }
        .min(0.5);
        let over = |n: u32, f: u32| {
            n >= c.rnic_min_probes
                && u64::from(f) * 100 > u64::from(c.rnic_timeout_percent) * u64::from(n)
        };
        let significant = |x: &[u32; 4]| {
            chernoff_score(f64::from(x[1] + x[3]), f64::from(x[0] + x[2]), p0)
                >= f64::from(c.min_score)
        };
        let mut removed: HashSet<u32> = HashSet::new();
        loop {
            let best = counts
                .iter()
                .filter(|(r, x)| {
                    !removed.contains(r) && (over(x[0], x[1]) || over(x[2], x[3])) && significant(x)
                })
                .map(|(&r, x)| {
                    let own = ratio((x[0] + x[2], x[1] + x[3]));
                    let all = ratio(all_class.get(&r).copied().unwrap_or_default());
                    (r, *x, own, all)
                })
                .max_by(|a, b| {
                    a.2.total_cmp(&b.2)
                        .then(a.3.total_cmp(&b.3))
                        .then(b.0.cmp(&a.0))
                });
            let Some((r, x, _, _)) = best else { break };
            let evidence = Evidence {
                probes: u64::from(x[0] + x[2]),
                timeouts: u64::from(x[1] + x[3]),
                detail: format!(
                    "ToR-mesh: {} of {} probes to it and {} of {} from it timed out (> {} %, background {:.2} %)",
                    x[1],
                    x[0],
                    x[3],
                    x[2],
                    c.rnic_timeout_percent,
                    p0 * 100.0
                ),
                ..Evidence::default()
            };
            self.sticky
                .insert(r, (inp.now_ms + c.rnic_sticky_ms as i64, evidence));
            removed.insert(r);
            // Its probes no longer count against its peers.
            for &flow in touching.get(&r).into_iter().flatten() {
                let other = if flow.0 == r { flow.1 } else { flow.0 };
                if !removed.contains(&other) {
                    add_mesh_flow(&mut counts, flow, false);
                }
            }
        }
        self.sticky.retain(|_, (until, _)| *until > inp.now_ms);
        // Several RNICs of one host at once: the host, not its RNICs.
        let mut per_host: HashMap<u32, Vec<u32>> = HashMap::new();
        for &r in self.sticky.keys() {
            if let Some(h) = host_of(r) {
                per_host.entry(h).or_default().push(r);
            }
        }
        for (h, rnics) in per_host.into_iter().filter(|(_, v)| v.len() >= 2) {
            let timeouts = rnics
                .iter()
                .filter_map(|r| self.sticky.remove(r))
                .map(|(_, e)| e.timeouts)
                .sum();
            noisy.entry(h).or_insert_with(|| Evidence {
                timeouts,
                detail: format!(
                    "host noise: {} RNICs of the host fail ToR-mesh probes at once",
                    rnics.len()
                ),
                ..Evidence::default()
            });
        }
        let noisy_ids: HashSet<u32> = noisy.keys().copied().collect();
        let mut noisy: Vec<_> = noisy.into_iter().collect();
        noisy.sort_by_key(|(h, _)| *h);
        for (h, evidence) in noisy {
            out.candidates.push(Candidate {
                kind: ProblemKind::HostNoise,
                component_kind: ComponentKind::Host,
                component: Self::host_name(inp, h),
                confidence: 0.9,
                evidence,
            });
        }
        let mut sticky: Vec<_> = self.sticky.iter().collect();
        sticky.sort_by_key(|(r, _)| **r);
        for (&r, (_, evidence)) in sticky {
            out.candidates.push(Candidate {
                kind: ProblemKind::RnicFault,
                component_kind: ComponentKind::Rnic,
                component: rnic_name(inp, r),
                confidence: 0.95,
                evidence: evidence.clone(),
            });
        }
        (self.sticky.keys().copied().collect(), noisy_ids)
    }

    /// Step 5: tomography of the timeouts and slow probes nothing else explains.
    fn tomography(
        &mut self,
        inp: &Inputs,
        noisy_hosts: &HashSet<u32>,
        anomalous: &HashSet<u32>,
        out: &mut Outcome,
    ) {
        let excluded = |r: u32| {
            anomalous.contains(&r)
                || inp
                    .registry
                    .get(r)
                    .is_none_or(|e| noisy_hosts.contains(&e.host_id))
        };
        let mut loss = Vec::new();
        let mut slow = Vec::new();
        let mut keys: Vec<(&FlowKey, &FlowAgg)> = self
            .flows
            .iter()
            .filter(|(k, f)| {
                f.ok + f.timeouts + f.ack2_lost > 0 && !excluded(k.prober) && !excluded(k.target)
            })
            .collect();
        keys.sort_by_key(|(k, _)| (k.prober, k.target, k.sport, k.dport));
        // Observations are tagged with the 5-tuple that failed: a probe's and the
        // reverse probe's ACK share one.
        let mut tuple_ids: HashMap<Tuple, usize> = HashMap::new();
        let mut tuple_id = |t: Tuple| {
            let n = tuple_ids.len();
            *tuple_ids.entry(t).or_insert(n)
        };
        // Nothing failed or nothing was slow: that tomography has nothing to explain.
        let c = &self.cfg;
        let failures: u32 = keys.iter().map(|(_, f)| f.timeouts + f.ack2_lost).sum();
        let slow_probes: u32 = keys.iter().map(|(_, f)| f.slow).sum();
        let want_loss = f64::from(failures) >= f64::from(c.min_failures);
        let want_slow = f64::from(slow_probes) >= MIN_SLOW;
        if !want_loss && !want_slow {
            return;
        }
        for (k, f) in keys {
            let (Some(p), Some(t)) = (end(inp, k.prober), end(inp, k.target)) else {
                continue;
            };
            let with_text = f.timeouts + f.ack2_lost + f.slow > 0;
            let fwd_key = Tuple {
                src: p.ip,
                dst: t.ip,
                sport: k.sport,
                dport: k.dport,
            };
            let fwd = route(inp.map, inp.paths.get(&fwd_key), &p, &t, with_text);
            let ack_key = Tuple {
                src: t.ip,
                dst: p.ip,
                sport: k.sport,
                dport: k.dport,
            };
            let swapped = Tuple {
                sport: k.dport,
                dport: k.sport,
                ..ack_key
            };
            let ack_traces = inp.paths.get(&ack_key).or_else(|| inp.paths.get(&swapped));
            let ack = route(inp.map, ack_traces, &t, &p, with_text);
            let ok_elems = union(&[&fwd.ok, &ack.ok]);
            let broken: Vec<&Route> = [&fwd, &ack]
                .into_iter()
                .filter(|r| r.break_device.is_some())
                .collect();
            let (fail_elems, located) = if broken.is_empty() {
                (union(&[&fwd.fail, &ack.fail]), false)
            } else {
                (
                    union(&broken.iter().map(|r| &r.fail).collect::<Vec<_>>()),
                    true,
                )
            };
            let break_device = fwd
                .break_device
                .clone()
                .or_else(|| ack.break_device.clone());
            let failed_tuple = if fwd.break_device.is_none() && ack.break_device.is_some() {
                ack_key
            } else {
                fwd_key
            };
            if want_loss {
                loss.push(FlowObs {
                    flow: tuple_id(failed_tuple),
                    ok: f64::from(f.ok),
                    fail: f64::from(f.timeouts),
                    ok_elems: ok_elems.clone(),
                    fail_elems,
                    located,
                    break_device: break_device.clone(),
                    text: fwd.text.clone(),
                });
            }
            if want_loss && f.ack2_lost > 0 {
                loss.push(FlowObs {
                    flow: tuple_id(ack_key),
                    ok: 0.0,
                    fail: f64::from(f.ack2_lost),
                    ok_elems: Vec::new(),
                    fail_elems: ack.fail.clone(),
                    located: ack.break_device.is_some(),
                    break_device: ack.break_device.clone(),
                    text: ack.text.clone(),
                });
            }
            if want_slow && f.ok > 0 {
                slow.push(FlowObs {
                    flow: tuple_id(fwd_key),
                    ok: f64::from(f.ok - f.slow),
                    fail: f64::from(f.slow),
                    fail_elems: ok_elems.clone(),
                    ok_elems,
                    located: false,
                    break_device: None,
                    text: fwd.text,
                });
            }
        }
        let loss_params = Params {
            min_score: f64::from(c.min_score),
            min_failures: f64::from(c.min_failures),
            floor: f64::from(c.background_loss_ppm) / 1e6,
            min_share: 0.0,
        };
        let slow_params = Params {
            min_failures: MIN_SLOW,
            floor: SLOW_FLOOR,
            min_share: f64::from(c.latency_percent) / 100.0,
            ..loss_params
        };
        let mut found = Vec::new();
        for f in explain_away(&loss, &loss_params) {
            let (kind, ck, name) = match (&f.element, &f.single_flow_break) {
                (Element::Rnic(r), _) => {
                    self.sticky.insert(
                        *r,
                        (inp.now_ms + c.rnic_sticky_ms as i64, evidence(&f, "RNIC")),
                    );
                    (
                        ProblemKind::RnicFault,
                        ComponentKind::Rnic,
                        rnic_name(inp, *r),
                    )
                }
                (Element::Link(_), Some(Some(dev))) => {
                    (ProblemKind::SwitchFault, ComponentKind::Switch, dev.clone())
                }
                (Element::Link(l), _) => (ProblemKind::LinkFault, ComponentKind::Link, l.clone()),
            };
            found.push((kind, ck, name, f));
        }
        for f in explain_away(&slow, &slow_params) {
            let (ck, name) = match &f.element {
                Element::Rnic(r) => (ComponentKind::Rnic, rnic_name(inp, *r)),
                Element::Link(l) => (ComponentKind::Link, l.clone()),
            };
            found.push((ProblemKind::HighLatency, ck, name, f));
        }
        // Switches that answered the fresh traces of failed probes are alive: their
        // failed links are link faults, not a dead switch.
        let alive: HashSet<&str> = loss
            .iter()
            .filter(|o| o.fail > 0.0)
            .filter_map(|o| o.break_device.as_deref())
            .collect();
        let suspects = located_suspects(&loss, loss_params.min_failures);
        for (kind, ck, name, f) in group_by_switch(inp.map, found, &suspects, &alive) {
            let what = match (kind, ck) {
                (ProblemKind::SwitchFault, _)
                    if f.len() == 1 && f[0].single_flow_break.is_some() =>
                {
                    "one 5-tuple fails through links others cross: silent drop in the switch where its trace stops"
                }
                (ProblemKind::HighLatency, _) => "latency tomography: slow probes",
                _ => "loss tomography: failed probes",
            };
            let score = f.iter().map(|x| x.score).fold(0.0, f64::max);
            let mut e = f.iter().fold(Evidence::default(), |mut e, x| {
                let one = evidence(x, what);
                e.probes += one.probes;
                e.timeouts += one.timeouts;
                e.votes += one.votes;
                e.ok_paths += one.ok_paths;
                e.example_paths.extend(one.example_paths);
                if !e.detail.is_empty() {
                    e.detail.push_str("; ");
                }
                e.detail.push_str(&one.detail);
                e
            });
            e.example_paths.truncate(5);
            out.candidates.push(Candidate {
                kind,
                component_kind: ck,
                component: name,
                confidence: confidence(score, f64::from(c.min_score)),
                evidence: e,
            });
        }
        out.baseline = alg1_votes(&loss)
            .into_iter()
            .map(|(e, votes)| match e {
                Element::Rnic(r) => BaselineVote {
                    component_kind: ComponentKind::Rnic,
                    component: rnic_name(inp, r),
                    votes,
                },
                Element::Link(l) => BaselineVote {
                    component_kind: ComponentKind::Link,
                    component: l,
                    votes,
                },
            })
            .collect();
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

/// Adds (or takes away) one ToR-mesh flow to its target's and prober's counts.
fn add_mesh_flow(
    counts: &mut HashMap<u32, [u32; 4]>,
    (p, t, ok, fail): (u32, u32, u32, u32),
    add: bool,
) {
    for (r, at) in [(t, 0), (p, 2)] {
        let x = counts.entry(r).or_default();
        if add {
            x[at] += ok + fail;
            x[at + 1] += fail;
        } else {
            x[at] -= ok + fail;
            x[at + 1] -= fail;
        }
    }
}

fn rnic_name(inp: &Inputs, r: u32) -> String {
    inp.registry
        .meta(r)
        .map_or_else(|| format!("rnic-{r}"), |m| m.name.clone())
}

fn end<'a>(inp: &'a Inputs, r: u32) -> Option<End<'a>> {
    let m = inp.registry.meta(r)?;
    let e = inp.registry.get(r)?;
    Some(End {
        rnic: r,
        ip: m.ip,
        tor: inp.registry.tor_name(e.tor),
        name: &m.name,
    })
}

/// Elements of several lists, each at its largest weight.
fn union(lists: &[&Vec<(Element, f64)>]) -> Vec<(Element, f64)> {
    let mut v: Vec<(Element, f64)> = Vec::new();
    for (e, w) in lists.iter().flat_map(|l| l.iter()) {
        match v.iter_mut().find(|(x, _)| x == e) {
            Some((_, old)) => *old = old.max(*w),
            None => v.push((e.clone(), *w)),
        }
    }
    v
}

fn evidence(f: &Finding, what: &str) -> Evidence {
    Evidence {
        probes: (f.failures + f.ok).round() as u64,
        timeouts: f.failures.round() as u64,
        votes: f.failures.round() as u64,
        ok_paths: f.ok.round() as u64,
        example_paths: f.examples.clone(),
        detail: format!(
            "{what}: {:.0} of {:.0} through it vs background {:.2} %, score {:.1}",
            f.failures,
            f.failures + f.ok,
            f.background * 100.0,
            f.score
        ),
    }
}

type Found = (ProblemKind, ComponentKind, String, Finding);
type Group = (ProblemKind, ComponentKind, String, Vec<Finding>);

/// Link findings of one kind covering most links of a switch become one switch finding,
/// unless the switch is known `alive` (it answered fresh traces of failed probes).
/// `suspects` are loss suspects not blamed themselves (their failures were explained
/// by a sibling) that still count towards their switches.
fn group_by_switch(
    map: &FabricMap,
    found: Vec<Found>,
    suspects: &[Element],
    alive: &HashSet<&str>,
) -> Vec<Group> {
    let mut per_switch: HashMap<(ProblemKind, String), Vec<usize>> = HashMap::new();
    for (i, (kind, ck, name, _)) in found.iter().enumerate() {
        if *ck != ComponentKind::Link {
            continue;
        }
        for d in map
            .link(name)
            .map(|l| l.devices.clone())
            .into_iter()
            .flatten()
        {
            let kind = if *kind == ProblemKind::LinkFault {
                ProblemKind::SwitchFault
            } else {
                *kind
            };
            per_switch.entry((kind, d)).or_default().push(i);
        }
    }
    let mut switches: Vec<_> = per_switch
        .into_iter()
        .filter(|((kind, d), links)| {
            if *kind == ProblemKind::SwitchFault && alive.contains(d.as_str()) {
                return false;
            }
            let total = map.links_of(d).count();
            let extra = if *kind == ProblemKind::SwitchFault {
                map.links_of(d)
                    .filter(|l| suspects.contains(&Element::Link(l.name.clone())))
                    .filter(|l| !links.iter().any(|&i| found[i].2 == l.name))
                    .count()
            } else {
                0
            };
            let implicated = links.len() + extra;
            implicated >= 2 && implicated as f64 >= SWITCH_SHARE * total as f64
        })
        .collect();
    switches.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    let mut taken = vec![false; found.len()];
    let mut groups: Vec<Group> = Vec::new();
    for ((kind, d), links) in switches {
        if links.iter().any(|&i| taken[i]) {
            continue;
        }
        links.iter().for_each(|&i| taken[i] = true);
        let ck = ComponentKind::Switch;
        groups.push((
            kind,
            ck,
            d,
            links.iter().map(|&i| found[i].3.clone()).collect(),
        ));
    }
    for (i, (kind, ck, name, f)) in found.into_iter().enumerate() {
        if !taken[i] {
            match groups
                .iter_mut()
                .find(|g| g.0 == kind && g.1 == ck && g.2 == name)
            {
                Some(g) => g.3.push(f),
                None => groups.push((kind, ck, name, vec![f])),
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::fabric::CLOS_2X2;
    use crate::diagnosis::intake::Liveness;
    use crate::registry::{RnicEntry, RnicMeta};
    use rocemesh_proto::TimestampSource;
    use rocemesh_proto::path::TracedPath;
    use std::collections::VecDeque;
    use std::net::{IpAddr, Ipv4Addr};

    const NOW: i64 = 1_700_000_000_000;
    /// Hosts h0..h3, two RNICs each (r0, r1); h0, h1 under t0, h2, h3 under t1.
    const HOSTS: u32 = 4;

    fn rnic(host: u32, k: u32) -> u32 {
        1 + host * 2 + k
    }
    fn host_of(r: u32) -> u32 {
        (r - 1) / 2
    }
    fn tor_of(r: u32) -> u32 {
        host_of(r) / 2
    }
    /// Index of an RNIC under its ToR (0..4).
    fn slot(r: u32) -> u8 {
        ((r - 1) % 4) as u8
    }
    fn ip(r: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 18, tor_of(r) as u8, 2 * slot(r) + 1))
    }
    fn rnics() -> impl Iterator<Item = u32> {
        1..=HOSTS * 2
    }

    fn registry() -> Registry {
        let tors: Arc<[String]> = vec!["t0".to_string(), "t1".to_string()].into();
        let mut reg = Registry::new(
            rnics().map(|r| {
                (
                    r,
                    RnicEntry {
                        host_id: host_of(r) + 1,
                        tor: tor_of(r) as u16,
                    },
                )
            }),
            tors,
        );
        for r in rnics() {
            let meta = RnicMeta {
                name: format!("h{}/r{}", host_of(r), (r - 1) % 2),
                host: format!("h{}", host_of(r)),
                ip: ip(r),
                qpn: 100 + r,
                epoch: 1,
            };
            reg.set_meta(r, meta);
        }
        reg
    }

    /// Spine of a 5-tuple (stands in for the ECMP hash; the ACK's 5-tuple is another one).
    fn spine(src: u32, dst: u32, sport: u16) -> u32 {
        (src * 7 + dst * 3 + u32::from(sport)) / 2 % 2
    }

    fn hops(src: u32, dst: u32, s: u32) -> Vec<Option<IpAddr>> {
        let (t, u) = (tor_of(src), tor_of(dst));
        vec![
            Some(IpAddr::V4(Ipv4Addr::new(198, 18, t as u8, 2 * slot(src)))),
            Some(IpAddr::V4(Ipv4Addr::new(
                198,
                19,
                0,
                (2 * (2 * t + s) + 1) as u8,
            ))),
            Some(IpAddr::V4(Ipv4Addr::new(
                198,
                19,
                0,
                (2 * (2 * u + s)) as u8,
            ))),
            Some(ip(dst)),
        ]
    }

    /// What a fault does to one packet direction: (lost, extra delay ns).
    type Fault<'a> = dyn FnMut(u32, u32, Option<u32>, u16) -> (bool, u32) + 'a;

    struct Sim {
        records: Vec<ProbeResult>,
        paths: PathStore,
        hosts: HashMap<u32, Liveness>,
        start_ms: i64,
        end_ms: i64,
    }

    impl Sim {
        fn new() -> Self {
            let hosts = (1..=HOSTS)
                .map(|h| {
                    (
                        h,
                        Liveness {
                            epoch: 1,
                            last_upload_ms: NOW,
                            first_upload_ms: NOW - 60_000,
                            restarts: VecDeque::new(),
                        },
                    )
                })
                .collect();
            Self {
                records: Vec::new(),
                paths: PathStore::new(100_000),
                hosts,
                start_ms: NOW - 9_000,
                end_ms: NOW - 1_500,
            }
        }

        fn trace(
            &mut self,
            src: u32,
            dst: u32,
            sport: u16,
            s: u32,
            ack: bool,
            stop_after: Option<usize>,
        ) {
            let mut h = hops(src, dst, s);
            if let Some(n) = stop_after {
                h.truncate(n);
                h.push(None);
            }
            self.paths.insert(&TracedPath {
                src: ip(src),
                dst: ip(dst),
                src_port: sport,
                dst_port: 4791,
                traced_at_unix_ns: 1,
                reached: stop_after.is_none(),
                ack_direction: ack,
                hops: h,
            });
        }

        /// 10 probes per second over the sim's time span on every ToR-mesh pair and
        /// on two 5-tuples of every inter-ToR pair, complete traces of all of them;
        /// `fault(src, dst, spine, sport)` decides each direction's fate.
        fn run(&mut self, fault: &mut Fault) {
            for p in rnics() {
                for t in rnics().filter(|&t| t != p) {
                    let ports: &[u16] = if tor_of(p) == tor_of(t) {
                        &[50_000]
                    } else {
                        &[50_001, 50_002]
                    };
                    for &sport in ports {
                        let inter = tor_of(p) != tor_of(t);
                        let (fs, bs) = (spine(p, t, sport), spine(t, p, sport));
                        if inter {
                            self.trace(p, t, sport, fs, false, None);
                            self.trace(t, p, sport, bs, true, None);
                        }
                        let mut at = self.start_ms;
                        while at < self.end_ms {
                            let fwd = fault(p, t, inter.then_some(fs), sport);
                            let back = fault(t, p, inter.then_some(bs), sport);
                            let lost = fwd.0 || back.0;
                            let rtt = 20_000 + fwd.1 + back.1;
                            self.records.push(ProbeResult {
                                prober_rnic: p,
                                target_rnic: t,
                                seq: 0,
                                target_qpn: 100 + t,
                                send_unix_ns: at as u64 * 1_000_000,
                                network_rtt_ns: if lost { 0 } else { rtt },
                                prober_delay_ns: 30_000,
                                responder_delay_ns: 10_000,
                                app_rtt_ns: rtt + 40_000,
                                src_port: sport,
                                dst_port: 4791,
                                class: if inter {
                                    ProbeClass::InterTor
                                } else {
                                    ProbeClass::TorMesh
                                },
                                status: if lost {
                                    ProbeStatus::Timeout
                                } else {
                                    ProbeStatus::Ok
                                },
                                ts_source: TimestampSource::Software,
                            });
                            at += 100;
                        }
                    }
                }
            }
        }

        /// The agents re-traced every inter-ToR 5-tuple hashed onto spine `s` (probes
        /// and ACKs) after timeouts: the traces stop after `stop(src)` hops.
        fn retrace_via(&mut self, s: u32, stop: impl Fn(u32) -> usize) {
            for p in rnics() {
                for t in rnics().filter(|&t| tor_of(t) != tor_of(p)) {
                    for sport in [50_001, 50_002] {
                        if spine(p, t, sport) == s {
                            self.trace(p, t, sport, s, false, Some(stop(p)));
                        }
                    }
                }
            }
        }

        fn diagnose(&self, engine: &mut Engine, map: &FabricMap) -> Outcome {
            let registry = registry();
            let records = [Arc::new(self.records.clone())];
            engine.run(&Inputs {
                now_ms: NOW,
                started_ms: NOW - 600_000,
                records: &records,
                hosts: &self.hosts,
                registry: &registry,
                map,
                paths: &self.paths,
            })
        }
    }

    fn found(o: &Outcome) -> Vec<(ProblemKind, String)> {
        let mut v: Vec<_> = o
            .candidates
            .iter()
            .map(|c| (c.kind, c.component.clone()))
            .collect();
        v.sort();
        v
    }

    fn diagnose(fault: &mut Fault) -> Vec<(ProblemKind, String)> {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut sim = Sim::new();
        sim.run(fault);
        found(&sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map))
    }

    fn link_down(a: u32, b: u32, s: u32) -> impl FnMut(u32, u32, Option<u32>, u16) -> (bool, u32) {
        move |src, dst, sp, _| {
            (
                sp == Some(s)
                    && (tor_of(src) == a || tor_of(dst) == a)
                    && (tor_of(src) == b || tor_of(dst) == b),
                0,
            )
        }
    }

    #[test]
    fn fault_free_fabric_reports_nothing() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut sim = Sim::new();
        sim.run(&mut |_, _, _, _| (false, 0));
        // Scattered single timeouts (noise) must not raise anything.
        for i in (0..sim.records.len()).step_by(997) {
            sim.records[i].status = ProbeStatus::Timeout;
            sim.records[i].network_rtt_ns = 0;
        }
        let o = sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map);
        assert_eq!(found(&o), []);
        assert!(!o.baseline.is_empty(), "Algorithm 1 votes for noise");
    }

    #[test]
    fn rnic_down_is_the_rnic_alone() {
        let dead = rnic(1, 0);
        let got = diagnose(&mut |s, d, _, _| (s == dead || d == dead, 0));
        assert_eq!(got, [(ProblemKind::RnicFault, "h1/r0".to_string())]);
    }

    #[test]
    fn link_down_is_localized_by_fresh_partial_traces() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut sim = Sim::new();
        let mut fault = link_down(0, 1, 1);
        sim.run(&mut fault);
        // Upwards from t0 the trace stops at t0; from t1 it gets to s1.
        sim.retrace_via(1, |p| if tor_of(p) == 0 { 1 } else { 2 });
        let got = found(&sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map));
        assert_eq!(got, [(ProblemKind::LinkFault, "t0-s1".to_string())]);
    }

    #[test]
    fn spine_down_is_the_switch() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut sim = Sim::new();
        sim.run(&mut |_, _, s, _| (s == Some(1), 0));
        // Whole paths alone cannot tell t0-s1 from t1-s1 here; every ToR's re-trace
        // stops at the ToR.
        sim.retrace_via(1, |_| 1);
        let got = found(&sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map));
        assert_eq!(got, [(ProblemKind::SwitchFault, "s1".to_string())]);
    }

    #[test]
    fn both_uplinks_of_a_tor_down_are_two_link_faults_as_the_tor_still_answers() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut sim = Sim::new();
        let mut fault = |s: u32, d: u32, sp: Option<u32>, _: u16| {
            (sp.is_some() && (tor_of(s) == 0 || tor_of(d) == 0), 0)
        };
        sim.run(&mut fault);
        // From t0 the traces stop at t0; from t1 they get to the spine.
        sim.retrace_via(0, |p| if tor_of(p) == 0 { 1 } else { 2 });
        sim.retrace_via(1, |p| if tor_of(p) == 0 { 1 } else { 2 });
        let got = found(&sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map));
        assert_eq!(
            got,
            [
                (ProblemKind::LinkFault, "t0-s0".to_string()),
                (ProblemKind::LinkFault, "t0-s1".to_string())
            ]
        );
    }

    #[test]
    fn host_down_explains_its_timeouts_and_is_not_the_network() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut sim = Sim::new();
        let dead = |r: u32| host_of(r) == 2;
        sim.run(&mut |s, d, _, _| (dead(s) || dead(d), 0));
        sim.records.retain(|r| !dead(r.prober_rnic));
        sim.hosts.get_mut(&3).unwrap().last_upload_ms = NOW - 20_000;
        let got = found(&sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map));
        assert_eq!(got, [(ProblemKind::HostDown, "h2".to_string())]);
        // A registered host never heard from is not declared down (maybe stale),
        // but timeouts towards it are still not the network's.
        sim.hosts.remove(&3);
        let got = found(&sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map));
        assert_eq!(got, []);
    }

    #[test]
    fn agent_restart_is_not_the_network() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut sim = Sim::new();
        let restarted = |r: &ProbeResult| host_of(r.target_rnic) == 1;
        sim.run(&mut |_, _, _, _| (false, 0));
        // The probers still name the old QPN; the registry has the new one.
        for r in sim.records.iter_mut().filter(|r| restarted(r)) {
            (r.status, r.network_rtt_ns, r.target_qpn) = (ProbeStatus::Timeout, 0, 1);
        }
        let got = found(&sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map));
        assert_eq!(got, [(ProblemKind::AgentRestart, "h1".to_string())]);
        // Same timeouts with the current QPN, inside the restart gap of the host.
        let mut sim = Sim::new();
        sim.run(&mut |_, _, _, _| (false, 0));
        for r in sim.records.iter_mut().filter(|r| restarted(r)) {
            (r.status, r.network_rtt_ns) = (ProbeStatus::Timeout, 0);
        }
        sim.hosts
            .get_mut(&2)
            .unwrap()
            .restarts
            .push_back((NOW - 9_500, NOW - 500));
        let got = found(&sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map));
        assert_eq!(got, [(ProblemKind::AgentRestart, "h1".to_string())]);
    }

    #[test]
    fn cpu_starved_host_is_noise_not_the_network() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut sim = Sim::new();
        let starved = |r: u32| host_of(r) == 3;
        let mut n = 0u32;
        sim.run(&mut |s, d, _, _| {
            n = n.wrapping_add(1);
            ((starved(s) || starved(d)) && n.is_multiple_of(3), 0)
        });
        for r in &mut sim.records {
            if starved(r.target_rnic) {
                r.responder_delay_ns = 80_000_000;
            }
            if starved(r.prober_rnic) {
                r.prober_delay_ns = 60_000_000;
            }
        }
        let got = found(&sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map));
        assert_eq!(got, [(ProblemKind::HostNoise, "h3".to_string())]);
    }

    #[test]
    fn one_dropped_five_tuple_is_the_switch_where_its_trace_stops() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut sim = Sim::new();
        let (src, dst) = (rnic(0, 0), rnic(2, 1));
        sim.run(&mut |s, d, _, sport| (s == src && d == dst && sport == 50_001, 0));
        let s = spine(src, dst, 50_001);
        sim.trace(src, dst, 50_001, s, false, Some(2));
        let o = sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map);
        let got = found(&o);
        let spine_name = format!("s{s}");
        assert_eq!(got, [(ProblemKind::SwitchFault, spine_name)]);
    }

    #[test]
    fn added_rnic_cable_delay_is_high_latency_after_a_baseline() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut engine = Engine::new(DiagnosisConfig::default());
        let mut sim = Sim::new();
        sim.run(&mut |_, _, _, _| (false, 0));
        assert_eq!(found(&sim.diagnose(&mut engine, &map)), []);
        let mut sim = Sim::new();
        // 20 ms one way on the cable of h2/r0, towards the RNIC.
        let slow = rnic(2, 0);
        sim.run(&mut |_, d, _, _| (false, if d == slow { 20_000_000 } else { 0 }));
        let got = found(&sim.diagnose(&mut engine, &map));
        assert_eq!(got, [(ProblemKind::HighLatency, "h2/r0".to_string())]);
    }

    #[test]
    fn timeouts_towards_an_agent_not_yet_started_are_not_faults() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut sim = Sim::new();
        let late = rnic(1, 1);
        sim.run(&mut |_, _, _, _| (false, 0));
        sim.records.retain(|r| r.prober_rnic != late);
        for r in sim.records.iter_mut().filter(|r| r.target_rnic == late) {
            (r.status, r.network_rtt_ns) = (ProbeStatus::Timeout, 0);
        }
        // Host h1 uploaded for the first time 2 s ago: its pinglist peers probed it
        // before its responder was up.
        sim.hosts.get_mut(&2).unwrap().first_upload_ms = NOW - 2_000;
        let got = found(&sim.diagnose(&mut Engine::new(DiagnosisConfig::default()), &map));
        assert_eq!(got, []);
    }

    #[test]
    fn rnic_faults_are_sticky() {
        let map = FabricMap::parse(CLOS_2X2).unwrap();
        let mut engine = Engine::new(DiagnosisConfig::default());
        let dead = rnic(3, 1);
        let mut sim = Sim::new();
        sim.run(&mut |s, d, _, _| (s == dead || d == dead, 0));
        assert_eq!(
            found(&sim.diagnose(&mut engine, &map)),
            [(ProblemKind::RnicFault, "h3/r1".to_string())]
        );
        let mut healthy = Sim::new();
        healthy.run(&mut |_, _, _, _| (false, 0));
        assert_eq!(
            found(&healthy.diagnose(&mut engine, &map)),
            [(ProblemKind::RnicFault, "h3/r1".to_string())]
        );
    }
}
