//! Node verdicts against the local API server: an active RNIC problem sets the node
//! condition within one diagnosis tick (1 s by default) and resolution clears it; the
//! taint only when enabled; link and switch problems never touch a node.

mod apiserver;

use apiserver::ApiServer;
use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use kube::api::ObjectMeta;
use rocemesh_k8s::{KubernetesConfig, ProblemSource};
use rocemesh_proto::api::{ComponentKind, Problem, ProblemKind};
use rocemesh_proto::testing::active_problem;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The analyzer's default diagnosis tick.
const TICK: Duration = Duration::from_secs(1);
const DEADLINE: Duration = Duration::from_secs(30);
const CONDITION: &str = "RocemeshRnicProblem";

fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "nvidia.com/gpu".into(),
                value: Some("present".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn problem(id: i64, kind: ProblemKind, ck: ComponentKind, component: &str) -> Problem {
    active_problem(id, kind, ck, component, "ToR-mesh loss 40%")
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

fn status_of(api: &ApiServer, node: &str) -> Option<String> {
    api.condition(node, CONDITION).map(|c| c.status)
}

fn our_taints(api: &ApiServer, node: &str) -> Vec<String> {
    api.node(node)
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

async fn scenario(taint: bool) {
    let api = ApiServer::start(Duration::from_millis(200)).await;
    for n in ["n0", "n1", "n2"] {
        api.put_node(&node(n));
    }
    let active: Arc<Mutex<Vec<Problem>>> = Arc::default();
    // Whether this process is the deployment's node-verdict writer (scale-out lease).
    let writer = Arc::new(AtomicBool::new(true));
    let source: ProblemSource = {
        let (active, writer) = (active.clone(), writer.clone());
        Arc::new(move || {
            let now = writer
                .load(Ordering::SeqCst)
                .then(|| active.lock().unwrap().clone());
            Box::pin(async move { now })
        })
    };
    let cfg = KubernetesConfig {
        enabled: true,
        taint,
        verdict_poll: Duration::from_millis(200),
        ..Default::default()
    };
    let cancel = CancellationToken::new();
    let run = tokio::spawn(rocemesh_k8s::run(
        api.client(),
        cfg,
        None,
        Some(source),
        cancel.clone(),
    ));
    // Network-side problems on components named like a node: nothing is written.
    *active.lock().unwrap() = vec![
        problem(1, ProblemKind::LinkFault, ComponentKind::Link, "n1"),
        problem(2, ProblemKind::SwitchFault, ComponentKind::Switch, "n1"),
        problem(
            3,
            ProblemKind::HighLatency,
            ComponentKind::Rnic,
            "n1/mlx5_0",
        ),
    ];
    tokio::time::sleep(4 * Duration::from_millis(200)).await;
    assert!(
        api.requests().iter().all(|r| r.method != "PATCH"),
        "network problems touched a node"
    );

    // An RNIC problem on n1 and a host-down on n2.
    active.lock().unwrap().extend([
        problem(4, ProblemKind::RnicFault, ComponentKind::Rnic, "n1/mlx5_3"),
        problem(5, ProblemKind::HostDown, ComponentKind::Host, "n2"),
    ]);
    let took = wait_until("conditions on n1 and n2", || {
        status_of(&api, "n1").as_deref() == Some("True")
            && status_of(&api, "n2").as_deref() == Some("True")
    })
    .await;
    // Five polls of slack: the fake server, the analyzer stand-in and this test share one
    // thread of a loaded machine. A condition that waited for a re-list or a resync would
    // take far longer.
    assert!(
        took < 5 * TICK,
        "condition set {took:?} after the problem, over five ticks"
    );
    let c = api.condition("n1", CONDITION).unwrap();
    assert_eq!(c.reason.as_deref(), Some("RnicFault"));
    assert!(c.message.as_deref().unwrap().contains("n1/mlx5_3"), "{c:?}");
    assert!(c.last_heartbeat_time.is_some() && c.last_transition_time.is_some());
    assert_eq!(
        api.condition("n2", CONDITION).unwrap().reason.as_deref(),
        Some("HostDown")
    );
    assert_eq!(status_of(&api, "n0"), None, "a healthy node is left alone");
    let want_taints = |tainted: bool| {
        let mut t = vec!["nvidia.com/gpu:NoSchedule".to_string()];
        if tainted {
            t.push("rocemesh.io/rnic-problem:NoSchedule".into());
        }
        t
    };
    if taint {
        wait_until("n1 and n2 tainted", || {
            our_taints(&api, "n1") == want_taints(true)
                && our_taints(&api, "n2") == want_taints(true)
        })
        .await;
    }
    // A few polls later nothing was written again (the heartbeat is a minute).
    let patches = |api: &ApiServer| {
        api.requests()
            .iter()
            .filter(|r| r.method == "PATCH")
            .count()
    };
    let before = patches(&api);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        patches(&api),
        before,
        "unchanged verdicts are not rewritten"
    );

    // Another instance holds the writer lease: what this one sees changes no node.
    writer.store(false, Ordering::SeqCst);
    let saved = std::mem::take(&mut *active.lock().unwrap());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(patches(&api), before, "a non-writer instance wrote nodes");
    *active.lock().unwrap() = saved;
    writer.store(true, Ordering::SeqCst);

    // Resolution clears both.
    active.lock().unwrap().retain(|p| p.id != 4);
    wait_until("n1 cleared", || {
        status_of(&api, "n1").as_deref() == Some("False")
    })
    .await;
    let c = api.condition("n1", CONDITION).unwrap();
    assert_eq!(c.reason.as_deref(), Some("NoRnicProblem"));
    assert_eq!(status_of(&api, "n2").as_deref(), Some("True"));
    if taint {
        wait_until("n1 untainted", || {
            our_taints(&api, "n1") == want_taints(false)
        })
        .await;
        assert_eq!(our_taints(&api, "n2"), want_taints(true));
    }
    cancel.cancel();
    run.await.unwrap();

    let paths: BTreeSet<String> = api
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.path.clone())
        .collect();
    let expected: BTreeSet<String> = ["n1", "n2"]
        .iter()
        .flat_map(|n| {
            let mut p = vec![format!("/api/v1/nodes/{n}/status")];
            if taint {
                p.push(format!("/api/v1/nodes/{n}"));
            }
            p
        })
        .collect();
    assert_eq!(
        paths, expected,
        "taint {taint}: only n1 and n2, taints only when enabled"
    );
    api.assert_requests_are_listed();
}

#[tokio::test]
async fn an_rnic_problem_sets_the_condition_and_resolution_clears_it() {
    scenario(false).await;
}

#[tokio::test]
async fn the_taint_comes_and_goes_only_when_enabled() {
    scenario(true).await;
}
