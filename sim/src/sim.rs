//! The simulation proper: a fabric with faults, and one simulated agent per host that
//! registers, takes the controller's pinglists, probes at their rates, traces 5-tuples
//! and uploads binary result batches — all in virtual time (`now_ms` arguments; nothing
//! sleeps). Drivers ([`crate::inproc`], [`crate::http`]) move the results and
//! registrations between the agents and the real controller and analyzer.

use crate::agent::{Agent, ListSchedule, TraceKey};
use crate::ecmp::Ecmp;
use crate::faults::{Effect, Fault, FaultSpec, Target};
use crate::latency::LatencyModel;
use crate::rng::{Rng, hash};
use crate::score::Truth;
use crate::topology::{Fabric, Route, Shape};
use crate::twins::Twins;
use anyhow::{Context, ensure};
use rocemesh_proto::api::{Pinglist, RegisterRequest, RegisterResponse, RnicRegistration};
use rocemesh_proto::batch::{BatchEncoder, BatchHeader};
use rocemesh_proto::fabric_map::{LinkDef, LinkEnd, MapFile, SwitchDef};
use rocemesh_proto::flow::FiveTuple;
use rocemesh_proto::path::TracedPath;
use rocemesh_proto::{ProbeClass, ProbeResult, ProbeStatus, TimestampSource};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

/// Most records in one uploaded batch (the agent's chunk size).
pub const MAX_BATCH_RECORDS: usize = 50_000;
/// UDP port every simulated responder listens on (the agent's default).
pub const RESPONDER_PORT: u16 = 4792;
/// TRACE packets that end a trace after the last answer (the agent's `SILENT_STOP`).
const SILENT_STOP: usize = 2;

/// Everything a simulation is made from.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// The fabric.
    pub shape: Shape,
    /// Seed of every random choice (ECMP seeds, latencies, losses, epochs).
    #[serde(default)]
    pub seed: u64,
    /// Latency model.
    #[serde(default)]
    pub latency: LatencyModel,
    /// TRACE packets per second per agent (the agent's `trace_pps`).
    #[serde(default = "default_trace_pps")]
    pub trace_pps: f64,
    /// How often every 5-tuple is traced again, ms (the agent's `trace_refresh_ms`).
    #[serde(default = "default_trace_refresh_ms")]
    pub trace_refresh_ms: i64,
    /// Highest TTL of a trace.
    #[serde(default = "default_trace_max_hops")]
    pub trace_max_hops: u8,
}

fn default_trace_pps() -> f64 {
    40.0
}

fn default_trace_refresh_ms() -> i64 {
    60_000
}

fn default_trace_max_hops() -> u8 {
    8
}

impl SimConfig {
    /// A configuration with the agent's defaults for `shape`.
    pub fn new(shape: Shape, seed: u64) -> Self {
        Self {
            shape,
            seed,
            latency: LatencyModel::default(),
            trace_pps: default_trace_pps(),
            trace_refresh_ms: default_trace_refresh_ms(),
            trace_max_hops: default_trace_max_hops(),
        }
    }
}

/// Counters of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimStats {
    /// Probe results produced.
    pub probes: u64,
    /// Of which timed out (ACK2 losses included).
    pub timeouts: u64,
    /// Traced paths produced.
    pub traces: u64,
    /// Batches produced.
    pub batches: u64,
}

/// The fabric, its faults and the registry view the agents probe through (read-only
/// while agents run).
struct World {
    cfg: SimConfig,
    fabric: Fabric,
    ecmp: Ecmp,
    faults: Vec<Fault>,
    /// Current QPN of every RNIC (what its responder accepts).
    qpn: Vec<u32>,
    /// Registry id of every RNIC (0 until registered).
    ids: Vec<u32>,
    /// Fabric RNIC of every registry id.
    by_id: HashMap<u32, u32>,
}

/// A simulated cluster (see the module doc).
pub struct Sim {
    world: World,
    /// The ground truth of every injected fault, made again at each injection (a host
    /// going down hides the faults only its probes could see).
    truths: Vec<Truth>,
    agents: Vec<Agent>,
    rng: Rng,
    stats: SimStats,
}

