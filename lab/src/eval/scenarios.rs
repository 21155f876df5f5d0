//! The fault scenarios of the localization suite: what each injects in a lab, and which
//! component rocemesh must blame for it.

use crate::lab::Lab;
use anyhow::{Context, Result};
use rocemesh_proto::api::{ComponentKind, ProblemKind};
use rocemesh_sim::score::{Component, Truth};
use rocemesh_testbed::{Direction, Fault, FiveTuple, JobSpec};

/// How to undo an injection.
#[derive(Debug)]
pub enum Undo {
    /// Clear a testbed fault.
    Fault(u16),
    /// Start the host's agent again.
    StartAgent(String),
    /// Stop a training job.
    StopJob(String),
}

/// What a scenario did and what it expects.
#[derive(Debug, Default)]
pub struct Injected {
    /// The faults' ground truth (onsets set by the runner; empty: nothing may be blamed).
    pub truth: Vec<Truth>,
    /// Steps that end the fault.
    pub undo: Vec<Undo>,
}

/// The truth that `kind` `name` is at fault with a problem of `problem`.
pub fn truth(fault: &str, problem: ProblemKind, kind: ComponentKind, name: &str) -> Truth {
    Truth::new(fault.to_string(), problem, Component::new(kind, name), 0)
}

/// A truth that is hard (down, 100 % loss): counted in the hard-fault time to localize.
pub fn hard(mut t: Truth) -> Truth {
    t.hard = true;
    t
}

/// A truth that may be reported but need not be, and the side effects it may cause.
pub fn optional(mut t: Truth, side_effects: &[ProblemKind]) -> Truth {
    t.required = false;
    t.side_effects = side_effects.to_vec();
    t
}

