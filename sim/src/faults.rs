//! Faults: what the operator asks for ([`FaultSpec`], JSON like the testbed's), what the
//! simulator applies ([`Fault`]: resolved ids, a time window) and the ground truth it
//! exports (the scorer's [`Truth`]: the component the analyzer must blame, named exactly
//! as the analyzer names it — fabric-map link and switch names, `"<host>/<ifname>"`
//! RNICs, host names).

use crate::score::{Component, Truth};
use crate::topology::{Fabric, Route};
use crate::twins::{Part, Twins};
use anyhow::{bail, ensure};
use rocemesh_proto::api::{ComponentKind, LinkDirection, ProblemKind};
use rocemesh_proto::flow::FiveTuple;
use serde::{Deserialize, Serialize};

fn default_flap_ms() -> u64 {
    2_000
}

fn default_restart_ms() -> u64 {
    3_000
}

fn default_noisy_rnics() -> u32 {
    2
}

fn default_noise_ms() -> f64 {
    8.0
}

/// A fault as asked for on the command line or by a test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultSpec {
    /// A switch link drops `percent` % of packets, both directions or only those going
    /// into switch `toward` (one of its ends).
    LinkLoss {
        /// Link name.
        link: String,
        /// Loss in percent (0, 100].
        percent: f64,
        /// One direction only: the end the lossy direction enters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        toward: Option<String>,
    },
    /// A switch link is down. Without `at` a black hole: routes do not converge around
    /// it. With `at`, the port at that end went down: that switch withdraws the link from
    /// its equal-cost groups (its traffic takes its other links), while the far end keeps
    /// sending into the dead link.
    LinkDown {
        /// Link name.
        link: String,
        /// The end (switch name) that saw its port go down, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<String>,
    },
    /// A switch link goes down for `down_ms`, up for `up_ms`, repeatedly.
    LinkFlap {
        /// Link name.
        link: String,
        /// Down time of each cycle.
        #[serde(default = "default_flap_ms")]
        down_ms: u64,
        /// Up time of each cycle.
        #[serde(default = "default_flap_ms")]
        up_ms: u64,
    },
    /// A switch link adds `delay_us` to every packet crossing it.
    LinkDelay {
        /// Link name.
        link: String,
        /// Added one-way delay in µs.
        delay_us: f64,
    },
    /// A switch drops everything and answers no traceroute.
    SwitchDown {
        /// Switch name.
        switch: String,
    },
    /// A switch drops `percent` % of the packets it forwards (every port).
    SwitchLoss {
        /// Switch name.
        switch: String,
        /// Loss in percent (0, 100].
        percent: f64,
    },
    /// A switch goes down for `down_ms`, up for `up_ms`, repeatedly (reboot loop).
    SwitchFlap {
        /// Switch name.
        switch: String,
        /// Down time of each cycle.
        #[serde(default = "default_flap_ms")]
        down_ms: u64,
        /// Up time of each cycle.
        #[serde(default = "default_flap_ms")]
        up_ms: u64,
    },
    /// A switch adds `delay_us` to every packet it forwards (e.g. a stuck buffer).
    SwitchDelay {
        /// Switch name.
        switch: String,
        /// Added one-way delay in µs.
        delay_us: f64,
    },
    /// An RNIC (or its cable / ToR port) drops `percent` % of packets.
    RnicLoss {
        /// `"<host>/<ifname>"`.
        rnic: String,
        /// Loss in percent (0, 100].
        percent: f64,
    },
    /// An RNIC (or its cable / ToR port) adds `delay_us` to every packet in and out.
    RnicDelay {
        /// `"<host>/<ifname>"`.
        rnic: String,
        /// Added one-way delay in µs.
        delay_us: f64,
    },
    /// An RNIC is down.
    RnicDown {
        /// `"<host>/<ifname>"`.
        rnic: String,
    },
    /// An RNIC goes down for `down_ms`, up for `up_ms`, repeatedly.
    RnicFlap {
        /// `"<host>/<ifname>"`.
        rnic: String,
        /// Down time of each cycle.
        #[serde(default = "default_flap_ms")]
        down_ms: u64,
        /// Up time of each cycle.
        #[serde(default = "default_flap_ms")]
        up_ms: u64,
    },
    /// One probed 5-tuple is silently dropped by one switch of its path (a bad ACL or
    /// hash bucket): the `pick`-th inter-ToR 5-tuple RNIC `prober` probes, resolved when
    /// injected; on its probes' path, or on its ACKs' path with `ack`; `hop` picks the
    /// switch from the sender's ToR on (both modulo what there is).
    FlowDrop {
        /// The probing RNIC, `"<host>/<ifname>"`.
        prober: String,
        /// Which of its inter-ToR 5-tuples.
        #[serde(default)]
        pick: u32,
        /// Drop the ACKs (responder to prober) instead of the probes.
        #[serde(default)]
        ack: bool,
        /// Which switch of that path.
        #[serde(default)]
        hop: u32,
    },
    /// A host goes down: its agent falls silent, its RNICs answer nothing.
    HostDown {
        /// Host name.
        host: String,
    },
    /// A host's agent restarts: silent for `down_ms`, then back with a new epoch and new
    /// QPNs (peers probe the old QPNs until their next pinglist poll).
    AgentRestart {
        /// Host name.
        host: String,
        /// How long the agent is gone.
        #[serde(default = "default_restart_ms")]
        down_ms: u64,
    },
    /// A host's CPU is busy: `rnics` of its RNICs answer and probe with `delay_ms` of
    /// processing delay.
    CpuNoise {
        /// Host name.
        host: String,
        /// How many of its RNICs (from r0).
        #[serde(default = "default_noisy_rnics")]
        rnics: u32,
        /// Processing delay in ms.
        #[serde(default = "default_noise_ms")]
        delay_ms: f64,
    },
}