/// One probe due: its list's class, its target, when it is sent, its sequence number.
struct DueProbe {
    class: ProbeClass,
    target: rocemesh_proto::api::PingTarget,
    at_ns: u64,
    seq: u32,
}

/// What probing one target produced besides the result.
struct Probed {
    result: ProbeResult,
    /// The responder's host learns this ACK 5-tuple (it answered).
    learned: Option<(u32, TraceKey)>,
    /// The prober's 5-tuple timed out at this time: trace it at once.
    anomaly: Option<(i64, TraceKey)>,
}

impl World {
    fn host_silent(&self, host: u32, t_ms: i64) -> bool {
        self.host_silent_between(host, t_ms, t_ms)
    }

    /// True when `host`'s agent was silent at some time in `from_ms..=to_ms`.
    fn host_silent_between(&self, host: u32, from_ms: i64, to_ms: i64) -> bool {
        self.faults.iter().any(|f| {
            let end = match f.effect {
                Effect::HostDown => f.end_ms,
                Effect::AgentRestart { down_ms } => Some(f.start_ms + down_ms as i64),
                _ => return false,
            };
            f.target == Target::Host(host) && f.start_ms <= to_ms && end.is_none_or(|e| e > from_ms)
        })
    }

    /// Processing delay of RNIC `r`'s host at `t_ms` when it is CPU-noisy.
    fn noise_ns(&self, r: u32, t_ms: i64) -> Option<u64> {
        let rnic = self.fabric.rnics[r as usize];
        self.faults.iter().find_map(|f| match f.effect {
            Effect::CpuNoise { rnics, delay_ns }
                if f.target == Target::Host(rnic.host) && rnic.index < rnics && f.active(t_ms) =>
            {
                Some(delay_ns)
            }
            _ => None,
        })
    }

    /// Probability that a packet crossing these RNIC links, switch links and switches at
    /// `t_ms` arrives.
    fn survival(&self, rnics: &[u32], links: &[u32], switches: &[u32], t_ms: i64) -> f64 {
        self.faults
            .iter()
            .filter(|f| f.active(t_ms) && f.crosses(rnics, links, switches))
            .map(|f| 1.0 - f.drop_probability(t_ms))
            .product()
    }

    /// True when a flow fault drops `tuple` at one of `switches` at `t_ms`.
    fn flow_dropped(&self, tuple: &FiveTuple, switches: &[u32], t_ms: i64) -> bool {
        self.faults
            .iter()
            .any(|f| f.drops_flow(tuple, switches, t_ms))
    }

    /// One-way delay that delay faults on these RNICs, links and switches add at `t_ms`.
    fn injected_delay_ns(&self, rnics: &[u32], links: &[u32], switches: &[u32], t_ms: i64) -> u64 {
        self.faults
            .iter()
            .filter(|f| f.active(t_ms) && f.crosses(rnics, links, switches))
            .filter_map(|f| match f.effect {
                Effect::Delay(ns) => Some(ns),
                _ => None,
            })
            .sum()
    }

    fn tuple(&self, key: &TraceKey) -> FiveTuple {
        FiveTuple {
            src: self.fabric.rnic_ip(key.src),
            dst: self.fabric.rnic_ip(key.dst),
            sport: key.sport,
            dport: key.dport,
        }
    }

    /// The route of `tuple` from RNIC `src` to RNIC `dst` at `t_ms`, around the links
    /// their switches saw go down.
    fn route(&self, src: u32, dst: u32, tuple: &FiveTuple, t_ms: i64) -> Route {
        let f = &self.fabric;
        self.ecmp.route_avoiding(
            f,
            f.rnics[src as usize].tor,
            f.rnics[dst as usize].tor,
            tuple,
            |sw, l| self.faults.iter().any(|x| x.withdraws(sw, l, t_ms)),
        )
    }

