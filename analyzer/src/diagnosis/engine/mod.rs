//! One diagnosis tick over the sliding window, in R-Pingmesh's order: host down,
//! agent restart (QPN reset), anomalous RNICs from ToR-mesh probes, host noise
//! ([`classify`]), then tomography of what is left, loss then latency ([`localize`]).
//!
//! Results are aggregated as they arrive ([`Engine::take`] into the [`Window`]); a tick
//! judges the raw timeouts ([`judge`]), passes over the flows once ([`mesh`]) and
//! routes only the flows that failed or were slow ([`observe`]).

mod classify;
mod judge;
mod latency;
mod localize;
mod memo;
mod mesh;
mod observe;

use super::fabric::FabricMap;
use super::flows::table::FlowKey;
use super::flows::{Window, WindowStats};
use super::intake::Liveness;
use super::paths::PathStore;
use super::policy::Onset;
use super::tomography::FlowObs;
use crate::config::DiagnosisConfig;
use crate::latency::Verdicts;
use crate::registry::Registry;
use rocemesh_proto::ProbeResult;
use rocemesh_proto::api::{ComponentKind, Evidence, ProblemKind};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
pub(crate) struct Outcome {
    /// Problems present now.
    pub candidates: Vec<Candidate>,
    /// Algorithm 1 votes on the same data, most first.
    pub baseline: Vec<BaselineVote>,
    /// Scale-out ([`Engine::share`]): this tick's own loss observations, for other shards.
    pub loss: Vec<FlowObs>,
}

/// What a tick reads.
pub(crate) struct Inputs<'a> {
    /// Tick time, ms since the Unix epoch.
    pub now_ms: i64,
    /// When the analyzer started (a host never heard from counts as silent since then).
    pub started_ms: i64,
    /// Upload liveness per host id.
    pub hosts: &'a HashMap<u32, Liveness>,
    /// RNIC registry.
    pub registry: &'a Registry,
    /// Fabric map.
    pub map: &'a FabricMap,
    /// Traced paths.
    pub paths: &'a PathStore,
    /// RNIC pairs whose latency detectors fired (SkeletonHunter §5.2).
    pub latency: &'a Arc<Verdicts>,
}

/// Diagnosis state kept across ticks: the window, sticky RNIC and switch verdicts.
#[derive(Debug)]
pub(crate) struct Engine {
    cfg: DiagnosisConfig,
    sticky: HashMap<u32, (i64, Evidence)>,
    /// Switches found down, until when a single failing link of theirs is still theirs
    /// (the switch's last failures leave the window link by link).
    down_switches: HashMap<String, i64>,
    /// Switches that answered fresh traces of failed probes, until when that still
    /// counts: one tick in which a loaded switch answers no trace does not make it dead.
    answered: HashMap<String, i64>,
    /// Links at which fresh traces located breaks: until when that still tells them
    /// from their twins ([`localize`]), and the failures at those breaks in the last tick
    /// that had any.
    located: HashMap<String, (i64, f64)>,
    /// Link findings held back until confirmed, and the recently reported ones.
    link_holds: localize::LinkHolds,
    /// Flow findings held back until confirmed (a fault's first failures may all be
    /// one flow's).
    flow_holds: Onset<FlowKey>,
    /// When each sticky RNIC verdict was first made (for `strained_rnic_hold_ms`).
    rnic_found: HashMap<u32, i64>,
    /// How long tomography has kept finding each RNIC (for `strained_rnic_hold_ms`).
    rnic_holds: Onset<u32>,
    /// The window's results, aggregated per flow as they arrive.
    window: Window,
    /// Each flow's components, kept while its traces are.
    routes: memo::RouteMemo,
    /// Scale-out: loss observations of other shards for the next tick ([`Engine::share`]).
    shared: Option<Vec<FlowObs>>,
    /// No tomography before this time ([`Engine::await_paths`]).
    paths_until_ms: i64,
    /// Before this time no switch counts as silent: which switches answer traces is
    /// learnt over a window of tomography ([`Engine::await_paths`]).
    silence_known_ms: i64,
}

/// Per-host tallies of one tick, keyed by host id.
type Tallies = foldhash::HashMap<u32, HostTally>;

/// Timeouts and ACK2 losses left for the network this tick, per flow index.
type Fails = foldhash::HashMap<u32, (u32, u32)>;

/// A timeout or lost ACK2 left for the network this tick.
#[derive(Debug, Clone, Copy)]
struct Failed {
    /// Index of its flow.
    flow: u32,
    /// When its probe was sent, ms since the Unix epoch.
    send_ms: i64,
    /// The ACK2 was lost (the probe and its ACK1 arrived).
    ack2: bool,
}

/// Per flow, the timeouts and ACK2 losses of `failed` sent within `span`.
fn tally(failed: &[Failed], span: &std::ops::Range<i64>) -> Fails {
    let mut fails = Fails::default();
    for f in failed.iter().filter(|f| span.contains(&f.send_ms)) {
        let n = fails.entry(f.flow).or_default();
        if f.ack2 {
            n.1 += 1;
        } else {
            n.0 += 1;
        }
    }
    fails
}

/// What a tick's stages established before tomography, stage by stage.
struct Facts {
    /// Stage 1: per-host tallies.
    hosts: Tallies,
    /// Stage 1: timeouts and ACK2 losses left for the network, per flow.
    fails: Fails,
    /// Stage 1: the same, one by one with their send times.
    failed: Vec<Failed>,
    /// Stage 4: hosts whose noise (CPU) explains their probes' failures and delays.
    noisy: HashSet<u32>,
    /// Stage 4: RNICs found anomalous (their flows are theirs, not the network's).
    anomalous: HashSet<u32>,
    /// Stage 4: RNICs whose own ToR-mesh probes vouch for them.
    vouched: HashSet<u32>,
    /// Stage 3: slow probes per flow index.
    slow: foldhash::HashMap<u32, u32>,
}

