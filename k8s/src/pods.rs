//! What a pod means to task discovery: the training job it belongs to (by the labels of
//! the common job controllers, else the configured task label), its rank in the job, its
//! node, readiness, and the addresses of its RDMA interfaces.

use crate::config::KubernetesConfig;
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Prefix of the names of tasks this crate owns (`k8s/<namespace>/<source>/<job>`).
pub const TASK_PREFIX: &str = "k8s/";

/// Multus writes the pod's attached networks here (JSON array).
pub(crate) const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";

/// Where a pod sits in its job: a group (replica type, replicated job) and indices within
/// it, compared in that order, then the pod name.
pub(crate) type Rank = (String, Vec<u64>);

/// What task discovery keeps of one pod (the object itself is dropped).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodFacts {
    /// Task name, `k8s/<namespace>/<source>/<job>`.
    pub(crate) task: String,
    pub(crate) rank: Rank,
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// Node the pod is bound to (`None`: not scheduled yet).
    pub(crate) node: Option<String>,
    /// Running, Ready and not being deleted.
    pub(crate) ready: bool,
    /// Uses the node's network namespace: every RNIC of the node is the pod's.
    pub(crate) host_network: bool,
    /// Addresses of its RDMA interfaces (Multus network status).
    pub(crate) ips: Vec<IpAddr>,
}

/// One job controller's labels: the label naming the job, and how the rank is read.
struct JobLabels {
    source: &'static str,
    job: &'static str,
    /// Label whose value is appended to the job name (LeaderWorkerSet groups are separate
    /// replicas of a model: each group is its own task).
    job_suffix: Option<&'static str>,
    group: Option<&'static str>,
    /// Indices, each read from the labels, else the annotations.
    indices: &'static [&'static str],
}

/// The job controllers recognised, first match wins.
const KNOWN_JOBS: [JobLabels; 4] = [
    JobLabels {
        source: "kubeflow",
        job: "training.kubeflow.org/job-name",
        job_suffix: None,
        group: Some("training.kubeflow.org/replica-type"),
        indices: &["training.kubeflow.org/replica-index"],
    },
    JobLabels {
        source: "jobset",
        job: "jobset.sigs.k8s.io/jobset-name",
        job_suffix: None,
        group: Some("jobset.sigs.k8s.io/replicatedjob-name"),
        indices: &[
            "jobset.sigs.k8s.io/job-index",
            "batch.kubernetes.io/job-completion-index",
        ],
    },
    JobLabels {
        source: "volcano",
        job: "volcano.sh/job-name",
        job_suffix: None,
        group: Some("volcano.sh/task-spec"),
        indices: &["volcano.sh/task-index"],
    },
    JobLabels {
        source: "lws",
        job: "leaderworkerset.sigs.k8s.io/name",
        job_suffix: Some("leaderworkerset.sigs.k8s.io/group-index"),
        group: None,
        indices: &["leaderworkerset.sigs.k8s.io/worker-index"],
    },
];

/// The label keys whose pods are watched (one label-selected watch each, so the API
/// server sends training pods only).
pub(crate) fn watched_labels(cfg: &KubernetesConfig) -> Vec<String> {
    KNOWN_JOBS
        .iter()
        .map(|j| j.job.to_string())
        .chain([cfg.task_label.clone()])
        .collect()
}

/// The facts of a pod of a training job; `None` for any other pod.
pub(crate) fn facts(pod: &Pod, cfg: &KubernetesConfig) -> Option<PodFacts> {
    let meta = &pod.metadata;
    let namespace = meta.namespace.clone()?;
    let name = meta.name.clone()?;
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    let value = |key: &str| labels.get(key).or_else(|| annotations.get(key));
    let index = |key: &str| value(key).and_then(|v| v.parse::<u64>().ok());
    let (source, job, rank) = KNOWN_JOBS
        .iter()
        .find_map(|j| {
            let mut job = labels.get(j.job)?.clone();
            if let Some(suffix) = j.job_suffix {
                job = format!("{job}-{}", value(suffix)?);
            }
            let group = j
                .group
                .and_then(&value)
                .map(|g| g.to_ascii_lowercase())
                .unwrap_or_default();
            let indices = j.indices.iter().filter_map(|k| index(k)).collect();
            Some((j.source, job, (group, indices)))
        })
        .or_else(|| {
            let job = labels.get(&cfg.task_label)?.clone();
            let indices = index(&cfg.rank_label).into_iter().collect();
            Some(("task", job, (String::new(), indices)))
        })?;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
    let ready_condition = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Some(PodFacts {
        task: format!("{TASK_PREFIX}{namespace}/{source}/{job}"),
        rank,
        node: spec.and_then(|s| s.node_name.clone()),
        ready: running && ready_condition && meta.deletion_timestamp.is_none(),
        host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
        ips: annotations
            .get(NETWORK_STATUS)
            .map(|text| rdma_ips(text, &cfg.rdma_networks))
            .unwrap_or_default(),
        namespace,
        name,
    })
}

/// One entry of the network-status annotation (fields rocemesh reads).
#[derive(Deserialize)]
struct NetworkStatus {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ips: Vec<String>,
    #[serde(default)]
    default: bool,
}

