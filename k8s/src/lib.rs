//! Kubernetes: training tasks discovered from the pods of training jobs (SkeletonHunter
//! §5.1 incremental activation as pods turn Ready), ToRs from node labels, and RNIC and
//! host verdicts written back to the nodes as a condition and an opt-in taint.
//!
//! The controller watches, not the agents: a task spans many nodes, so only a cluster-wide
//! view can assemble it and order its ranks; one watch per label on the API server instead
//! of one per node; and the ClusterRole to read pods and patch nodes lives in one
//! Deployment instead of on every GPU node.

mod config;
mod mirror;
mod pods;
pub mod rbac;
mod run;
mod tasks;
mod verdicts;

pub use config::{DEFAULT_TASK_LABEL, DEFAULT_TOR_LABEL, KubernetesConfig};
pub use kube::Client;
pub use pods::TASK_PREFIX;
pub use run::{ProblemSource, connect, run};
