//! The one loop: pod and node watches in, tasks, placements and node verdicts out.

use crate::config::KubernetesConfig;
use crate::mirror::Mirror;
use crate::pods::{self, PodFacts};
use crate::tasks;
use crate::verdicts::{self, NodeFacts, Writes};
use futures_util::future::BoxFuture;
use futures_util::stream::{self, BoxStream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use rocemesh_controller::ControllerState;
use rocemesh_controller::topology::NodeLabels;
use rocemesh_proto::api::Problem;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where node verdicts come from: the deployment's active problems, or `None` when this
/// process is not the one that writes node verdicts now (another analyzer instance is).
pub type ProblemSource = Arc<dyn Fn() -> BoxFuture<'static, Option<Vec<Problem>>> + Send + Sync>;

/// A client of the cluster `cfg.kubeconfig` names, else of the cluster this process runs
/// in (its service account), else of the current kubeconfig context.
pub async fn connect(cfg: &KubernetesConfig) -> anyhow::Result<Client> {
    let config = match &cfg.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| anyhow::anyhow!("kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!("no Kubernetes API (in-cluster service account or kubeconfig): {e}")
        })?,
    };
    Client::try_from(config).map_err(|e| anyhow::anyhow!("Kubernetes client: {e}"))
}

/// How long pod events gather before tasks are re-derived (a list arrives as a burst).
const SETTLE: Duration = Duration::from_millis(20);

type Events<K> = BoxStream<'static, (usize, Result<watcher::Event<K>, watcher::Error>)>;

/// Runs until `cancel`: with `controller`, pods of training jobs become its tasks and node
/// labels place its RNICs; with `problems`, active RNIC and host problems become node
/// conditions (and taints when enabled). Watches that fail are retried with back-off; a
/// watch that expired (410 Gone) re-lists.
pub async fn run(
    client: Client,
    cfg: KubernetesConfig,
    controller: Option<ControllerState>,
    problems: Option<ProblemSource>,
    cancel: CancellationToken,
) {
    let nodes_api: Api<Node> = Api::all(client.clone());
    let pods_api: Api<Pod> = match &cfg.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let labels = if controller.is_some() {
        pods::watched_labels(&cfg)
    } else {
        Vec::new()
    };
    let mut pod_events: Events<Pod> =
        stream::select_all(labels.iter().enumerate().map(|(i, l)| {
            watcher(pods_api.clone(), watcher::Config::default().labels(l))
                .default_backoff()
                .map(move |e| (i, e))
                .boxed()
        }))
        .boxed();
    let mut node_events = watcher(nodes_api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut state = State {
        cfg: &cfg,
        pods: labels.iter().map(|_| Mirror::default()).collect(),
        nodes: Mirror::default(),
        placed: HashMap::new(),
    };
    let mut due: Option<Instant> = None;
    let mut resync = tokio::time::interval(cfg.resync);
    let mut verdict_poll = tokio::time::interval(cfg.verdict_poll);
    let far = || Instant::now() + Duration::from_secs(3600);
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            Some((i, event)) = pod_events.next(), if !labels.is_empty() => match event {
                Ok(event) => {
                    if state.pods[i].apply(event, |p| pods::facts(p, &cfg)) {
                        due.get_or_insert_with(|| Instant::now() + SETTLE);
                    }
                }
                Err(e) => tracing::warn!(label = %labels[i], "pod watch: {e}"),
            },
            Some(event) = node_events.next() => match event {
                Ok(watcher::Event::Apply(n)) if behind(&n, &state.nodes) => {}
                Ok(event) => {
                    if state.nodes.apply(event, |n| Some(verdicts::node_facts(n, &cfg)))
                        && let Some(c) = &controller
                    {
                        state.place(c).await;
                    }
                }
                Err(e) => tracing::warn!("node watch: {e}"),
            },
            _ = resync.tick(), if controller.is_some() => {
                due.get_or_insert_with(Instant::now);
            }
            () = tokio::time::sleep_until(due.unwrap_or_else(far)), if due.is_some() => {
                if let Some(c) = &controller
                    && state.pods.iter().all(Mirror::synced)
                {
                    due = None;
                    let desired = tasks::desired(
                        state.pods.iter().flat_map(|m| m.live().values()),
                        |host| c.host_rnics(host),
                    );
                    tasks::reconcile(c, desired).await;
                } else {
                    due = Some(Instant::now() + SETTLE);
                }
            }
            _ = verdict_poll.tick(), if problems.is_some() => {
                if let Some(p) = &problems
                    && let Some(active) = p().await
                {
                    state.write_verdicts(&nodes_api, &active).await;
                }
            }
        }
    }
}

