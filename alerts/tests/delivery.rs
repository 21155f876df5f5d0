//! The alerts service end to end on real databases (SQLite, and PostgreSQL when
//! `ROCEMESH_TEST_PG_URL` is set) against real HTTP receivers on 127.0.0.1: problems are
//! written to the `problems` table as the analyzer and the impact loop would.

use rocemesh_alerts::testing::TestReceiver;
use rocemesh_alerts::{Alerts, AlertsConfig, ReceiverConfig, Status, run, signature};
use rocemesh_proto::api::{ComponentKind, Priority};
use rocemesh_store::{Db, test_databases};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const SECRET: &str = "test-secret-0123456789";

fn now_ms() -> i64 {
    rocemesh_proto::now_unix_ms()
}

fn receiver(
    name: &str,
    url: &str,
    priorities: Vec<Priority>,
    components: Vec<ComponentKind>,
) -> ReceiverConfig {
    ReceiverConfig {
        name: name.into(),
        url: url.into(),
        secret: Some(SECRET.into()),
        secret_file: None,
        priorities,
        components,
    }
}

fn fast_config(receivers: Vec<ReceiverConfig>) -> AlertsConfig {
    AlertsConfig {
        external_url: "http://rocemesh.test:8080".into(),
        poll_ms: 100,
        group_wait_ms: 300,
        priority_wait_ms: 600,
        retry_initial_ms: 100,
        retry_max_ms: 400,
        timeout_ms: 2_000,
        receivers,
        ..AlertsConfig::default()
    }
}

/// A running alerts service.
struct Service {
    alerts: Arc<Alerts>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Service {
    fn start(db: &Db, cfg: AlertsConfig) -> Service {
        let alerts: Arc<Alerts> = Alerts::new(db.clone(), cfg).expect("valid config");
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run(alerts.clone(), cancel.clone()));
        Service {
            alerts,
            cancel,
            task,
        }
    }

    /// `rocemesh_alert_deliveries_total` by outcome, as `/metrics` shows it.
    fn deliveries(&self) -> HashMap<String, u64> {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(rocemesh_alerts::collector(&self.alerts));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("rocemesh_alert_deliveries_total{outcome=\""))
            .map(|l| {
                let (outcome, n) = l.split_once("\"} ").unwrap();
                (outcome.to_string(), n.parse().unwrap())
            })
            .collect()
    }

    /// Graceful stop: the round in progress finishes and is recorded.
    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.expect("alerts task");
    }
}

/// Writes a problem row as the analyzer does (and the impact loop's priority, if any).
async fn insert_problem(
    db: &Db,
    kind: &str,
    component_kind: &str,
    component: &str,
    priority: Option<&str>,
) -> i64 {
    insert_problem_on(db.pool(), kind, component_kind, component, priority).await
}

/// [`insert_problem`] on a given connection (a transaction's, to commit rows together).
async fn insert_problem_on<'e>(
    db: impl sqlx::Executor<'e, Database = sqlx::Any>,
    kind: &str,
    component_kind: &str,
    component: &str,
    priority: Option<&str>,
) -> i64 {
    let now = now_ms();
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO problems (kind, component_kind, component, state, confidence, network, \
         first_seen_ms, last_seen_ms, resolved_ms, evidence, priority) \
         VALUES ($1, $2, $3, 'active', 0.9, 1, $4, $4, NULL, $5, $6) RETURNING id",
    )
    .bind(kind)
    .bind(component_kind)
    .bind(component)
    .bind(now)
    .bind(r#"{"probes":40,"timeouts":12,"votes":5,"ok_paths":0,"example_paths":["h0 t0 s1 t1 h2"],"detail":"tomography: every failed path crosses it"}"#)
    .bind(priority)
    .fetch_one(db)
    .await
    .expect("insert problem");
    id
}

async fn set_priority(db: &Db, id: i64, priority: &str) {
    sqlx::query("UPDATE problems SET priority = $1 WHERE id = $2")
        .bind(priority)
        .bind(id)
        .execute(db.pool())
        .await
        .expect("set priority");
}

async fn resolve(db: &Db, id: i64) {
    let now = now_ms();
    sqlx::query(
        "UPDATE problems SET state = 'resolved', resolved_ms = $1, last_seen_ms = $1 WHERE id = $2",
    )
    .bind(now)
    .bind(id)
    .execute(db.pool())
    .await
    .expect("resolve problem");
}

async fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads with `read` until `done` holds or `timeout` passes and returns the last value
/// (the caller asserts on it): for state written after the receiver has seen a request.
async fn settled<T>(
    timeout: Duration,
    mut read: impl AsyncFnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let v = read().await;
        if done(&v) || Instant::now() >= deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// component -> (firing count, resolved count) of the alerts `rx` accepted.
fn tally(rx: &TestReceiver) -> HashMap<String, (usize, usize)> {
    let mut out: HashMap<String, (usize, usize)> = HashMap::new();
    for a in rx.delivered() {
        let e = out.entry(a.labels["component"].clone()).or_default();
        match a.status {
            Status::Firing => e.0 += 1,
            Status::Resolved => e.1 += 1,
        }
    }
    out
}

#[tokio::test]
async fn payload_is_alertmanager_v4_and_signed() {
    for (backend, db) in test_databases().await {
        let rx = TestReceiver::start().await.unwrap();
        let svc = Service::start(
            &db,
            fast_config(vec![receiver("ops", &rx.url, vec![], vec![])]),
        );
        // One commit, so no poll sees one without the other (which could split the group).
        let mut tx = db.pool().begin().await.unwrap();
        let a = insert_problem_on(&mut *tx, "link_fault", "link", "t0-s1", Some("P2")).await;
        let b = insert_problem_on(&mut *tx, "link_fault", "link", "t1-s0", Some("P2")).await;
        tx.commit().await.unwrap();
        wait_for("firing", Duration::from_secs(10), || {
            rx.delivered().len() == 2
        })
        .await;
        let reqs = rx.requests();
        assert_eq!(reqs.len(), 1, "{backend}: one group, one request");
        let req = &reqs[0];
        let sig = req.signature.as_deref().expect("signed");
        assert!(
            signature::verify(SECRET.as_bytes(), &req.body, sig),
            "{backend}: signature verifies"
        );
        assert!(!signature::verify(b"wrong", &req.body, sig));
        let v: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(v["version"], "4");
        assert_eq!(v["status"], "firing");
        assert_eq!(v["receiver"], "ops");
        assert_eq!(v["externalURL"], "http://rocemesh.test:8080");
        assert_eq!(
            v["groupLabels"],
            serde_json::json!({"kind": "link_fault", "priority": "P2"})
        );
        assert_eq!(v["commonLabels"]["alertname"], "RocemeshLinkFault");
        assert!(v["commonLabels"].get("component").is_none());
        assert!(v["groupKey"].as_str().unwrap().contains("link_fault"));
        let alerts = v["alerts"].as_array().unwrap();
        let first = &alerts[0];
        assert_eq!(first["status"], "firing");
        assert_eq!(first["labels"]["component"], "t0-s1");
        assert_eq!(first["labels"]["component_kind"], "link");
        assert_eq!(first["labels"]["kind"], "link_fault");
        assert_eq!(first["labels"]["priority"], "P2");
        assert_eq!(first["labels"]["severity"], "info");
        assert_eq!(first["endsAt"], "0001-01-01T00:00:00Z");
        assert!(first["startsAt"].as_str().unwrap().ends_with('Z'));
        assert_eq!(
            first["generatorURL"],
            format!("http://rocemesh.test:8080/api/v1/problems/{a}")
        );
        assert!(
            first["annotations"]["description"]
                .as_str()
                .unwrap()
                .contains("timeouts 12")
        );
        assert!(
            first["annotations"]["summary"]
                .as_str()
                .unwrap()
                .contains("t0-s1")
        );
        let fp = first["fingerprint"].as_str().unwrap().to_string();

        resolve(&db, a).await;
        wait_for("resolved", Duration::from_secs(10), || {
            rx.delivered().len() == 3
        })
        .await;
        let last = rx.requests().last().unwrap().notification();
        assert_eq!(last.status, Status::Resolved);
        assert_eq!(last.alerts.len(), 1);
        assert_eq!(
            last.alerts[0].fingerprint, fp,
            "{backend}: one fingerprint per episode"
        );
        assert_ne!(last.alerts[0].ends_at, "0001-01-01T00:00:00Z");
        // Nothing more comes: the still-active problem b is not notified again.
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(rx.requests().len(), 2, "{backend}: no repeats");
        let _ = b;
        svc.stop().await;
    }
}

#[tokio::test]
async fn failing_receiver_gets_every_alert_exactly_once_after_recovery() {
    for (backend, db) in test_databases().await {
        let rx = TestReceiver::start().await.unwrap();
        rx.fail_next(4, 503);
        let svc = Service::start(
            &db,
            fast_config(vec![receiver("ops", &rx.url, vec![], vec![])]),
        );
        let mut ids = Vec::new();
        for (i, kind) in ["link_fault", "link_fault", "switch_fault", "rnic_fault"]
            .iter()
            .enumerate()
        {
            let ck = match *kind {
                "switch_fault" => "switch",
                "rnic_fault" => "rnic",
                _ => "link",
            };
            ids.push(insert_problem(&db, kind, ck, &format!("c{i}"), Some("P1")).await);
        }
        // Half of them end while the receiver is still failing.
        tokio::time::sleep(Duration::from_millis(200)).await;
        resolve(&db, ids[0]).await;
        resolve(&db, ids[2]).await;
        wait_for("all alerts", Duration::from_secs(20), || {
            rx.delivered().len() == 6
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let t = tally(&rx);
        assert_eq!(t["c0"], (1, 1), "{backend}: {t:?}");
        assert_eq!(t["c1"], (1, 0), "{backend}: {t:?}");
        assert_eq!(t["c2"], (1, 1), "{backend}: {t:?}");
        assert_eq!(t["c3"], (1, 0), "{backend}: {t:?}");
        let failed = rx.requests().iter().filter(|r| r.answered == 503).count();
        assert_eq!(failed, 4, "{backend}: the failures were real requests");
        // A resolved alert never arrives before its firing one.
        let keys = rx.delivered_keys();
        for (i, (fp, st)) in keys.iter().enumerate() {
            if *st == Status::Resolved {
                assert!(
                    keys[..i].contains(&(fp.clone(), Status::Firing)),
                    "{backend}: resolved before firing"
                );
            }
        }
        // The receiver records a request before the sender records its outcome.
        let outbox: Vec<(String, i64)> = settled(
            Duration::from_secs(20),
            async || {
                sqlx::query_as("SELECT state, attempts FROM alert_outbox")
                    .fetch_all(db.pool())
                    .await
                    .unwrap()
            },
            |o: &Vec<(String, i64)>| o.len() == 6 && o.iter().all(|(s, _)| s == "delivered"),
        )
        .await;
        assert_eq!(outbox.len(), 6);
        assert!(
            outbox.iter().all(|(s, _)| s == "delivered"),
            "{backend}: {outbox:?}"
        );
        assert!(
            outbox.iter().any(|(_, a)| *a > 1),
            "{backend}: retried: {outbox:?}"
        );
        // Every failed request retried at least one alert; all six got through (counted
        // before the outbox rows were written).
        let d = svc.deliveries();
        assert_eq!((d["delivered"], d["failed"]), (6, 0), "{backend}: {d:?}");
        assert!(d["retried"] >= 4, "{backend}: {d:?}");
        svc.stop().await;
    }
}

#[tokio::test]
async fn permanent_client_errors_give_up_after_a_few_tries() {
    for (backend, db) in test_databases().await {
        let rx = TestReceiver::start().await.unwrap();
        rx.fail_next(100, 400);
        let svc = Service::start(
            &db,
            fast_config(vec![receiver("ops", &rx.url, vec![], vec![])]),
        );
        insert_problem(&db, "link_fault", "link", "t0-s1", Some("P0")).await;
        wait_for("three tries", Duration::from_secs(10), || {
            rx.requests().len() >= 3
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(
            rx.requests().len(),
            3,
            "{backend}: no tries after the permanent failure"
        );
        // The receiver records a request before the sender records its outcome.
        let (state, attempts, err): (String, i64, Option<String>) = settled(
            Duration::from_secs(20),
            async || {
                sqlx::query_as("SELECT state, attempts, last_error FROM alert_outbox")
                    .fetch_one(db.pool())
                    .await
                    .unwrap()
            },
            |(state, _, _): &(String, i64, Option<String>)| state == "failed",
        )
        .await;
        assert_eq!((state.as_str(), attempts), ("failed", 3), "{backend}");
        assert!(err.unwrap_or_default().contains("HTTP 400"));
        // Counted before the outbox row was written.
        let d = svc.deliveries();
        assert_eq!(
            (d["delivered"], d["retried"], d["failed"]),
            (0, 2, 1),
            "{backend}: two retried attempts, then given up"
        );
        svc.stop().await;
    }
}

#[tokio::test]
async fn restart_mid_way_loses_and_duplicates_nothing() {
    for (backend, db) in test_databases().await {
        let rx = TestReceiver::start().await.unwrap();
        // Slow answers so the stop lands while a request is in flight.
        rx.set_delay(Duration::from_millis(400));
        rx.fail_next(1, 500);
        let cfg = || fast_config(vec![receiver("ops", &rx.url, vec![], vec![])]);
        let svc = Service::start(&db, cfg());
        let a = insert_problem(&db, "link_fault", "link", "a", Some("P2")).await;
        let b = insert_problem(&db, "switch_fault", "switch", "b", Some("P2")).await;
        wait_for("first request", Duration::from_secs(10), || {
            !rx.requests().is_empty()
        })
        .await;
        wait_for("a request in flight", Duration::from_secs(10), || {
            rx.requests().len() == 1
        })
        .await;
        tokio::time::sleep(Duration::from_millis(450)).await;
        svc.stop().await;
        // While the service is down: one episode ends, another starts and ends, one starts.
        resolve(&db, a).await;
        let c = insert_problem(&db, "link_fault", "link", "c", Some("P2")).await;
        resolve(&db, c).await;
        insert_problem(&db, "rnic_fault", "rnic", "d", Some("P2")).await;
        let svc = Service::start(&db, cfg());
        wait_for("everything", Duration::from_secs(20), || {
            rx.delivered().len() == 6
        })
        .await;
        // A second restart after everything went out repeats nothing.
        svc.stop().await;
        let svc = Service::start(&db, cfg());
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let t = tally(&rx);
        assert_eq!(t["a"], (1, 1), "{backend}: {t:?}");
        assert_eq!(t["b"], (1, 0), "{backend}: {t:?}");
        assert_eq!(t["c"], (1, 1), "{backend}: {t:?}");
        assert_eq!(t["d"], (1, 0), "{backend}: {t:?}");
        let _ = b;
        svc.stop().await;
    }
}

#[tokio::test]
async fn filters_and_unassessed_priorities() {
    for (backend, db) in test_databases().await {
        let urgent = TestReceiver::start().await.unwrap();
        let switches = TestReceiver::start().await.unwrap();
        let all = TestReceiver::start().await.unwrap();
        // A priority wait long enough that the late assessment below lands within it on a
        // loaded machine.
        let svc = Service::start(
            &db,
            AlertsConfig {
                priority_wait_ms: 3_000,
                ..fast_config(vec![
                    receiver(
                        "urgent",
                        &urgent.url,
                        vec![Priority::P0, Priority::P1],
                        vec![],
                    ),
                    receiver(
                        "switches",
                        &switches.url,
                        vec![],
                        vec![ComponentKind::Switch],
                    ),
                    receiver("all", &all.url, vec![], vec![]),
                ])
            },
        );
        insert_problem(&db, "link_fault", "link", "p0-link", Some("P0")).await;
        insert_problem(&db, "switch_fault", "switch", "p2-switch", Some("P2")).await;
        // Never assessed: goes out as "unknown" after priority_wait, to "all" only.
        insert_problem(&db, "link_fault", "link", "unassessed", None).await;
        // Assessed within the wait: goes out with its priority.
        let late = insert_problem(&db, "link_fault", "link", "late-p1", None).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        set_priority(&db, late, "P1").await;
        wait_for("all four at 'all'", Duration::from_secs(20), || {
            all.delivered().len() == 4
        })
        .await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        let comps = |rx: &TestReceiver| {
            let mut v: Vec<String> = rx
                .delivered()
                .iter()
                .map(|a| a.labels["component"].clone())
                .collect();
            v.sort();
            v
        };
        assert_eq!(comps(&urgent), vec!["late-p1", "p0-link"], "{backend}");
        assert_eq!(comps(&switches), vec!["p2-switch"], "{backend}");
        let prio: HashMap<String, String> = all
            .delivered()
            .iter()
            .map(|a| (a.labels["component"].clone(), a.labels["priority"].clone()))
            .collect();
        assert_eq!(prio["unassessed"], "unknown", "{backend}");
        assert_eq!(prio["late-p1"], "P1", "{backend}");
        assert_eq!(prio["p0-link"], "P0", "{backend}");
        svc.stop().await;
    }
}
