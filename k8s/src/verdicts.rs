//! RNIC and host verdicts written back to the nodes, the way Node Problem Detector does:
//! a node condition (status, reason, message, heartbeat, transition time) and, opt-in, a
//! `NoSchedule` taint, both cleared when the problem resolves. Network-side problems
//! (links, switches, flows, latency) never touch a node: the node is not what is broken.

use crate::config::KubernetesConfig;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use rocemesh_controller::topology::NodeLabels;
use rocemesh_proto::api::{ComponentKind, Problem, ProblemKind, ProblemState};
use std::collections::BTreeMap;

/// Longest condition message written (the rest is cut at a character boundary).
const MAX_MESSAGE: usize = 1024;
/// Reason of the condition when the node has no active problem.
pub(crate) const REASON_CLEAR: &str = "NoRnicProblem";

/// What rocemesh keeps of a node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeFacts {
    /// Where the node's ToR and rail labels put its RNICs.
    pub(crate) placement: NodeLabels,
    /// rocemesh's condition on the node, if written before.
    pub(crate) condition: Option<NodeCondition>,
    pub(crate) taints: Vec<Taint>,
    /// For taint updates: the list is replaced whole, so only over the version read.
    pub(crate) resource_version: Option<String>,
}

/// The facts of a node.
pub(crate) fn node_facts(node: &Node, cfg: &KubernetesConfig) -> NodeFacts {
    NodeFacts {
        placement: node
            .metadata
            .labels
            .as_ref()
            .map(|l| placement(l, cfg))
            .unwrap_or_default(),
        condition: node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == cfg.condition_type))
            .cloned(),
        taints: node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default(),
        resource_version: node.metadata.resource_version.clone(),
    }
}

/// The ToR and rail labels of a node: `<label>` for every RNIC, `<label>.<ifname>` for one.
/// Empty values are no label; a rail that is not a number is ignored with a warning.
fn placement(labels: &BTreeMap<String, String>, cfg: &KubernetesConfig) -> NodeLabels {
    let mut out = NodeLabels::default();
    for (key, value) in labels.iter().filter(|(_, v)| !v.is_empty()) {
        let scoped = |label: &str| -> Option<Option<String>> {
            if key == label {
                return Some(None);
            }
            let ifname = key.strip_prefix(label)?.strip_prefix('.')?;
            (!ifname.is_empty()).then(|| Some(ifname.to_string()))
        };
        if let Some(ifname) = scoped(&cfg.tor_label) {
            match ifname {
                Some(i) => out.rnic_tors.insert(i, value.clone()),
                None => out.tor.replace(value.clone()),
            };
        } else if let Some(ifname) = scoped(&cfg.rail_label) {
            let Ok(rail) = value.parse::<u32>() else {
                tracing::warn!(label = %key, value, "rail label is not a number; ignored");
                continue;
            };
            match ifname {
                Some(i) => out.rnic_rails.insert(i, rail),
                None => out.rail.replace(rail),
            };
        }
    }
    out
}

/// Why a node is marked: the condition's reason and message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

/// The node (= host) of an active RNIC or host-down problem; `None` for every other.
fn node_of(p: &Problem) -> Option<&str> {
    if p.state != ProblemState::Active {
        return None;
    }
    match (p.kind, p.component_kind) {
        (ProblemKind::RnicFault, ComponentKind::Rnic) => {
            p.component.split_once('/').map(|(host, _)| host)
        }
        (ProblemKind::HostDown, ComponentKind::Host) => Some(p.component.as_str()),
        _ => None,
    }
}

