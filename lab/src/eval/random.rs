//! Seeded random scenarios for the namespace testbed (`rocemesh-lab eval --random N --seed
//! S`): the fabric's shape (2–6 ToRs × 2–4 spines, 1–2 RNICs per host, rail-optimized
//! too), the faults' kinds, positions, directions and strengths, and how many run at once
//! (0–3; fault-free runs carry training-job traffic) are drawn from `(seed, index)`
//! only, so any scenario is replayed alone with `--only <index>`. The components a fault
//! hits are drawn when the scenario is; a dropped 5-tuple is drawn at injection among the
//! 5-tuples the agents really probe (the pinglists exist only then), from the same seed.

use super::scenarios::{
    Injected, Undo, agent_restart_truth, cpu_truth, flow_drop_truth, hard, host_down_truth,
    start_training_job, truth,
};
use crate::lab::Lab;
use anyhow::{Context, Result, bail};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{
    ComponentKind, HostInfo, LinkDirection, Pinglist, ProblemKind, RnicInfo,
};
use rocemesh_sim::Shape;
use rocemesh_sim::random::concurrent;
use rocemesh_sim::rng::{Rng, hash};
use rocemesh_sim::topology::Fabric as SimFabric;
use rocemesh_sim::twins::{Part, Twins};
use rocemesh_testbed::{Direction, FabricSpec, Fault, FiveTuple, Topology};
use serde::Serialize;

/// One fault of a drawn scenario, with every position fixed except a dropped 5-tuple's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Planned {
    /// A ToR–spine link goes down at its upper or its lower end.
    LinkDown {
        /// Link name.
        link: String,
        /// The lower (ToR) end goes down: the ToR reroutes, the spine blackholes.
        lower_end: bool,
    },
    /// Random loss on a link, both directions or one.
    LinkLoss {
        /// Link name.
        link: String,
        /// Which way(s).
        direction: Direction,
        /// Loss, %.
        percent: u8,
    },
    /// A link flaps.
    LinkFlap {
        /// Link name.
        link: String,
        /// Down + up cycle, ms.
        period_ms: u32,
    },
    /// A switch drops `percent` % of everything it receives (loss on all its ports).
    SwitchLoss {
        /// Switch name.
        switch: String,
        /// Loss, %.
        percent: u8,
    },
    /// A switch delays everything its spine ports receive.
    SwitchDelay {
        /// Spine name.
        switch: String,
        /// Added delay, ms.
        ms: u32,
    },
    /// One probed 5-tuple is silently dropped in a router of its forward path or of its
    /// ACKs' path.
    FlowDrop {
        /// The ACKs' path (else the probes').
        ack_path: bool,
        /// Which router of the path: 0 the sender's ToR, 1 the spine, 2 the receiver's ToR.
        position: u8,
    },
    /// An RNIC goes down.
    RnicDown {
        /// RNIC name ("h3r0").
        rnic: String,
    },
    /// An RNIC flaps.
    RnicFlap {
        /// RNIC name.
        rnic: String,
        /// Down + up cycle, ms.
        period_ms: u32,
    },
    /// A host's agent is killed (the host falls silent).
    HostDown {
        /// Host name.
        host: String,
    },
    /// A host's agent restarts.
    AgentRestart {
        /// Host name.
        host: String,
    },
    /// A host's agent is starved to 1 % of a CPU.
    CpuStarve {
        /// Host name.
        host: String,
    },
}

/// One drawn scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Drawn {
    /// Index in the suite.
    pub index: u32,
    /// The fabric (prefix and management set by the lab).
    pub spec: FabricSpec,
    /// The faults (empty: a fault-free run with training-job traffic).
    pub faults: Vec<Planned>,
    /// Seed of the injection-time draws.
    pub seed: u64,
}

fn between(rng: &mut Rng, lo: u32, hi: u32) -> u32 {
    lo + rng.below(u64::from(hi - lo + 1)) as u32
}

