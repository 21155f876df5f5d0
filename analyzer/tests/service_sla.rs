//! Service-network SLAs (R-Pingmesh §5): task and service rows from real batches, stored
//! and served like the other scopes (SQLite always, PostgreSQL when ROCEMESH_TEST_PG_URL
//! is set).

mod common;

use common::*;
use rocemesh_analyzer::Analyzer;
use rocemesh_analyzer::AnalyzerConfig;
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{SlaRow, SlaScope};
use rocemesh_store::Db;

/// RNICs 1, 2 on tor-a (host 1), 3 on tor-b (host 2), 4 on tor-b (host 3); task `llm`
/// on RNICs 1 and 3, task `ft` on RNICs 2 and 4, and RNIC 3 in both.
async fn fabric(db: &Db) {
    seed(
        db,
        &[
            (1, 1, "tor-a"),
            (2, 1, "tor-a"),
            (3, 2, "tor-b"),
            (4, 3, "tor-b"),
        ],
    )
    .await;
    let ep = |h: &str, r: &str| (h.to_string(), r.to_string());
    seed_task(db, 1, "llm", &[ep("host-1", "eth1"), ep("host-2", "eth3")]).await;
    seed_task(
        db,
        2,
        "ft",
        &[
            ep("host-1", "eth2"),
            ep("host-3", "eth4"),
            ep("host-2", "eth3"),
        ],
    )
    .await;
}

fn rows_of(rows: &[SlaRow], scope: SlaScope) -> Vec<(String, i64, i64)> {
    rows.iter()
        .filter(|r| r.scope == scope)
        .map(|r| (r.key.clone(), r.probes, r.timeouts))
        .collect()
}

#[tokio::test]
async fn task_and_service_rows_count_the_probes_of_their_pairs_and_are_served() {
    for (name, db) in rocemesh_store::test_databases().await {
        fabric(&db).await;
        let a = Analyzer::new(db.clone(), AnalyzerConfig::default())
            .await
            .unwrap();
        let now = mid_period_now();
        let start = now - 10_000;
        let service = |p, t, ok, rtt| rocemesh_proto::ProbeResult {
            class: ProbeClass::Service,
            ..rec(p, t, start + 100, ok, rtt)
        };
        let mut records = Vec::new();
        // llm's pair 1 -> 3 on its service 5-tuple: 40 ok at 30 us, 10 lost.
        records.extend((0..40).map(|_| service(1, 3, true, 30_000)));
        records.extend((0..10).map(|_| service(1, 3, false, 0)));
        // ft's pair 2 -> 4, inter-ToR class: 20 ok at 50 us (task row, not service).
        records.extend((0..20).map(|_| rocemesh_proto::ProbeResult {
            class: ProbeClass::InterTor,
            ..rec(2, 4, start + 200, true, 50_000)
        }));
        // 3 -> 4 serves ft (3 is in both tasks, 4 only in ft): 5 ok service probes at 70 us.
        records.extend((0..5).map(|_| service(3, 4, true, 70_000)));
        // 1 -> 2: ToR-mesh, in no task.
        records.extend((0..30).map(|_| rec(1, 2, start + 300, true, 10_000)));
        let ack = a.ingest(&batch(1, 1, 1, &records), now).unwrap();
        assert_eq!(ack.accepted, 105, "{name}");
        a.tick(now + 10_000 + GRACE).await.unwrap();
        let rows = a.latest();
        assert_eq!(
            rows_of(&rows, SlaScope::Task),
            [("ft".to_string(), 25, 0), ("llm".to_string(), 50, 10)],
            "{name}"
        );
        assert_eq!(
            rows_of(&rows, SlaScope::Service),
            [("service".to_string(), 55, 10)],
            "{name}"
        );
        let llm = rows
            .iter()
            .find(|r| r.scope == SlaScope::Task && r.key == "llm")
            .unwrap();
        assert_eq!(llm.network_rtt_ns.p50, Some(30_000), "{name}");
        // Nothing open blames an RNIC or a host: every loss is the switch network's.
        assert_eq!((llm.rnic_drops, llm.switch_drops), (0, 10), "{name}");
        assert!((llm.switch_drop_rate - 0.2).abs() < 1e-12, "{name}");

        // Stored: the same rows come back from the database and over HTTP.
        let base = serve(a.clone()).await;
        let stored: Vec<SlaRow> = get(&base, "/sla?scope=task").await;
        assert_eq!(rows_of(&stored, SlaScope::Task).len(), 2, "{name}");
        let got = stored.iter().find(|r| r.key == "llm").unwrap();
        assert_eq!(got, llm, "{name}");
        let svc: Vec<SlaRow> = get(&base, "/sla?scope=service").await;
        assert_eq!(
            rows_of(&svc, SlaScope::Service),
            [("service".into(), 55, 10)]
        );
        let latest: Vec<SlaRow> = get(&base, "/sla/latest?scope=task&key=ft").await;
        assert_eq!(rows_of(&latest, SlaScope::Task), [("ft".into(), 25, 0)]);
        let (status, _) = call(format!("{base}/sla?scope=tasks"), None, None).await;
        assert_eq!(status, 400, "{name}: an unknown scope is refused");
    }
}