/// The verdict per node from the active problems.
pub(crate) fn verdicts(problems: &[Problem]) -> BTreeMap<String, Verdict> {
    let mut by_node: BTreeMap<String, Vec<&Problem>> = BTreeMap::new();
    for p in problems {
        if let Some(node) = node_of(p) {
            by_node.entry(node.to_string()).or_default().push(p);
        }
    }
    by_node
        .into_iter()
        .map(|(node, mut ps)| {
            ps.sort_by(|a, b| a.component.cmp(&b.component));
            let host_down = ps.iter().any(|p| p.kind == ProblemKind::HostDown);
            let parts: Vec<String> = ps
                .iter()
                .map(|p| match p.kind {
                    ProblemKind::HostDown => {
                        format!("host {}: agent silent (problem {})", p.component, p.id)
                    }
                    _ => format!(
                        "RNIC {} faulty (problem {}): {}",
                        p.component, p.id, p.evidence.detail
                    ),
                })
                .collect();
            let mut message = format!("rocemesh: {}", parts.join("; "));
            if message.len() > MAX_MESSAGE {
                let mut cut = MAX_MESSAGE;
                while !message.is_char_boundary(cut) {
                    cut -= 1;
                }
                message.truncate(cut);
            }
            let reason = if host_down { "HostDown" } else { "RnicFault" };
            (node, Verdict { reason, message })
        })
        .collect()
}

/// What to write to one node.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Writes {
    /// The condition to merge into `status.conditions` (by type).
    pub(crate) condition: Option<NodeCondition>,
    /// The node's whole new taint list.
    pub(crate) taints: Option<Vec<Taint>>,
}

