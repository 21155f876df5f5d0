//! The fault scenarios of the localization suite: what each injects in a lab, and which
//! component rocemesh must blame for it.

use crate::lab::Lab;
use anyhow::{Context, Result};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{ComponentKind, Pinglist, Problem, ProblemKind};
use rocemesh_testbed::{Direction, Fault, FiveTuple};

/// A faulty component rocemesh must report. The first alternative is the truth; the
/// others are equivalent answers (e.g. the links of the switch that silently drops one
/// 5-tuple, which no probe can tell apart from the switch).
#[derive(Debug, Clone)]
pub struct Expect {
    /// Acceptable (kind, name) answers.
    pub alternatives: Vec<(ComponentKind, String)>,
    /// Only a flow problem listing an alternative among its suspects is right (no probe
    /// can single out the component that drops one 5-tuple).
    pub flow: bool,
}

impl Expect {
    fn one(kind: ComponentKind, name: &str) -> Self {
        Self {
            alternatives: vec![(kind, name.to_string())],
            flow: false,
        }
    }

    /// True when a reported problem is this answer.
    pub fn matches_problem(&self, p: &Problem) -> bool {
        if self.flow {
            p.kind == ProblemKind::FlowFault
                && p.evidence
                    .candidates
                    .iter()
                    .any(|c| self.matches(c.component_kind, &c.component))
        } else {
            self.matches(p.component_kind, &p.component)
        }
    }

    /// Display form `kind:name` of the truth.
    pub fn label(&self) -> String {
        let (k, n) = &self.alternatives[0];
        format!("{}:{n}", kind_str(*k))
    }

    /// True when a reported component matches.
    pub fn matches(&self, kind: ComponentKind, name: &str) -> bool {
        self.alternatives
            .iter()
            .any(|(k, n)| *k == kind && n == name)
    }
}

/// Stable lowercase name of a component kind.
pub fn kind_str(k: ComponentKind) -> &'static str {
    match k {
        ComponentKind::Rnic => "rnic",
        ComponentKind::Link => "link",
        ComponentKind::Switch => "switch",
        ComponentKind::Host => "host",
        ComponentKind::Agent => "agent",
        ComponentKind::Flow => "flow",
    }
}

/// How to undo an injection.
#[derive(Debug)]
pub enum Undo {
    /// Clear a testbed fault.
    Fault(u16),
    /// Start the host's agent again.
    StartAgent(String),
}

/// What a scenario did and what it expects.
#[derive(Debug, Default)]
pub struct Injected {
    /// Components to be blamed (empty: nothing may be blamed on the network).
    pub expected: Vec<Expect>,
    /// Non-network problem kinds on the faulty host that are fine to report.
    pub benign: Vec<ProblemKind>,
    /// Steps that end the fault.
    pub undo: Vec<Undo>,
}

/// One scenario.
pub struct Scenario {
    /// Name used on the command line and in the report.
    pub name: &'static str,
    /// Part of the quick subset CI runs.
    pub quick: bool,
    inject: fn(&mut Lab) -> Result<Injected>,
}

impl Scenario {
    /// Injects the fault into `lab`.
    pub fn inject(&self, lab: &mut Lab) -> Result<Injected> {
        (self.inject)(lab)
    }
}

const LINK: &str = "t0-s1";
const HOST: &str = "h3";
const RNIC: &str = "h3r0";
const RNIC_COMPONENT: &str = "h3/r0";

fn fault(lab: &Lab, f: Fault, expected: Vec<Expect>) -> Result<Injected> {
    let h = lab.fabric.apply(&f)?;
    Ok(Injected {
        expected,
        undo: vec![Undo::Fault(h.id)],
        ..Injected::default()
    })
}

fn link_fault(lab: &Lab, f: Fault) -> Result<Injected> {
    fault(lab, f, vec![Expect::one(ComponentKind::Link, LINK)])
}

fn loss(lab: &Lab, percent: u8) -> Result<Injected> {
    link_fault(
        lab,
        Fault::Loss {
            link: LINK.into(),
            direction: Direction::Both,
            percent,
        },
    )
}

/// An inter-ToR 5-tuple host h0 really probes, the spine ECMP puts it on, and the
/// destination's ToR index.
fn probed_inter_tor_flow(lab: &Lab) -> Result<(FiveTuple, String, u8)> {
    let hosts: Vec<rocemesh_proto::api::HostInfo> = lab.get("/api/v1/hosts")?;
    let h0 = hosts
        .iter()
        .find(|h| h.host == "h0")
        .context("host h0 not registered")?;
    let pl: Pinglist = lab.get(&format!("/api/v1/pinglists/{}", h0.id))?;
    let src = lab.fabric.hosts()[0].rnics[0].ip;
    for list in pl
        .rnics
        .iter()
        .flat_map(|r| &r.lists)
        .filter(|l| l.class == ProbeClass::InterTor)
    {
        for e in &list.entries {
            let std::net::IpAddr::V4(dst) = e.ip else {
                continue;
            };
            let flow = FiveTuple {
                src,
                dst,
                sport: e.src_port,
                dport: e.port,
            };
            let dst_tor = lab.fabric.topology().rnic_by_ip(dst).map(|(_, r)| r.tor);
            if let (Some(spine), Some(dst_tor)) = (lab.fabric.spine_for(&flow)?, dst_tor) {
                return Ok((flow, spine, dst_tor));
            }
        }
    }
    anyhow::bail!("h0 has no inter-ToR pinglist entry")
}