/// What a fault hits (ids into the fabric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Packets of one 5-tuple at one switch.
    Flow {
        /// The dropped 5-tuple.
        tuple: FiveTuple,
        /// The switch dropping it.
        switch: u32,
    },
    /// A switch link.
    Link(u32),
    /// A switch.
    Switch(u32),
    /// An RNIC.
    Rnic(u32),
    /// A host.
    Host(u32),
}

/// What a fault does to its target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Effect {
    /// Drops packets with this probability.
    Loss(f64),
    /// Drops everything.
    Down,
    /// Down for the first `down_ms` of every `down_ms + up_ms` since the onset.
    Flap {
        /// Down part of a cycle.
        down_ms: u64,
        /// Up part of a cycle.
        up_ms: u64,
    },
    /// Adds this one-way delay, ns.
    Delay(u64),
    /// The host and its agent are gone.
    HostDown,
    /// The agent is gone for `down_ms`, then back as a new incarnation.
    AgentRestart {
        /// Time gone.
        down_ms: u64,
    },
    /// The first `rnics` RNICs of the host have `delay_ns` of processing delay.
    CpuNoise {
        /// RNICs affected.
        rnics: u32,
        /// Processing delay, ns.
        delay_ns: u64,
    },
}

/// A fault applied to a fabric over a time window.
#[derive(Debug, Clone)]
pub struct Fault {
    /// The fault as asked for.
    pub spec: FaultSpec,
    /// What it hits.
    pub target: Target,
    /// What it does.
    pub effect: Effect,
    /// A link fault in one direction only: the switch that direction enters.
    pub toward: Option<u32>,
    /// A link down at one end: the switch at that end, which routes around the link.
    pub withdrawn_at: Option<u32>,
    /// A flow drop: the dropped 5-tuple's route.
    pub route: Option<Route>,
    /// Start, ms (virtual time).
    pub start_ms: i64,
    /// End (exclusive), if any.
    pub end_ms: Option<i64>,
}

fn delay(us: f64) -> anyhow::Result<Effect> {
    ensure!(
        us.is_finite() && us > 0.0 && us <= 1e6,
        "delay_us must be in (0, 1e6], got {us}"
    );
    Ok(Effect::Delay((us * 1e3) as u64))
}

