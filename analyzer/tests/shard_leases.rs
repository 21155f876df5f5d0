//! Shard leases of the analyzer scale-out on a real database (SQLite, and PostgreSQL when
//! `ROCEMESH_TEST_PG_URL` is set): fair share between instances, takeover of a dead
//! instance's shards once its leases expire, and never two holders of one lease.

use rocemesh_store::coord::{self, ANALYZER_ROLE, acquire, balance_shards};
use rocemesh_store::test_databases;
use std::collections::BTreeSet;

const SHARDS: u32 = 16;
const TTL: i64 = 3_000;

async fn round(db: &rocemesh_store::Db, me: &str, now: i64) -> BTreeSet<u32> {
    balance_shards(db, (me, &format!("http://{me}")), SHARDS, now, TTL)
        .await
        .unwrap()
}

#[tokio::test]
async fn fair_share_then_takeover_without_double_owner() {
    for (name, db) in test_databases().await {
        let mut now = 1_000_000;
        // Alone, "a" takes every shard.
        assert_eq!(round(&db, "a", now).await.len(), 16, "{name}");
        // "b" joins: "a" gives up half at its next round, "b" takes them at its next.
        now += 1_000;
        assert!(
            round(&db, "b", now).await.is_empty(),
            "{name}: nothing free yet"
        );
        let a = round(&db, "a", now).await;
        let b = round(&db, "b", now).await;
        assert_eq!((a.len(), b.len()), (8, 8), "{name}: {a:?} {b:?}");
        assert!(a.is_disjoint(&b), "{name}: double owner {a:?} {b:?}");
        let owners = coord::shard_owners(&db, now).await.unwrap();
        assert_eq!(owners.len(), 16, "{name}");
        // Steady rounds change nothing.
        now += 1_000;
        assert_eq!(round(&db, "a", now).await, a, "{name}");
        assert_eq!(round(&db, "b", now).await, b, "{name}");
        // "b" dies: before its leases end nothing moves, after they do "a" has them all.
        now += TTL - 500;
        assert_eq!(
            round(&db, "a", now).await,
            a,
            "{name}: b's leases still run"
        );
        now += 1_000;
        let all = round(&db, "a", now).await;
        assert_eq!(all.len(), 16, "{name}: takeover {all:?}");
        assert_eq!(
            coord::live_instances(&db, ANALYZER_ROLE, now - TTL)
                .await
                .unwrap(),
            vec!["a".to_string()],
            "{name}"
        );
        // A clean exit releases at once.
        coord::leave(&db, "a").await.unwrap();
        assert!(
            coord::shard_owners(&db, now).await.unwrap().is_empty(),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_instances_never_share_a_lease() {
    for (name, db) in test_databases().await {
        for attempt in 0..5 {
            let lease = format!("race/{attempt}");
            let tasks: Vec<_> = (0..8)
                .map(|i| {
                    let (db, lease) = (db.clone(), lease.clone());
                    tokio::spawn(async move {
                        acquire(&db, &lease, &format!("i{i}"), 10, 5_000)
                            .await
                            .unwrap()
                    })
                })
                .collect();
            let mut won = 0;
            for t in tasks {
                won += usize::from(t.await.unwrap());
            }
            assert_eq!(won, 1, "{name}: {won} holders of {lease}");
            // Expired, it goes to the next one asking; the old holder cannot renew it back.
            let holder = coord::holder(&db, &lease, 10).await.unwrap().unwrap();
            assert!(
                acquire(&db, &lease, "late", 5_001, 9_000).await.unwrap(),
                "{name}"
            );
            assert!(
                !acquire(&db, &lease, &holder, 5_002, 9_000).await.unwrap(),
                "{name}"
            );
        }
    }
}

#[tokio::test]
async fn sqlite_refuses_scale_out_and_runs_unsharded_without_it() {
    for (name, db) in test_databases().await {
        let on = coord::ScaleoutConfig {
            enabled: true,
            ..coord::ScaleoutConfig::default()
        };
        let joined = on.joins(&db, "analyzer");
        match db.backend() {
            rocemesh_store::Backend::Sqlite => {
                let err = joined.unwrap_err().to_string();
                assert!(err.contains("needs PostgreSQL"), "{name}: {err}");
            }
            rocemesh_store::Backend::Postgres => assert!(joined.unwrap(), "{name}"),
        }
        let off = coord::ScaleoutConfig::default().joins(&db, "analyzer");
        assert!(!off.unwrap(), "{name}: off by default");
    }
}

/// Node verdicts (Kubernetes) are written by one instance of a scale-out deployment, from
/// every shard's problems: an instance that wrote from its own shards alone would clear
/// the verdicts of the others' problems.
#[tokio::test]
async fn one_instance_answers_for_the_deployments_problems() {
    use rocemesh_analyzer::NODE_VERDICTS_LEASE;
    use rocemesh_analyzer::{Analyzer, AnalyzerConfig};
    for (name, db) in test_databases().await {
        let mut cfg = AnalyzerConfig::default();
        if db.backend() == rocemesh_store::Backend::Sqlite {
            // One instance: its own problems, always.
            let a = Analyzer::new(db.clone(), cfg).await.unwrap();
            let got = a.deployment_problems(NODE_VERDICTS_LEASE, 0).await.unwrap();
            assert_eq!(got, Some(vec![]), "{name}");
            continue;
        }
        cfg.scaleout.enabled = true;
        cfg.scaleout.advertise_url = Some("http://127.0.0.1:1".into());
        let lease = cfg.scaleout.lease_ms as i64;
        let a = Analyzer::new(db.clone(), cfg.clone()).await.unwrap();
        let b = Analyzer::new(db.clone(), cfg).await.unwrap();
        // A problem another shard filed, stored only in the database.
        let filed = rocemesh_proto::testing::active_problem(
            0,
            rocemesh_proto::api::ProblemKind::LinkFault,
            rocemesh_proto::api::ComponentKind::Link,
            "t1-s0",
            "loss 3 %",
        );
        db.problems().insert(&filed).await.unwrap();
        let now = 1_000_000;
        let first = a
            .deployment_problems(NODE_VERDICTS_LEASE, now)
            .await
            .unwrap();
        let second = b
            .deployment_problems(NODE_VERDICTS_LEASE, now)
            .await
            .unwrap();
        let components = |p: &Option<Vec<rocemesh_proto::api::Problem>>| {
            p.as_ref()
                .map(|v| v.iter().map(|p| p.component.clone()).collect::<Vec<_>>())
        };
        assert_eq!(
            components(&first),
            Some(vec!["t1-s0".to_string()]),
            "{name}"
        );
        assert_eq!(second, None, "{name}: two writers");
        // The writer goes silent: once its lease ends the other takes over.
        let later = now + lease + 1;
        let taken = b
            .deployment_problems(NODE_VERDICTS_LEASE, later)
            .await
            .unwrap();
        assert_eq!(
            components(&taken),
            Some(vec!["t1-s0".to_string()]),
            "{name}"
        );
        assert_eq!(
            a.deployment_problems(NODE_VERDICTS_LEASE, later + 1)
                .await
                .unwrap(),
            None,
            "{name}: the old writer came back and wrote beside the new one"
        );
    }
}