/// Scenario `index` of the suite seeded `seed`.
pub fn draw(seed: u64, index: u32, prefix: &str) -> Result<Drawn> {
    let mut rng = Rng::new(hash(&[seed, u64::from(index), 0x7e57bed]));
    let rail = rng.chance(0.25);
    let spec = if rail {
        let pods = between(&mut rng, 1, 3) as u8;
        FabricSpec {
            prefix: prefix.to_string(),
            tors: 2 * pods,
            spines: between(&mut rng, 2, 4) as u8,
            hosts_per_tor: between(&mut rng, 2, 3) as u8,
            rnics_per_host: 2,
            rail_optimized: true,
            management: false,
        }
    } else {
        FabricSpec {
            prefix: prefix.to_string(),
            tors: between(&mut rng, 2, 6) as u8,
            spines: between(&mut rng, 2, 4) as u8,
            hosts_per_tor: between(&mut rng, 1, 2) as u8,
            rnics_per_host: between(&mut rng, 1, 2) as u8,
            rail_optimized: false,
            management: false,
        }
    };
    spec.validate()?;
    let topo = Topology::new(&spec);
    let mut taken = Taken::default();
    let faults = concurrent(&mut rng, |rng| one_fault(rng, &topo, &mut taken));
    Ok(Drawn {
        index,
        spec,
        faults,
        seed: rng.next_u64(),
    })
}

/// Nodes (switches, hosts) and links concurrent faults already hit: each fault gets its
/// own, so every truth is one component.
#[derive(Default)]
struct Taken {
    nodes: Vec<String>,
    links: Vec<String>,
    flows: bool,
}

impl Taken {
    fn link(&mut self, t: &Topology, rng: &mut Rng) -> Option<String> {
        let uplinks: Vec<&rocemesh_testbed::Link> = t
            .links
            .iter()
            .filter(|l| l.a.node.starts_with('t'))
            .collect();
        let l = uplinks[rng.below(uplinks.len() as u64) as usize];
        let free = !self.links.contains(&l.name)
            && !self.nodes.contains(&l.a.node)
            && !self.nodes.contains(&l.b.node);
        free.then(|| {
            self.links.push(l.name.clone());
            l.name.clone()
        })
    }

    fn switch(&mut self, t: &Topology, rng: &mut Rng, spines_only: bool) -> Option<String> {
        let mut names: Vec<&str> = t.spines.iter().map(|s| s.name.as_str()).collect();
        if !spines_only {
            names.extend(t.tors.iter().map(|s| s.name.as_str()));
        }
        let s = names[rng.below(names.len() as u64) as usize];
        let free = !self.nodes.iter().any(|n| n == s)
            && !self
                .links
                .iter()
                .any(|l| t.link(l).is_some_and(|l| l.a.node == s || l.b.node == s))
            && !self.nodes.iter().any(|h| {
                t.hosts.iter().any(|host| {
                    &host.name == h
                        && host
                            .rnics
                            .iter()
                            .any(|r| r.link.ends_with(&format!("-{s}")))
                })
            });
        free.then(|| {
            self.nodes.push(s.to_string());
            s.to_string()
        })
    }

    fn host(&mut self, t: &Topology, rng: &mut Rng) -> Option<usize> {
        let h = rng.below(t.hosts.len() as u64) as usize;
        let host = &t.hosts[h];
        let under_taken_tor = host.rnics.iter().any(|r| {
            self.nodes
                .iter()
                .any(|n| r.link.ends_with(&format!("-{n}")))
        });
        (!self.nodes.contains(&host.name) && !under_taken_tor).then(|| {
            self.nodes.push(host.name.clone());
            h
        })
    }
}

fn one_fault(rng: &mut Rng, t: &Topology, taken: &mut Taken) -> Option<Planned> {
    let period = |rng: &mut Rng| between(rng, 2, 4) * 1_000;
    Some(match rng.below(13) {
        0 | 1 => Planned::LinkDown {
            link: taken.link(t, rng)?,
            lower_end: rng.chance(0.5),
        },
        2 => Planned::LinkLoss {
            link: taken.link(t, rng)?,
            direction: Direction::Both,
            percent: between(rng, 1, 3) as u8,
        },
        3 => Planned::LinkLoss {
            link: taken.link(t, rng)?,
            direction: if rng.chance(0.5) {
                Direction::Up
            } else {
                Direction::Down
            },
            percent: between(rng, 1, 3) as u8,
        },
        4 => Planned::LinkFlap {
            link: taken.link(t, rng)?,
            period_ms: period(rng),
        },
        5 => Planned::SwitchLoss {
            switch: taken.switch(t, rng, false)?,
            percent: between(rng, 1, 3) as u8,
        },
        6 => Planned::SwitchDelay {
            switch: taken.switch(t, rng, true)?,
            ms: between(rng, 2, 5),
        },
        7 | 8 => {
            // One dropped 5-tuple per scenario: its routers are drawn at injection.
            if std::mem::replace(&mut taken.flows, true) {
                return None;
            }
            Planned::FlowDrop {
                ack_path: rng.chance(0.5),
                position: rng.below(3) as u8,
            }
        }
        9 => {
            let h = taken.host(t, rng)?;
            let rnics = &t.hosts[h].rnics;
            let rnic = rnics[rng.below(rnics.len() as u64) as usize].name.clone();
            if rng.chance(0.5) {
                Planned::RnicDown { rnic }
            } else {
                Planned::RnicFlap {
                    rnic,
                    period_ms: period(rng),
                }
            }
        }
        10 => Planned::HostDown {
            host: t.hosts[taken.host(t, rng)?].name.clone(),
        },
        11 => Planned::AgentRestart {
            host: t.hosts[taken.host(t, rng)?].name.clone(),
        },
        _ => Planned::CpuStarve {
            host: t.hosts[taken.host(t, rng)?].name.clone(),
        },
    })
}