/// A node event older than the node as this loop last wrote it (the watch lags behind the
/// patch's answer): applying it would plan the same write again. Versions that are not
/// integers (not etcd revisions) are never taken as older.
fn behind(node: &Node, nodes: &Mirror<NodeFacts>) -> bool {
    let version = |v: Option<&String>| v.and_then(|v| v.parse::<u64>().ok());
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match (
        version(node.metadata.resource_version.as_ref()),
        version(
            nodes
                .live()
                .get(name)
                .and_then(|f| f.resource_version.as_ref()),
        ),
    ) {
        (Some(event), Some(written)) => event < written,
        _ => false,
    }
}

struct State<'a> {
    cfg: &'a KubernetesConfig,
    /// One mirror per watched label (the same pod may appear in several).
    pods: Vec<Mirror<PodFacts>>,
    nodes: Mirror<NodeFacts>,
    /// The placement labels last handed to the controller, per node.
    placed: HashMap<String, NodeLabels>,
}

impl State<'_> {
    /// Hands changed placement labels to the controller; nodes gone since lose theirs.
    async fn place(&mut self, controller: &ControllerState) {
        let mut changes: Vec<(String, NodeLabels)> = self
            .nodes
            .live()
            .iter()
            .filter(|(name, f)| self.placed.get(*name) != Some(&f.placement))
            .map(|(name, f)| (name.clone(), f.placement.clone()))
            .collect();
        if self.nodes.synced() {
            changes.extend(
                self.placed
                    .keys()
                    .filter(|n| !self.nodes.live().contains_key(*n))
                    .map(|n| (n.clone(), NodeLabels::default())),
            );
        }
        for (node, labels) in changes {
            match controller.set_node_labels(&node, labels.clone()).await {
                Ok(_) if labels.is_empty() && !self.nodes.live().contains_key(&node) => {
                    self.placed.remove(&node);
                }
                Ok(_) => {
                    self.placed.insert(node, labels);
                }
                Err(e) => tracing::warn!(node, "cannot place the node's RNICs: {e:#}"),
            }
        }
    }

    /// Brings every node's condition and taint in line with the active problems.
    async fn write_verdicts(&mut self, api: &Api<Node>, problems: &[Problem]) {
        if !self.nodes.synced() {
            return;
        }
        let verdicts = verdicts::verdicts(problems);
        let now = Timestamp::now();
        let plans: Vec<(String, Writes)> = self
            .nodes
            .live()
            .iter()
            .map(|(name, f)| {
                (
                    name.clone(),
                    verdicts::plan(f, verdicts.get(name), self.cfg, now),
                )
            })
            .filter(|(_, w)| *w != Writes::default())
            .collect();
        for (name, writes) in plans {
            if let Some(node) = self.write(api, &name, writes).await {
                // The answer is the node as written: the next poll plans from it even if
                // the watch has not delivered it yet.
                self.nodes.set(&name, verdicts::node_facts(&node, self.cfg));
            }
        }
    }

    /// Patches one node: the condition into its status (merged by type), the taint list
    /// over the version read (a conflict is retried at the next poll).
    async fn write(&self, api: &Api<Node>, name: &str, writes: Writes) -> Option<Node> {
        let params = PatchParams::default();
        let mut latest = None;
        if let Some(condition) = writes.condition {
            let status = condition.status.clone();
            let patch = serde_json::json!({"status": {"conditions": [condition]}});
            match api
                .patch_status(name, &params, &Patch::Strategic(patch))
                .await
            {
                Ok(node) => {
                    tracing::info!(
                        node = name,
                        status,
                        "node condition {} written",
                        self.cfg.condition_type
                    );
                    latest = Some(node);
                }
                Err(e) => tracing::warn!(node = name, "cannot write the node condition: {e}"),
            }
        }
        if let Some(taints) = writes.taints {
            let version = latest
                .as_ref()
                .and_then(|n: &Node| n.metadata.resource_version.clone())
                .or_else(|| {
                    self.nodes
                        .live()
                        .get(name)
                        .and_then(|f| f.resource_version.clone())
                });
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": version},
                "spec": {"taints": taints},
            });
            match api.patch(name, &params, &Patch::Merge(patch)).await {
                Ok(node) => {
                    tracing::info!(node = name, taints = taints.len(), "node taints written");
                    latest = Some(node);
                }
                Err(e) => tracing::warn!(node = name, "cannot write the node taints: {e}"),
            }
        }
        latest
    }
}