/// Compares a node with its verdict (`None`: no active problem): a condition when the
/// status or message changes or the heartbeat is due (a node never marked gets nothing),
/// the taint list when the taint must come or go.
pub(crate) fn plan(
    node: &NodeFacts,
    verdict: Option<&Verdict>,
    cfg: &KubernetesConfig,
    now: Timestamp,
) -> Writes {
    let current = node.condition.as_ref();
    let status = if verdict.is_some() { "True" } else { "False" };
    let (reason, message) = match verdict {
        Some(v) => (v.reason, v.message.clone()),
        None => (
            REASON_CLEAR,
            "rocemesh: no active RNIC or host problem".to_string(),
        ),
    };
    let changed =
        current.is_none_or(|c| c.status != status || c.message.as_deref() != Some(&message));
    let heartbeat_due = current
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .is_none_or(|t| {
            now.duration_since(t.0)
                >= SignedDuration::try_from(cfg.heartbeat).unwrap_or(SignedDuration::MAX)
        });
    let wanted = cfg.conditions
        && (verdict.is_some() || current.is_some_and(|c| c.status == "True"))
        && (changed || (verdict.is_some() && heartbeat_due));
    let condition = wanted.then(|| NodeCondition {
        type_: cfg.condition_type.clone(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(match current {
            Some(c) if c.status == status => c.last_transition_time.clone().unwrap_or(Time(now)),
            _ => Time(now),
        }),
    });
    let ours = |t: &Taint| t.key == cfg.taint_key && t.effect == "NoSchedule";
    let tainted = node.taints.iter().any(ours);
    let want_taint = cfg.taint && verdict.is_some();
    let taints = (tainted != want_taint).then(|| {
        let mut list: Vec<Taint> = node.taints.iter().filter(|t| !ours(t)).cloned().collect();
        if want_taint {
            list.push(Taint {
                key: cfg.taint_key.clone(),
                value: verdict.map(|v| v.reason.to_string()),
                effect: "NoSchedule".into(),
                time_added: None,
            });
        }
        list
    });
    Writes { condition, taints }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::testing::active_problem;

    fn problem(id: i64, kind: ProblemKind, ck: ComponentKind, component: &str) -> Problem {
        active_problem(id, kind, ck, component, "60% of ToR-mesh probes lost")
    }

    #[test]
    fn only_rnic_and_host_problems_mark_nodes() {
        let mut resolved = problem(5, ProblemKind::RnicFault, ComponentKind::Rnic, "n3/mlx5_0");
        resolved.state = ProblemState::Resolved;
        let ps = [
            problem(1, ProblemKind::RnicFault, ComponentKind::Rnic, "n1/mlx5_1"),
            problem(2, ProblemKind::HostDown, ComponentKind::Host, "n2"),
            problem(3, ProblemKind::LinkFault, ComponentKind::Link, "n1/x->y"),
            problem(4, ProblemKind::SwitchFault, ComponentKind::Switch, "n1"),
            problem(6, ProblemKind::HostNoise, ComponentKind::Host, "n4"),
            problem(
                7,
                ProblemKind::HighLatency,
                ComponentKind::Rnic,
                "n5/mlx5_0",
            ),
            resolved,
        ];
        let v = verdicts(&ps);
        assert_eq!(v.keys().collect::<Vec<_>>(), ["n1", "n2"]);
        assert_eq!(v["n1"].reason, "RnicFault");
        assert!(v["n1"].message.contains("n1/mlx5_1"), "{}", v["n1"].message);
        assert_eq!(v["n2"].reason, "HostDown");
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let mut p = problem(1, ProblemKind::RnicFault, ComponentKind::Rnic, "n1/mlx5_0");
        p.evidence.detail = "é".repeat(2000);
        let v = verdicts(&[p]);
        assert!(v["n1"].message.len() <= MAX_MESSAGE);
    }

    #[test]
    fn set_refresh_and_clear_follow_npd() {
        let cfg = KubernetesConfig::default();
        let t0 = Timestamp::from_second(1_800_000_000).unwrap();
        let verdict = Verdict {
            reason: "RnicFault",
            message: "m".into(),
        };
        let mut node = NodeFacts {
            placement: NodeLabels::default(),
            condition: None,
            taints: vec![],
            resource_version: None,
        };
        // A healthy node never marked gets nothing.
        assert_eq!(plan(&node, None, &cfg, t0), Writes::default());
        let w = plan(&node, Some(&verdict), &cfg, t0);
        let c = w.condition.clone().unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some("RnicFault"))
        );
        assert_eq!(w.taints, None, "taint is opt-in");
        node.condition = Some(c);
        // Unchanged within the heartbeat: nothing; after it: heartbeat only.
        let t1 = t0 + SignedDuration::from_secs(10);
        assert_eq!(plan(&node, Some(&verdict), &cfg, t1), Writes::default());
        let t2 = t0 + SignedDuration::from_secs(61);
        let c2 = plan(&node, Some(&verdict), &cfg, t2).condition.unwrap();
        assert_eq!(c2.last_transition_time, Some(Time(t0)));
        assert_eq!(c2.last_heartbeat_time, Some(Time(t2)));
        // Resolved: status False with a new transition time.
        let c3 = plan(&node, None, &cfg, t2).condition.unwrap();
        assert_eq!(
            (c3.status.as_str(), c3.reason.as_deref()),
            ("False", Some(REASON_CLEAR))
        );
        assert_eq!(c3.last_transition_time, Some(Time(t2)));
        node.condition = Some(c3);
        assert_eq!(
            plan(&node, None, &cfg, t2 + SignedDuration::from_secs(600)),
            Writes::default()
        );
    }

    #[test]
    fn the_taint_comes_and_goes_and_others_stay() {
        let cfg = KubernetesConfig {
            taint: true,
            ..Default::default()
        };
        let other = Taint {
            key: "gpu".into(),
            value: None,
            effect: "NoExecute".into(),
            time_added: None,
        };
        let mut node = NodeFacts {
            placement: NodeLabels::default(),
            condition: None,
            taints: vec![other.clone()],
            resource_version: Some("7".into()),
        };
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let verdict = Verdict {
            reason: "RnicFault",
            message: "m".into(),
        };
        let taints = plan(&node, Some(&verdict), &cfg, now).taints.unwrap();
        assert_eq!(taints.len(), 2);
        assert_eq!(taints[1].key, cfg.taint_key);
        assert_eq!(taints[1].effect, "NoSchedule");
        node.taints = taints;
        assert_eq!(plan(&node, Some(&verdict), &cfg, now).taints, None);
        assert_eq!(
            plan(&node, None, &cfg, now).taints,
            Some(vec![other.clone()])
        );
        // Turned off while tainted: the taint goes.
        let off = KubernetesConfig::default();
        assert_eq!(
            plan(&node, Some(&verdict), &off, now).taints,
            Some(vec![other])
        );
    }
}