/// The inter-ToR 5-tuples `host`'s RNICs really probe, each with the spine ECMP puts it
/// on and the destination's ToR index.
pub fn probed_inter_tor_flows(lab: &Lab, host: &str) -> Result<Vec<(FiveTuple, String, u8)>> {
    let hosts: Vec<HostInfo> = lab.get("/api/v1/hosts")?;
    let info = hosts
        .iter()
        .find(|h| h.host == host)
        .with_context(|| format!("host {host} not registered"))?;
    let pl: Pinglist = lab.get(&format!("/api/v1/pinglists/{}", info.id))?;
    let rnics: Vec<RnicInfo> = lab.get("/api/v1/rnics")?;
    let topo = lab.fabric.topology();
    let mut out = Vec::new();
    for (rnic, list) in pl.rnics.iter().flat_map(|r| {
        let ip = rnics.iter().find(|x| x.id == r.rnic_id).map(|x| x.ip);
        r.lists.iter().map(move |l| (ip, l))
    }) {
        let Some(std::net::IpAddr::V4(src)) = rnic else {
            continue;
        };
        if list.class != ProbeClass::InterTor {
            continue;
        }
        for e in &list.entries {
            let std::net::IpAddr::V4(dst) = e.ip else {
                continue;
            };
            let flow = FiveTuple {
                src: src.into(),
                dst: e.ip,
                sport: e.src_port,
                dport: e.port,
            };
            let dst_tor = topo.rnic_by_ip(dst).map(|(_, r)| r.tor);
            if let (Some(spine), Some(dst_tor)) = (lab.fabric.spine_for(&flow)?, dst_tor) {
                out.push((flow, spine, dst_tor));
            }
        }
    }
    Ok(out)
}

fn describe(f: &Fault) -> String {
    serde_json::to_string(f).unwrap_or_default()
}

fn link_direction(t: &Topology, link: &str, direction: Direction) -> Option<LinkDirection> {
    let l = t.link(link)?;
    let (from, to) = match direction {
        Direction::Both => return None,
        Direction::Up => (&l.a.node, &l.b.node),
        Direction::Down => (&l.b.node, &l.a.node),
    };
    Some(LinkDirection {
        from: from.clone(),
        to: to.clone(),
    })
}

/// What the probes between live hosts can see of the testbed's fabric: the simulator's
/// [`Twins`] on the same shape, whose switches are the testbed's in the same order (ToRs,
/// then spines) and only named differently on rail fabrics.
struct Seen {
    fabric: SimFabric,
    /// The simulator's hosts taken down.
    down: Vec<u32>,
    /// The testbed's switch names, by the simulator's switch index.
    names: Vec<String>,
}