#[derive(Default)]
struct HostTally {
    silent_timeouts: u64,
    restart_timeouts: u64,
    delays: u32,
    slow_delays: u32,
}

impl Engine {
    /// Links with an open problem at `now_ms` (the tracker's, which outlive this engine:
    /// restored after a restart, taken over from a shard): reported as soon as found.
    pub(crate) fn keep_open(&mut self, links: Vec<String>, now_ms: i64) {
        self.link_holds.keep_open(links, now_ms);
    }

    /// Fresh state.
    pub(crate) fn new(cfg: DiagnosisConfig) -> Self {
        Self {
            sticky: HashMap::new(),
            down_switches: HashMap::new(),
            answered: HashMap::new(),
            located: HashMap::new(),
            link_holds: localize::LinkHolds::default(),
            flow_holds: Onset::default(),
            rnic_holds: Onset::default(),
            rnic_found: HashMap::new(),
            window: Window::new(&cfg),
            routes: memo::RouteMemo::default(),
            cfg,
            shared: None,
            paths_until_ms: i64::MIN,
            silence_known_ms: i64::MIN,
        }
    }

    /// Agents new to this analyzer at `now_ms` (it just started, or took their shards
    /// over) upload their traced paths again with their next upload: for
    /// `paths_settle_ms` the tomography does not run, rather than localize on the few
    /// paths known so far (a partial trace without its complete one, one direction of a
    /// flow without the other) and blame a component beside the culprit.
    ///
    /// Which switches still answer traces is learnt from the traces of failed probes
    /// over one window (`answered`), and that memory starts empty here:
    /// for a window after the paths settle, no switch counts as silent, so a switch that
    /// merely answered no trace yet (a late ICMP answer on a loaded box) is not declared
    /// down. `down_switches` (those with an open switch problem, restored or taken
    /// over) keep being reported as switches meanwhile.
    pub(crate) fn await_paths(&mut self, now_ms: i64, down_switches: Vec<String>) {
        let until = now_ms.saturating_add(self.cfg.paths_settle_ms as i64);
        self.paths_until_ms = self.paths_until_ms.max(until);
        let known = until.saturating_add(self.cfg.window_ms as i64);
        self.silence_known_ms = self.silence_known_ms.max(known);
        for s in down_switches {
            self.down_switches.insert(s, known);
        }
    }

    /// True when a host last heard from as `l` is silent at `now_ms` (no upload for
    /// `host_silent_ms`): its RNICs' timeouts are its own, not the network's.
    pub(crate) fn silent(&self, l: &Liveness, now_ms: i64) -> bool {
        now_ms - l.last_upload_ms > self.cfg.host_silent_ms as i64
    }

    /// Scale-out: the next tick builds its loss observations even without failures and
    /// returns them in [`Outcome::loss`] (other shards merge them), and its tomography
    /// also explains `others`, the observations other shards published.
    pub(crate) fn share(&mut self, others: Vec<FlowObs>) {
        self.shared = Some(others);
    }

    /// Aggregates results received at `now_ms` into the window.
    pub(crate) fn take(
        &mut self,
        records: impl Iterator<Item = ProbeResult>,
        registry: &Registry,
        now_ms: i64,
    ) {
        self.window.take(records, registry, now_ms);
    }

    /// The window's counters.
    pub(crate) fn window_stats(&self) -> WindowStats {
        self.window.stats()
    }

    /// Runs the whole pipeline once; results arriving afterwards are judged slow
    /// against this tick's latency alarms.
    pub(crate) fn run(&mut self, inp: &Inputs) -> Outcome {
        let mut out = Outcome::default();
        let expired = self.window.advance(inp.now_ms);
        // Stage 1: timeouts judged against host liveness and agent restarts.
        let (hosts, failed) = self.judge(inp);
        let fails = tally(&failed, &(i64::MIN..i64::MAX));
        // Stage 2: host down and agent restarts (not the network).
        self.host_verdicts(inp, &hosts, &mut out);
        // Stage 3: one pass over the flows (ToR-mesh counts, slow candidates).
        let noisy = self.noisy_hosts(&hosts);
        let (mesh, slow) = self.sweep(inp, &expired, &fails, &noisy);
        // Stage 4: anomalous RNICs and host noise.
        let (anomalous, noisy, vouched) =
            self.rnic_verdicts(inp, &hosts, noisy, (mesh, &fails), &mut out);
        let slow = self.slow_flows(inp, slow);
        let facts = Facts {
            hosts,
            fails,
            failed,
            noisy,
            anomalous,
            vouched,
            slow,
        };
        // Stage 5: tomography of what the facts leave to the network.
        self.tomography(inp, &facts, &mut out);
        self.window.judge_with(Arc::clone(inp.latency));
        out
    }

    fn last_upload(&self, inp: &Inputs, host: u32) -> i64 {
        inp.hosts.get(&host).map_or(inp.started_ms, |l| {
            if l.restored {
                l.last_upload_ms
            } else {
                l.last_upload_ms.max(inp.started_ms)
            }
        })
    }
}

fn rnic_name(inp: &Inputs, r: u32) -> String {
    inp.registry
        .meta(r)
        .map_or_else(|| format!("rnic-{r}"), |m| m.name.clone())
}

#[cfg(test)]
mod tests;