/// The addresses of the RDMA networks in a network-status annotation: the networks named
/// in `networks` (bare or `namespace/name`), or every non-default one when it is empty.
/// A malformed annotation yields none (the pod then has no endpoints, and is logged).
fn rdma_ips(text: &str, networks: &[String]) -> Vec<IpAddr> {
    let entries: Vec<NetworkStatus> = match serde_json::from_str(text) {
        Ok(e) => e,
        Err(e) => {
            tracing::debug!("unreadable {NETWORK_STATUS} annotation: {e}");
            return Vec::new();
        }
    };
    let wanted = |name: &str| {
        networks
            .iter()
            .any(|n| n == name || name.rsplit_once('/').is_some_and(|(_, bare)| bare == n))
    };
    entries
        .iter()
        .filter(|e| {
            if networks.is_empty() {
                !e.default
            } else {
                wanted(&e.name)
            }
        })
        .flat_map(|e| e.ips.iter().filter_map(|ip| ip.parse().ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use kube::api::ObjectMeta;

    fn pod(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        Pod {
            metadata: ObjectMeta {
                namespace: Some("ml".into()),
                name: Some("p-0".into()),
                labels: map(labels),
                annotations: map(annotations),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-a".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn each_job_controller_names_the_task_and_the_rank() {
        let cfg = KubernetesConfig::default();
        for (labels, annotations, task, rank) in [
            (
                vec![
                    ("training.kubeflow.org/job-name", "llm"),
                    ("training.kubeflow.org/replica-type", "Worker"),
                    ("training.kubeflow.org/replica-index", "7"),
                ],
                vec![],
                "k8s/ml/kubeflow/llm",
                ("worker".to_string(), vec![7]),
            ),
            (
                vec![
                    ("jobset.sigs.k8s.io/jobset-name", "js"),
                    ("jobset.sigs.k8s.io/replicatedjob-name", "workers"),
                    ("jobset.sigs.k8s.io/job-index", "1"),
                ],
                vec![("batch.kubernetes.io/job-completion-index", "3")],
                "k8s/ml/jobset/js",
                ("workers".to_string(), vec![1, 3]),
            ),
            (
                vec![
                    ("volcano.sh/job-name", "vj"),
                    ("volcano.sh/task-spec", "worker"),
                ],
                vec![("volcano.sh/task-index", "2")],
                "k8s/ml/volcano/vj",
                ("worker".to_string(), vec![2]),
            ),
            (
                vec![
                    ("leaderworkerset.sigs.k8s.io/name", "serve"),
                    ("leaderworkerset.sigs.k8s.io/group-index", "4"),
                    ("leaderworkerset.sigs.k8s.io/worker-index", "1"),
                ],
                vec![],
                "k8s/ml/lws/serve-4",
                (String::new(), vec![1]),
            ),
            (
                vec![("rocemesh.io/task", "mine"), ("rocemesh.io/rank", "12")],
                vec![],
                "k8s/ml/task/mine",
                (String::new(), vec![12]),
            ),
        ] {
            let f = facts(&pod(&labels, &annotations), &cfg).unwrap();
            assert_eq!(f.task, task);
            assert_eq!(f.rank, rank, "{task}");
            assert!(f.ready);
            assert_eq!(f.node.as_deref(), Some("node-a"));
        }
        assert_eq!(facts(&pod(&[("app", "web")], &[]), &cfg), None);
    }

    #[test]
    fn readiness_needs_running_ready_and_no_deletion() {
        let cfg = KubernetesConfig::default();
        let mut p = pod(&[("rocemesh.io/task", "t")], &[]);
        assert!(facts(&p, &cfg).unwrap().ready);
        p.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        assert!(!facts(&p, &cfg).unwrap().ready);
        let mut p = pod(&[("rocemesh.io/task", "t")], &[]);
        p.status.as_mut().unwrap().phase = Some("Failed".into());
        assert!(!facts(&p, &cfg).unwrap().ready);
        let mut p = pod(&[("rocemesh.io/task", "t")], &[]);
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(!facts(&p, &cfg).unwrap().ready);
    }

    #[test]
    fn rdma_addresses_come_from_the_network_status() {
        let status = r#"[
          {"name": "cbr0", "interface": "eth0", "ips": ["10.244.1.5"], "default": true},
          {"name": "ml/rdma-net-0", "interface": "net1", "ips": ["192.168.10.5"], "device-info": {"type": "pci"}},
          {"name": "storage", "interface": "net2", "ips": ["172.16.0.9", "fd00::9"]}
        ]"#;
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            rdma_ips(status, &[]),
            vec![ip("192.168.10.5"), ip("172.16.0.9"), ip("fd00::9")]
        );
        assert_eq!(
            rdma_ips(status, &["rdma-net-0".into()]),
            vec![ip("192.168.10.5")]
        );
        assert_eq!(
            rdma_ips(status, &["ml/rdma-net-0".into()]),
            vec![ip("192.168.10.5")]
        );
        assert!(rdma_ips("{not json", &[]).is_empty());
        let cfg = KubernetesConfig::default();
        let f = facts(
            &pod(&[("rocemesh.io/task", "t")], &[(NETWORK_STATUS, status)]),
            &cfg,
        )
        .unwrap();
        assert_eq!(f.ips.len(), 3);
    }
}
