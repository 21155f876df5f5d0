//! Impact end to end over real HTTP on 127.0.0.1 against SQLite and PostgreSQL: agents
//! register and tasks are created through the controller's API, problems are stored the
//! way the analyzer stores them, the impact loop prioritizes them, verdicts are asked for.

use rocemesh_analyzer::{Analyzer, AnalyzerConfig};
use rocemesh_controller::{ControllerConfig, ControllerState};
use rocemesh_impact::{Impact, ImpactConfig, Verdict, VerdictKind};
use rocemesh_proto::api::{
    ComponentKind, ErrorBody, Evidence, Priority, Problem, ProblemKind, ProblemState,
    RegisterResponse, TaskInfo,
};
use rocemesh_proto::batch::{BatchEncoder, BatchHeader, CONTENT_TYPE};
use rocemesh_proto::path::TracedPath;
use rocemesh_proto::testing::rnic_sla_row;
use rocemesh_store::Db;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// ToRs t0..t2, spines s0, s1, link `tX-sY`: t's address on it 198.19.t.(2s), the spine's
/// 198.19.t.(2s+1).
fn fabric_map() -> String {
    let mut text = String::new();
    let mut links = String::new();
    let mut spine_addrs = [Vec::new(), Vec::new()];
    for t in 0..3 {
        let mut tor_addrs = Vec::new();
        for (s, spine) in spine_addrs.iter_mut().enumerate() {
            let (a, b) = (
                format!("198.19.{t}.{}", 2 * s),
                format!("198.19.{t}.{}", 2 * s + 1),
            );
            links.push_str(&format!(
                "[[link]]\nname = \"t{t}-s{s}\"\nends = [{{ device = \"t{t}\", ip = \"{a}\" }}, \
                 {{ device = \"s{s}\", ip = \"{b}\" }}]\n"
            ));
            tor_addrs.push(format!("\"{a}\""));
            spine.push(format!("\"{b}\""));
        }
        text.push_str(&format!(
            "[[switch]]\nname = \"t{t}\"\naddresses = [{}]\n",
            tor_addrs.join(", ")
        ));
    }
    for (s, a) in spine_addrs.iter().enumerate() {
        text.push_str(&format!(
            "[[switch]]\nname = \"s{s}\"\naddresses = [{}]\n",
            a.join(", ")
        ));
    }
    text + &links
}

struct Server {
    base: String,
    db: Db,
    analyzer: Arc<Analyzer>,
    cancel: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The controller's throughput rings as verdicts read them (the server's wiring).
struct Rings(ControllerState);

impl rocemesh_impact::health::ThroughputSource for Rings {
    fn series(&self, rnics: &[u32]) -> Result<rocemesh_taskhealth::Throughput, String> {
        self.0.task_throughput(rnics)
    }

    fn dp_groups(&self, task: u32) -> Vec<Vec<u32>> {
        self.0.task_dp_groups(task)
    }
}

/// Controller, analyzer and impact routers on one 127.0.0.1 listener, impact loop running.
async fn start(db: Db) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("fabric.toml");
    std::fs::write(&map, fabric_map()).unwrap();
    let controller = ControllerState::new(db.clone(), ControllerConfig::default())
        .await
        .unwrap();
    let analyzer = Analyzer::new(
        db.clone(),
        AnalyzerConfig {
            fabric_map: Some(map),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let cfg = ImpactConfig {
        tick_ms: 100,
        ..Default::default()
    };
    let impact = Impact::new(db.clone(), cfg, analyzer.clone()).unwrap();
    impact.set_throughput(Arc::new(Rings(controller.clone())));
    let app = rocemesh_controller::router(controller)
        .merge(rocemesh_analyzer::router(analyzer.clone()))
        .merge(rocemesh_impact::router(impact.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .unwrap()
    });
    tokio::spawn(rocemesh_impact::run(impact, cancel.child_token()));
    Server {
        base: format!("http://{addr}/api/v1"),
        db,
        analyzer,
        cancel,
        _dir: dir,
    }
}

/// One request; returns (status, body).
async fn call(method: &'static str, url: String, body: Option<String>) -> (u16, String) {
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut resp = match (method, body) {
            ("POST", Some(b)) => agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(b)
                .unwrap(),
            ("PUT", Some(b)) => agent
                .put(&url)
                .header("Content-Type", "application/json")
                .send(b)
                .unwrap(),
            _ => agent.get(&url).call().unwrap(),
        };
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap())
    })
    .await
    .unwrap()
}

impl Server {
    async fn send(&self, method: &'static str, path: &str, body: Value) -> (u16, String) {
        call(
            method,
            format!("{}{path}", self.base),
            Some(body.to_string()),
        )
        .await
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let (s, b) = call("GET", format!("{}{path}", self.base), None).await;
        assert_eq!(s, 200, "GET {path}: {b}");
        serde_json::from_str(&b).unwrap()
    }

