//! Task discovery and node placement against a local list/watch API server (tests/apiserver)
//! and a real controller over HTTP: pods of a 16-rank job become a task whose endpoints
//! activate as pods turn Ready (checked in the pinglists served), job deletion ends it,
//! a watch expiry (410 Gone) re-lists without losing or doubling tasks, bookmarks move the
//! resume point, and a node whose ToR label changes moves its RNICs.

mod apiserver;
#[path = "../../controller/tests/common/mod.rs"]
mod http;

use apiserver::ApiServer;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodSpec, PodStatus};
use kube::api::ObjectMeta;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rocemesh_controller::{ControllerConfig, ControllerState};
use rocemesh_k8s::KubernetesConfig;
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{Pinglist, RegisterResponse, TaskInfo, TopologyInfo};
use rocemesh_store::test_databases;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const NS: &str = "train";
/// Generous deadline of every wait (a loaded 2-core machine).
const DEADLINE: Duration = Duration::from_secs(30);

fn labels(kv: &[(&str, String)]) -> Option<BTreeMap<String, String>> {
    Some(kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

fn node(name: &str, tor: Option<&str>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: labels(
                &tor.map(|t| ("topology.rocemesh.io/tor", t.to_string()))
                    .into_iter()
                    .collect::<Vec<_>>(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A Kubeflow PyTorchJob worker: rank `rank` on node `n{rank}`, its RDMA interface
/// (Multus) holding `ip`.
fn worker(job: &str, rank: usize, ip: &str, ready: bool) -> Pod {
    let status = json!([
        {"name": "k8s-pod-network", "interface": "eth0", "ips": [format!("10.244.{rank}.7")], "default": true},
        {"name": format!("{NS}/rdma-net"), "interface": "net1", "ips": [ip], "device-info": {"type": "pci", "version": "1.1.0"}}
    ]);
    Pod {
        metadata: ObjectMeta {
            namespace: Some(NS.into()),
            name: Some(format!("{job}-worker-{rank}")),
            labels: labels(&[
                ("training.kubeflow.org/job-name", job.to_string()),
                ("training.kubeflow.org/replica-type", "worker".to_string()),
                ("training.kubeflow.org/replica-index", rank.to_string()),
            ]),
            annotations: labels(&[("k8s.v1.cni.cncf.io/network-status", status.to_string())]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("n{rank}")),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some(if ready { "Running" } else { "Pending" }.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn rnic_ip(host: usize) -> String {
    format!("10.9.{}.{}", host / 200, host % 200 + 1)
}

/// Registers host `n{h}` with one RNIC `mlx5_0` on rail 0 (no ToR hint).
async fn register_host(addr: SocketAddr, h: usize) -> RegisterResponse {
    let body = json!({"host": format!("n{h}"), "epoch": 1, "rnics": [
        {"ifname": "mlx5_0", "ip": rnic_ip(h), "qpn": 100, "port": 4791, "rail": 0}
    ]});
    let r = http::register(addr, &body).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

async fn wait_for<T, F: Future<Output = Option<T>>>(what: &str, mut f: impl FnMut() -> F) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn tasks(addr: SocketAddr) -> Vec<TaskInfo> {
    http::get(addr, "/api/v1/tasks").await.json()
}

async fn task(addr: SocketAddr, name: &str) -> Option<TaskInfo> {
    tasks(addr).await.into_iter().find(|t| t.name == name)
}

/// The RNIC pairs (unordered) of the Service lists served to `hosts`.
async fn served_pairs(addr: SocketAddr, hosts: &[RegisterResponse]) -> BTreeSet<(u32, u32)> {
    let mut pairs = BTreeSet::new();
    for h in hosts {
        let list: Pinglist = http::get(addr, &format!("/api/v1/pinglists/{}", h.host_id))
            .await
            .json();
        for r in &list.rnics {
            for l in r.lists.iter().filter(|l| l.class == ProbeClass::Service) {
                for t in &l.entries {
                    pairs.insert((r.rnic_id.min(t.rnic_id), r.rnic_id.max(t.rnic_id)));
                }
            }
        }
    }
    pairs
}

fn all_pairs(ids: &[u32]) -> BTreeSet<(u32, u32)> {
    let mut out = BTreeSet::new();
    for (i, a) in ids.iter().enumerate() {
        for b in &ids[i + 1..] {
            out.insert((*a.min(b), *a.max(b)));
        }
    }
    out
}

struct Harness {
    srv: http::Server,
    cancel: CancellationToken,
    run: tokio::task::JoinHandle<()>,
}

impl Harness {
    async fn start(db: rocemesh_store::Db, api: ApiServer) -> Self {
        let state = ControllerState::new(db, ControllerConfig::default())
            .await
            .unwrap();
        let srv = http::serve_state(state.clone()).await;
        let cancel = CancellationToken::new();
        let cfg = KubernetesConfig {
            enabled: true,
            resync: Duration::from_millis(300),
            ..Default::default()
        };
        let run = tokio::spawn(rocemesh_k8s::run(
            api.client(),
            cfg,
            Some(state),
            None,
            cancel.clone(),
        ));
        Self { srv, cancel, run }
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.run.await.unwrap();
    }
}

#[tokio::test]
async fn a_sixteen_rank_job_activates_rank_by_rank_and_ends_with_its_pods() {
    let seed: u64 = std::env::var("K8S_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("seed {seed} (replay: K8S_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for (backend, db) in test_databases().await {
        let api = ApiServer::start(Duration::from_millis(5)).await;
        let h = Harness::start(db, api.clone()).await;
        let mut hosts = Vec::new();
        for n in 0..16 {
            api.put_node(&node(&format!("n{n}"), None));
            hosts.push(register_host(h.srv.addr, n).await);
        }
        let rnic_of: Vec<u32> = hosts.iter().map(|r| r.rnics[0].id).collect();
        for rank in 0..16 {
            api.put_pod(&worker("llm", rank, &rnic_ip(rank), false));
        }
        // A pod of another app is not a task.
        let mut web = worker("web", 0, &rnic_ip(0), true);
        web.metadata.labels = labels(&[("app", "web".into())]);
        api.put_pod(&web);
        let name = "k8s/train/kubeflow/llm";
        let t = wait_for("the task with 16 endpoints", || async {
            task(h.srv.addr, name)
                .await
                .filter(|t| t.endpoints.len() == 16)
        })
        .await;
        let order: Vec<&str> = t.endpoints.iter().map(|(e, _)| e.host.as_str()).collect();
        let expected: Vec<String> = (0..16).map(|r| format!("n{r}")).collect();
        assert_eq!(order, expected, "{backend}: endpoints in rank order");
        assert_eq!((t.active_pairs, t.basic_pairs), (0, 120), "{backend}");
        assert!(served_pairs(h.srv.addr, &hosts).await.is_empty());

        let mut ranks: Vec<usize> = (0..16).collect();
        ranks.shuffle(&mut rng);
        let mut ready: Vec<usize> = Vec::new();
        for (i, &rank) in ranks.iter().enumerate() {
            let at = Instant::now();
            api.put_pod(&worker("llm", rank, &rnic_ip(rank), true));
            wait_for("the endpoint's activation", || async {
                task(h.srv.addr, name)
                    .await
                    .filter(|t| t.endpoints[rank].0.ready)
            })
            .await;
            let took = at.elapsed();
            // Seconds of slack for a loaded machine's database writes; a lost watch event
            // never activates it at all.
            assert!(
                took < Duration::from_secs(10),
                "{backend}: rank {rank} active {took:?} after its pod's Ready"
            );
            ready.push(rank);
            if i == 4 || i == 15 {
                // Partial readiness: exactly the pairs of ready ranks are probed.
                let ids: Vec<u32> = ready.iter().map(|r| rnic_of[*r]).collect();
                assert_eq!(
                    served_pairs(h.srv.addr, &hosts).await,
                    all_pairs(&ids),
                    "{backend}: ready ranks {ready:?}"
                );
            }
        }
        let id = task(h.srv.addr, name).await.unwrap().id;
        // A failed pod deactivates its endpoint (the skeleton's pairs of it stop).
        let failed = ranks[0];
        let mut pod = worker("llm", failed, &rnic_ip(failed), false);
        pod.status.as_mut().unwrap().phase = Some("Failed".into());
        api.put_pod(&pod);
        let t = wait_for("the failed pod's deactivation", || async {
            task(h.srv.addr, name)
                .await
                .filter(|t| !t.endpoints[failed].0.ready)
        })
        .await;
        assert_eq!(
            (t.id, t.active_pairs),
            (id, 105),
            "{backend}: same task, 15 ready ranks"
        );
        let ids: Vec<u32> = ranks[1..].iter().map(|r| rnic_of[*r]).collect();
        assert_eq!(served_pairs(h.srv.addr, &hosts).await, all_pairs(&ids));

        // Job deletion: its pods go, and so does the task.
        for rank in 0..16 {
            api.delete_pod(NS, &format!("llm-worker-{rank}"));
        }
        wait_for("the task's end", || async {
            task(h.srv.addr, name).await.is_none().then_some(())
        })
        .await;
        assert!(served_pairs(h.srv.addr, &hosts).await.is_empty());
        assert!(tasks(h.srv.addr).await.is_empty(), "{backend}");
        api.assert_requests_are_listed();
        h.stop().await;
    }
}

#[tokio::test]
async fn an_expired_watch_relists_without_losing_or_doubling_tasks() {
    let (_, db) = test_databases().await.remove(0);
    let api = ApiServer::start(Duration::from_millis(100)).await;
    let h = Harness::start(db, api.clone()).await;
    for n in 0..12 {
        api.put_node(&node(&format!("n{n}"), None));
        register_host(h.srv.addr, n).await;
    }
    let job = |job: &str, ranks: std::ops::Range<usize>| {
        ranks
            .map(|r| worker(job, r, &rnic_ip(r), true))
            .collect::<Vec<_>>()
    };
    for p in job("a", 0..4).iter().chain(&job("b", 4..8)) {
        api.put_pod(p);
    }
    let a = wait_for("tasks a and b", || async {
        let ts = tasks(h.srv.addr).await;
        (ts.len() == 2 && ts.iter().all(|t| t.endpoints.len() == 4))
            .then(|| ts.into_iter().find(|t| t.name.ends_with("/a")).unwrap())
    })
    .await;

    // Bookmarks: a watch that ends normally resumes from the last bookmark, no re-list.
    let lists = |api: &ApiServer| {
        api.requests()
            .iter()
            .filter(|r| r.rbac() == ("pods".into(), "list"))
            .count()
    };
    let pod_lists = lists(&api);
    api.put_node(&node("n11", Some("unrelated-change")));
    let rv_now: u64 = api
        .node("n11")
        .metadata
        .resource_version
        .unwrap()
        .parse()
        .unwrap();
    // The bookmark past the node's change reaches each pod watch within a tick, at a time
    // a loaded machine decides: end the watches until every resumed one starts there.
    let start = Instant::now();
    loop {
        let marked = api.requests().len();
        api.end_watches();
        let resumed = wait_for("pod watches resumed", || async {
            let r: Vec<u64> = api.requests()[marked..]
                .iter()
                .filter(|r| r.rbac() == ("pods".into(), "watch"))
                .filter_map(|r| r.query.get("resourceVersion")?.parse().ok())
                .collect();
            (r.len() >= 5).then_some(r)
        })
        .await;
        if resumed.iter().all(|rv| *rv >= rv_now) {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "pod watches resume from the bookmark (>= {rv_now}), not their last pod event: {resumed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(lists(&api), pod_lists, "a resumed watch needs no list");
    for r in api.requests() {
        if r.rbac().1 == "watch" {
            assert_eq!(
                r.query.get("allowWatchBookmarks").map(String::as_str),
                Some("true")
            );
        }
    }

    // Expiry: history compacted, watches end with 410; meanwhile a pod of a goes, job b
    // goes, job c comes. The re-list must find exactly that.
    api.expire_watches();
    api.delete_pod(NS, "a-worker-3");
    for r in 4..8 {
        api.delete_pod(NS, &format!("b-worker-{r}"));
    }
    for p in job("c", 8..10) {
        api.put_pod(&p);
    }
    let ts = wait_for("tasks a (3 ranks) and c", || async {
        let ts = tasks(h.srv.addr).await;
        let shape: BTreeMap<String, usize> = ts
            .iter()
            .map(|t| (t.name.clone(), t.endpoints.len()))
            .collect();
        let want = BTreeMap::from([
            ("k8s/train/kubeflow/a".to_string(), 3),
            ("k8s/train/kubeflow/c".to_string(), 2),
        ]);
        (shape == want && ts.len() == 2).then_some(ts)
    })
    .await;
    assert!(lists(&api) > pod_lists, "the expired watches re-listed");
    let a2 = ts.iter().find(|t| t.name == a.name).unwrap();
    assert_eq!(a2.id, a.id, "task a is the same task, not a second one");
    // Still the same after a few more resyncs (nothing doubles later either).
    tokio::time::sleep(Duration::from_millis(700)).await;
    let again: Vec<(u32, String, usize)> = tasks(h.srv.addr)
        .await
        .into_iter()
        .map(|t| (t.id, t.name, t.endpoints.len()))
        .collect();
    let before: Vec<(u32, String, usize)> = ts
        .into_iter()
        .map(|t| (t.id, t.name, t.endpoints.len()))
        .collect();
    assert_eq!(again, before);
    api.assert_requests_are_listed();
    h.stop().await;
}

async fn tor_of(addr: SocketAddr, rnic: u32) -> Option<String> {
    let topo: TopologyInfo = http::get(addr, "/api/v1/topology").await.json();
    topo.tors
        .into_iter()
        .find(|t| t.rnics.contains(&rnic))
        .map(|t| t.name)
}

#[tokio::test]
async fn a_node_label_places_its_rnics_and_a_change_moves_them() {
    let (_, db) = test_databases().await.remove(0);
    let api = ApiServer::start(Duration::from_millis(200)).await;
    api.put_node(&node("n0", Some("tor-a")));
    api.put_node(&node("n1", Some("tor-b")));
    api.put_node(&node("n2", Some("tor-b")));
    let h = Harness::start(db.clone(), api.clone()).await;
    let r0 = register_host(h.srv.addr, 0).await.rnics[0].id;
    let r1 = register_host(h.srv.addr, 1).await.rnics[0].id;
    // n2's agent names its ToR: the hint wins over the label.
    let body = json!({"host": "n2", "epoch": 1, "rnics": [
        {"ifname": "mlx5_0", "ip": rnic_ip(2), "qpn": 100, "port": 4791, "rail": 0, "tor": "tor-hint"}
    ]});
    let r2: RegisterResponse = http::register(h.srv.addr, &body).await.json();
    let r2 = r2.rnics[0].id;
    wait_for("labels applied", || async {
        (tor_of(h.srv.addr, r0).await.as_deref() == Some("tor-a")
            && tor_of(h.srv.addr, r1).await.as_deref() == Some("tor-b"))
        .then_some(())
    })
    .await;
    assert_eq!(tor_of(h.srv.addr, r2).await.as_deref(), Some("tor-hint"));

    api.put_node(&node("n1", Some("tor-a")));
    api.put_node(&node("n2", Some("tor-a")));
    wait_for("n1 moved to tor-a", || async {
        (tor_of(h.srv.addr, r1).await.as_deref() == Some("tor-a")).then_some(())
    })
    .await;
    // The database follows (the analyzer reads ToRs from it).
    let (tor,): (String,) = sqlx::query_as("SELECT tor FROM rnics WHERE id = $1")
        .bind(i64::from(r1))
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(tor, "tor-a");
    assert_eq!(tor_of(h.srv.addr, r2).await.as_deref(), Some("tor-hint"));
    // The label removed: back to what the agent can tell (no gateway: unknown).
    api.put_node(&node("n1", None));
    wait_for("n1 unplaced", || async {
        (tor_of(h.srv.addr, r1).await.as_deref() == Some("unknown")).then_some(())
    })
    .await;
    api.assert_requests_are_listed();
    h.stop().await;
}

fn labelled_node(name: &str, kv: &[(&str, &str)]) -> Node {
    let mut n = node(name, None);
    n.metadata.labels = labels(
        &kv.iter()
            .map(|(k, v)| (*k, v.to_string()))
            .collect::<Vec<_>>(),
    );
    n
}

/// The ToR and rail of an RNIC as the analyzer reads them (the database).
async fn stored_place(db: &rocemesh_store::Db, rnic: u32) -> (String, Option<i64>) {
    sqlx::query_as("SELECT tor, rail FROM rnics WHERE id = $1")
        .bind(i64::from(rnic))
        .fetch_one(db.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn per_rnic_labels_place_a_rail_optimized_node_and_the_agents_rail_wins() {
    let (_, db) = test_databases().await.remove(0);
    let api = ApiServer::start(Duration::from_millis(200)).await;
    // A rail-optimized node: each RNIC on its own rail ToR.
    api.put_node(&labelled_node(
        "n5",
        &[
            ("topology.rocemesh.io/tor", "tor-node"),
            ("topology.rocemesh.io/tor.mlx5_1", "rail-1-tor"),
            ("topology.rocemesh.io/rail", "0"),
            ("topology.rocemesh.io/rail.mlx5_1", "1"),
            ("topology.rocemesh.io/rail.mlx5_2", "not-a-number"),
        ],
    ));
    let h = Harness::start(db.clone(), api.clone()).await;
    let body = json!({"host": "n5", "epoch": 1, "rnics": [
        {"ifname": "mlx5_0", "ip": rnic_ip(5), "qpn": 100, "port": 4791},
        {"ifname": "mlx5_1", "ip": rnic_ip(6), "qpn": 100, "port": 4791},
        {"ifname": "mlx5_2", "ip": rnic_ip(7), "qpn": 100, "port": 4791, "rail": 3}
    ]});
    let r: RegisterResponse = http::register(h.srv.addr, &body).await.json();
    let ids: Vec<u32> = r.rnics.iter().map(|r| r.id).collect();
    let want = [
        ("tor-node", Some(0)),
        ("rail-1-tor", Some(1)),
        // The agent's rail wins; a label that is no number places nothing.
        ("tor-node", Some(3)),
    ];
    wait_for("labels applied", || async {
        let mut got = Vec::new();
        for id in &ids {
            got.push(stored_place(&db, *id).await);
        }
        let want: Vec<(String, Option<i64>)> =
            want.iter().map(|(t, r)| (t.to_string(), *r)).collect();
        (got == want).then_some(())
    })
    .await;
    assert_eq!(
        tor_of(h.srv.addr, ids[1]).await.as_deref(),
        Some("rail-1-tor")
    );

    // The labels change: mlx5_1 moves rail and ToR; the node-wide rail goes.
    api.put_node(&labelled_node(
        "n5",
        &[
            ("topology.rocemesh.io/tor", "tor-node"),
            ("topology.rocemesh.io/tor.mlx5_1", "rail-2-tor"),
            ("topology.rocemesh.io/rail.mlx5_1", "2"),
        ],
    ));
    wait_for("mlx5_1 moved", || async {
        (stored_place(&db, ids[1]).await == ("rail-2-tor".into(), Some(2))
            && stored_place(&db, ids[0]).await == ("tor-node".into(), None))
            .then_some(())
    })
    .await;
    assert_eq!(
        stored_place(&db, ids[2]).await,
        ("tor-node".into(), Some(3))
    );
    h.stop().await;

    // A restart without Kubernetes keeps the agent's rail and drops what labels gave.
    let cfg = ControllerConfig::default();
    let state = ControllerState::new(db.clone(), cfg).await.unwrap();
    drop(state);
    assert_eq!(stored_place(&db, ids[2]).await.1, Some(3));
    assert_eq!(stored_place(&db, ids[1]).await.1, None);
}