fn percent(p: f64) -> anyhow::Result<f64> {
    ensure!(
        p.is_finite() && p > 0.0 && p <= 100.0,
        "loss percent must be in (0, 100], got {p}"
    );
    Ok(p / 100.0)
}

impl Fault {
    /// Resolves `spec` against `fabric`: unknown names and bad values are errors.
    pub fn new(
        fabric: &Fabric,
        spec: FaultSpec,
        start_ms: i64,
        end_ms: Option<i64>,
    ) -> anyhow::Result<Self> {
        let flap = |down_ms: u64, up_ms: u64| {
            ensure!(
                down_ms > 0 && up_ms > 0,
                "flap down_ms and up_ms must be positive"
            );
            Ok(Effect::Flap { down_ms, up_ms })
        };
        let (target, effect) = match &spec {
            FaultSpec::LinkLoss {
                link, percent: p, ..
            } => (
                Target::Link(fabric.link_by_name(link)?),
                Effect::Loss(percent(*p)?),
            ),
            FaultSpec::LinkDown { link, .. } => {
                (Target::Link(fabric.link_by_name(link)?), Effect::Down)
            }
            FaultSpec::LinkFlap {
                link,
                down_ms,
                up_ms,
            } => (
                Target::Link(fabric.link_by_name(link)?),
                flap(*down_ms, *up_ms)?,
            ),
            FaultSpec::LinkDelay { link, delay_us } => {
                (Target::Link(fabric.link_by_name(link)?), delay(*delay_us)?)
            }
            FaultSpec::SwitchDown { switch } => {
                (Target::Switch(fabric.switch_by_name(switch)?), Effect::Down)
            }
            FaultSpec::SwitchLoss { switch, percent: p } => (
                Target::Switch(fabric.switch_by_name(switch)?),
                Effect::Loss(percent(*p)?),
            ),
            FaultSpec::SwitchFlap {
                switch,
                down_ms,
                up_ms,
            } => (
                Target::Switch(fabric.switch_by_name(switch)?),
                flap(*down_ms, *up_ms)?,
            ),
            FaultSpec::SwitchDelay { switch, delay_us } => (
                Target::Switch(fabric.switch_by_name(switch)?),
                delay(*delay_us)?,
            ),
            FaultSpec::RnicDelay { rnic, delay_us } => {
                (Target::Rnic(fabric.rnic_by_name(rnic)?), delay(*delay_us)?)
            }
            FaultSpec::RnicLoss { rnic, percent: p } => (
                Target::Rnic(fabric.rnic_by_name(rnic)?),
                Effect::Loss(percent(*p)?),
            ),
            FaultSpec::RnicDown { rnic } => {
                (Target::Rnic(fabric.rnic_by_name(rnic)?), Effect::Down)
            }
            FaultSpec::RnicFlap {
                rnic,
                down_ms,
                up_ms,
            } => (
                Target::Rnic(fabric.rnic_by_name(rnic)?),
                flap(*down_ms, *up_ms)?,
            ),
            FaultSpec::FlowDrop { .. } => {
                bail!("a flow drop is resolved against the agents' pinglists: inject it into a Sim")
            }
            FaultSpec::HostDown { host } => {
                (Target::Host(fabric.host_by_name(host)?), Effect::HostDown)
            }
            FaultSpec::AgentRestart { host, down_ms } => (
                Target::Host(fabric.host_by_name(host)?),
                Effect::AgentRestart { down_ms: *down_ms },
            ),
            FaultSpec::CpuNoise {
                host,
                rnics,
                delay_ms,
            } => {
                ensure!(
                    delay_ms.is_finite() && *delay_ms > 0.0 && *delay_ms <= 1_000.0,
                    "cpu_noise delay_ms must be in (0, 1000], got {delay_ms}"
                );
                ensure!(*rnics >= 1, "cpu_noise needs at least one RNIC");
                (
                    Target::Host(fabric.host_by_name(host)?),
                    Effect::CpuNoise {
                        rnics: *rnics,
                        delay_ns: (delay_ms * 1e6) as u64,
                    },
                )
            }
        };
        Self::on(fabric, spec, target, effect, start_ms, end_ms)
    }

