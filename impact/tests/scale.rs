//! Assessment cost at a few thousand problems: 100 tasks of 16 RNICs, 2,000 active problems
//! (half on task RNICs, half on links no task uses), half the tasks degraded. Prints the
//! timings; asserts every priority and a generous bound so a regression to per-row
//! round trips per task shows.

use rocemesh_analyzer::{Analyzer, AnalyzerConfig};
use rocemesh_impact::{Impact, ImpactConfig, ObjectiveSpec, verdict};
use rocemesh_store::Db;
use std::time::{Duration, Instant};

const TASKS: u32 = 100;
const PER_TASK: u32 = 16;

/// `INSERT INTO {table} VALUES` the rows, as one multi-row statement.
async fn insert(db: &Db, table: &str, rows: Vec<String>) {
    let sql = format!("INSERT INTO {table} VALUES {}", rows.join(", "));
    sqlx::raw_sql(&sql).execute(db.pool()).await.unwrap();
}

async fn seed(db: &Db, now: i64) {
    let (mut tasks, mut hosts, mut rnics, mut endpoints) = (vec![], vec![], vec![], vec![]);
    for t in 1..=TASKS {
        tasks.push(format!("({t}, 'job{t}', 0, 0)"));
        for e in 0..PER_TASK {
            let n = (t - 1) * PER_TASK + e + 1;
            hosts.push(format!("({n}, 'h{n}', 1, 1, 0)"));
            let ip = format!("10.{}.{}.1", n / 256, n % 256);
            let tor = n / 32;
            rnics.push(format!(
                "({n}, {n}, 'eth0', '{ip}', NULL, 7, 4791, 'tor{tor}', NULL, NULL, NULL, 1, 0)"
            ));
            endpoints.push(format!("({t}, {e}, 'h{n}', 'eth0', NULL, NULL, NULL, 1)"));
        }
    }
    insert(db, "tasks (id, name, created_at_ms, updated_at_ms)", tasks).await;
    insert(
        db,
        "hosts (id, name, epoch, registrations, registered_at_ms)",
        hosts,
    )
    .await;
    insert(
        db,
        "rnics (id, host_id, ifname, ip, gid, qpn, port, tor, tor_hint, rail, gateway, epoch, \
         registered_at_ms)",
        rnics,
    )
    .await;
    insert(
        db,
        "task_endpoints (task_id, pos, host, rnic, rail, namespace, pod, ready)",
        endpoints,
    )
    .await;
    let start = now - 60_000;
    let evidence =
        r#"{"probes":0,"timeouts":0,"votes":0,"ok_paths":0,"example_paths":[],"detail":""}"#;
    let problems = (0..2_000u32)
        .map(|i| {
            let (kind, ck, name) = if i % 2 == 0 {
                let host = i / 2 % (TASKS * PER_TASK) + 1;
                ("rnic_fault", "rnic", format!("h{host}/eth0"))
            } else {
                ("link_fault", "link", format!("x{i}-y{i}"))
            };
            format!("('{kind}', '{ck}', '{name}', 'active', 0.9, 1, {start}, {start}, NULL, '{evidence}')")
        })
        .collect();
    insert(
        db,
        "problems (kind, component_kind, component, state, confidence, network, first_seen_ms, \
         last_seen_ms, resolved_ms, evidence)",
        problems,
    )
    .await;
    let mut samples = Vec::new();
    for t in 1..=TASKS {
        let spec = ObjectiveSpec {
            metric: "throughput".into(),
            higher_is_better: true,
            baseline: Some(100.0),
            tolerable_degradation: 0.1,
        };
        rocemesh_impact::samples::set_objective(db, t, &spec, now)
            .await
            .unwrap();
        let value = if t.is_multiple_of(2) { 50.0 } else { 99.0 };
        for k in 0..20 {
            samples.push(format!(
                "({t}, 'throughput', {}, {value})",
                start + 1_000 * k
            ));
        }
    }
    insert(
        db,
        "task_metric_samples (task_id, name, at_ms, value)",
        samples,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_thousand_problems_are_assessed_in_bounded_time() {
    for (backend, db) in rocemesh_store::test_databases().await {
        let now = rocemesh_proto::now_unix_ms();
        seed(&db, now).await;
        let analyzer = Analyzer::new(db.clone(), AnalyzerConfig::default())
            .await
            .unwrap();
        let impact = Impact::new(db.clone(), ImpactConfig::default(), analyzer).unwrap();

        let t = Instant::now();
        let first = impact.assess(now).await.unwrap();
        let first_took = t.elapsed();
        assert_eq!((first.problems, first.changed), (2_000, 2_000), "{backend}");
        let t = Instant::now();
        let again = impact.assess(now).await.unwrap();
        let again_took = t.elapsed();
        assert_eq!(
            again.changed, 0,
            "{backend}: nothing changed, nothing written"
        );
        let t = Instant::now();
        let v = verdict::verdict(&impact, 2, now - 120_000, now, now)
            .await
            .unwrap()
            .unwrap();
        let verdict_took = t.elapsed();
        eprintln!(
            "{backend}: first assessment {first_took:?} (2000 written), steady {again_took:?}, \
             verdict {verdict_took:?}"
        );

        let counts: Vec<(String, i64)> = sqlx::query_as(
            "SELECT priority, COUNT(*) FROM problems GROUP BY priority ORDER BY priority",
        )
        .fetch_all(db.pool())
        .await
        .unwrap();
        // RNIC problems: 1,000 over 1,600 RNICs of 100 tasks → tasks 1..=63 (even ones degraded).
        let p0 = (1..=1_000u32)
            .filter(|i| ((i - 1) / PER_TASK + 1).is_multiple_of(2))
            .count() as i64;
        let want = vec![
            ("P0".to_string(), p0),
            ("P1".to_string(), 1_000 - p0),
            ("P2".to_string(), 1_000),
        ];
        assert_eq!(counts, want, "{backend}");
        assert!(!v.problems.is_empty(), "{backend}: task 2 has P0 problems");
        // Bounded, not fast (a debug build on a loaded machine; the benchmarks time it).
        assert!(
            again_took < Duration::from_secs(20) && verdict_took < Duration::from_secs(20),
            "{backend}: steady {again_took:?}, verdict {verdict_took:?}"
        );
    }
}
