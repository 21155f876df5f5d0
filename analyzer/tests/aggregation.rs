//! Aggregation, de-duplication, drops and persistence against real databases
//! (SQLite always, PostgreSQL when ROCEMESH_TEST_PG_URL is set).

mod common;

use common::*;
use rocemesh_analyzer::{Analyzer, AnalyzerConfig};
use rocemesh_analyzer::{SlaQuery, query_sla};
use rocemesh_proto::api::{SlaRow, SlaScope};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn find<'a>(rows: &'a [SlaRow], scope: SlaScope, key: &str) -> &'a SlaRow {
    rows.iter()
        .find(|r| r.scope == scope && r.key == key)
        .unwrap_or_else(|| panic!("no {scope:?} row {key}"))
}

fn close(got: Option<u64>, want: u64) -> bool {
    got.is_some_and(|g| (g as f64 - want as f64).abs() <= want as f64 * 0.01)
}

fn query(scope: SlaScope, key: Option<&str>) -> SlaQuery {
    SlaQuery {
        scope,
        key: key.map(str::to_owned),
        from_ms: None,
        to_ms: None,
        limit: None,
    }
}

#[tokio::test]
async fn period_figures_per_scope_are_exact_and_persisted() {
    for (name, db) in rocemesh_store::test_databases().await {
        let a = analyzer(&db).await;
        let now = mid_period_now();
        let start = now - 10_000;
        let mut records = Vec::new();
        // 1 -> 2 (tor-a -> tor-a): 90 ok with RTT 10..=99 us, 10 timeouts.
        for i in 0..90u32 {
            records.push(rec(1, 2, start + i64::from(i), true, 10_000 + i * 1_000));
        }
        for _ in 0..10 {
            records.push(rec(1, 2, start + 500, false, 0));
        }
        // 3 -> 1 (tor-b -> tor-a): 50 ok at 20 us.
        for _ in 0..50 {
            records.push(rec(3, 1, start + 9_000, true, 20_000));
        }
        let ack = a.ingest(&batch(1, 1, 1, &records), now).unwrap();
        assert_eq!(
            (ack.accepted, ack.dropped, ack.duplicate),
            (150, 0, false),
            "{name}"
        );

        // Not finalized before its grace time is over.
        a.tick(now + 10_000 + GRACE - 1).await.unwrap();
        assert!(a.latest().is_empty(), "{name}");
        a.tick(now + 10_000 + GRACE).await.unwrap();
        let rows = a.latest();

        let c = find(&rows, SlaScope::Cluster, "cluster");
        assert_eq!(
            (c.period_start_ms, c.period_ms, c.probes, c.timeouts),
            (start, PERIOD, 150, 10),
            "{name}"
        );
        assert!((c.timeout_rate - 10.0 / 150.0).abs() < 1e-12);
        // 140 ok RTTs: 10..99 us by 1 us plus 50 more at 20 us -> ranks 11..=61
        // are 20 us, rank 70 (p50) is 29 us, rank 140 (p999) is 99 us.
        assert!(
            close(c.network_rtt_ns.p50, 29_000),
            "{name}: {:?}",
            c.network_rtt_ns
        );
        assert!(
            close(c.network_rtt_ns.p999, 99_000),
            "{name}: {:?}",
            c.network_rtt_ns
        );
        assert!(close(c.prober_delay_ns.p50, 4_000) && close(c.responder_delay_ns.p99, 2_000));

        let aa = find(&rows, SlaScope::TorPair, "tor-a->tor-a");
        assert_eq!((aa.probes, aa.timeouts), (100, 10));
        assert!(
            close(aa.network_rtt_ns.p90, 90_000),
            "{name}: {:?}",
            aa.network_rtt_ns
        ); // rank 81 of 90
        let ba = find(&rows, SlaScope::TorPair, "tor-b->tor-a");
        assert_eq!(
            (ba.probes, ba.timeouts, ba.network_rtt_ns.p50),
            (50, 0, Some(20_000))
        );
        assert_eq!(
            rows.iter().filter(|r| r.scope == SlaScope::TorPair).count(),
            2
        );

        // Target RNIC 2 owns probes, timeouts and RTT; prober RNIC 3 only prober delay.
        let r2 = find(&rows, SlaScope::Rnic, "2");
        assert_eq!(
            (r2.probes, r2.timeouts, r2.prober_delay_ns.p50),
            (100, 10, None)
        );
        assert!(
            close(r2.app_rtt_ns.p50, 60_000),
            "{name}: {:?}",
            r2.app_rtt_ns
        ); // rank 45 of 90: 54 us RTT + 6
        let r1 = find(&rows, SlaScope::Rnic, "1");
        assert_eq!(
            (r1.probes, r1.network_rtt_ns.p50, r1.prober_delay_ns.p50),
            (50, Some(20_000), Some(4_000))
        );
        let r3 = find(&rows, SlaScope::Rnic, "3");
        assert_eq!(
            (
                r3.probes,
                r3.timeouts,
                r3.network_rtt_ns.p50,
                r3.prober_delay_ns.p999
            ),
            (0, 0, None, Some(4_000))
        );

        // The same rows come back from the database.
        for scope in [SlaScope::Cluster, SlaScope::TorPair, SlaScope::Rnic] {
            let stored = query_sla(&db, &query(scope, None)).await.unwrap();
            let mut mem: Vec<SlaRow> = rows.iter().filter(|r| r.scope == scope).cloned().collect();
            mem.sort_by(|x, y| x.key.cmp(&y.key));
            assert_eq!(stored, mem, "{name} {scope:?}");
        }
        let one = query_sla(&db, &query(SlaScope::Rnic, Some("2")))
            .await
            .unwrap();
        assert_eq!(one, vec![r2.clone()], "{name}");
    }
}