    /// A fault of `effect` on `target` (already resolved) from `start_ms` to `end_ms`.
    pub fn on(
        fabric: &Fabric,
        spec: FaultSpec,
        target: Target,
        effect: Effect,
        start_ms: i64,
        end_ms: Option<i64>,
    ) -> anyhow::Result<Self> {
        if let Some(end) = end_ms {
            ensure!(end > start_ms, "a fault must end after it starts");
        }
        let end_of = |end: &str, l: u32| {
            let sw = fabric.switch_by_name(end)?;
            let link = &fabric.links[l as usize];
            ensure!(
                sw == link.lower || sw == link.upper,
                "{end} is not an end of link {}",
                link.name
            );
            Ok(Some(sw))
        };
        let (toward, withdrawn_at) = match (&spec, target) {
            (
                FaultSpec::LinkLoss {
                    toward: Some(end), ..
                },
                Target::Link(l),
            ) => (end_of(end, l)?, None),
            (FaultSpec::LinkDown { at: Some(end), .. }, Target::Link(l)) => (None, end_of(end, l)?),
            _ => (None, None),
        };
        Ok(Self {
            spec,
            target,
            effect,
            toward,
            withdrawn_at,
            route: None,
            start_ms,
            end_ms,
        })
    }

    /// True when the fault's target is one of these RNICs, switch links or switches (a
    /// packet crossing them meets the fault); `links[i]` leads from `switches[i]` to
    /// `switches[i + 1]`, which a one-direction fault checks.
    pub fn crosses(&self, rnics: &[u32], links: &[u32], switches: &[u32]) -> bool {
        match self.target {
            Target::Rnic(r) => rnics.contains(&r),
            Target::Link(l) => match self.toward {
                None => links.contains(&l),
                Some(sw) => {
                    (0..links.len()).any(|i| links[i] == l && switches.get(i + 1) == Some(&sw))
                }
            },
            Target::Switch(s) => switches.contains(&s),
            Target::Host(_) | Target::Flow { .. } => false,
        }
    }

    /// True when switch `sw` routes around link `l` at `t_ms` because of this fault.
    pub fn withdraws(&self, sw: u32, l: u32, t_ms: i64) -> bool {
        self.withdrawn_at == Some(sw) && self.target == Target::Link(l) && self.active(t_ms)
    }

    /// True when this fault drops `tuple` at a switch of `switches` at `t_ms`.
    pub fn drops_flow(&self, tuple: &FiveTuple, switches: &[u32], t_ms: i64) -> bool {
        matches!(self.target, Target::Flow { tuple: t, switch } if t == *tuple && switches.contains(&switch))
            && self.active(t_ms)
    }

    /// The host this fault keeps down for the whole of `other`, if it does: no probe
    /// reaches or leaves it while `other` lasts.
    pub fn keeps_down(&self, other: &Fault) -> Option<u32> {
        let Target::Host(h) = self.target else {
            return None;
        };
        let covers = self.start_ms <= other.start_ms
            && self
                .end_ms
                .is_none_or(|end| other.end_ms.is_some_and(|e| e <= end));
        (self.effect == Effect::HostDown && covers).then_some(h)
    }

    /// True while the fault is in place at `t_ms`.
    pub fn active(&self, t_ms: i64) -> bool {
        t_ms >= self.start_ms && self.end_ms.is_none_or(|e| t_ms < e)
    }

    /// Probability that a packet crossing the target at `t_ms` is dropped.
    pub fn drop_probability(&self, t_ms: i64) -> f64 {
        if !self.active(t_ms) {
            return 0.0;
        }
        match self.effect {
            Effect::Loss(p) => p,
            Effect::Down | Effect::HostDown => 1.0,
            Effect::Flap { down_ms, up_ms } => {
                let phase = (t_ms - self.start_ms) as u64 % (down_ms + up_ms);
                if phase < down_ms { 1.0 } else { 0.0 }
            }
            Effect::Delay(_) | Effect::AgentRestart { .. } | Effect::CpuNoise { .. } => 0.0,
        }
    }

