//! Kubernetes end to end, root only: a namespace lab with real agents and a server whose
//! `[kubernetes]` section points at the local list/watch API server (k8s/tests/apiserver).
//! A job's pods appear → its task and skeleton pinglist activate as they turn Ready → an
//! RNIC fault injected in the testbed sets the node condition → the repair clears it.

#[path = "../../k8s/tests/apiserver/mod.rs"]
mod apiserver;
mod support;

use apiserver::ApiServer;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodSpec, PodStatus};
use kube::api::ObjectMeta;
use rocemesh_k8s::KubernetesConfig;
use rocemesh_proto::api::TaskInfo;
use rocemesh_testbed::Fault;
use std::time::{Duration, Instant};

const PREFIX: &str = "rmk8";
const CONDITION: &str = "RocemeshRnicProblem";

/// Polls `cond` until it holds (support::wait_for); the time it took.
fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    support::wait_for(what, timeout, || cond().then_some(()));
    start.elapsed()
}

/// A host-network pod of job `e2e` (rocemesh.io/task label) with rank `rank` on `host`.
fn pod(host: &str, rank: usize, ready: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some("ml".into()),
            name: Some(format!("e2e-{rank}")),
            labels: Some(
                [
                    ("rocemesh.io/task".to_string(), "e2e".to_string()),
                    ("rocemesh.io/rank".to_string(), rank.to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(host.into()),
            host_network: Some(true),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

#[test]
fn pods_become_a_task_and_an_rnic_fault_marks_its_node() {
    if !support::is_root() {
        println!("skipping k8s_e2e: needs root (network namespaces)");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let api = rt.block_on(ApiServer::start(Duration::from_secs(1)));
    let kubeconfig = support::scratch_dir("k8s-e2e").join("kubeconfig");
    api.write_kubeconfig(&kubeconfig);
    let spec = rocemesh_lab::eval::lab_spec(PREFIX);
    let hosts: Vec<String> = (0..usize::from(spec.tors) * usize::from(spec.hosts_per_tor))
        .map(|i| format!("h{i}"))
        .collect();
    for h in &hosts {
        api.put_node(&Node {
            metadata: ObjectMeta {
                name: Some(h.clone()),
                ..Default::default()
            },
            ..Default::default()
        });
    }
    for (rank, h) in hosts.iter().enumerate() {
        api.put_pod(&pod(h, rank, false));
    }
    let lab =
        rocemesh_lab::lab::Lab::up_with(spec, &rocemesh_lab::lab::LabTiming::default(), |cfg| {
            // An RNIC verdict stays a minute after its evidence by default; the repair is to
            // show within this test's deadline.
            cfg.analyzer.diagnosis.rnic_sticky_ms = 5_000;
            cfg.kubernetes = KubernetesConfig {
                enabled: true,
                kubeconfig: Some(kubeconfig.clone()),
                resync: Duration::from_millis(500),
                ..Default::default()
            };
        })
        .expect("lab up");
    lab.wait_ready(Duration::from_secs(60))
        .expect("agents ready");

    let task = || -> Option<TaskInfo> {
        lab.get::<Vec<TaskInfo>>("/api/v1/tasks")
            .ok()?
            .into_iter()
            .find(|t| t.name == "k8s/ml/task/e2e")
    };
    wait_for("the task with every host", Duration::from_secs(30), || {
        task().is_some_and(|t| t.endpoints.len() == hosts.len() && t.active_pairs == 0)
    });
    for (rank, h) in hosts.iter().enumerate() {
        api.put_pod(&pod(h, rank, true));
    }
    let n = hosts.len();
    wait_for("every pair active", Duration::from_secs(30), || {
        task().is_some_and(|t| t.active_pairs == n * (n - 1) / 2)
    });

    let fault = lab
        .fabric
        .apply(&Fault::RnicDown {
            rnic: "h3r0".into(),
        })
        .expect("inject rnic down");
    let took = wait_for("the condition on h3", Duration::from_secs(60), || {
        api.condition("h3", CONDITION)
            .is_some_and(|c| c.status == "True")
    });
    println!("condition set {took:?} after the fault");
    let c = api.condition("h3", CONDITION).unwrap();
    assert_eq!(c.reason.as_deref(), Some("RnicFault"), "{c:?}");
    assert!(
        c.message.as_deref().unwrap_or("").contains("h3/r0"),
        "{c:?}"
    );
    for h in hosts.iter().filter(|h| *h != "h3") {
        assert_eq!(api.condition(h, CONDITION), None, "{h} was marked");
    }
    lab.fabric.clear(fault.id).expect("repair");
    wait_for("the condition cleared", Duration::from_secs(90), || {
        api.condition("h3", CONDITION)
            .is_some_and(|c| c.status == "False")
    });
    api.assert_requests_are_listed();
    drop(lab);
    drop(rt);
}