#[tokio::test]
async fn retried_batches_count_once() {
    for (name, db) in rocemesh_store::test_databases().await {
        let a = analyzer(&db).await;
        let now = mid_period_now();
        let body = batch(
            1,
            5,
            42,
            &[rec(1, 2, now, true, 9_000), rec(2, 1, now, false, 0)],
        );
        assert!(!a.ingest(&body, now).unwrap().duplicate);
        let again = a.ingest(&body, now + 100).unwrap();
        assert_eq!(
            (again.accepted, again.dropped, again.duplicate),
            (0, 0, true),
            "{name}"
        );
        // Same sequence number after an agent restart (new epoch) is a new batch.
        assert!(
            !a.ingest(&batch(1, 6, 42, &[rec(1, 2, now, true, 9_000)]), now)
                .unwrap()
                .duplicate
        );
        let s = a.stats();
        assert_eq!(
            (s.batches, s.duplicate_batches, s.records_accepted),
            (2, 1, 3),
            "{name}"
        );
        assert_eq!(s.hosts.len(), 1);
        assert_eq!(
            (
                s.hosts[0].host_id,
                s.hosts[0].epoch,
                s.hosts[0].agent_dropped
            ),
            (1, 6, 3)
        );
        assert_eq!(s.hosts[0].last_upload_ms, now);
        a.tick(now + PERIOD + GRACE).await.unwrap();
        let c = find(&a.latest(), SlaScope::Cluster, "cluster").clone();
        assert_eq!((c.probes, c.timeouts), (3, 1), "{name}");
    }
}

#[tokio::test]
async fn late_future_and_unknown_records_are_dropped_and_counted() {
    for (name, db) in rocemesh_store::test_databases().await {
        let a = analyzer(&db).await;
        let start = mid_period_now() - 10_000;
        let now = start + 5_000; // the previous period is still in its grace time
        let records = [
            rec(1, 2, now, true, 9_000),                    // accepted
            rec(1, 2, start - 1, true, 9_000),              // previous period, in grace: accepted
            rec(1, 2, start - PERIOD - 1, true, 9_000),     // the one before, past grace: late
            rec(1, 2, start + 2 * PERIOD, true, 9_000),     // two periods ahead: future
            rec(1, 2, start + 2 * PERIOD - 1, true, 9_000), // next period: accepted
            rec(1, 99, now, true, 9_000),                   // unknown target
            rec(98, 1, now, false, 0),                      // unknown prober
        ];
        let ack = a.ingest(&batch(1, 1, 1, &records), now).unwrap();
        assert_eq!((ack.accepted, ack.dropped), (3, 4), "{name}");
        let d = a.stats().dropped_records;
        assert_eq!((d.late, d.future, d.unknown_rnic), (1, 1, 2), "{name}");
        // Once a period is finalized, stragglers for it are late.
        let due = start + GRACE;
        a.tick(due).await.unwrap();
        let prev = a.latest();
        assert_eq!(
            find(&prev, SlaScope::Cluster, "cluster").period_start_ms,
            start - PERIOD
        );
        assert_eq!(find(&prev, SlaScope::Cluster, "cluster").probes, 1);
        let ack = a
            .ingest(&batch(1, 1, 2, &[rec(1, 2, start - 1, true, 1)]), due)
            .unwrap();
        assert_eq!((ack.accepted, ack.dropped), (0, 1), "{name}");
    }
}

