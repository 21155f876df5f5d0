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

/// A restarted analyzer reads the task matrices of the newest stored period at once: a
/// lossy row of task `ft` blames its RNIC as a source, a lossy cell of the two-rank task
/// `llm` its connection, each filed as a problem naming the task; once those findings
/// expire (no newer period stored) the problems resolve like any other.
#[tokio::test]
async fn a_restart_files_the_newest_periods_task_matrix_attributions() {
    use rocemesh_proto::api::{ComponentKind, ProblemKind, ProblemState};
    use rocemesh_store::{StateFilter, TaskPairRow};
    for (name, db) in rocemesh_store::test_databases().await {
        fabric(&db).await;
        let now = rocemesh_proto::now_unix_ms();
        let start = now / PERIOD * PERIOD - PERIOD;
        db.sla()
            .persist(&[rocemesh_proto::testing::rnic_sla_row("1", start, 10, 1_000)])
            .await
            .unwrap();
        let row = |task_id, src_rnic, dst_rnic, lost| TaskPairRow {
            task_id,
            period_start_ms: start,
            period_ms: PERIOD,
            src_rnic,
            dst_rnic,
            probes: 200,
            lost,
            rtt_p50_ns: Some(20_000),
        };
        // ft: RNICs 2, 3, 4, every probe from 2 losing 5 %; llm: RNICs 1, 3, 1 -> 3 lossy.
        let mut rows = vec![row(1, 1, 3, 10), row(1, 3, 1, 0)];
        for (s, d) in [(2, 3), (2, 4), (3, 2), (3, 4), (4, 2), (4, 3)] {
            rows.push(row(2, s, d, if s == 2 { 10 } else { 0 }));
        }
        db.task_pairs().persist(&rows).await.unwrap();
        let a = Analyzer::new(db.clone(), AnalyzerConfig::default())
            .await
            .unwrap();
        a.diagnose(now).await.unwrap();
        let mut found: Vec<_> = db
            .problems()
            .load_active()
            .await
            .unwrap()
            .into_iter()
            .filter(|p| p.evidence.detail.contains(" matrix: "))
            .map(|p| (p.kind, p.component_kind, p.component, p.evidence.detail))
            .collect();
        found.sort_by(|x, y| x.2.cmp(&y.2));
        assert_eq!(found.len(), 2, "{name}: {found:?}");
        assert_eq!(
            (found[0].0, found[0].1, found[0].2.as_str()),
            (
                ProblemKind::FlowFault,
                ComponentKind::Flow,
                "host-1/eth1 -> host-2/eth3"
            ),
            "{name}"
        );
        assert!(
            found[0]
                .3
                .starts_with("task llm (id 1) matrix: host-1/eth1 -> host-2/eth3 as connection"),
            "{name}: {}",
            found[0].3
        );
        assert_eq!(
            (found[1].0, found[1].1, found[1].2.as_str()),
            (ProblemKind::RnicFault, ComponentKind::Rnic, "host-1/eth2"),
            "{name}"
        );
        assert!(
            found[1].3.starts_with(
                "task ft (id 2) matrix: host-1/eth2 as source, 2 of 2 pairs bad, 5.00 %"
            ),
            "{name}: {}",
            found[1].3
        );
        // Still found a period later; with no newer period stored, the findings lapse two
        // periods after the start and the problems resolve resolve_after after their last
        // evidence.
        a.diagnose(now + PERIOD).await.unwrap();
        assert_eq!(
            db.problems().load_active().await.unwrap().len(),
            2,
            "{name}"
        );
        a.diagnose(now + 3 * PERIOD).await.unwrap();
        let resolved = db
            .problems()
            .query(StateFilter::Resolved, None, i64::MIN, 100)
            .await
            .unwrap();
        assert_eq!(resolved.len(), 2, "{name}: {resolved:?}");
        assert!(resolved.iter().all(|p| p.state == ProblemState::Resolved));
    }
}