    /// The address switch `i` of `route` answers traceroute from (its ingress port).
    fn ingress_ip(&self, src: u32, route: &Route, i: usize) -> IpAddr {
        match i {
            0 => self.fabric.tor_port_ip(src),
            _ => self
                .fabric
                .link_ip(route.links()[i - 1], route.switches()[i]),
        }
    }

    /// One probe by RNIC `prober`.
    fn probe(&self, rng: &mut Rng, prober: u32, due: &DueProbe, timeout_ms: u64) -> Probed {
        let (target, at_ns) = (&due.target, due.at_ns);
        let t_ms = (at_ns / 1_000_000) as i64;
        let mut r = ProbeResult {
            prober_rnic: self.ids[prober as usize],
            target_rnic: target.rnic_id,
            seq: due.seq,
            target_qpn: target.qpn,
            send_unix_ns: at_ns,
            network_rtt_ns: 0,
            prober_delay_ns: 0,
            responder_delay_ns: 0,
            app_rtt_ns: 0,
            src_port: target.src_port,
            dst_port: target.port,
            class: due.class,
            status: ProbeStatus::Timeout,
            ts_source: TimestampSource::Hardware,
        };
        let Some(&dst) = self.by_id.get(&target.rnic_id) else {
            return Probed {
                result: r,
                learned: None,
                anomaly: None,
            };
        };
        let fwd_key = TraceKey {
            src: prober,
            dst,
            sport: target.src_port,
            dport: target.port,
            ack: false,
        };
        let tuple = self.tuple(&fwd_key);
        let (fwd, rev) = (
            self.route(prober, dst, &tuple, t_ms),
            self.route(dst, prober, &tuple.ack(), t_ms),
        );
        let ends = [prober, dst];
        let dst_host = self.fabric.rnics[dst as usize].host;
        let answers = !self.host_silent(dst_host, t_ms) && self.qpn[dst as usize] == target.qpn;
        let lost_there = answers
            && (self.flow_dropped(&tuple, fwd.switches(), t_ms)
                || rng.chance(1.0 - self.survival(&ends, fwd.links(), fwd.switches(), t_ms)));
        let back = if self.flow_dropped(&tuple.ack(), rev.switches(), t_ms) {
            0.0
        } else {
            self.survival(&ends, rev.links(), rev.switches(), t_ms)
        };
        let timeout_at = t_ms + timeout_ms as i64;
        if !answers || lost_there || !rng.chance(back) {
            return Probed {
                result: r,
                learned: None,
                anomaly: Some((timeout_at, fwd_key)),
            };
        }
        let learned = Some((
            dst_host,
            TraceKey {
                src: dst,
                dst: prober,
                ack: true,
                ..fwd_key
            },
        ));
        if !rng.chance(back) {
            r.status = ProbeStatus::Ack2Lost;
            r.app_rtt_ns = (timeout_ms * 1_000_000).min(u64::from(u32::MAX)) as u32;
            return Probed {
                result: r,
                learned,
                anomaly: Some((timeout_at, fwd_key)),
            };
        }
        let lat = &self.cfg.latency;
        let seed = self.cfg.seed;
        let network = lat.one_way_ns(rng, &self.fabric, seed, &fwd, t_ms)
            + lat.one_way_ns(rng, &self.fabric, seed, &rev, t_ms)
            + (self.injected_delay_ns(&ends, fwd.links(), fwd.switches(), t_ms)
                + self.injected_delay_ns(&ends, rev.links(), rev.switches(), t_ms))
                as f64;
        let mut processing = |r: u32| match self.noise_ns(r, t_ms) {
            Some(n) => rng.lognormal(n as f64, 0.2),
            None => lat.host_ns(rng),
        };
        let responder = processing(dst);
        let prober_delay = processing(prober);
        let ns = |v: f64| v.round().clamp(1.0, f64::from(u32::MAX)) as u32;
        r.status = ProbeStatus::Ok;
        r.network_rtt_ns = ns(network);
        r.responder_delay_ns = ns(responder);
        r.prober_delay_ns = ns(prober_delay);
        r.app_rtt_ns = ns(network + responder + prober_delay);
        Probed {
            result: r,
            learned,
            anomaly: None,
        }
    }