impl Seen {
    fn new(t: &Topology, down: &[&str]) -> Result<Self> {
        let spec = &t.spec;
        let shape = if spec.rail_optimized {
            Shape::Rail {
                groups: u32::from(spec.tors / spec.rnics_per_host),
                hosts_per_group: u32::from(spec.hosts_per_tor),
                rails: u32::from(spec.rnics_per_host),
                spines: u32::from(spec.spines),
            }
        } else {
            Shape::LeafSpine {
                tors: u32::from(spec.tors),
                spines: u32::from(spec.spines),
                hosts_per_tor: u32::from(spec.hosts_per_tor),
                rnics_per_host: u32::from(spec.rnics_per_host),
            }
        };
        let fabric = SimFabric::new(shape)?;
        let names: Vec<String> = t
            .tors
            .iter()
            .chain(&t.spines)
            .map(|r| r.name.clone())
            .collect();
        if names.len() != fabric.switches.len() || fabric.hosts.len() != t.hosts.len() {
            bail!(
                "the simulator's {shape:?} is not the testbed's fabric",
                shape = fabric.shape()
            );
        }
        let down = down
            .iter()
            .map(|h| fabric.host_by_name(h))
            .collect::<Result<_>>()?;
        Ok(Self {
            fabric,
            down,
            names,
        })
    }

    fn switch(&self, name: &str) -> Result<u32> {
        let i = self.names.iter().position(|n| n == name);
        Ok(i.with_context(|| format!("unknown switch {name}"))? as u32)
    }

    /// Link `link` ("t1-s0") hit in `direction`.
    fn link(&self, link: &str, direction: Direction) -> Result<Part> {
        let (a, b) = link
            .split_once('-')
            .with_context(|| format!("not a switch link: {link}"))?;
        let (lower, upper) = (self.switch(a)?, self.switch(b)?);
        let l = self
            .fabric
            .links
            .iter()
            .position(|l| (l.lower, l.upper) == (lower, upper))
            .with_context(|| format!("no link {link} in the simulator's fabric"))?
            as u32;
        Ok(match direction {
            Direction::Both => Part::Link(l),
            Direction::Up => Part::Direction {
                link: l,
                toward: upper,
            },
            Direction::Down => Part::Direction {
                link: l,
                toward: lower,
            },
        })
    }

    /// Sets truth `t`'s twins, the components on exactly the routes `part` is on (a
    /// 2-ToR fabric's spine and both its links): no probe tells a loss or delay on one
    /// from one on another. Whether anything observes `part` at all decides whether `t`
    /// is required.
    fn twins(&self, t: &mut rocemesh_sim::score::Truth, part: Part) {
        let twins = Twins::new(&self.fabric, &self.down);
        t.required &= twins.observed(part);
        t.equivalent = twins
            .of(part)
            .into_iter()
            .map(|mut c| {
                let rename = |n: &str| {
                    self.fabric
                        .switch_by_name(n)
                        .map_or_else(|_| n.to_string(), |i| self.names[i as usize].clone())
                };
                c.name = match c.kind {
                    ComponentKind::Switch => rename(&c.name),
                    ComponentKind::Link => match c.name.split_once('-') {
                        Some((a, b)) => format!("{}-{}", rename(a), rename(b)),
                        None => c.name,
                    },
                    _ => c.name,
                };
                c
            })
            .collect();
    }

    /// Whether any probe between live hosts crosses `part`: a link whose ToR's hosts are
    /// all down is not (its fault is then not required).
    fn observed(&self, part: Part) -> bool {
        Twins::new(&self.fabric, &self.down).observed(part)
    }
}

/// The analyzer's name of testbed RNIC `name` ("h3r0" → "h3/r0").
fn rnic_component(t: &Topology, name: &str) -> Result<String> {
    let (h, r) = t
        .rnic(name)
        .with_context(|| format!("unknown RNIC {name}"))?;
    Ok(format!("{}/{}", h.name, r.ifname))
}

/// Injects `d`'s faults (or, fault-free, starts a training job) into `lab`.
pub fn inject(lab: &mut Lab, d: &Drawn) -> Result<Injected> {
    let mut inj = Injected::default();
    if d.faults.is_empty() {
        inj.undo.push(start_training_job(lab, d.seed)?);
    }
    let mut rng = Rng::new(d.seed);
    let down: Vec<&str> = d
        .faults
        .iter()
        .filter_map(|f| match f {
            Planned::HostDown { host } => Some(host.as_str()),
            _ => None,
        })
        .collect();
    let seen = Seen::new(lab.fabric.topology(), &down)?;
    for f in &d.faults {
        inject_one(lab, f, (&mut rng, &down, &seen), &mut inj)?;
    }
    Ok(inj)
}

fn apply(lab: &Lab, f: &Fault, inj: &mut Injected) -> Result<()> {
    let h = lab.fabric.apply(f)?;
    inj.undo.push(Undo::Fault(h.id));
    Ok(())
}