/// Every scenario of the suite, in report order.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "fault_free",
            quick: true,
            inject: |_| Ok(Injected::default()),
        },
        Scenario {
            name: "link_loss_1pct",
            quick: false,
            inject: |l| loss(l, 1),
        },
        Scenario {
            name: "link_loss_10pct",
            quick: false,
            inject: |l| loss(l, 10),
        },
        Scenario {
            name: "link_loss_100pct",
            quick: true,
            inject: |l| loss(l, 100),
        },
        Scenario {
            name: "link_down",
            quick: true,
            inject: |l| link_fault(l, Fault::LinkDown { link: LINK.into() }),
        },
        Scenario {
            name: "spine_down",
            quick: false,
            inject: |l| {
                fault(
                    l,
                    Fault::SpineDown { spine: "s1".into() },
                    vec![Expect::one(ComponentKind::Switch, "s1")],
                )
            },
        },
        Scenario {
            name: "link_flapping",
            quick: false,
            inject: |l| {
                link_fault(
                    l,
                    Fault::LinkFlap {
                        link: LINK.into(),
                        period_ms: 2_000,
                    },
                )
            },
        },
        Scenario {
            name: "five_tuple_silent_drop",
            quick: false,
            inject: |l| {
                let (flow, spine, dst_tor) = probed_inter_tor_flow(l)?;
                let expect = Expect {
                    alternatives: vec![
                        (ComponentKind::Switch, spine.clone()),
                        (ComponentKind::Link, format!("t0-{spine}")),
                        (ComponentKind::Link, format!("t{dst_tor}-{spine}")),
                    ],
                    flow: true,
                };
                fault(
                    l,
                    Fault::FlowDrop {
                        flow,
                        at: Some(spine),
                    },
                    vec![expect],
                )
            },
        },
        Scenario {
            name: "link_delay",
            quick: false,
            inject: |l| {
                link_fault(
                    l,
                    Fault::Delay {
                        link: LINK.into(),
                        direction: Direction::Both,
                        ms: 5,
                    },
                )
            },
        },
        Scenario {
            name: "corruption",
            quick: false,
            inject: |l| {
                link_fault(
                    l,
                    Fault::Corrupt {
                        link: LINK.into(),
                        direction: Direction::Both,
                        percent: 20,
                    },
                )
            },
        },
        Scenario {
            name: "congestion",
            quick: false,
            inject: |l| {
                link_fault(
                    l,
                    Fault::Congestion {
                        link: LINK.into(),
                        direction: Direction::Up,
                        rate_kbit: 48,
                        background: None,
                    },
                )
            },
        },
        Scenario {
            name: "rnic_down",
            quick: true,
            inject: |l| {
                fault(
                    l,
                    Fault::RnicDown { rnic: RNIC.into() },
                    vec![Expect::one(ComponentKind::Rnic, RNIC_COMPONENT)],
                )
            },
        },
        Scenario {
            name: "rnic_flapping",
            quick: false,
            inject: |l| {
                fault(
                    l,
                    Fault::RnicFlap {
                        rnic: RNIC.into(),
                        period_ms: 2_000,
                    },
                    vec![Expect::one(ComponentKind::Rnic, RNIC_COMPONENT)],
                )
            },
        },
        Scenario {
            name: "host_down",
            quick: true,
            inject: |l| {
                l.kill_agent(HOST);
                Ok(Injected {
                    expected: vec![Expect::one(ComponentKind::Host, HOST)],
                    benign: vec![ProblemKind::AgentRestart],
                    undo: vec![Undo::StartAgent(HOST.into())],
                })
            },
        },
        Scenario {
            name: "agent_restart",
            quick: true,
            inject: |l| {
                l.kill_agent(HOST);
                l.start_agent(HOST)?;
                Ok(Injected {
                    benign: vec![ProblemKind::AgentRestart, ProblemKind::HostDown],
                    ..Injected::default()
                })
            },
        },
        Scenario {
            name: "cpu_overload",
            quick: false,
            inject: |l| {
                let pid = l.agent_pid(HOST).context("agent of h3 not running")?;
                let h = l.fabric.apply(&Fault::CpuStarve { pid, percent: 1 })?;
                Ok(Injected {
                    benign: vec![
                        ProblemKind::HostNoise,
                        ProblemKind::HostDown,
                        ProblemKind::AgentRestart,
                    ],
                    undo: vec![Undo::Fault(h.id)],
                    ..Injected::default()
                })
            },
        },
        Scenario {
            name: "two_links_different_spines",
            quick: true,
            inject: |l| {
                let a = l.fabric.apply(&Fault::Loss {
                    link: "t0-s0".into(),
                    direction: Direction::Both,
                    percent: 100,
                })?;
                let b = l.fabric.apply(&Fault::Loss {
                    link: "t1-s1".into(),
                    direction: Direction::Both,
                    percent: 100,
                })?;
                Ok(Injected {
                    expected: vec![
                        Expect::one(ComponentKind::Link, "t0-s0"),
                        Expect::one(ComponentKind::Link, "t1-s1"),
                    ],
                    undo: vec![Undo::Fault(a.id), Undo::Fault(b.id)],
                    ..Injected::default()
                })
            },
        },
    ]
}