    /// TRACE packets a trace of `key` takes when nothing is lost.
    fn trace_cost(&self, key: &TraceKey, t_ms: i64) -> f64 {
        (self
            .route(key.src, key.dst, &self.tuple(key), t_ms)
            .switches()
            .len()
            + SILENT_STOP) as f64
    }

    /// One traceroute of `key` at `t_ms` by the agent's rules: TTL after TTL until two
    /// silent ones in a row; reached only when every switch answered and no probe timeout
    /// triggered it (then the trailing silence is not listed).
    fn trace(&self, rng: &mut Rng, key: &TraceKey, t_ms: i64, anomaly: bool) -> TracedPath {
        let tuple = self.tuple(key);
        let route = self.route(key.src, key.dst, &tuple, t_ms);
        let n = route.switches().len();
        let mut hops: Vec<Option<IpAddr>> = Vec::with_capacity(n + SILENT_STOP);
        let mut silent = 0;
        for ttl in 1..=usize::from(self.cfg.trace_max_hops) {
            let i = ttl - 1;
            // A switch answers an expiring TTL itself; one before it that drops the
            // 5-tuple stops it from getting there.
            let answer = (i < n && !self.flow_dropped(&tuple, &route.switches()[..i], t_ms))
                .then(|| {
                    let p = self.survival(
                        &[key.src],
                        &route.links()[..i],
                        &route.switches()[..=i],
                        t_ms,
                    );
                    rng.chance(p).then(|| self.ingress_ip(key.src, &route, i))
                })
                .flatten();
            silent = if answer.is_some() { 0 } else { silent + 1 };
            hops.push(answer);
            if silent == SILENT_STOP {
                break;
            }
        }
        let reached =
            !anomaly && hops.len() == n + SILENT_STOP && hops[..n].iter().all(Option::is_some);
        if reached {
            hops.truncate(n);
        }
        TracedPath {
            src: tuple.src,
            dst: tuple.dst,
            src_port: tuple.sport,
            dst_port: tuple.dport,
            traced_at_unix_ns: t_ms.max(0) as u64 * 1_000_000,
            reached,
            ack_direction: key.ack,
            hops,
        }
    }
}

impl Sim {
    /// Builds the fabric and one unregistered agent per host.
    pub fn new(cfg: SimConfig) -> anyhow::Result<Self> {
        ensure!(
            cfg.trace_pps.is_finite() && (0.1..=10_000.0).contains(&cfg.trace_pps),
            "trace_pps must be 0.1..=10000"
        );
        ensure!(
            cfg.trace_refresh_ms >= 1_000,
            "trace_refresh_ms must be at least 1000"
        );
        ensure!(
            (1..=16).contains(&cfg.trace_max_hops),
            "trace_max_hops must be 1..=16"
        );
        let fabric = Fabric::new(cfg.shape.clone())?;
        let mut rng = Rng::new(hash(&[cfg.seed, 0x5eed]));
        let qpn = (0..fabric.rnics.len())
            .map(|_| random_qpn(&mut rng))
            .collect();
        let agents = fabric
            .hosts
            .iter()
            .enumerate()
            .map(|(i, h)| Agent::new(h.rnics, random_epoch(&mut rng), hash(&[cfg.seed, i as u64])))
            .collect();
        let ids = vec![0; fabric.rnics.len()];
        Ok(Self {
            world: World {
                ecmp: Ecmp::new(cfg.seed),
                cfg,
                fabric,
                faults: Vec::new(),
                qpn,
                ids,
                by_id: HashMap::new(),
            },
            truths: Vec::new(),
            agents,
            rng,
            stats: SimStats::default(),
        })
    }