/// Starts a training job over every RNIC of `lab`'s fabric (tensor-parallel within a
/// host, data-parallel across hosts): traffic with no fault, which nothing may blame.
pub fn start_training_job(lab: &mut Lab, seed: u64) -> Result<Undo> {
    let spec = lab.fabric.spec().clone();
    let job = JobSpec {
        tp: u32::from(spec.rnics_per_host),
        pp: 1,
        dp: spec.host_count() as u32,
        seed,
        ..JobSpec::tp2_pp2_dp4("trainingjob")
    };
    let h = lab.fabric.start_job(&job)?;
    Ok(Undo::StopJob(h.name().to_string()))
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

fn describe(f: &Fault) -> String {
    serde_json::to_string(f).unwrap_or_default()
}

fn fault(lab: &Lab, f: Fault, truth: Vec<Truth>) -> Result<Injected> {
    let h = lab.fabric.apply(&f)?;
    Ok(Injected {
        truth,
        undo: vec![Undo::Fault(h.id)],
    })
}

fn link_fault(lab: &Lab, f: Fault, is_hard: bool) -> Result<Injected> {
    let problem = match f {
        Fault::Delay { .. } | Fault::Congestion { .. } => ProblemKind::HighLatency,
        _ => ProblemKind::LinkFault,
    };
    let t = truth(&describe(&f), problem, ComponentKind::Link, LINK);
    fault(lab, f, vec![if is_hard { hard(t) } else { t }])
}

fn loss(lab: &Lab, percent: u8) -> Result<Injected> {
    link_fault(
        lab,
        Fault::Loss {
            link: LINK.into(),
            direction: Direction::Both,
            percent,
        },
        percent == 100,
    )
}

/// The truth of a host whose agent was killed: the host is down; its agent's return
/// may be reported as a restart.
pub fn host_down_truth(host: &str) -> Truth {
    let mut t = truth(
        &format!("kill the agent of {host}"),
        ProblemKind::HostDown,
        ComponentKind::Host,
        host,
    );
    t.side_effects = vec![ProblemKind::AgentRestart];
    t
}

/// The truth of an agent restarted at once: it may be reported, nothing else may.
pub fn agent_restart_truth(host: &str) -> Truth {
    optional(
        truth(
            &format!("restart the agent of {host}"),
            ProblemKind::AgentRestart,
            ComponentKind::Agent,
            host,
        ),
        &[ProblemKind::AgentRestart, ProblemKind::HostDown],
    )
}

/// The truth of a host whose agent is starved of CPU: host noise may be reported, no
/// network fault may.
pub fn cpu_truth(host: &str) -> Truth {
    optional(
        truth(
            &format!("starve the agent of {host} to 1 % of a CPU"),
            ProblemKind::HostNoise,
            ComponentKind::Host,
            host,
        ),
        &[
            ProblemKind::HostNoise,
            ProblemKind::HostDown,
            ProblemKind::AgentRestart,
        ],
    )
}

/// The flow-level truth of `flow` dropped at router `at` (a ToR or spine on its path):
/// the probes cannot tell the router from its links on that path.
pub fn flow_drop_truth(flow: &FiveTuple, at: &str, path_links: Vec<String>) -> Truth {
    let f = Fault::FlowDrop {
        flow: *flow,
        at: Some(at.to_string()),
    };
    let mut t = truth(
        &describe(&f),
        ProblemKind::FlowFault,
        ComponentKind::Switch,
        at,
    );
    t.flow_level = true;
    t.equivalent = path_links
        .into_iter()
        .map(|l| Component::new(ComponentKind::Link, l))
        .collect();
    t
}

/// An inter-ToR 5-tuple host h0 really probes, the spine ECMP puts it on, and the
/// destination's ToR index.
fn probed_inter_tor_flow(lab: &Lab) -> Result<(FiveTuple, String, u8)> {
    super::random::probed_inter_tor_flows(lab, "h0")?
        .into_iter()
        .next()
        .context("h0 has no inter-ToR pinglist entry")
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
            name: "training_job",
            quick: false,
            inject: |l| {
                Ok(Injected {
                    truth: Vec::new(),
                    undo: vec![start_training_job(l, 1)?],
                })
            },
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
            inject: |l| link_fault(l, Fault::LinkDown { link: LINK.into() }, true),
        },
        Scenario {
            name: "spine_down",
            quick: false,
            inject: |l| {
                let f = Fault::SpineDown { spine: "s1".into() };
                let t = truth(
                    &describe(&f),
                    ProblemKind::SwitchFault,
                    ComponentKind::Switch,
                    "s1",
                );
                fault(l, f, vec![t])
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
                    false,
                )
            },
        },
        Scenario {
            name: "five_tuple_silent_drop",
            quick: false,
            inject: |l| {
                let (flow, spine, dst_tor) = probed_inter_tor_flow(l)?;
                let t = flow_drop_truth(
                    &flow,
                    &spine,
                    vec![format!("t0-{spine}"), format!("t{dst_tor}-{spine}")],
                );
                fault(
                    l,
                    Fault::FlowDrop {
                        flow,
                        at: Some(spine),
                    },
                    vec![t],
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
                    false,
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
                    false,
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
                    false,
                )
            },
        },
        Scenario {
            name: "rnic_down",
            quick: true,
            inject: |l| {
                let f = Fault::RnicDown { rnic: RNIC.into() };
                let t = truth(
                    &describe(&f),
                    ProblemKind::RnicFault,
                    ComponentKind::Rnic,
                    RNIC_COMPONENT,
                );
                fault(l, f, vec![hard(t)])
            },
        },
        Scenario {
            name: "rnic_flapping",
            quick: false,
            inject: |l| {
                let f = Fault::RnicFlap {
                    rnic: RNIC.into(),
                    period_ms: 2_000,
                };
                let t = truth(
                    &describe(&f),
                    ProblemKind::RnicFault,
                    ComponentKind::Rnic,
                    RNIC_COMPONENT,
                );
                fault(l, f, vec![t])
            },
        },
        Scenario {
            name: "host_down",
            quick: true,
            inject: |l| {
                l.kill_agent(HOST);
                Ok(Injected {
                    truth: vec![host_down_truth(HOST)],
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
                    truth: vec![agent_restart_truth(HOST)],
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
                    truth: vec![cpu_truth(HOST)],
                    undo: vec![Undo::Fault(h.id)],
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
                let lost = |link: &str| {
                    hard(truth(
                        &format!("loss 100 % {link}"),
                        ProblemKind::LinkFault,
                        ComponentKind::Link,
                        link,
                    ))
                };
                Ok(Injected {
                    truth: vec![lost("t0-s0"), lost("t1-s1")],
                    undo: vec![Undo::Fault(a.id), Undo::Fault(b.id)],
                })
            },
        },
    ]
}
