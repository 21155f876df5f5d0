//! Training tasks over real HTTP on 127.0.0.1, against SQLite and PostgreSQL: CRUD and
//! restart, refused bodies, incremental activation in served pinglists, throughput
//! ingestion, and the runtime skeleton from synthetic traffic.

mod common;

use common::*;
use rocemesh_controller::{ControllerConfig, ControllerState};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{Pinglist, RegisterResponse, TaskInfo, TaskPhase, UploadAck};
use rocemesh_skeleton::{SyntheticJob, synth};
use rocemesh_store::{Db, test_databases};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;

fn cfg() -> ControllerConfig {
    ControllerConfig {
        rotation_period_ms: 1 << 50,
        ..Default::default()
    }
}

/// Registers host `h{h}` with `rnics` RNICs `eth0..` on rails 0.. (ToR by host parity).
async fn register_host(addr: SocketAddr, h: usize, rnics: usize) -> RegisterResponse {
    let list: Vec<Value> = (0..rnics)
        .map(|r| json!({"ifname": format!("eth{r}"), "ip": format!("10.{}.{h}.{}", 20 + h / 200, r + 1), "qpn": 100 + r, "port": 4791, "rail": r, "tor": format!("t{}", h % 2)}))
        .collect();
    let r = register(
        addr,
        &json!({"host": format!("h{h}"), "epoch": 1, "rnics": list}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn ep(host: usize, rnic: usize) -> Value {
    json!({"host": format!("h{host}"), "rnic": format!("eth{rnic}")})
}

/// A task over `hosts` x `rnics` endpoints.
fn grid(name: &str, hosts: usize, rnics: usize) -> Value {
    let endpoints: Vec<Value> = (0..hosts)
        .flat_map(|h| (0..rnics).map(move |r| ep(h, r)))
        .collect();
    json!({"name": name, "endpoints": endpoints})
}

async fn ready(addr: SocketAddr, id: u32, host: usize, rnic: usize) -> TaskInfo {
    let r = send_json(
        addr,
        "POST",
        &format!("/api/v1/tasks/{id}/ready"),
        &ep(host, rnic),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// (tasks, endpoint rows, ready endpoints) in the database.
async fn task_rows(db: &Db) -> (i64, i64, i64) {
    let (t,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM tasks")
        .fetch_one(db.pool())
        .await
        .unwrap();
    let (e, r): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), CAST(COALESCE(SUM(ready), 0) AS BIGINT) FROM task_endpoints",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    (t, e, r)
}

/// Every (prober, target, src port, list pps, list size) of the Service lists served to `hosts`.
async fn service_entries(addr: SocketAddr, hosts: &[u32]) -> Vec<(u32, u32, u16, f64, usize)> {
    let mut out = Vec::new();
    for h in hosts {
        let list: Pinglist = get(addr, &format!("/api/v1/pinglists/{h}")).await.json();
        for r in &list.rnics {
            for l in r.lists.iter().filter(|l| l.class == ProbeClass::Service) {
                out.extend(
                    l.entries
                        .iter()
                        .map(|t| (r.rnic_id, t.rnic_id, t.src_port, l.pps, l.entries.len())),
                );
            }
        }
    }
    out.sort_by_key(|e| (e.0, e.1));
    out
}

#[tokio::test]
async fn task_crud_readiness_and_restart() {
    for (backend, db) in test_databases().await {
        let srv = serve(db.clone(), cfg()).await;
        let h0 = register_host(srv.addr, 0, 2).await;
        let h1 = register_host(srv.addr, 1, 2).await;
        // h2 is not registered yet: its endpoint is accepted and resolved later.
        let mut spec = json!({"name": "train-a", "endpoints": [ep(0, 0), ep(0, 1), ep(1, 0), ep(1, 1), ep(2, 0)]});
        spec["endpoints"][0]["ready"] = json!(true);
        spec["endpoints"][0]["pod"] = json!("worker-0");
        let created = send_json(srv.addr, "POST", "/api/v1/tasks", &spec).await;
        assert_eq!(
            created.status,
            201,
            "{backend}: {}",
            String::from_utf8_lossy(&created.body)
        );
        let t: TaskInfo = created.json();
        let ids: Vec<Option<u32>> = t.endpoints.iter().map(|(_, id)| *id).collect();
        assert_eq!(
            ids,
            vec![
                Some(h0.rnics[0].id),
                Some(h0.rnics[1].id),
                Some(h1.rnics[0].id),
                Some(h1.rnics[1].id),
                None
            ]
        );
        assert_eq!(t.endpoints[0].0.pod.as_deref(), Some("worker-0"));
        assert_eq!(t.phase, TaskPhase::Preload);
        // Rail 0: h0, h1, h2 (rank on host) -> 3 pairs; rail 1: h0, h1 -> 1.
        assert_eq!(
            (t.full_mesh_pairs, t.basic_pairs, t.active_pairs),
            (10, 4, 0),
            "{backend}"
        );
        assert!(t.skeleton.is_none());
        assert_eq!(
            get(srv.addr, "/api/v1/tasks").await.json::<Vec<TaskInfo>>(),
            vec![t.clone()]
        );
        assert_eq!(
            get(srv.addr, &format!("/api/v1/tasks/{}", t.id))
                .await
                .json::<TaskInfo>(),
            t
        );

        assert_eq!(
            ready(srv.addr, t.id, 1, 0).await.active_pairs,
            1,
            "{backend}: h0/eth0 - h1/eth0"
        );
        register_host(srv.addr, 2, 1).await;
        let after_reg: TaskInfo = get(srv.addr, &format!("/api/v1/tasks/{}", t.id))
            .await
            .json();
        assert!(
            after_reg.endpoints[4].1.is_some(),
            "{backend}: resolved once registered"
        );
        assert_eq!(ready(srv.addr, t.id, 2, 0).await.active_pairs, 3);
        // Idempotent.
        assert_eq!(ready(srv.addr, t.id, 2, 0).await.active_pairs, 3);
        assert_eq!(task_rows(&db).await, (1, 5, 3));

        let before = get(srv.addr, &format!("/api/v1/tasks/{}", t.id)).await.body;
        drop(srv);
        let srv = serve(db.clone(), cfg()).await;
        assert_eq!(
            get(srv.addr, &format!("/api/v1/tasks/{}", t.id)).await.body,
            before,
            "{backend}: restart keeps tasks and readiness"
        );

        let replaced = send_json(
            srv.addr,
            "PUT",
            &format!("/api/v1/tasks/{}", t.id),
            &json!({"name": "train-b", "endpoints": [ep(0, 1), ep(1, 1)]}),
        )
        .await;
        assert_eq!(
            replaced.status,
            200,
            "{backend}: {}",
            String::from_utf8_lossy(&replaced.body)
        );
        let r: TaskInfo = replaced.json();
        assert_eq!(
            (
                r.id,
                r.name.as_str(),
                r.endpoints.len(),
                r.basic_pairs,
                r.active_pairs
            ),
            (t.id, "train-b", 2, 1, 0)
        );
        assert_eq!(task_rows(&db).await, (1, 2, 0));
        // The old name is free again.
        assert_eq!(
            send_json(srv.addr, "POST", "/api/v1/tasks", &grid("train-a", 2, 1))
                .await
                .status,
            201
        );

        assert_eq!(
            request(
                srv.addr,
                "DELETE",
                &format!("/api/v1/tasks/{}", t.id),
                &[],
                b""
            )
            .await
            .status,
            204
        );
        assert_eq!(
            request(
                srv.addr,
                "DELETE",
                &format!("/api/v1/tasks/{}", t.id),
                &[],
                b""
            )
            .await
            .status,
            404
        );
        assert_eq!(
            get(srv.addr, &format!("/api/v1/tasks/{}", t.id))
                .await
                .status,
            404
        );
        assert_eq!(
            task_rows(&db).await,
            (1, 2, 0),
            "{backend}: only train-a's rows remain"
        );
    }
}

#[tokio::test]
async fn bad_task_bodies_are_4xx_and_change_nothing() {
    for (backend, db) in test_databases().await {
        let srv = serve(
            db.clone(),
            ControllerConfig {
                task_max_pairs: 10,
                ..cfg()
            },
        )
        .await;
        let existing: TaskInfo =
            send_json(srv.addr, "POST", "/api/v1/tasks", &grid("existing", 2, 2))
                .await
                .json();
        send_json(srv.addr, "POST", "/api/v1/tasks", &grid("other", 2, 1)).await;
        let rows = task_rows(&db).await;
        let shown = get(srv.addr, "/api/v1/tasks").await.body;
        let valid = grid("new", 2, 1);
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = valid.clone();
            f(&mut v);
            v.to_string()
        };
        let huge = format!(
            "{{\"name\":\"x\",\"endpoints\":[{}]}}",
            vec![r#"{"host":"h","rnic":"e"}"#; 700_000].join(",")
        );
        let valid_text = valid.to_string();
        let cases: Vec<(String, u16, &str)> = vec![
            (
                with(&|v| v["endpoints"][1] = ep(0, 0)),
                400,
                "duplicate endpoint h0/eth0",
            ),
            (with(&|v| v["endpoints"] = json!([])), 400, "2..=100000"),
            (with(&|v| v["endpoints"] = json!([ep(0, 0)])), 400, "got 1"),
            (with(&|v| v["name"] = json!("")), 400, "task name is empty"),
            (
                with(&|v| v["endpoints"][0]["host"] = json!("x".repeat(300))),
                400,
                "longer",
            ),
            (
                with(&|v| v["endpoints"][0]["rail"] = json!(70_000)),
                400,
                "rail 70000",
            ),
            (
                with(&|v| v["name"] = json!("existing")),
                409,
                "taken by task",
            ),
            (grid("big", 6, 1).to_string(), 400, "task_max_pairs"),
            (huge, 413, ""),
            (with(&|v| v["endpoints"] = json!("all")), 422, "endpoints"),
            (
                with(&|v| v["endpoints"][0]["rail"] = json!("one")),
                422,
                "rail",
            ),
            (
                with(&|v| v["endpoints"][0]["rail"] = json!(-1)),
                422,
                "rail",
            ),
            (
                with(&|v| v["endpoints"][0]["ready"] = json!("yes")),
                422,
                "ready",
            ),
            (with(&|v| v["endpoints"][0]["gpu"] = json!(3)), 422, "gpu"),
            (with(&|v| v["owner"] = json!("me")), 422, "owner"),
            (valid_text[..valid_text.len() / 2].to_string(), 400, ""),
        ];
        for (body, status, why) in &cases {
            let r = post_json(srv.addr, "/api/v1/tasks", body.as_bytes()).await;
            let head = &body[..body.len().min(80)];
            assert_eq!(r.status, *status, "{backend}: {head}");
            assert!(r.error().contains(why), "{backend}: {head}: {}", r.error());
        }
        // The same bodies replacing an existing task (a 409 only for a name taken by another).
        let put_path = format!("/api/v1/tasks/{}", existing.id);
        for (body, status, _) in cases.iter().filter(|(_, s, _)| *s != 409) {
            let r = request(
                srv.addr,
                "PUT",
                &put_path,
                &[("Content-Type", "application/json")],
                body.as_bytes(),
            )
            .await;
            assert_eq!(
                r.status,
                *status,
                "{backend}: PUT {}",
                &body[..body.len().min(80)]
            );
        }
        let taken = send_json(srv.addr, "PUT", &put_path, &grid("other", 2, 1)).await;
        assert_eq!(taken.status, 409);
        assert_eq!(
            send_json(srv.addr, "PUT", "/api/v1/tasks/999", &valid)
                .await
                .status,
            404
        );
        assert_eq!(
            send_json(srv.addr, "PUT", "/api/v1/tasks/x", &valid)
                .await
                .status,
            400
        );
        let ready_path = format!("/api/v1/tasks/{}/ready", existing.id);
        let nowhere = send_json(srv.addr, "POST", &ready_path, &ep(5, 0)).await;
        assert_eq!(
            (
                nowhere.status,
                nowhere.error().contains("no endpoint h5/eth0")
            ),
            (404, true)
        );
        assert_eq!(
            send_json(srv.addr, "POST", "/api/v1/tasks/999/ready", &ep(0, 0))
                .await
                .status,
            404
        );
        assert_eq!(
            send_json(srv.addr, "POST", &ready_path, &json!({"host": "h0"}))
                .await
                .status,
            422
        );
        assert_eq!(
            send_json(
                srv.addr,
                "POST",
                &ready_path,
                &json!({"host": "h0", "rnic": "eth0", "x": 1})
            )
            .await
            .status,
            422
        );
        assert_eq!(
            request(srv.addr, "PATCH", &put_path, &[], b"").await.status,
            405
        );

        assert_eq!(
            task_rows(&db).await,
            rows,
            "{backend}: refused requests changed the database"
        );
        assert_eq!(
            get(srv.addr, "/api/v1/tasks").await.body,
            shown,
            "{backend}: refused requests changed the tasks"
        );
    }
}

#[tokio::test]
async fn only_ready_pairs_are_served_and_the_basic_list_is_8x_smaller() {
    for (backend, db) in test_databases().await {
        let srv = serve(db, cfg()).await;
        let mut hosts = Vec::new();
        for h in 0..4 {
            hosts.push(register_host(srv.addr, h, 8).await);
        }
        let host_ids: Vec<u32> = hosts.iter().map(|h| h.host_id).collect();
        let rail_of: HashMap<u32, (u32, u32)> = hosts
            .iter()
            .flat_map(|h| h.rnics.iter().map(|r| (r.id, (r.rail.unwrap(), r.host_id))))
            .collect();
        let t: TaskInfo = send_json(srv.addr, "POST", "/api/v1/tasks", &grid("job", 4, 8))
            .await
            .json();
        assert_eq!(
            (t.full_mesh_pairs, t.basic_pairs, t.active_pairs),
            (496, 48, 0),
            "{backend}"
        );
        assert!(
            t.full_mesh_pairs >= 8 * t.basic_pairs,
            "same rail, different hosts: >= 8x smaller"
        );
        assert!(service_entries(srv.addr, &host_ids).await.is_empty());

        let path0 = format!("/api/v1/pinglists/{}", host_ids[0]);
        let etag0 = get(srv.addr, &path0)
            .await
            .header("etag")
            .unwrap()
            .to_string();
        ready(srv.addr, t.id, 0, 3).await;
        let unchanged = request(srv.addr, "GET", &path0, &[("If-None-Match", &etag0)], b"").await;
        assert_eq!(
            unchanged.status, 304,
            "{backend}: one ready endpoint activates nothing"
        );

        assert_eq!(ready(srv.addr, t.id, 1, 3).await.active_pairs, 1);
        let served = service_entries(srv.addr, &host_ids).await;
        let pair: BTreeSet<u32> = [served[0].0, served[0].1].into();
        assert_eq!(served.len(), 1, "{backend}: {served:?}");
        assert_eq!(
            pair,
            BTreeSet::from([hosts[0].rnics[3].id, hosts[1].rnics[3].id])
        );
        assert_eq!(served[0].3, 10.0, "one pair at task_pair_pps");
        let prober_host = host_ids[if served[0].0 == hosts[0].rnics[3].id {
            0
        } else {
            1
        }];
        let path = format!("/api/v1/pinglists/{prober_host}");
        let etag1 = get(srv.addr, &path)
            .await
            .header("etag")
            .unwrap()
            .to_string();
        if prober_host == host_ids[0] {
            assert_ne!(etag1, etag0, "{backend}: the prober's pinglist changed");
        }

        for h in 0..4 {
            for r in 0..8 {
                ready(srv.addr, t.id, h, r).await;
            }
        }
        let all: TaskInfo = get(srv.addr, &format!("/api/v1/tasks/{}", t.id))
            .await
            .json();
        assert_eq!(all.active_pairs, 48);
        let served = service_entries(srv.addr, &host_ids).await;
        assert_eq!(served.len(), 48, "{backend}: every active pair probed once");
        for (prober, target, port, pps, n) in &served {
            assert_eq!(rail_of[prober].0, rail_of[target].0, "same rail");
            assert_ne!(rail_of[prober].1, rail_of[target].1, "different hosts");
            assert!(*port >= 49152);
            assert_eq!(*pps, *n as f64 * 10.0);
        }
        assert_ne!(
            get(srv.addr, &path).await.header("etag"),
            Some(etag1.as_str())
        );
        assert_eq!(
            service_entries(srv.addr, &host_ids).await,
            served,
            "{backend}: deterministic ports"
        );
        // Deleting the task removes its lists.
        request(
            srv.addr,
            "DELETE",
            &format!("/api/v1/tasks/{}", t.id),
            &[],
            b"",
        )
        .await;
        assert!(service_entries(srv.addr, &host_ids).await.is_empty());
    }
}

#[tokio::test]
async fn the_per_rnic_rate_is_capped() {
    let (_, db) = test_databases().await.remove(0);
    let srv = serve(
        db,
        ControllerConfig {
            task_max_pps_per_rnic: 15.0,
            ..cfg()
        },
    )
    .await;
    let mut host_ids = Vec::new();
    for h in 0..6 {
        host_ids.push(register_host(srv.addr, h, 1).await.host_id);
    }
    let mut spec = grid("capped", 6, 1);
    for e in spec["endpoints"].as_array_mut().unwrap() {
        e["ready"] = json!(true);
    }
    let t: TaskInfo = send_json(srv.addr, "POST", "/api/v1/tasks", &spec)
        .await
        .json();
    assert_eq!(t.active_pairs, 15);
    let served = service_entries(srv.addr, &host_ids).await;
    assert_eq!(served.len(), 15);
    assert!(
        served.iter().all(|e| e.3 == (e.4 as f64 * 10.0).min(15.0)),
        "{served:?}"
    );
    assert!(
        served.iter().any(|e| e.4 >= 2),
        "some prober has two targets, so the cap bites"
    );
}

fn upload(host_id: u32, epoch: u32, interval_ms: u32, series: Vec<Value>) -> Value {
    json!({"host_id": host_id, "epoch": epoch, "interval_ms": interval_ms, "series": series})
}

fn series(rnic_id: u32, start_ms: i64, tx: &[u64]) -> Value {
    json!({"rnic_id": rnic_id, "start_ms": start_ms, "tx_bytes": tx, "rx_bytes": vec![0u64; tx.len()]})
}

#[tokio::test]
async fn throughput_uploads_are_validated_and_bounded() {
    for (backend, db) in test_databases().await {
        let state = ControllerState::new(db, cfg()).await.unwrap();
        let srv = serve_state(state.clone()).await;
        let a = register_host(srv.addr, 0, 2).await;
        let b = register_host(srv.addr, 1, 2).await;
        // eth1 of h0 is in no task.
        let t: TaskInfo = send_json(
            srv.addr,
            "POST",
            "/api/v1/tasks",
            &json!({"name": "t", "endpoints": [ep(0, 0), ep(1, 0), ep(1, 1)]}),
        )
        .await
        .json();
        let (a0, a1, b0) = (a.rnics[0].id, a.rnics[1].id, b.rnics[0].id);
        let ok = |s: Vec<Value>| upload(a.host_id, 1, 1000, s);
        let mut wrong_len = series(a0, 0, &[1, 2]);
        wrong_len["rx_bytes"] = json!([1]);
        let cases: Vec<(Value, u16, &str)> = vec![
            (
                upload(999, 1, 1000, vec![series(a0, 0, &[1])]),
                404,
                "unknown host 999",
            ),
            (
                upload(a.host_id, 2, 1000, vec![series(a0, 0, &[1])]),
                409,
                "register again",
            ),
            (
                upload(a.host_id, 1, 0, vec![series(a0, 0, &[1])]),
                400,
                "interval_ms",
            ),
            (
                upload(a.host_id, 1, 1001, vec![series(a0, 0, &[1])]),
                400,
                "interval_ms",
            ),
            (ok(vec![wrong_len]), 400, "2 tx samples but 1 rx"),
            (ok(vec![series(b0, 0, &[1])]), 400, "not an RNIC of host"),
            (
                ok(vec![series(a0, 0, &[1]), series(a0, 5000, &[1])]),
                400,
                "duplicate RNIC",
            ),
            (
                ok(vec![series(a0, 0, &vec![1; 1201])]),
                400,
                "at most 1200 samples",
            ),
            (ok(vec![series(a0, -5, &[1])]), 400, "start_ms"),
            (
                ok((0..65).map(|_| series(a0, 0, &[1])).collect()),
                400,
                "at most 64 series",
            ),
            (
                ok(vec![
                    json!({"rnic_id": a0, "start_ms": 0, "tx_bytes": [-1], "rx_bytes": [0]}),
                ]),
                422,
                "tx_bytes",
            ),
            (
                ok(vec![json!({"rnic_id": a0, "start_ms": 0, "tx_bytes": [1]})]),
                422,
                "rx_bytes",
            ),
            (
                json!({"host_id": a.host_id, "epoch": 1, "interval_ms": 1000, "series": [], "extra": 1}),
                422,
                "extra",
            ),
        ];
        for (body, status, why) in cases {
            let r = send_json(srv.addr, "POST", "/api/v1/throughput", &body).await;
            assert_eq!(r.status, status, "{backend}: {why}");
            assert!(r.error().contains(why), "{backend}: {why}: {}", r.error());
        }
        let err = state.infer_task_now(t.id).await.unwrap_err().to_string();
        assert!(
            err.contains("no throughput samples"),
            "{backend}: refused uploads stored nothing: {err}"
        );

        let good = ok(vec![
            series(a0, 10_000, &[5; 100]),
            series(a1, 10_000, &[5; 100]),
        ]);
        let ack: UploadAck = send_json(srv.addr, "POST", "/api/v1/throughput", &good)
            .await
            .json();
        assert_eq!(
            (ack.accepted, ack.dropped),
            (100, 100),
            "{backend}: the RNIC in no task is dropped"
        );
        let retry: UploadAck = send_json(srv.addr, "POST", "/api/v1/throughput", &good)
            .await
            .json();
        assert_eq!(
            (retry.accepted, retry.dropped),
            (0, 200),
            "{backend}: a retried upload is not stored twice"
        );
        let err = state.infer_task_now(t.id).await.unwrap_err().to_string();
        assert!(
            err.contains(&format!("RNIC {b0} has no throughput samples")),
            "{err}"
        );
    }
}

/// Registers 4 hosts of 4 RNICs and a 16-endpoint task (all ready); returns the state, the
/// server, the task and the RNIC id of each synthetic rank (host = rank / 4, rail = rank % 4).
async fn sixteen_rnic_task(db: Db) -> (ControllerState, Server, TaskInfo, Vec<RegisterResponse>) {
    let state = ControllerState::new(db, cfg()).await.unwrap();
    let srv = serve_state(state.clone()).await;
    let mut hosts = Vec::new();
    for h in 0..4 {
        hosts.push(register_host(srv.addr, h, 4).await);
    }
    let mut spec = grid("llm", 4, 4);
    for e in spec["endpoints"].as_array_mut().unwrap() {
        e["ready"] = json!(true);
    }
    let t: TaskInfo = send_json(srv.addr, "POST", "/api/v1/tasks", &spec)
        .await
        .json();
    assert_eq!((t.basic_pairs, t.active_pairs), (24, 24));
    (state, srv, t, hosts)
}

/// Uploads per-rank byte series in two halves per host, 1 s samples; returns samples accepted.
async fn upload_ranks(addr: SocketAddr, hosts: &[RegisterResponse], bytes: &[Vec<f64>]) -> u64 {
    let mut accepted = 0;
    let half = bytes[0].len() / 2;
    for (from, to) in [(0, half), (half, bytes[0].len())] {
        for (h, host) in hosts.iter().enumerate() {
            let s: Vec<Value> = (0..4)
                .map(|r| {
                    let tx: Vec<u64> = bytes[h * 4 + r][from..to]
                        .iter()
                        .map(|b| b.round() as u64)
                        .collect();
                    series(host.rnics[r].id, 1_000_000 + from as i64 * 1000, &tx)
                })
                .collect();
            let ack: UploadAck = send_json(
                addr,
                "POST",
                "/api/v1/throughput",
                &upload(host.host_id, 1, 1000, s),
            )
            .await
            .json();
            accepted += ack.accepted;
        }
    }
    accepted
}

#[tokio::test]
async fn skeleton_from_synthetic_traffic_drives_the_pinglist() {
    for (backend, db) in test_databases().await {
        let (state, srv, t, hosts) = sixteen_rnic_task(db).await;
        let host_ids: Vec<u32> = hosts.iter().map(|h| h.host_id).collect();
        let job = SyntheticJob {
            rnics_per_host: 4,
            ..SyntheticJob::new(2, 2, 4)
        };
        let trace = job.generate().unwrap();
        let id_of = |synth_id: u32| {
            let rank = (synth_id - job.first_id) as usize;
            hosts[rank / 4].rnics[rank % 4].id
        };
        let bytes: Vec<Vec<f64>> = trace.observations.iter().map(|o| o.bytes.clone()).collect();
        assert_eq!(upload_ranks(srv.addr, &hosts, &bytes).await, 16 * 240);

        let info = state.infer_task_now(t.id).await.unwrap();
        assert_eq!(
            info.phase,
            TaskPhase::Skeleton,
            "{backend}: {:?}",
            info.skeleton
        );
        let sk = info.skeleton.clone().unwrap();
        assert_eq!(
            (sk.dp, sk.tp_pp, sk.fallback_reason.as_deref()),
            (4, 4, None)
        );
        let mut truth: Vec<Vec<u32>> = trace
            .groups
            .iter()
            .map(|g| {
                let mut g: Vec<u32> = g.iter().map(|&id| id_of(id)).collect();
                g.sort_unstable();
                g
            })
            .collect();
        truth.sort();
        let mut groups = sk.groups.clone();
        groups.sort();
        assert_eq!(groups, truth, "{backend}: DP groups exact");
        assert_eq!(
            info.active_pairs, sk.pairs,
            "{backend}: active pairs = skeleton pairs"
        );
        let served = service_entries(srv.addr, &host_ids).await;
        assert_eq!(served.len(), sk.pairs);
        let served_pairs: BTreeSet<(u32, u32)> = served
            .iter()
            .map(|e| (e.0.min(e.1), e.0.max(e.1)))
            .collect();
        for &(a, b) in &trace.talking_pairs {
            let (x, y) = (id_of(a), id_of(b));
            assert!(
                served_pairs.contains(&(x.min(y), x.max(y))),
                "{backend}: talking pair {a}-{b} not probed"
            );
        }
        assert_eq!(
            get(srv.addr, &format!("/api/v1/tasks/{}", t.id))
                .await
                .json::<TaskInfo>(),
            info
        );
        // Replacing the endpoints starts over in preload.
        let spec = json!({"name": "llm", "endpoints": [ep(0, 0), ep(1, 0)]});
        let replaced: TaskInfo =
            send_json(srv.addr, "PUT", &format!("/api/v1/tasks/{}", t.id), &spec)
                .await
                .json();
        assert_eq!(
            (replaced.phase, replaced.skeleton),
            (TaskPhase::Preload, None)
        );
    }
}

#[tokio::test]
async fn unstructured_traffic_keeps_the_basic_list() {
    for (backend, db) in test_databases().await {
        let (state, srv, t, hosts) = sixteen_rnic_task(db).await;
        let bytes: Vec<Vec<f64>> = synth::unstructured(4, 4, 240, 5)
            .into_iter()
            .map(|o| o.bytes)
            .collect();
        let short: Vec<Vec<f64>> = bytes.iter().map(|b| b[..100].to_vec()).collect();
        assert_eq!(upload_ranks(srv.addr, &hosts, &short).await, 16 * 100);
        let err = state.infer_task_now(t.id).await.unwrap_err().to_string();
        assert!(
            err.contains("only 100 aligned throughput samples per RNIC, 128 needed"),
            "{backend}: {err}"
        );
        assert_eq!(
            state.infer_task_now(999).await.unwrap_err().to_string(),
            "unknown task 999"
        );
        // The rest of the series: the first 100 samples are already held.
        assert_eq!(upload_ranks(srv.addr, &hosts, &bytes).await, 16 * 140);
        let info = state.infer_task_now(t.id).await.unwrap();
        assert_eq!(info.phase, TaskPhase::BasicFallback, "{backend}");
        let reason = info
            .skeleton
            .as_ref()
            .and_then(|s| s.fallback_reason.clone())
            .unwrap_or_default();
        assert!(reason.contains("periodicity"), "{reason}");
        assert_eq!(
            (info.basic_pairs, info.active_pairs),
            (24, 24),
            "the basic list stays"
        );
        let host_ids: Vec<u32> = hosts.iter().map(|h| h.host_id).collect();
        assert_eq!(service_entries(srv.addr, &host_ids).await.len(), 24);
    }
}

#[tokio::test]
async fn the_periodic_loop_infers_without_being_asked() {
    let (_, db) = test_databases().await.remove(0);
    let state = ControllerState::new(
        db,
        ControllerConfig {
            skeleton_interval_ms: 100,
            ..cfg()
        },
    )
    .await
    .unwrap();
    let srv = serve_state(state.clone()).await;
    let mut hosts = Vec::new();
    for h in 0..4 {
        hosts.push(register_host(srv.addr, h, 4).await);
    }
    let t: TaskInfo = send_json(srv.addr, "POST", "/api/v1/tasks", &grid("looped", 4, 4))
        .await
        .json();
    let cancel = tokio_util::sync::CancellationToken::new();
    let looping = tokio::spawn(state.clone().run_skeleton_loop(cancel.clone()));
    let job = SyntheticJob {
        rnics_per_host: 4,
        ..SyntheticJob::new(2, 2, 4)
    };
    let bytes: Vec<Vec<f64>> = job
        .generate()
        .unwrap()
        .observations
        .into_iter()
        .map(|o| o.bytes)
        .collect();
    upload_ranks(srv.addr, &hosts, &bytes).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let phase = loop {
        let info: TaskInfo = get(srv.addr, &format!("/api/v1/tasks/{}", t.id))
            .await
            .json();
        if info.phase != TaskPhase::Preload || tokio::time::Instant::now() > deadline {
            break info.phase;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(phase, TaskPhase::Skeleton);
    cancel.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(5), looping)
        .await
        .expect("loop stops when cancelled")
        .unwrap();
}