#[tokio::test]
async fn a_restarted_analyzer_serves_stored_rows_and_never_reopens_them() {
    for (name, db) in rocemesh_store::test_databases().await {
        let now = mid_period_now();
        let first = analyzer(&db).await;
        first
            .ingest(&batch(1, 1, 1, &[rec(1, 2, now, true, 12_000)]), now)
            .unwrap();
        first.flush().await.unwrap();
        let before = first.latest();
        drop(first);

        let second = Analyzer::new(db.clone(), AnalyzerConfig::default())
            .await
            .unwrap();
        assert_eq!(second.latest(), before, "{name}");
        let stored = query_sla(&db, &query(SlaScope::TorPair, Some("tor-a->tor-a")))
            .await
            .unwrap();
        assert_eq!(
            (stored.len(), stored[0].probes, stored[0].network_rtt_ns.p50),
            (1, 1, Some(12_000)),
            "{name}"
        );
        // The flushed period is closed for good: no second, partial row for it.
        let ack = second
            .ingest(&batch(1, 1, 2, &[rec(1, 2, now, true, 1)]), now)
            .unwrap();
        assert_eq!((ack.accepted, ack.dropped), (0, 1), "{name}");
        assert_eq!(second.stats().dropped_records.late, 1);
    }
}

#[tokio::test]
async fn retention_purges_old_rows() {
    for (name, db) in rocemesh_store::test_databases().await {
        seed(&db, &[(1, 1, "tor-a"), (2, 1, "tor-a")]).await;
        let cfg = AnalyzerConfig {
            rnic_retention_ms: 30_000,
            retention_ms: 70_000,
            ..AnalyzerConfig::default()
        };
        let a = Analyzer::new(db.clone(), cfg).await.unwrap();
        let now = mid_period_now();
        for k in 0..4i64 {
            let t = now + k * PERIOD;
            a.ingest(&batch(1, 1, k as u64, &[rec(1, 2, t, true, 5_000)]), t)
                .unwrap();
            a.tick(t + PERIOD).await.unwrap(); // finalizes period k
        }
        // Period k starts at now - 10 s + k * 20 s. Last tick at now + 80 s: cluster
        // rows starting before now + 10 s and RNIC rows before now + 50 s are gone.
        let starts = |scope| {
            let db = db.clone();
            async move {
                let rows = query_sla(&db, &query(scope, None)).await.unwrap();
                rows.iter()
                    .map(|r| (r.period_start_ms - (now - 10_000)) / PERIOD)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(starts(SlaScope::Cluster).await, [3, 2, 1], "{name}");
        assert_eq!(starts(SlaScope::TorPair).await, [3, 2, 1], "{name}");
        assert_eq!(
            starts(SlaScope::Rnic).await,
            [3, 3],
            "{name}: RNICs 1 and 2 of period 3"
        );
    }
}

#[tokio::test]
async fn run_refreshes_the_registry_on_demand_and_flushes_at_cancel() {
    for (name, db) in rocemesh_store::test_databases().await {
        seed(&db, &[(1, 1, "tor-a")]).await;
        // Periodic refresh effectively off: only an unknown RNIC can trigger one.
        let cfg = AnalyzerConfig {
            registry_refresh_ms: 3_600_000,
            ..AnalyzerConfig::default()
        };
        let a = Analyzer::new(db.clone(), cfg).await.unwrap();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(rocemesh_analyzer::run(a.clone(), cancel.clone()));
        let now = rocemesh_proto::now_unix_ms();
        let ack = a
            .ingest(&batch(1, 1, 1, &[rec(1, 2, now, true, 8_000)]), now)
            .unwrap();
        assert_eq!(ack.dropped, 1, "{name}");
        seed(&db, &[(2, 1, "tor-a")]).await;
        let mut accepted = 0;
        // Up to 30 s: the registry refresh runs on the analyzer's task, late on a loaded machine.
        for seq in 2..300 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = rocemesh_proto::now_unix_ms();
            accepted = a
                .ingest(&batch(1, 1, seq, &[rec(1, 2, now, true, 8_000)]), now)
                .unwrap()
                .accepted;
            if accepted == 1 {
                break;
            }
        }
        assert_eq!(accepted, 1, "{name}: RNIC 2 never became known");
        cancel.cancel();
        task.await.unwrap();
        let stored = query_sla(&db, &query(SlaScope::Rnic, Some("2")))
            .await
            .unwrap();
        assert_eq!(
            stored.iter().map(|r| r.probes).sum::<i64>(),
            1,
            "{name}: flush stored the open period"
        );
    }
}
