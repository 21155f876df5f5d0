//! The analyzer's `/metrics` route over real HTTP on every test database (SQLite, and
//! PostgreSQL when `ROCEMESH_TEST_PG_URL` is set): histograms from ingested batches, the
//! diagnosis window's size, and active problems counted by priority with the database's
//! own SQL.

mod common;

use common::*;
use rocemesh_analyzer::testing::insert_link_problem;

/// `GET /metrics` of the analyzer's route over real HTTP.
async fn scrape(a: std::sync::Arc<rocemesh_analyzer::Analyzer>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = rocemesh_analyzer::metrics_router(Some(a), Vec::new());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let (status, text) = call(format!("http://{addr}/metrics"), None, None).await;
    assert_eq!(status, 200, "{text}");
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_ingested_results_and_active_problems_on_every_database() {
    for (name, db) in rocemesh_store::test_databases().await {
        let a = analyzer(&db).await;
        let now = rocemesh_proto::now_unix_ms();
        let records: Vec<_> = (0..4)
            .map(|i| rec(1, 3, now, i != 0, 25_000))
            .chain([rec(1, 2, now, true, 700)])
            .collect();
        let ack = a.ingest(&batch(1, 1, 1, &records), now).unwrap();
        assert_eq!(ack.accepted, 5, "{name}");
        for (component, state, priority) in [
            ("t0-s0", "active", Some("P0")),
            ("t0-s1", "active", Some("P0")),
            ("t1-s1", "active", None),
            ("t2-s1", "resolved", Some("P2")),
        ] {
            insert_link_problem(&db, component, state, priority)
                .await
                .unwrap();
        }

        let text = scrape(a.clone()).await;

        let ab = r#"src_tor="tor-a",dst_tor="tor-b""#;
        let aa = r#"src_tor="tor-a",dst_tor="tor-a""#;
        for line in [
            format!("rocemesh_probes_total{{{ab}}} 4"),
            format!("rocemesh_probe_timeouts_total{{{ab}}} 1"),
            format!("rocemesh_network_rtt_seconds_count{{{ab}}} 3"),
            format!(r#"rocemesh_network_rtt_seconds_bucket{{le="0.000022",{ab}}} 0"#),
            format!(r#"rocemesh_network_rtt_seconds_bucket{{le="0.000027",{ab}}} 3"#),
            format!(r#"rocemesh_network_rtt_seconds_bucket{{le="6.8e-7",{aa}}} 0"#),
            format!(r#"rocemesh_network_rtt_seconds_bucket{{le="8.2e-7",{aa}}} 1"#),
            "rocemesh_ingest_results_total 5".to_string(),
            // Two flows in the diagnosis window, and its one timeout held raw.
            "rocemesh_diagnosis_flows 2".to_string(),
            "rocemesh_diagnosis_timeouts 1".to_string(),
            r#"rocemesh_diagnosis_dropped_results_total{reason="late"} 0"#.to_string(),
            r#"rocemesh_problems_active{kind="link_fault",component_kind="link",priority="P0"} 2"#
                .to_string(),
            r#"rocemesh_problems_active{kind="link_fault",component_kind="link",priority="unknown"} 1"#
                .to_string(),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{name}: no line `{line}` in\n{text}"
            );
        }
        assert!(
            !text.contains(r#"priority="P2""#),
            "{name}: resolved problems are not active"
        );
        assert!(!text.contains("rnic="), "{name}: no per-RNIC label");
    }
}

/// Past `max_tor_pair_series` a pair gets no series, and the scrape says so: the pairs
/// left out in a gauge, their results in a counter.
#[tokio::test(flavor = "multi_thread")]
async fn pairs_past_the_configured_cap_are_counted_in_the_scrape() {
    let (_, db) = rocemesh_store::test_databases().await.remove(0);
    seed(&db, &[(1, 1, "tor-a"), (2, 1, "tor-a"), (3, 2, "tor-b")]).await;
    let cfg = rocemesh_analyzer::AnalyzerConfig {
        max_tor_pair_series: 1,
        ..Default::default()
    };
    let a = rocemesh_analyzer::Analyzer::new(db.clone(), cfg)
        .await
        .unwrap();
    let now = rocemesh_proto::now_unix_ms();
    let records = [
        rec(1, 2, now, true, 2_000),
        rec(1, 3, now, true, 9_000),
        rec(1, 3, now, true, 9_000),
    ];
    a.ingest(&batch(1, 1, 1, &records), now).unwrap();
    let text = scrape(a.clone()).await;
    for line in [
        "rocemesh_tor_pair_series_limit 1",
        "rocemesh_tor_pairs_exported 1",
        "rocemesh_tor_pairs_unexported 1",
        "rocemesh_tor_pair_overflow_results_total 2",
        r#"rocemesh_probes_total{src_tor="tor-a",dst_tor="tor-a"} 1"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line `{line}` in\n{text}"
        );
    }
    assert!(!text.contains(r#"dst_tor="tor-b""#), "{text}");
}
