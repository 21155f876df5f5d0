//! From pods to task specs, and the controller brought in line with them.
//!
//! Level-triggered: every pass derives the whole desired set from the mirrored pods and
//! the registered RNICs and applies the difference, so a missed event, a re-list after a
//! watch expiry or a controller restart converge to the same tasks, never duplicates.

use crate::pods::{PodFacts, TASK_PREFIX};
use rocemesh_controller::ControllerState;
use rocemesh_proto::api::{TaskEndpoint, TaskSpec};
use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

/// A registered RNIC of a host: name, address, rail.
pub(crate) type HostRnic = (String, IpAddr, Option<u32>);

/// The tasks the pods describe, by name. A pod's endpoints are its RDMA addresses that a
/// registered RNIC of its node holds (every RNIC of the node under host networking),
/// ordered by rail then name; pods are in rank order, then by name. An RNIC two pods claim
/// (host-network pods sharing a node) counts once, for the lower rank. A task needs two
/// endpoints: a job with fewer has nothing to probe yet.
pub(crate) fn desired<'a>(
    pods: impl IntoIterator<Item = &'a PodFacts>,
    rnics_of: impl Fn(&str) -> Vec<HostRnic>,
) -> BTreeMap<String, TaskSpec> {
    let mut by_task: BTreeMap<&str, Vec<&PodFacts>> = BTreeMap::new();
    for p in pods {
        by_task.entry(p.task.as_str()).or_default().push(p);
    }
    let mut out = BTreeMap::new();
    for (task, mut pods) in by_task {
        pods.sort_by(|a, b| (&a.rank, &a.name).cmp(&(&b.rank, &b.name)));
        let mut seen = HashSet::new();
        let mut endpoints = Vec::new();
        for pod in pods {
            let Some(node) = &pod.node else { continue };
            let mut rnics: Vec<HostRnic> = rnics_of(node)
                .into_iter()
                .filter(|(_, ip, _)| pod.host_network || pod.ips.contains(ip))
                .collect();
            rnics.sort_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
            for (rnic, _, _) in rnics {
                if seen.insert((node.clone(), rnic.clone())) {
                    endpoints.push(TaskEndpoint {
                        host: node.clone(),
                        rnic,
                        rail: None,
                        namespace: Some(pod.namespace.clone()),
                        pod: Some(pod.name.clone()),
                        ready: pod.ready,
                    });
                }
            }
        }
        if endpoints.len() >= 2 {
            out.insert(
                task.to_string(),
                TaskSpec {
                    name: task.to_string(),
                    endpoints,
                },
            );
        }
    }
    out
}

/// Brings the controller's `k8s/` tasks in line with `desired`: each synced (created,
/// readiness written, or replaced), every other `k8s/` task deleted. Tasks of other
/// names (POSTed by hand) are left alone. A refusal (a task over the pair bound) is
/// logged and the rest go on.
pub(crate) async fn reconcile(controller: &ControllerState, desired: BTreeMap<String, TaskSpec>) {
    for name in controller.task_names() {
        if name.starts_with(TASK_PREFIX) && !desired.contains_key(&name) {
            match controller.delete_task_named(&name).await {
                Ok(_) => tracing::info!(task = %name, "job gone: task deleted"),
                Err(e) => tracing::warn!(task = %name, "cannot delete task: {e}"),
            }
        }
    }
    for (name, spec) in desired {
        if let Err(e) = controller.sync_task(spec).await {
            tracing::warn!(task = %name, "cannot sync task: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, rank: u64, node: &str, ready: bool, ips: &[&str]) -> PodFacts {
        PodFacts {
            task: "k8s/ml/task/t".into(),
            rank: (String::new(), vec![rank]),
            namespace: "ml".into(),
            name: name.into(),
            node: Some(node.into()),
            ready,
            host_network: ips.is_empty(),
            ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
        }
    }

    fn rnics(node: &str) -> Vec<HostRnic> {
        let n: u8 = node.trim_start_matches("n").parse().unwrap();
        vec![
            (
                "mlx5_1".into(),
                format!("10.1.{n}.1").parse().unwrap(),
                Some(1),
            ),
            (
                "mlx5_0".into(),
                format!("10.0.{n}.1").parse().unwrap(),
                Some(0),
            ),
        ]
    }

    #[test]
    fn endpoints_follow_rank_then_rail_and_only_registered_addresses() {
        // Rank 1 on n2 (Multus, one of its RNICs), rank 0 on n1 (host network: both).
        let pods = [
            pod("w-1", 1, "n2", false, &["10.1.2.1", "192.0.2.1"]),
            pod("w-0", 0, "n1", true, &[]),
        ];
        let d = desired(&pods, rnics);
        let t = &d["k8s/ml/task/t"];
        let got: Vec<(&str, &str, bool)> = t
            .endpoints
            .iter()
            .map(|e| (e.host.as_str(), e.rnic.as_str(), e.ready))
            .collect();
        assert_eq!(
            got,
            [
                ("n1", "mlx5_0", true),
                ("n1", "mlx5_1", true),
                ("n2", "mlx5_1", false)
            ]
        );
        assert_eq!(t.endpoints[2].pod.as_deref(), Some("w-1"));
    }

    #[test]
    fn fewer_than_two_endpoints_is_no_task_and_shared_rnics_count_once() {
        let one = [pod("w-0", 0, "n1", true, &["10.0.1.1"])];
        assert!(desired(&one, rnics).is_empty());
        let shared = [pod("a", 0, "n1", true, &[]), pod("b", 1, "n1", true, &[])];
        let d = desired(&shared, rnics);
        let pods: Vec<_> = d["k8s/ml/task/t"]
            .endpoints
            .iter()
            .map(|e| e.pod.clone().unwrap())
            .collect();
        assert_eq!(pods, ["a", "a"]);
        let mut unscheduled = pod("w-0", 0, "n1", true, &[]);
        unscheduled.node = None;
        assert!(desired(&[unscheduled], rnics).is_empty());
    }
}