    /// Registers `host` with one RNIC `eth1` at `ip` under `tor`; returns the RNIC id.
    async fn register(&self, host: &str, ip: &str, tor: &str) -> u32 {
        self.register_host(host, ip, tor).await.rnics[0].id
    }

    async fn register_host(&self, host: &str, ip: &str, tor: &str) -> RegisterResponse {
        let body = json!({"host": host, "epoch": 1, "rnics": [
            {"ifname": "eth1", "ip": ip, "qpn": 7, "port": 4791, "tor": tor}]});
        let (s, b) = self.send("POST", "/agents/register", body).await;
        assert_eq!(s, 200, "{b}");
        let r: RegisterResponse = serde_json::from_str(&b).unwrap();
        assert_eq!(r.rnics[0].tor, tor);
        r
    }

    async fn task(&self, name: &str, hosts: &[&str]) -> u32 {
        let endpoints: Vec<Value> = hosts
            .iter()
            .map(|h| json!({"host": h, "rnic": "eth1"}))
            .collect();
        let (s, b) = self
            .send(
                "POST",
                "/tasks",
                json!({"name": name, "endpoints": endpoints}),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        serde_json::from_str::<TaskInfo>(&b).unwrap().id
    }

    async fn sample(&self, task: u32, value: f64, at_ms: i64) {
        let (s, b) = self
            .send(
                "POST",
                &format!("/tasks/{task}/metrics"),
                json!({"name": "throughput", "value": value, "at_ms": at_ms}),
            )
            .await;
        assert_eq!(s, 201, "{b}");
    }

    /// Waits until problem `id` carries `want` (the impact loop ticks every 100 ms).
    async fn wait_priority(&self, id: i64, want: Priority) -> Problem {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let p: Problem = self.get(&format!("/problems/{id}")).await;
            if p.priority == Some(want) {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "problem {id} on {} stays {:?}, want {want:?}",
                p.component,
                p.priority
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn samples_stored(&self) -> i64 {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM task_metric_samples")
            .fetch_one(self.db.pool())
            .await
            .unwrap();
        n
    }
}

/// Stores an active problem the way the analyzer's tracker does.
async fn problem(db: &Db, kind: ProblemKind, ck: ComponentKind, name: &str, at: i64) -> i64 {
    let p = Problem {
        id: 0,
        kind,
        component_kind: ck,
        component: name.into(),
        state: ProblemState::Active,
        confidence: 0.9,
        network: kind.is_network(),
        first_seen_ms: at,
        last_seen_ms: at,
        resolved_ms: None,
        evidence: Evidence::default(),
        priority: None,
        affected_tasks: Vec::new(),
    };
    db.problems().insert(&p).await.unwrap()
}

/// An RNIC-scope SLA period with probes, as the analyzer persists it.
async fn covered(db: &Db, rnic: u32, start_ms: i64) {
    let row = rnic_sla_row(&rnic.to_string(), start_ms, 40, 9_000);
    db.sla().persist(&[row]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn priorities_follow_placement_and_degradation_and_verdicts_follow_priorities() {
    for (backend, db) in rocemesh_store::test_databases().await {
        let srv = start(db.clone()).await;
        let now = rocemesh_proto::now_unix_ms();
        srv.register("h0", "10.0.0.1", "t0").await;
        srv.register("h1", "10.0.1.1", "t1").await;
        let b0 = srv.register("h2", "10.0.2.1", "t2").await;
        let b1 = srv.register("h3", "10.0.2.2", "t2").await;
        srv.register("h4", "10.0.0.2", "t0").await;
        srv.register("h5", "10.0.0.3", "t0").await;
        let a = srv.task("train-a", &["h0", "h1"]).await; // spans t0 and t1
        let b = srv.task("train-b", &["h2", "h3"]).await; // under t2 alone
        let c = srv.task("train-c", &["h4", "h5"]).await; // under t0 alone
        let (s, body) = srv
            .send(
                "PUT",
                &format!("/tasks/{a}/objective"),
                json!({"metric": "throughput", "higher_is_better": true, "baseline": 100.0,
                       "tolerable_degradation": 0.1}),
            )
            .await;
        assert_eq!(s, 200, "{backend}: {body}");
        // B's baseline is learned from its first five samples.
        let (s, body) = srv
            .send(
                "PUT",
                &format!("/tasks/{b}/objective"),
                json!({"metric": "throughput"}),
            )
            .await;
        assert_eq!(s, 200, "{backend}: {body}");

        let start = now - 60_000;
        for i in 0..5 {
            srv.sample(
                a,
                100.0 - f64::from(i),
                start + 5_000 + i64::from(i) * 1_000,
            )
            .await;
            srv.sample(b, 200.0, start + 5_000 + i64::from(i) * 1_000)
                .await;
        }
        let uplink = problem(
            &db,
            ProblemKind::LinkFault,
            ComponentKind::Link,
            "t0-s1",
            start,
        )
        .await;
        let idle = problem(
            &db,
            ProblemKind::LinkFault,
            ComponentKind::Link,
            "t2-s0",
            start,
        )
        .await;
        let rnic = problem(
            &db,
            ProblemKind::RnicFault,
            ComponentKind::Rnic,
            "h1/eth1",
            start,
        )
        .await;
        let down = problem(&db, ProblemKind::HostDown, ComponentKind::Host, "h2", start).await;

        // Healthy metrics: in a service network → P1, outside every one → P2.
        let p = srv.wait_priority(uplink, Priority::P1).await;
        assert_eq!(
            p.affected_tasks,
            vec![a],
            "{backend}: the uplink between A's ToRs"
        );
        let p = srv.wait_priority(idle, Priority::P2).await;
        assert!(
            p.affected_tasks.is_empty(),
            "{backend}: B sits under one ToR: {p:?}"
        );
        srv.wait_priority(rnic, Priority::P1).await;
        let p = srv.wait_priority(down, Priority::P1).await;
        assert_eq!(
            p.affected_tasks,
            vec![b],
            "{backend}: a host of B, not a network problem"
        );
        let listed: Vec<Value> = srv.get(&format!("/tasks/{a}/metrics")).await;
        let values: Vec<f64> = listed
            .iter()
            .map(|v| v["value"].as_f64().unwrap())
            .collect();
        assert_eq!(
            values,
            [100.0, 99.0, 98.0, 97.0, 96.0],
            "{backend}: oldest first"
        );
        let listed: Vec<Value> = srv
            .get(&format!("/tasks/{a}/metrics?name=throughput&limit=2"))
            .await;
        assert_eq!(listed[1]["value"], 96.0, "{backend}: the newest two");
        assert_eq!(listed.len(), 2);
        // The impact loop learns B's baseline on a tick after its fifth sample, which
        // may come after the tick that set the priorities above.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let objective: Value = srv.get(&format!("/tasks/{b}/objective")).await;
            if !objective["learned_baseline"].is_null() {
                assert_eq!(
                    objective["learned_baseline"], 200.0,
                    "{backend}: {objective}"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{backend}: never learned: {objective}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // A's throughput falls 45 % (three samples: not one noisy one): its problems are P0.
        for i in 0..3 {
            srv.sample(a, 55.0, now - 10_000 + i * 1_000).await;
        }
        srv.wait_priority(uplink, Priority::P0).await;
        srv.wait_priority(rnic, Priority::P0).await;
        srv.wait_priority(idle, Priority::P2).await;
        // One bad sample of B is noise, not a degradation.
        srv.sample(b, 20.0, now - 9_000).await;
        srv.sample(b, 200.0, now - 8_000).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        srv.wait_priority(down, Priority::P1).await;

        let listed: Vec<Problem> = srv.get("/problems?state=all&priority=P0").await;
        let mut ids: Vec<i64> = listed.iter().map(|p| p.id).collect();
        ids.sort();
        assert_eq!(ids, vec![uplink, rnic], "{backend}: ?priority=P0");
        let listed: Vec<Problem> = srv.get("/problems?state=all&priority=P2").await;
        assert_eq!(listed.iter().map(|p| p.id).collect::<Vec<_>>(), vec![idle]);
        let (s, _) = call("GET", format!("{}/problems?priority=P7", srv.base), None).await;
        assert_eq!(s, 400, "{backend}: unknown priority");

        // Verdicts over the last two minutes.
        let range = format!("from={}&to={}", now - 120_000, now);
        let v: Verdict = srv.get(&format!("/tasks/{a}/verdict?{range}")).await;
        assert_eq!(
            v.verdict,
            VerdictKind::NetworkAtFault,
            "{backend}: {}",
            v.reason
        );
        assert_eq!(v.degraded, Some(true));
        let blamed: Vec<&str> = v.problems.iter().map(|p| p.component.as_str()).collect();
        assert!(
            blamed.contains(&"t0-s1") && blamed.contains(&"h1/eth1"),
            "{blamed:?}"
        );
        assert!(
            (v.metric.degradation.unwrap() - 0.45).abs() < 1e-9,
            "{:?}",
            v.metric
        );

        // B: now degraded for real, but only its host is down, and probes covered both
        // RNICs: the network is innocent.
        for i in 0..3 {
            srv.sample(b, 100.0, now - 5_000 + i * 1_000).await;
        }
        covered(&db, b0, now - 40_000).await;
        covered(&db, b1, now - 40_000).await;
        srv.wait_priority(down, Priority::P0).await;
        let v: Verdict = srv.get(&format!("/tasks/{b}/verdict?{range}")).await;
        assert_eq!(
            v.verdict,
            VerdictKind::NetworkInnocent,
            "{backend}: {}",
            v.reason
        );
        assert_eq!(v.degraded, Some(true), "{backend}: {:?}", v.metric);
        assert_eq!((v.coverage.covered, v.coverage.endpoints), (2, 2));
        assert!(v.reason.contains("HostDown on h2"), "{}", v.reason);
        assert_eq!(v.metric.baseline_source.as_deref(), Some("learned"));

        // C: no metric, no probe results → unknown, and the reason says so.
        let v: Verdict = srv.get(&format!("/tasks/{c}/verdict?{range}")).await;
        assert_eq!(v.verdict, VerdictKind::Unknown, "{backend}: {}", v.reason);
        assert_eq!(v.degraded, None);
        assert!(v.reason.contains("no probe results"), "{}", v.reason);
        assert!(
            v.reason.contains("no performance objective"),
            "{}",
            v.reason
        );

        // A's interval before its problems began: no problem overlaps, nothing covered.
        let v: Verdict = srv
            .get(&format!(
                "/tasks/{a}/verdict?from={}&to={}",
                now - 600_000,
                start - 1
            ))
            .await;
        assert_eq!(v.verdict, VerdictKind::Unknown, "{backend}: {}", v.reason);
        assert!(v.problems.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_refused_clearly_and_stores_nothing() {
    for (backend, db) in rocemesh_store::test_databases().await {
        let srv = start(db).await;
        let task = srv.task("t", &["h0", "h1"]).await;
        let metrics = format!("/tasks/{task}/metrics");
        let now = rocemesh_proto::now_unix_ms();
        let cases: Vec<(&str, String, &str, u16, &str)> = vec![
            (
                "unknown task",
                "/tasks/999/metrics".into(),
                r#"{"name":"throughput","value":1}"#,
                404,
                "no task 999",
            ),
            (
                "NaN",
                metrics.clone(),
                r#"{"name":"throughput","value":NaN}"#,
                400,
                "",
            ),
            (
                "NaN string",
                metrics.clone(),
                r#"{"name":"throughput","value":"NaN"}"#,
                400,
                "value",
            ),
            (
                "overflow",
                metrics.clone(),
                r#"{"name":"throughput","value":1e999}"#,
                400,
                "",
            ),
            (
                "negative time",
                metrics.clone(),
                r#"{"name":"throughput","value":1,"at_ms":-5}"#,
                400,
                "negative",
            ),
            (
                "future",
                metrics.clone(),
                format!(r#"{{"name":"x","value":1,"at_ms":{}}}"#, now + 3_600_000).leak(),
                400,
                "future",
            ),
            (
                "bad name",
                metrics.clone(),
                r#"{"name":"a b","value":1}"#,
                400,
                "metric name",
            ),
            (
                "unknown field",
                metrics.clone(),
                r#"{"name":"x","value":1,"unit":"GB"}"#,
                400,
                "unit",
            ),
            (
                "not a task id",
                "/tasks/abc/metrics".into(),
                r#"{"name":"x","value":1}"#,
                400,
                "",
            ),
            (
                "tolerance",
                format!("/tasks/{task}/objective"),
                r#"{"metric":"x","tolerable_degradation":2}"#,
                400,
                "tolerable",
            ),
            (
                "baseline",
                format!("/tasks/{task}/objective"),
                r#"{"metric":"x","baseline":-1}"#,
                400,
                "baseline",
            ),
            (
                "objective of unknown task",
                "/tasks/999/objective".into(),
                r#"{"metric":"x"}"#,
                404,
                "no task",
            ),
            (
                "oversized sample",
                metrics.clone(),
                format!(r#"{{"name":"x","value":1,"pad":"{}"}}"#, "p".repeat(20_000)).leak(),
                413,
                "larger than",
            ),
            (
                "oversized objective",
                format!("/tasks/{task}/objective"),
                format!(r#"{{"metric":"{}"}}"#, "m".repeat(20_000)).leak(),
                413,
                "larger than",
            ),
        ];
        for (what, path, body, status, text) in cases {
            let method = if path.ends_with("objective") {
                "PUT"
            } else {
                "POST"
            };
            let (s, b) = call(
                method,
                format!("{}{path}", srv.base),
                Some(body.to_string()),
            )
            .await;
            assert_eq!(s, status, "{backend} {what}: {b}");
            let e: ErrorBody = serde_json::from_str(&b).unwrap_or_else(|_| panic!("{what}: {b}"));
            assert!(e.error.contains(text), "{backend} {what}: {}", e.error);
        }
        assert_eq!(srv.samples_stored().await, 0, "{backend}: nothing stored");
        let (s, _) = call("GET", format!("{}/tasks/{task}/objective", srv.base), None).await;
        assert_eq!(s, 404, "{backend}: no objective was stored");
        for (query, status) in [
            (format!("/tasks/{task}/metrics"), 400), // no objective names the metric
            (format!("/tasks/{task}/metrics?name=x&limit=0"), 400),
            ("/tasks/999/metrics?name=x".to_string(), 404),
            (format!("/tasks/{task}/verdict?from=10&to=5"), 400),
            (format!("/tasks/{task}/verdict?from=-1"), 400),
            (format!("/tasks/{task}/verdict?since=1"), 400),
            ("/tasks/999/verdict".to_string(), 404),
        ] {
            let (s, b) = call("GET", format!("{}{query}", srv.base), None).await;
            assert_eq!(s, status, "{backend} {query}: {b}");
        }
        // The good sample goes in, with its receive time.
        let (s, b) = srv
            .send(
                "POST",
                &metrics,
                json!({"name": "throughput", "value": 1.5}),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        let stored: Value = serde_json::from_str(&b).unwrap();
        assert!(stored["at_ms"].as_i64().unwrap() >= now, "{stored}");
        assert_eq!(srv.samples_stored().await, 1);
    }
}

/// Four ranks train on a 1 s rhythm (bursts of 300 ms sampled every 100 ms) until rank 2
/// stops: its peers exchange their first chunks and stall. The verdict reads the uploaded
/// throughput and reports a non-communication hang with h2 as the straggler after the
/// healthy iterations — a communication hang once h2's probes are lost during it — and
/// healthy windows over an interval before the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_rank_is_a_hang_with_that_rank_as_straggler() {
    use rocemesh_taskhealth::WindowClass;
    for (backend, db) in rocemesh_store::test_databases().await {
        let srv = start(db).await;
        let hosts = ["h0", "h1", "h2", "h3"];
        let mut regs = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            regs.push(
                srv.register_host(h, &format!("10.0.0.{}", i + 1), "t0")
                    .await,
            );
        }
        let task = srv.task("train", &hosts).await;
        let (iterations, tail, step) = (8usize, 60usize, 100i64);
        let len = iterations * 10 + tail;
        let start_ms = rocemesh_proto::now_unix_ms() - len as i64 * step;
        for (r, reg) in regs.iter().enumerate() {
            let mut tx = vec![1_000u64; len];
            for it in 0..iterations {
                for s in 0..3 {
                    tx[it * 10 + s] = 50_000_000;
                }
            }
            // The stalled collective: first chunks between running neighbours only.
            if r != 2 {
                tx[iterations * 10] = 20_000_000;
            }
            let body = json!({"host_id": reg.host_id, "epoch": reg.epoch, "interval_ms": step,
                "series": [{"rnic_id": reg.rnics[0].id, "start_ms": start_ms,
                            "tx_bytes": tx, "rx_bytes": vec![0u64; len]}]});
            let (s, b) = srv.send("POST", "/throughput", body).await;
            assert_eq!(s, 200, "{backend}: {b}");
        }
        let v: Value = srv.get(&format!("/tasks/{task}/verdict")).await;
        let h = &v["health"];
        assert_eq!(
            h["worst"],
            json!(WindowClass::NonCommunicationHang),
            "{backend}: {v}"
        );
        assert_eq!(h["straggler"], "h2/eth1", "{backend}: {v}");
        let windows = h["windows"].as_array().unwrap();
        let healthy = windows.iter().filter(|w| w["class"] == "healthy").count();
        assert_eq!(healthy, iterations, "{backend}: {v}");
        // It sent nothing of the stalled collective (a burst since the one before, its
        // peers a first chunk more). Before any probe result, its link cannot be blamed.
        assert!(
            windows.last().unwrap()["evidence"]
                .as_str()
                .unwrap()
                .ends_with(
                    "moved 0 % of its peers' median in the last burst, sent 1.000 bursts since \
                     the one before (peers' median 1.133); over the hang: no probes on its pairs"
                ),
            "{backend}: {v}"
        );
        // Its RNIC losing most probes during the hang (no pair rows of the task yet) makes it
        // a communication hang.
        let hang_from = windows.last().unwrap()["from_ms"].as_i64().unwrap();
        let mut row = rnic_sla_row(&regs[2].rnics[0].id.to_string(), hang_from, 100, 9_000);
        row.timeouts = 90;
        row.timeout_rate = 0.9;
        srv.db.sla().persist(&[row]).await.unwrap();
        let v: Value = srv.get(&format!("/tasks/{task}/verdict")).await;
        let h = &v["health"];
        assert_eq!(
            h["worst"],
            json!(WindowClass::CommunicationHang),
            "{backend}: {v}"
        );
        assert_eq!(h["straggler"], "h2/eth1", "{backend}: {v}");
        let last = h["windows"].as_array().unwrap().last().unwrap().clone();
        assert!(
            last["evidence"]
                .as_str()
                .unwrap()
                .contains("90 of 100 probes on its RNIC lost"),
            "{backend}: {v}"
        );
        // The task's own pairs answering during the hang outweigh the RNIC's totals: the
        // process stopped, its host and link are alive.
        let straggler = regs[2].rnics[0].id;
        let mut pair_rows = Vec::new();
        for peer in [0, 1, 3].map(|r| regs[r].rnics[0].id) {
            for (src, dst) in [(straggler, peer), (peer, straggler)] {
                pair_rows.push(rocemesh_store::TaskPairRow {
                    task_id: task,
                    period_start_ms: hang_from,
                    period_ms: 20_000,
                    src_rnic: src,
                    dst_rnic: dst,
                    probes: 50,
                    lost: 0,
                    rtt_p50_ns: Some(9_000),
                });
            }
        }
        srv.db.task_pairs().persist(&pair_rows).await.unwrap();
        let v: Value = srv.get(&format!("/tasks/{task}/verdict")).await;
        let h = &v["health"];
        assert_eq!(
            h["worst"],
            json!(WindowClass::NonCommunicationHang),
            "{backend}: {v}"
        );
        let last = h["windows"].as_array().unwrap().last().unwrap().clone();
        assert!(
            last["evidence"].as_str().unwrap().ends_with(
                "over the hang: its pairs answer probes (lost: 0 of 150 to it, 0 of 150 from it)"
            ),
            "{backend}: {v}"
        );
        assert_eq!(h["attributions"], json!([]), "{backend}: {v}");
        // The same verdict over an interval that ends before the stop: healthy.
        let to = start_ms + (iterations as i64 * 10 - 1) * step;
        let v: Value = srv
            .get(&format!("/tasks/{task}/verdict?from={start_ms}&to={to}"))
            .await;
        assert_eq!(v["health"]["worst"], "healthy", "{backend}: {v}");
        // A task without samples says why.
        srv.register("h4", "10.0.0.5", "t0").await;
        srv.register("h5", "10.0.0.6", "t0").await;
        let other = srv.task("idle", &["h4", "h5"]).await;
        let v: Value = srv.get(&format!("/tasks/{other}/verdict")).await;
        assert!(
            v["health"].is_null() && v["health_note"].is_string(),
            "{backend}: {v}"
        );
    }
}

/// Uploads `path` the way an agent does (a heartbeat batch with a path section).
async fn upload_path(base: &str, host: &RegisterResponse, path: TracedPath) {
    let header = BatchHeader {
        host_id: host.host_id,
        epoch: host.epoch,
        batch_seq: 1,
        dropped: 0,
    };
    let body = BatchEncoder::new(header, 0).finish_with_paths(&[path]);
    let url = format!("{base}/results");
    let (status, text) = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut resp = agent
            .post(&url)
            .header("Content-Type", CONTENT_TYPE)
            .send(&body[..])
            .unwrap();
        (
            resp.status().as_u16(),
            resp.body_mut().read_to_string().unwrap(),
        )
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_traced_path_narrows_the_service_network_to_the_links_it_crossed() {
    for (backend, db) in rocemesh_store::test_databases().await {
        let srv = start(db.clone()).await;
        let h0 = srv.register_host("h0", "10.0.0.1", "t0").await;
        srv.register("h1", "10.0.1.1", "t1").await;
        let a = srv.task("train-a", &["h0", "h1"]).await;
        srv.analyzer.refresh_registry().await.unwrap();
        let now = rocemesh_proto::now_unix_ms();
        let start = now - 30_000;
        let uplink_s0 = problem(
            &db,
            ProblemKind::LinkFault,
            ComponentKind::Link,
            "t0-s0",
            start,
        )
        .await;
        let spine_s0 = problem(
            &db,
            ProblemKind::SwitchFault,
            ComponentKind::Switch,
            "s0",
            start,
        )
        .await;
        // Untraced, A may use any uplink between t0 and t1.
        srv.wait_priority(uplink_s0, Priority::P1).await;
        srv.wait_priority(spine_s0, Priority::P1).await;

        // t0 -> s1 (t0-s1) -> t1 (t1-s1) -> h1, as h0's agent traced it.
        let hop = |s: &str| Some(s.parse().unwrap());
        let path = TracedPath {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.1.1".parse().unwrap(),
            src_port: 49_152,
            dst_port: 4791,
            traced_at_unix_ns: u64::try_from(now).unwrap() * 1_000_000,
            reached: true,
            ack_direction: false,
            hops: vec![
                hop("198.19.0.2"),
                hop("198.19.0.3"),
                hop("198.19.1.2"),
                hop("10.0.1.1"),
            ],
        };
        upload_path(&srv.base, &h0, path).await;
        // The diagnosis tick files uploaded paths.
        srv.analyzer.diagnose(now).await.unwrap();
        let uplink_s1 = problem(
            &db,
            ProblemKind::LinkFault,
            ComponentKind::Link,
            "t1-s1",
            start,
        )
        .await;
        let p = srv.wait_priority(uplink_s1, Priority::P1).await;
        assert_eq!(p.affected_tasks, vec![a], "{backend}");
        srv.wait_priority(uplink_s0, Priority::P2).await;
        srv.wait_priority(spine_s0, Priority::P2).await;
    }
}

/// A problem whose flow blame names a task puts it in that task's service network even
/// where no trace between the task's endpoints shows the component.
#[tokio::test(flavor = "multi_thread")]
async fn tasks_blamed_in_the_evidence_are_affected() {
    for (backend, db) in rocemesh_store::test_databases().await {
        let srv = start(db.clone()).await;
        srv.register("h0", "10.0.0.1", "t0").await;
        srv.register("h1", "10.0.0.2", "t0").await;
        let a = srv.task("train-a", &["h0", "h1"]).await; // under t0 alone: no uplink
        let now = rocemesh_proto::now_unix_ms();
        let mut p = Problem {
            id: 0,
            kind: ProblemKind::LinkFault,
            component_kind: ComponentKind::Link,
            component: "t0-s1".into(),
            state: ProblemState::Active,
            confidence: 0.9,
            network: true,
            first_seen_ms: now - 10_000,
            last_seen_ms: now,
            resolved_ms: None,
            evidence: Evidence::default(),
            priority: None,
            affected_tasks: Vec::new(),
        };
        let outside = db.problems().insert(&p).await.unwrap();
        p.component = "t0-s0".into();
        p.evidence.blamed = vec![rocemesh_proto::api::BlamedFlow {
            name: "train-a".into(),
            task_id: Some(a),
            flows: 1,
            bytes_per_s: None,
            share: 1.0,
        }];
        let blamed = db.problems().insert(&p).await.unwrap();
        let got = srv.wait_priority(blamed, Priority::P1).await;
        assert_eq!(got.affected_tasks, vec![a], "{backend}");
        srv.wait_priority(outside, Priority::P2).await;
    }
}

/// Five ranks train on a healthy rhythm while the probes from one rank (random; the seed is
/// printed, `ROCEMESH_EVAL_SEED` replays it) lose 5 %: the analyzer stores the task's pair
/// table, the verdict over that period blames the rank as a source, and the diagnosis
/// files an RNIC-fault problem on its RNIC naming the task — resolved once a period
/// without the loss has been stored and `resolve_after` has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lossy_ranks_row_is_attributed_stored_as_a_problem_and_resolved() {
    use rocemesh_proto::batch::encode_batch;
    use rocemesh_proto::testing::probe_result;
    use rocemesh_store::CellFilter;
    const PERIOD: i64 = 20_000;
    const GRACE: i64 = 7_000;
    const RESOLVE_AFTER: i64 = 10_000;
    let seed: u64 = match std::env::var("ROCEMESH_EVAL_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("ROCEMESH_EVAL_SEED={s:?} is not a number")),
        Err(_) => rocemesh_proto::now_unix_ms() as u64,
    };
    eprintln!("lossy rank seed {seed} (replay: ROCEMESH_EVAL_SEED={seed})");
    let n = 5usize;
    let lossy = (seed % n as u64) as usize;
    for (backend, db) in rocemesh_store::test_databases().await {
        let srv = start(db.clone()).await;
        let hosts: Vec<String> = (0..n).map(|i| format!("h{i}")).collect();
        let mut regs = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            regs.push(
                srv.register_host(h, &format!("10.0.0.{}", i + 1), "t0")
                    .await,
            );
        }
        let names: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let task = srv.task("train", &names).await;
        srv.analyzer.refresh_registry().await.unwrap();
        let ids: Vec<u32> = regs.iter().map(|r| r.rnics[0].id).collect();
        // A healthy rhythm over the last minute: 300 ms bursts every second.
        let step = 100i64;
        let len = 600usize;
        let now = rocemesh_proto::now_unix_ms();
        let series_start = now - len as i64 * step;
        for reg in &regs {
            let tx: Vec<u64> = (0..len)
                .map(|s| if s % 10 < 3 { 50_000_000 } else { 1_000 })
                .collect();
            let body = json!({"host_id": reg.host_id, "epoch": reg.epoch, "interval_ms": step,
                "series": [{"rnic_id": reg.rnics[0].id, "start_ms": series_start,
                            "tx_bytes": tx, "rx_bytes": vec![0u64; len]}]});
            let (s, b) = srv.send("POST", "/throughput", body).await;
            assert_eq!(s, 200, "{backend}: {b}");
        }
        // Every pair probed 200 times in period t0 (lossy: 10 of the rank's probes to each
        // peer lost), then 200 times in t0 + PERIOD without loss.
        // Both periods end before now, inside the throughput series.
        let t0 = now / PERIOD * PERIOD - 2 * PERIOD;
        let mut seq = 0u64;
        let mut upload = |period: i64, lossy_row: bool| {
            for (s, reg) in regs.iter().enumerate() {
                let mut records = Vec::new();
                for (d, &dst) in ids.iter().enumerate().filter(|(d, _)| *d != s) {
                    for k in 0..200i64 {
                        let ok = !(lossy_row && s == lossy && k < 10);
                        records.push(probe_result(
                            ids[s],
                            dst,
                            period + 50 * k + d as i64,
                            ok,
                            10_000,
                        ));
                    }
                }
                seq += 1;
                let header = BatchHeader {
                    host_id: reg.host_id,
                    epoch: reg.epoch,
                    batch_seq: seq,
                    dropped: 0,
                };
                let ack = srv
                    .analyzer
                    .ingest(&encode_batch(header, &records), period + PERIOD - 1)
                    .unwrap();
                assert_eq!(ack.accepted, records.len() as u64, "{backend}");
            }
        };
        upload(t0, true);
        let judged = t0 + PERIOD + GRACE;
        srv.analyzer.tick(judged).await.unwrap();
        // The pair table: every ordered pair, the lossy row's cells with their losses.
        let cells = db
            .task_pairs()
            .cells(&CellFilter {
                task: Some(task),
                from_ms: t0,
                to_ms: t0,
                limit: 100,
            })
            .await
            .unwrap();
        assert_eq!(cells.len(), n * (n - 1), "{backend}: {cells:?}");
        for c in &cells {
            let want = if c.src_rnic == i64::from(ids[lossy]) {
                10
            } else {
                0
            };
            assert_eq!((c.probes, c.lost), (200, want), "{backend}: {c:?}");
            assert_eq!(c.rtt_ns, Some(10_000), "{backend}: {c:?}");
        }
        // The verdict over that period carries the attribution.
        let v: Value = srv
            .get(&format!(
                "/tasks/{task}/verdict?from={t0}&to={}",
                t0 + PERIOD - 1
            ))
            .await;
        let attributions = v["health"]["attributions"].as_array().unwrap();
        assert_eq!(attributions.len(), 1, "{backend}: {v}");
        let a = &attributions[0];
        assert_eq!(
            (&a["blame"], &a["rank"], &a["kind"], &a["bad_cells"]),
            (
                &json!("source"),
                &json!(lossy),
                &json!("rnic_fault"),
                &json!(n - 1)
            ),
            "{backend}: {v}"
        );
        assert_eq!(v["health"]["worst"], "healthy", "{backend}: {v}");
        // A healthy interval's verdict has none.
        let v: Value = srv
            .get(&format!(
                "/tasks/{task}/verdict?from={}&to={}",
                t0 + PERIOD,
                t0 + 2 * PERIOD - 1
            ))
            .await;
        assert!(
            v["health"]["attributions"].as_array().unwrap().is_empty(),
            "{backend}: {v}"
        );

        // The diagnosis files it as a problem on that RNIC, naming the task.
        let rnic = format!("h{lossy}/eth1");
        srv.analyzer.diagnose(judged).await.unwrap();
        let found = rnic_problems(&db, &rnic).await;
        assert_eq!(found.len(), 1, "{backend}: {found:?}");
        let p = &found[0];
        assert_eq!(p.state, ProblemState::Active, "{backend}");
        assert_eq!(p.component_kind, ComponentKind::Rnic, "{backend}");
        assert!(
            p.evidence.detail.contains(&format!(
                "task train (id {task}) matrix: {rnic} as source, 4 of 4 pairs bad"
            )),
            "{backend}: {}",
            p.evidence.detail
        );
        // Still seen while the stored period holds it (past resolve_after of the first tick),
        // the agents uploading meanwhile (a silent host's findings would be its own).
        let later = judged + 15_000;
        for reg in &regs {
            let header = BatchHeader {
                host_id: reg.host_id,
                epoch: reg.epoch,
                batch_seq: 1_000_000,
                dropped: 0,
            };
            srv.analyzer
                .ingest(&encode_batch(header, &[]), later - 1_000)
                .unwrap();
        }
        srv.analyzer.diagnose(later).await.unwrap();
        assert_eq!(
            rnic_problems(&db, &rnic).await[0].state,
            ProblemState::Active,
            "{backend}"
        );
        // The loss stops: once the healthy period is stored, it resolves after resolve_after.
        upload(t0 + PERIOD, false);
        let healthy = t0 + 2 * PERIOD + GRACE;
        srv.analyzer.tick(healthy).await.unwrap();
        srv.analyzer.diagnose(healthy).await.unwrap();
        assert_eq!(
            rnic_problems(&db, &rnic).await[0].state,
            ProblemState::Active,
            "{backend}: resolves only after resolve_after without evidence"
        );
        srv.analyzer
            .diagnose(judged + 15_000 + RESOLVE_AFTER)
            .await
            .unwrap();
        let found = rnic_problems(&db, &rnic).await;
        assert_eq!(found.len(), 1, "{backend}: {found:?}");
        assert_eq!(
            found[0].state,
            ProblemState::Resolved,
            "{backend}: {found:?}"
        );
        // Nothing else on the task's RNICs or connections was blamed.
        let all = db
            .problems()
            .query(rocemesh_store::StateFilter::All, None, i64::MIN, 100)
            .await
            .unwrap();
        let matrix_kinds = [
            ProblemKind::RnicFault,
            ProblemKind::FlowFault,
            ProblemKind::HighLatency,
        ];
        assert!(
            all.iter()
                .filter(|p| matrix_kinds.contains(&p.kind))
                .all(|p| p.component == rnic),
            "{backend}: {all:?}"
        );
    }
}

/// Every stored RNIC-fault problem on `rnic`.
async fn rnic_problems(db: &Db, rnic: &str) -> Vec<Problem> {
    db.problems()
        .query(rocemesh_store::StateFilter::All, None, i64::MIN, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.kind == ProblemKind::RnicFault && p.component == rnic)
        .collect()
}