    /// The ground truth of this fault in `fabric`, as far as the probes between the live
    /// RNICs `twins` knows can see it: a fault no such probe crosses is not required.
    pub fn truth(&self, fabric: &Fabric, twins: &Twins) -> Truth {
        // A delay fault is a latency problem of its component, anything else a fault.
        let slow = matches!(self.effect, Effect::Delay(_));
        let pick = |fault| {
            if slow {
                ProblemKind::HighLatency
            } else {
                fault
            }
        };
        let (kind, ck, name) = match (self.target, self.effect) {
            (Target::Link(l), _) => (
                pick(ProblemKind::LinkFault),
                ComponentKind::Link,
                fabric.links[l as usize].name.clone(),
            ),
            (Target::Switch(s), _) => (
                pick(ProblemKind::SwitchFault),
                ComponentKind::Switch,
                fabric.switches[s as usize].name.clone(),
            ),
            (Target::Rnic(r), _) => (
                pick(ProblemKind::RnicFault),
                ComponentKind::Rnic,
                fabric.rnic_name(r),
            ),
            (Target::Flow { switch, .. }, _) => (
                ProblemKind::FlowFault,
                ComponentKind::Switch,
                fabric.switches[switch as usize].name.clone(),
            ),
            (Target::Host(h), effect) => {
                let host = fabric.hosts[h as usize].name.clone();
                match effect {
                    Effect::AgentRestart { .. } => {
                        (ProblemKind::AgentRestart, ComponentKind::Agent, host)
                    }
                    Effect::CpuNoise { .. } => (ProblemKind::HostNoise, ComponentKind::Host, host),
                    _ => (ProblemKind::HostDown, ComponentKind::Host, host),
                }
            }
        };
        let mut t = Truth::new(
            serde_json::to_string(&self.spec).unwrap_or_default(),
            kind,
            Component::new(ck, name),
            self.start_ms,
        );
        t.end_ms = self.end_ms;
        t.hard = match self.effect {
            Effect::Loss(p) => p >= 1.0,
            Effect::Down | Effect::HostDown => true,
            _ => false,
        };
        t.side_effects = match self.effect {
            Effect::HostDown => vec![ProblemKind::AgentRestart],
            Effect::AgentRestart { .. } => vec![ProblemKind::HostDown],
            Effect::CpuNoise { .. } => vec![ProblemKind::HostDown, ProblemKind::AgentRestart],
            _ => Vec::new(),
        };
        let part = match self.target {
            Target::Link(link) => Some(match self.toward {
                Some(toward) => Part::Direction { link, toward },
                None => Part::Link(link),
            }),
            Target::Switch(s) => Some(Part::Switch(s)),
            Target::Rnic(r) => Some(Part::Rnic(r)),
            Target::Flow { .. } | Target::Host(_) => None,
        };
        if let Some(part) = part {
            t.required = twins.observed(part);
            // Down and flapping components reroute traffic (their ends withdraw them),
            // which sets them apart from their twins.
            if matches!(self.effect, Effect::Loss(_) | Effect::Delay(_)) {
                t.equivalent = twins.of(part);
            }
        }
        if let Target::Flow { tuple, switch } = self.target {
            // Dropped between a dead host and anything, it fails whatever the switch does.
            t.required = [tuple.src, tuple.dst].iter().all(|ip| {
                (0..fabric.rnics.len() as u32).any(|r| fabric.rnic_ip(r) == *ip && twins.live(r))
            });
            // The probes cannot tell the switch from its links on the flow's path.
            t.flow_level = true;
            t.equivalent = self
                .route
                .iter()
                .flat_map(|r| {
                    let at = r.switches().iter().position(|&s| s == switch);
                    r.links()
                        .iter()
                        .enumerate()
                        .filter(move |(i, _)| at.is_some_and(|a| *i + 1 == a || *i == a))
                        .map(|(_, &l)| l)
                })
                .map(|l| Component::new(ComponentKind::Link, fabric.links[l as usize].name.clone()))
                .collect();
        }
        t.direction = self.toward.and_then(|to| {
            let Target::Link(l) = self.target else {
                return None;
            };
            let link = &fabric.links[l as usize];
            let from = if to == link.lower {
                link.upper
            } else {
                link.lower
            };
            Some(LinkDirection {
                from: fabric.switches[from as usize].name.clone(),
                to: fabric.switches[to as usize].name.clone(),
            })
        });
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Shape;

    fn fabric() -> Fabric {
        Fabric::new(Shape::LeafSpine {
            tors: 2,
            spines: 2,
            hosts_per_tor: 2,
            rnics_per_host: 2,
        })
        .unwrap()
    }

    #[test]
    fn a_host_down_for_the_whole_of_a_fault_keeps_its_probes_away() {
        let f = fabric();
        let spec = |json: &str| serde_json::from_str::<FaultSpec>(json).unwrap();
        let down = |start, end| {
            Fault::new(&f, spec(r#"{"kind":"host_down","host":"h1"}"#), start, end).unwrap()
        };
        let loss = spec(r#"{"kind":"link_loss","link":"t0-s1","percent":2}"#);
        let link = Fault::new(&f, loss, 1_000, Some(5_000)).unwrap();
        assert_eq!(down(0, None).keeps_down(&link), Some(1));
        assert_eq!(down(0, Some(6_000)).keeps_down(&link), Some(1));
        assert_eq!(
            down(0, Some(4_000)).keeps_down(&link),
            None,
            "back before its end"
        );
        assert_eq!(
            down(2_000, None).keeps_down(&link),
            None,
            "down after its start"
        );
        assert_eq!(link.keeps_down(&link), None);
    }

    #[test]
    fn specs_parse_resolve_and_name_their_truth() {
        let f = fabric();
        let spec: FaultSpec =
            serde_json::from_str(r#"{"kind":"link_flap","link":"t0-s1","down_ms":100}"#).unwrap();
        let fault = Fault::new(&f, spec, 1_000, Some(5_000)).unwrap();
        assert_eq!(fault.drop_probability(999), 0.0);
        assert_eq!(fault.drop_probability(1_050), 1.0);
        assert_eq!(fault.drop_probability(1_150), 0.0, "up after 100 ms");
        assert_eq!(fault.drop_probability(5_000), 0.0, "over");
        let t = fault.truth(&f, &Twins::new(&f, &[]));
        assert_eq!(
            (t.kind, t.component.name.as_str()),
            (ProblemKind::LinkFault, "t0-s1")
        );
        let rnic: FaultSpec =
            serde_json::from_str(r#"{"kind":"rnic_down","rnic":"h3/r1"}"#).unwrap();
        let t = Fault::new(&f, rnic, 0, None)
            .unwrap()
            .truth(&f, &Twins::new(&f, &[]));
        assert_eq!(
            (t.component.kind, t.component.name.as_str()),
            (ComponentKind::Rnic, "h3/r1")
        );
        let restart: FaultSpec =
            serde_json::from_str(r#"{"kind":"agent_restart","host":"h1"}"#).unwrap();
        assert_eq!(
            Fault::new(&f, restart, 0, None)
                .unwrap()
                .truth(&f, &Twins::new(&f, &[]))
                .component
                .kind,
            ComponentKind::Agent
        );
    }

    #[test]
    fn switch_and_rnic_faults_name_their_component_and_kind() {
        let f = fabric();
        for (json, kind, ck, name, drop_at_start) in [
            (
                r#"{"kind":"switch_loss","switch":"s1","percent":20}"#,
                ProblemKind::SwitchFault,
                ComponentKind::Switch,
                "s1",
                0.2,
            ),
            (
                r#"{"kind":"switch_flap","switch":"s0","down_ms":50,"up_ms":50}"#,
                ProblemKind::SwitchFault,
                ComponentKind::Switch,
                "s0",
                1.0,
            ),
            (
                r#"{"kind":"switch_delay","switch":"s1","delay_us":40}"#,
                ProblemKind::HighLatency,
                ComponentKind::Switch,
                "s1",
                0.0,
            ),
            (
                r#"{"kind":"rnic_delay","rnic":"h2/r0","delay_us":15}"#,
                ProblemKind::HighLatency,
                ComponentKind::Rnic,
                "h2/r0",
                0.0,
            ),
        ] {
            let spec: FaultSpec = serde_json::from_str(json).unwrap();
            let fault = Fault::new(&f, spec, 100, None).unwrap();
            assert_eq!(fault.drop_probability(100), drop_at_start, "{json}");
            let t = fault.truth(&f, &Twins::new(&f, &[]));
            assert_eq!(
                (t.kind, t.component.kind, t.component.name.as_str()),
                (kind, ck, name),
                "{json}"
            );
        }
        let slow: FaultSpec =
            serde_json::from_str(r#"{"kind":"switch_delay","switch":"s1","delay_us":40}"#).unwrap();
        let fault = Fault::new(&f, slow, 0, None).unwrap();
        assert_eq!(fault.effect, Effect::Delay(40_000));
        let s1 = f.switch_by_name("s1").unwrap();
        assert!(fault.crosses(&[], &[], &[s1]) && !fault.crosses(&[0], &[0], &[]));
    }

    #[test]
    fn one_direction_loss_hits_only_packets_entering_its_end() {
        let f = fabric();
        let spec: FaultSpec = serde_json::from_str(
            r#"{"kind":"link_loss","link":"t1-s0","percent":2,"toward":"t1"}"#,
        )
        .unwrap();
        let fault = Fault::new(&f, spec, 0, None).unwrap();
        let (t0, t1, s0) = (
            f.switch_by_name("t0").unwrap(),
            f.switch_by_name("t1").unwrap(),
            f.switch_by_name("s0").unwrap(),
        );
        let (up0, up1) = (
            f.link_by_name("t0-s0").unwrap(),
            f.link_by_name("t1-s0").unwrap(),
        );
        assert!(fault.crosses(&[], &[up0, up1], &[t0, s0, t1]), "s0 -> t1");
        assert!(!fault.crosses(&[], &[up1, up0], &[t1, s0, t0]), "t1 -> s0");
        let t = fault.truth(&f, &Twins::new(&f, &[]));
        assert_eq!(t.component.name, "t1-s0");
        assert_eq!(
            t.direction,
            Some(LinkDirection {
                from: "s0".into(),
                to: "t1".into()
            })
        );
        assert!(!t.hard);
        let bad: FaultSpec = serde_json::from_str(
            r#"{"kind":"link_loss","link":"t1-s0","percent":2,"toward":"t0"}"#,
        )
        .unwrap();
        assert!(
            Fault::new(&f, bad, 0, None).is_err(),
            "t0 is no end of t1-s0"
        );
    }

    #[test]
    fn bad_faults_are_refused_with_a_reason() {
        let f = fabric();
        for (json, why) in [
            (r#"{"kind":"link_down","link":"t9-s0"}"#, "t9-s0"),
            (
                r#"{"kind":"link_loss","link":"t0-s0","percent":0}"#,
                "percent",
            ),
            (r#"{"kind":"rnic_down","rnic":"h0/r7"}"#, "h0/r7"),
            (r#"{"kind":"switch_down","switch":"s7"}"#, "s7"),
            (
                r#"{"kind":"switch_delay","switch":"s0","delay_us":0}"#,
                "delay_us",
            ),
            (r#"{"kind":"switch_flap","switch":"s0","up_ms":0}"#, "up_ms"),
            (
                r#"{"kind":"rnic_delay","rnic":"h0/r0","delay_us":2e6}"#,
                "delay_us",
            ),
            (
                r#"{"kind":"cpu_noise","host":"h0","delay_ms":-1}"#,
                "delay_ms",
            ),
        ] {
            let spec: FaultSpec = serde_json::from_str(json).unwrap();
            let err = format!("{:#}", Fault::new(&f, spec, 0, None).unwrap_err());
            assert!(err.contains(why), "{json}: {err}");
        }
        assert!(serde_json::from_str::<FaultSpec>(r#"{"kind":"link_down","lnk":"x"}"#).is_err());
    }
}