/// Injects `p`; `down` are the hosts the scenario takes down, `seen` what the probes
/// between the others can tell apart.
fn inject_one(
    lab: &mut Lab,
    p: &Planned,
    (rng, down, seen): (&mut Rng, &[&str], &Seen),
    inj: &mut Injected,
) -> Result<()> {
    let topo = lab.fabric.topology().clone();
    match p {
        Planned::LinkDown { link, lower_end } => {
            let f = if *lower_end {
                Fault::LowerEndDown { link: link.clone() }
            } else {
                Fault::LinkDown { link: link.clone() }
            };
            apply(lab, &f, inj)?;
            inj.truth.push(hard(link_down_truth(seen, &f, link)?));
        }
        Planned::LinkLoss {
            link,
            direction,
            percent,
        } => {
            let f = Fault::Loss {
                link: link.clone(),
                direction: *direction,
                percent: *percent,
            };
            apply(lab, &f, inj)?;
            let mut t = truth(
                &describe(&f),
                ProblemKind::LinkFault,
                ComponentKind::Link,
                link,
            );
            t.direction = link_direction(&topo, link, *direction);
            seen.twins(&mut t, seen.link(link, *direction)?);
            inj.truth.push(t);
        }
        Planned::LinkFlap { link, period_ms } => {
            let f = Fault::LinkFlap {
                link: link.clone(),
                period_ms: *period_ms,
            };
            apply(lab, &f, inj)?;
            inj.truth.push(link_down_truth(seen, &f, link)?);
        }
        Planned::SwitchLoss { switch, percent } => {
            // Only what enters the switch: a packet meets the loss once per crossing.
            every_port(lab, &topo, switch, inj, |link, direction| Fault::Loss {
                link,
                direction,
                percent: *percent,
            })?;
            let mut t = truth(
                &format!("{percent} % loss on every port of {switch}"),
                ProblemKind::SwitchFault,
                ComponentKind::Switch,
                switch,
            );
            seen.twins(&mut t, Part::Switch(seen.switch(switch)?));
            inj.truth.push(t);
        }
        Planned::SwitchDelay { switch, ms } => {
            every_port(lab, &topo, switch, inj, |link, direction| Fault::Delay {
                link,
                direction,
                ms: *ms,
            })?;
            let mut t = truth(
                &format!("{ms} ms delay on every port of {switch}"),
                ProblemKind::HighLatency,
                ComponentKind::Switch,
                switch,
            );
            seen.twins(&mut t, Part::Switch(seen.switch(switch)?));
            inj.truth.push(t);
        }
        Planned::FlowDrop { ack_path, position } => {
            let (f, mut t) = flow_drop(lab, &topo, *ack_path, *position, rng)?;
            // A 5-tuple whose prober or target host is down for the whole fault is
            // crossed by no probe anyone answers: reporting its drop counts, missing it
            // does not (as in the simulator's scorer).
            if let Fault::FlowDrop { flow, .. } = &f {
                let on_down = |ip| {
                    topo.rnic_by_ip(ip)
                        .is_some_and(|(h, _)| down.contains(&h.name.as_str()))
                };
                t.required = !(on_down(flow.src) || on_down(flow.dst));
            }
            apply(lab, &f, inj)?;
            inj.truth.push(t);
        }
        Planned::RnicDown { rnic } | Planned::RnicFlap { rnic, .. } => {
            let f = match p {
                Planned::RnicFlap { period_ms, .. } => Fault::RnicFlap {
                    rnic: rnic.clone(),
                    period_ms: *period_ms,
                },
                _ => Fault::RnicDown { rnic: rnic.clone() },
            };
            apply(lab, &f, inj)?;
            let t = truth(
                &describe(&f),
                ProblemKind::RnicFault,
                ComponentKind::Rnic,
                &rnic_component(&topo, rnic)?,
            );
            inj.truth.push(if matches!(p, Planned::RnicDown { .. }) {
                hard(t)
            } else {
                t
            });
        }
        Planned::HostDown { host } => {
            lab.kill_agent(host);
            inj.undo.push(Undo::StartAgent(host.clone()));
            inj.truth.push(host_down_truth(host));
        }
        Planned::AgentRestart { host } => {
            lab.kill_agent(host);
            lab.start_agent(host)?;
            inj.truth.push(agent_restart_truth(host));
        }
        Planned::CpuStarve { host } => {
            let pid = lab
                .agent_pid(host)
                .with_context(|| format!("agent of {host} not running"))?;
            apply(lab, &Fault::CpuStarve { pid, percent: 1 }, inj)?;
            inj.truth.push(cpu_truth(host));
        }
    }
    Ok(())
}