    /// The fabric.
    pub fn fabric(&self) -> &Fabric {
        &self.world.fabric
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.world.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> SimStats {
        self.stats
    }

    /// The analyzer's fabric map of this fabric: every switch with every address it
    /// answers traceroute from, every switch-to-switch link with its two ends.
    pub fn fabric_map(&self) -> MapFile {
        let f = &self.world.fabric;
        let mut addresses: Vec<Vec<IpAddr>> = vec![Vec::new(); f.switches.len()];
        for (r, rnic) in f.rnics.iter().enumerate() {
            addresses[rnic.tor as usize].push(f.tor_port_ip(r as u32));
        }
        let link = f
            .links
            .iter()
            .enumerate()
            .map(|(l, link)| {
                let l = l as u32;
                let ends = [link.lower, link.upper].map(|sw| {
                    let ip = f.link_ip(l, sw);
                    addresses[sw as usize].push(ip);
                    LinkEnd {
                        device: f.switches[sw as usize].name.clone(),
                        ip,
                    }
                });
                LinkDef {
                    name: link.name.clone(),
                    ends,
                }
            })
            .collect();
        MapFile {
            switch: f
                .switches
                .iter()
                .zip(addresses)
                .map(|(s, addresses)| SwitchDef {
                    name: s.name.clone(),
                    addresses,
                })
                .collect(),
            link,
        }
    }

    /// [`Self::fabric_map`] as the TOML file the analyzer's `fabric_map` setting reads.
    pub fn fabric_map_toml(&self) -> anyhow::Result<String> {
        toml::to_string(&self.fabric_map()).context("rendering the fabric map")
    }

    /// Applies `spec` from `start_ms` until `end_ms` (virtual time); returns its truth.
    pub fn inject(
        &mut self,
        spec: FaultSpec,
        start_ms: i64,
        end_ms: Option<i64>,
    ) -> anyhow::Result<Truth> {
        let fault = match spec {
            FaultSpec::FlowDrop {
                ref prober,
                pick,
                ack,
                hop,
            } => {
                let (tuple, route) = self.probed_flow(prober, pick, ack, start_ms)?;
                let switches = route.switches();
                let switch = switches[hop as usize % switches.len()];
                let mut f = Fault::on(
                    &self.world.fabric,
                    spec,
                    Target::Flow { tuple, switch },
                    Effect::Down,
                    start_ms,
                    end_ms,
                )?;
                f.route = Some(route);
                f
            }
            spec => Fault::new(&self.world.fabric, spec, start_ms, end_ms)?,
        };
        self.world.faults.push(fault);
        let (fabric, faults) = (&self.world.fabric, &self.world.faults);
        // One fingerprint of the fabric per set of hosts kept down (usually none).
        let mut seen: Vec<(Vec<u32>, Twins)> = Vec::new();
        self.truths = faults
            .iter()
            .map(|f| {
                let down: Vec<u32> = faults.iter().filter_map(|h| h.keeps_down(f)).collect();
                let i = match seen.iter().position(|(d, _)| *d == down) {
                    Some(i) => i,
                    None => {
                        let twins = Twins::new(fabric, &down);
                        seen.push((down, twins));
                        seen.len() - 1
                    }
                };
                f.truth(fabric, &seen[i].1)
            })
            .collect();
        Ok(self
            .truths
            .last()
            .cloned()
            .expect("a fault was just injected"))
    }

    /// The `pick`-th (modulo their number) inter-ToR 5-tuple RNIC `prober` probes now
    /// (the next RNIC that probes any when it probes none), or with `ack` the 5-tuple of
    /// its ACKs, and its route.
    fn probed_flow(
        &self,
        prober: &str,
        pick: u32,
        ack: bool,
        t_ms: i64,
    ) -> anyhow::Result<(FiveTuple, Route)> {
        let w = &self.world;
        let start = w.fabric.rnic_by_name(prober)?;
        let n = w.fabric.rnics.len() as u32;
        for r in (0..n).map(|i| (start + i) % n) {
            let rnic = w.fabric.rnics[r as usize];
            let host = &w.fabric.hosts[rnic.host as usize];
            let lists = &self.agents[rnic.host as usize].lists[(r - host.first_rnic) as usize];
            let flows: Vec<(u32, FiveTuple)> = lists
                .iter()
                .flat_map(|l| l.entries())
                .filter_map(|t| {
                    let dst = *w.by_id.get(&t.rnic_id)?;
                    (w.fabric.rnics[dst as usize].tor != rnic.tor)
                        .then(|| (dst, w.tuple(&TraceKey::probe(r, dst, t))))
                })
                .collect();
            if flows.is_empty() {
                continue;
            }
            let (dst, tuple) = flows[pick as usize % flows.len()];
            return Ok(if ack {
                (tuple.ack(), w.route(dst, r, &tuple.ack(), t_ms))
            } else {
                (tuple, w.route(r, dst, &tuple, t_ms))
            });
        }
        anyhow::bail!(
            "no RNIC probes an inter-ToR 5-tuple (yet): inject a flow drop after the warm-up"
        )
    }

    /// The ground truth of every injected fault.
    pub fn truth(&self) -> Vec<Truth> {
        self.truths.clone()
    }

    /// Number of hosts (agents).
    pub fn hosts(&self) -> u32 {
        self.agents.len() as u32
    }

    /// The registration host `host`'s agent sends (its current epoch and QPNs).
    pub fn registration(&self, host: u32) -> RegisterRequest {
        let f = &self.world.fabric;
        let h = &f.hosts[host as usize];
        let rail = matches!(f.shape(), Shape::Rail { .. });
        RegisterRequest {
            host: h.name.clone(),
            epoch: self.agents[host as usize].epoch,
            rnics: (h.first_rnic..h.first_rnic + h.rnics)
                .map(|r| {
                    let rnic = f.rnics[r as usize];
                    RnicRegistration {
                        ifname: format!("r{}", rnic.index),
                        ip: f.rnic_ip(r),
                        gid: None,
                        qpn: self.world.qpn[r as usize],
                        port: RESPONDER_PORT,
                        tor: Some(f.switches[rnic.tor as usize].name.clone()),
                        rail: rail.then_some(rnic.index),
                        gateway: None,
                    }
                })
                .collect(),
        }
    }

    /// Takes the controller's answer to [`Self::registration`].
    pub fn registered(&mut self, host: u32, resp: &RegisterResponse) -> anyhow::Result<()> {
        let f = &self.world.fabric;
        let h = &f.hosts[host as usize];
        for info in &resp.rnics {
            let r = f
                .rnic_by_name(&format!("{}/{}", h.name, info.ifname))
                .with_context(|| format!("controller answered {} with an unknown RNIC", h.name))?;
            self.world.ids[r as usize] = info.id;
            self.world.by_id.insert(info.id, r);
        }
        let agent = &mut self.agents[host as usize];
        agent.host_id = Some(resp.host_id);
        agent.needs_register = false;
        Ok(())
    }

    /// The controller no longer knows `host`'s incarnation: it registers again.
    pub fn must_register(&mut self, host: u32) {
        self.agents[host as usize].needs_register = true;
    }

    /// The host id the controller gave `host`, once registered.
    pub fn host_id(&self, host: u32) -> Option<u32> {
        self.agents[host as usize].host_id
    }

    /// The epoch of `host`'s current agent.
    pub fn epoch(&self, host: u32) -> u32 {
        self.agents[host as usize].epoch
    }

    /// The pinglist version `host` applied last (for `If-None-Match`).
    pub fn pinglist_version(&self, host: u32) -> Option<&str> {
        self.agents[host as usize].pinglist_version.as_deref()
    }

    /// Applies a pinglist polled at `now_ms`: schedules restart from where probing is,
    /// every probe 5-tuple gets traced.
    pub fn apply_pinglist(&mut self, host: u32, list: &Pinglist, now_ms: i64) {
        let first = self.world.fabric.hosts[host as usize].first_rnic;
        let agent = &mut self.agents[host as usize];
        if agent.probed_until_ns == 0 {
            agent.probed_until_ns = ms_to_ns(now_ms);
        }
        let start = agent.probed_until_ns;
        for lists in &mut agent.lists {
            lists.clear();
        }
        for rl in &list.rnics {
            let Some(&r) = self.world.by_id.get(&rl.rnic_id) else {
                continue;
            };
            let Some(local) = r
                .checked_sub(first)
                .filter(|&l| (l as usize) < agent.lists.len())
            else {
                continue;
            };
            let mut keep = HashSet::new();
            for l in &rl.lists {
                let Some(s) = ListSchedule::new(l, start, &mut agent.rng) else {
                    continue;
                };
                for t in s.entries() {
                    if let Some(&dst) = self.world.by_id.get(&t.rnic_id) {
                        let key = TraceKey::probe(r, dst, t);
                        agent.traces.learn(key, now_ms);
                        keep.insert(key);
                    }
                }
                agent.lists[local as usize].push(s);
            }
            agent.traces.retain_probes(r, &keep);
        }
        agent.pinglist_version = Some(list.version.clone());
    }

    /// Brings every agent's life up to `now_ms` (down, restarted) and returns the hosts
    /// whose running agent must register (first start, restart).
    pub fn pending_registrations(&mut self, now_ms: i64) -> Vec<u32> {
        (0..self.hosts())
            .filter(|&h| {
                self.lifecycle(h, now_ms);
                let a = &self.agents[h as usize];
                a.running && a.needs_register
            })
            .collect()
    }

    /// A silent host's agent stops; when the silence ends it starts as a new
    /// incarnation (new epoch and QPNs) that must register and fetch its pinglist. A
    /// silence that began and ended since the agent was last looked at is a restart too.
    fn lifecycle(&mut self, host: u32, now_ms: i64) {
        let silent = self.world.host_silent(host, now_ms);
        let h = &self.world.fabric.hosts[host as usize];
        let (first, n) = (h.first_rnic, h.rnics);
        let agent = &mut self.agents[host as usize];
        if silent {
            agent.running = false;
            agent.probed_until_ns = ms_to_ns(now_ms);
            return;
        }
        if agent.running
            && !self
                .world
                .host_silent_between(host, agent.running_at_ms, now_ms)
        {
            agent.running_at_ms = now_ms;
            return;
        }
        for r in first..first + n {
            self.world.qpn[r as usize] = random_qpn(&mut self.rng);
        }
        let fresh = Agent::new(n, random_epoch(&mut self.rng), self.rng.next_u64());
        *agent = Agent {
            host_id: agent.host_id,
            running_at_ms: now_ms,
            probed_until_ns: ms_to_ns(now_ms),
            ..fresh
        };
    }

    /// Runs `host`'s agent up to `now_ms` and returns the batches it uploads now (none
    /// while it is down or unregistered). Probes are simulated up to one probe timeout
    /// before `timeout_ms`, so every result is final.
    pub fn collect(&mut self, host: u32, now_ms: i64, timeout_ms: u64) -> Vec<Vec<u8>> {
        self.lifecycle(host, now_ms);
        let world = &self.world;
        let first = world.fabric.hosts[host as usize].first_rnic;
        let (running, host_id) = {
            let a = &self.agents[host as usize];
            (a.running, a.host_id)
        };
        let Some(host_id) = host_id.filter(|_| running) else {
            return Vec::new();
        };
        let until = ms_to_ns(now_ms - timeout_ms as i64);
        let mut learned = Vec::new();
        let agent = &mut self.agents[host as usize];
        if until > agent.probed_until_ns {
            let mut anomalies = Vec::new();
            for (local, lists) in agent.lists.iter_mut().enumerate() {
                for list in lists.iter_mut() {
                    while list.next_ns < until {
                        let (at, target) = list.pop(&mut agent.rng);
                        if at < agent.probed_until_ns {
                            continue;
                        }
                        agent.seq = agent.seq.wrapping_add(1);
                        let due = DueProbe {
                            class: list.class,
                            target,
                            at_ns: at,
                            seq: agent.seq,
                        };
                        let p = world.probe(&mut agent.rng, first + local as u32, &due, timeout_ms);
                        if p.result.status.is_timeout() {
                            self.stats.timeouts += 1;
                        }
                        agent.results.push(p.result);
                        learned.extend(p.learned);
                        anomalies.extend(p.anomaly);
                    }
                }
            }
            for (at, key) in anomalies {
                agent.traces.anomaly(key, at);
            }
            agent.probed_until_ns = until;
        }
        let cfg = &world.cfg;
        let due = agent
            .traces
            .due_traces(now_ms, cfg.trace_pps, cfg.trace_refresh_ms, |k| {
                world.trace_cost(k, now_ms)
            });
        self.stats.traces += due.len() as u64;
        for (at, key, urgent) in due {
            agent
                .paths
                .push(world.trace(&mut agent.rng, &key, at, urgent));
        }
        let results = std::mem::take(&mut agent.results);
        let paths = std::mem::take(&mut agent.paths);
        let mut bodies = Vec::new();
        let mut chunks = results.chunks(MAX_BATCH_RECORDS).peekable();
        let mut paths = Some(paths);
        loop {
            let chunk = chunks.next().unwrap_or(&[]);
            agent.batch_seq += 1;
            let mut e = BatchEncoder::new(
                BatchHeader {
                    host_id,
                    epoch: agent.epoch,
                    batch_seq: agent.batch_seq,
                    dropped: 0,
                },
                chunk.len(),
            );
            chunk.iter().for_each(|r| e.push(r));
            bodies.push(e.finish_with_paths(&paths.take().unwrap_or_default()));
            if chunks.peek().is_none() {
                break;
            }
        }
        self.stats.probes += results.len() as u64;
        self.stats.batches += bodies.len() as u64;
        for (h, key) in learned {
            if self.agents[h as usize].running {
                self.agents[h as usize].traces.learn(key, now_ms);
            }
        }
        bodies
    }
}

fn ms_to_ns(ms: i64) -> u64 {
    ms.max(0) as u64 * 1_000_000
}

/// A 24-bit QPN like an agent's (never 0).
fn random_qpn(rng: &mut Rng) -> u32 {
    1 + rng.below(0x00ff_fffe) as u32
}

fn random_epoch(rng: &mut Rng) -> u32 {
    1 + rng.below(u64::from(u32::MAX) - 1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four hosts; h1's agent is silent from 10.0 s to 10.5 s.
    fn restarting_h1() -> Sim {
        let shape = Shape::LeafSpine {
            tors: 2,
            spines: 2,
            hosts_per_tor: 2,
            rnics_per_host: 1,
        };
        let mut s = Sim::new(SimConfig::new(shape, 7)).unwrap();
        let restart = FaultSpec::AgentRestart {
            host: "h1".into(),
            down_ms: 500,
        };
        s.inject(restart, 10_000, None).unwrap();
        s
    }

    #[test]
    fn an_agent_restart_between_two_looks_is_a_new_incarnation() {
        // Looked at 9 s and 12 s only, around its silence: it restarted, as a
        // real agent would (new epoch, registers again); the other hosts did not.
        let mut s = restarting_h1();
        s.pending_registrations(9_000);
        let before: Vec<u32> = (0..s.hosts()).map(|h| s.epoch(h)).collect();
        s.pending_registrations(12_000);
        let after: Vec<u32> = (0..s.hosts()).map(|h| s.epoch(h)).collect();
        for h in 0..s.hosts() as usize {
            assert_eq!(
                before[h] != after[h],
                h == 1,
                "host {h}: {before:?} {after:?}"
            );
        }
        // Looked at during the silence too: one restart, not two.
        let mut s = restarting_h1();
        s.pending_registrations(9_000);
        let first = s.epoch(1);
        s.pending_registrations(10_200);
        assert_eq!(s.epoch(1), first, "still down");
        assert!(!s.pending_registrations(10_300).contains(&1), "down");
        s.pending_registrations(11_000);
        let second = s.epoch(1);
        assert_ne!(second, first);
        s.pending_registrations(12_000);
        assert_eq!(s.epoch(1), second, "one restart");
    }
}
