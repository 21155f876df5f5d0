//! The task-pair repository against SQLite, and PostgreSQL when ROCEMESH_TEST_PG_URL is
//! set: rows stored once, summed per pair over the periods of an interval, purged.

use rocemesh_store::{CellFilter, TaskPairCell, TaskPairRow};

fn row(task: u32, start: i64, (src, dst): (u32, u32), probes: u64, lost: u64) -> TaskPairRow {
    TaskPairRow {
        task_id: task,
        period_start_ms: start,
        period_ms: 20_000,
        src_rnic: src,
        dst_rnic: dst,
        probes,
        lost,
        rtt_p50_ns: (lost < probes).then_some(10_000 * (1 + start as u64 / 20_000)),
    }
}

fn cell(
    task: i64,
    (src, dst): (i64, i64),
    probes: i64,
    lost: i64,
    rtt: Option<i64>,
) -> TaskPairCell {
    TaskPairCell {
        task_id: task,
        src_rnic: src,
        dst_rnic: dst,
        probes,
        lost,
        rtt_ns: rtt,
    }
}

#[tokio::test]
async fn pairs_are_stored_once_summed_over_an_interval_and_purged() {
    for (name, db) in rocemesh_store::test_databases().await {
        let repo = db.task_pairs();
        repo.persist(&[]).await.unwrap();
        // Periods 0 and 20 s of task 7; task 8 in period 0 only.
        let rows = [
            row(7, 0, (1, 2), 100, 0),      // RTT median 10 µs over 100 answered
            row(7, 20_000, (1, 2), 300, 0), // 20 µs over 300
            row(7, 0, (2, 1), 100, 100),    // all lost: no median
            row(7, 20_000, (2, 1), 100, 50),
            row(8, 0, (3, 4), 40, 1),
        ];
        repo.persist(&rows).await.unwrap();
        // A period stored again (a retried tick) keeps the first rows.
        repo.persist(&[row(7, 0, (1, 2), 999, 999)]).await.unwrap();
        let all = |task, from_ms, to_ms, limit| CellFilter {
            task,
            from_ms,
            to_ms,
            limit,
        };
        let both = repo.cells(&all(Some(7), 0, 39_999, 100)).await.unwrap();
        assert_eq!(
            both,
            [
                // (10 µs x 100 + 20 µs x 300) / 400
                cell(7, (1, 2), 400, 0, Some(17_500)),
                cell(7, (2, 1), 200, 150, Some(20_000)),
            ],
            "{name}"
        );
        // Only the periods overlapping the interval: the second period alone.
        let second = repo
            .cells(&all(Some(7), 20_000, 20_000, 100))
            .await
            .unwrap();
        assert_eq!(
            second,
            [
                cell(7, (1, 2), 300, 0, Some(20_000)),
                cell(7, (2, 1), 100, 50, Some(20_000)),
            ],
            "{name}"
        );
        let first = repo.cells(&all(None, 0, 0, 100)).await.unwrap();
        assert_eq!(
            first,
            [
                cell(7, (1, 2), 100, 0, Some(10_000)),
                cell(7, (2, 1), 100, 100, None),
                cell(8, (3, 4), 40, 1, Some(10_000)),
            ],
            "{name}"
        );
        assert_eq!(
            repo.cells(&all(None, 0, 0, 2)).await.unwrap().len(),
            2,
            "{name}"
        );
        assert!(
            repo.cells(&all(Some(9), 0, 40_000, 100))
                .await
                .unwrap()
                .is_empty(),
            "{name}"
        );
        assert_eq!(repo.purge(20_000).await.unwrap(), 3, "{name}");
        assert_eq!(
            repo.cells(&all(None, 0, 40_000, 100)).await.unwrap().len(),
            2,
            "{name}"
        );
    }
}