/// The truth of `f`, which takes `link` down (or flaps it): required only when a probe
/// between live hosts crosses the link. It has no twins: the rerouting it causes tells it
/// apart.
fn link_down_truth(seen: &Seen, f: &Fault, link: &str) -> Result<rocemesh_sim::score::Truth> {
    let mut t = truth(
        &describe(f),
        ProblemKind::LinkFault,
        ComponentKind::Link,
        link,
    );
    t.required &= seen.observed(seen.link(link, Direction::Both)?);
    Ok(t)
}

/// Applies `fault(link, direction into the switch)` to every link of `switch`.
fn every_port(
    lab: &Lab,
    topo: &Topology,
    switch: &str,
    inj: &mut Injected,
    fault: impl Fn(String, Direction) -> Fault,
) -> Result<()> {
    for l in topo.links_of(switch) {
        let direction = if l.b.node == switch {
            Direction::Up
        } else {
            Direction::Down
        };
        apply(lab, &fault(l.name.clone(), direction), inj)?;
    }
    Ok(())
}

/// Draws a probed inter-ToR 5-tuple and drops it (or its ACKs) in the router at
/// `position` of that path.
fn flow_drop(
    lab: &Lab,
    topo: &Topology,
    ack_path: bool,
    position: u8,
    rng: &mut Rng,
) -> Result<(Fault, rocemesh_sim::score::Truth)> {
    let mut hosts: Vec<String> = topo.hosts.iter().map(|h| h.name.clone()).collect();
    rng.shuffle(&mut hosts);
    for host in hosts {
        let flows = probed_inter_tor_flows(lab, &host)?;
        if flows.is_empty() {
            continue;
        }
        let (probe, ..) = flows[rng.below(flows.len() as u64) as usize];
        // The ACKs go back from the responder to the prober on the same ports.
        let flow = if ack_path { probe.ack() } else { probe };
        let tor = |ip| {
            topo.rnic_by_ip(ip)
                .map(|(_, r)| topo.tors[usize::from(r.tor)].name.clone())
                .with_context(|| format!("{ip} is no RNIC"))
        };
        let (src_tor, dst_tor) = (tor(flow.src)?, tor(flow.dst)?);
        let spine = lab
            .fabric
            .spine_for(&flow)?
            .context("an inter-ToR flow crosses a spine")?;
        let (at, links) = match position {
            0 => (src_tor.clone(), vec![format!("{src_tor}-{spine}")]),
            1 => (
                spine.clone(),
                vec![format!("{src_tor}-{spine}"), format!("{dst_tor}-{spine}")],
            ),
            _ => (dst_tor.clone(), vec![format!("{dst_tor}-{spine}")]),
        };
        let t = flow_drop_truth(&flow, &at, links);
        return Ok((Fault::FlowDrop { flow, at: Some(at) }, t));
    }
    bail!("no host probes an inter-ToR 5-tuple")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_on_a_two_tor_fabric_lists_the_components_no_probe_tells_apart() {
        let names = |spec: &FabricSpec, down: &[&str], part: &dyn Fn(&Seen) -> Part| {
            let topo = Topology::new(spec);
            let seen = Seen::new(&topo, down).unwrap();
            let mut t = truth("", ProblemKind::LinkFault, ComponentKind::Link, "x");
            seen.twins(&mut t, part(&seen));
            let mut v: Vec<String> = t.equivalent.iter().map(|c| c.label()).collect();
            v.sort();
            (t.required, v)
        };
        let spec = |tors, rail_optimized| FabricSpec {
            tors,
            spines: 3,
            rnics_per_host: 2,
            rail_optimized,
            ..FabricSpec::default()
        };
        let link = |l: &'static str, d| move |s: &Seen| s.link(l, d).unwrap();
        // Two ToRs: every flow over t1-s2 crosses t0-s2 and s2, and nothing else does.
        assert_eq!(
            names(&spec(2, false), &[], &link("t1-s2", Direction::Both)),
            (true, vec!["link:t0-s2".into(), "switch:s2".into()])
        );
        // Into s2 from t1 is what leaves s2 towards t0: the twin link, one direction.
        assert_eq!(
            names(&spec(2, false), &[], &link("t1-s2", Direction::Up)),
            (true, vec!["link:t0-s2".into()])
        );
        // A third ToR sets them apart; on rail fabrics the testbed's names come back.
        assert_eq!(
            names(&spec(3, false), &[], &link("t1-s2", Direction::Both)).1,
            Vec::<String>::new()
        );
        assert_eq!(
            names(&spec(2, true), &[], &|s: &Seen| Part::Switch(
                s.switch("s1").unwrap()
            )),
            (true, vec!["link:t0-s1".into(), "link:t1-s1".into()])
        );
        // With every host of t1 down, nothing crosses t1-s2: not required.
        assert!(
            !names(
                &spec(3, false),
                &["h2", "h3"],
                &link("t1-s2", Direction::Both)
            )
            .0
        );
    }

    #[test]
    fn a_link_down_no_probe_between_live_hosts_crosses_is_not_required() {
        let spec = FabricSpec {
            tors: 3,
            spines: 2,
            hosts_per_tor: 1,
            ..FabricSpec::default()
        };
        let topo = Topology::new(&spec);
        let required = |down: &[&str], link: &str| {
            let f = Fault::LowerEndDown { link: link.into() };
            link_down_truth(&Seen::new(&topo, down).unwrap(), &f, link)
                .unwrap()
                .required
        };
        assert!(required(&[], "t0-s0"));
        // h0 is t0's only host: nothing crosses t0's links while it is down.
        assert!(!required(&["h0"], "t0-s0"));
        assert!(required(&["h0"], "t1-s0"));
    }

    #[test]
    fn a_scenario_depends_on_seed_and_index_only() {
        let a = draw(5, 2, "rmr").unwrap();
        let b = draw(5, 2, "rmr").unwrap();
        assert_eq!((&a.spec, &a.faults, a.seed), (&b.spec, &b.faults, b.seed));
        assert!((0..20).any(|i| draw(6, i, "rmr").unwrap().faults != a.faults));
    }

    #[test]
    fn drawn_shapes_and_faults_cover_the_space_and_stay_apart() {
        let mut kinds = std::collections::BTreeSet::new();
        let (mut rail, mut lower, mut directed, mut free, mut concurrent) = (0, 0, 0, 0, 0);
        for i in 0..400 {
            let d = draw(11, i, "rmr").unwrap();
            let s = &d.spec;
            assert!((2..=6).contains(&s.tors) && (2..=4).contains(&s.spines));
            assert!((1..=2).contains(&s.rnics_per_host));
            rail += usize::from(s.rail_optimized);
            free += usize::from(d.faults.is_empty());
            concurrent += usize::from(d.faults.len() > 1);
            let topo = Topology::new(s);
            let mut named = Vec::new();
            for f in &d.faults {
                kinds.insert(serde_json::to_value(f).unwrap()["kind"].to_string());
                let name = match f {
                    Planned::LinkDown { link, lower_end } => {
                        lower += usize::from(*lower_end);
                        Some(link.clone())
                    }
                    Planned::LinkLoss {
                        link, direction, ..
                    } => {
                        directed += usize::from(*direction != Direction::Both);
                        Some(link.clone())
                    }
                    Planned::LinkFlap { link, .. } => Some(link.clone()),
                    Planned::SwitchLoss { switch, .. } | Planned::SwitchDelay { switch, .. } => {
                        Some(switch.clone())
                    }
                    Planned::RnicDown { rnic } | Planned::RnicFlap { rnic, .. } => {
                        assert!(topo.rnic(rnic).is_some(), "{rnic}");
                        Some(rnic.clone())
                    }
                    Planned::HostDown { host }
                    | Planned::AgentRestart { host }
                    | Planned::CpuStarve { host } => Some(host.clone()),
                    Planned::FlowDrop { .. } => None,
                };
                if let Some(n) = name {
                    assert!(!named.contains(&n), "scenario {i} hits {n} twice");
                    if let Some(l) = topo.link(&n) {
                        assert!(l.a.node.starts_with('t') && l.b.node.starts_with('s'));
                        assert!(!named.contains(&l.a.node) && !named.contains(&l.b.node));
                    }
                    named.push(n);
                }
            }
        }
        assert_eq!(kinds.len(), 11, "{kinds:?}");
        assert!(rail > 50 && lower > 10 && directed > 10 && free > 40 && concurrent > 40);
    }
}
