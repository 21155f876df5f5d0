//! The REST API over real HTTP on 127.0.0.1 (ureq client, axum server).

mod common;

use common::*;
use rocemesh_analyzer::IngestStats;
use rocemesh_proto::api::{SlaRow, SlaScope, UploadAck};
use rocemesh_proto::batch::{CONTENT_TYPE, HEADER_LEN, MAX_BATCH_BYTES, RECORD_LEN};

async fn post(base: &str, content_type: Option<&'static str>, body: Vec<u8>) -> (u16, String) {
    call(format!("{base}/results"), content_type, Some(body)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_uploads_are_refused_and_change_nothing() {
    let (_, db) = rocemesh_store::test_databases().await.remove(0);
    let a = analyzer(&db).await;
    let base = serve(a.clone()).await;
    let now = rocemesh_proto::now_unix_ms();
    let good = batch(
        1,
        1,
        1,
        &[rec(1, 2, now, true, 9_000), rec(1, 2, now, true, 9_000)],
    );

    let mut bad_record = good.clone();
    bad_record[HEADER_LEN + RECORD_LEN + 45] = 9; // second record: unknown status
    let mut truncated = good.clone();
    truncated.pop();
    let cases: [(&str, Vec<u8>, u16, &str); 4] = [
        ("bad record", bad_record, 400, "record 1: unknown status"),
        ("truncated", truncated, 400, "length mismatch"),
        ("json", br#"{"records": []}"#.to_vec(), 400, "bad magic"),
        ("short", b"RMB".to_vec(), 400, "truncated"),
    ];
    for (what, body, status, text) in cases {
        let (s, b) = post(&base, Some(CONTENT_TYPE), body).await;
        assert_eq!(s, status, "{what}: {b}");
        assert!(error_text(&b).contains(text), "{what}: {b}");
    }
    let (s, b) = post(&base, Some("application/json"), good.clone()).await;
    assert_eq!(s, 415, "{b}");
    assert!(error_text(&b).contains(CONTENT_TYPE));
    let (s, _) = post(&base, None, good.clone()).await;
    assert_eq!(s, 415);
    let (s, b) = post(
        &base,
        Some("application/octet-stream"),
        vec![0; MAX_BATCH_BYTES + 1],
    )
    .await;
    assert_eq!(s, 413, "{b}");
    assert!(error_text(&b).contains("larger than"));

    let stats: IngestStats = get(&base, "/ingest/stats").await;
    let r = &stats.rejected_batches;
    assert_eq!(
        (r.bad_record, r.bad_length, r.bad_magic, r.truncated),
        (1, 1, 1, 1)
    );
    assert_eq!((r.bad_content_type, r.too_large), (2, 1));
    assert_eq!(
        (stats.batches, stats.records_accepted, stats.hosts.len()),
        (0, 0, 0),
        "nothing else changed"
    );

    // The batch is accepted once it is sent properly, with either content type.
    let (s, b) = post(
        &base,
        Some("application/octet-stream; charset=binary"),
        good,
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let ack: UploadAck = serde_json::from_str(&b).unwrap();
    assert_eq!((ack.accepted, ack.dropped, ack.duplicate), (2, 0, false));
}

#[tokio::test(flavor = "multi_thread")]
async fn uploaded_results_are_queryable_over_http() {
    for (name, db) in rocemesh_store::test_databases().await {
        let a = analyzer(&db).await;
        let base = serve(a.clone()).await;
        let now = rocemesh_proto::now_unix_ms();
        let records = [
            rec(1, 3, now, true, 30_000),
            rec(2, 3, now, false, 0),
            rec(3, 1, now, true, 40_000),
        ];
        let (s, b) = post(&base, Some(CONTENT_TYPE), batch(1, 1, 1, &records)).await;
        assert_eq!(s, 200, "{name}: {b}");
        let (s, b) = post(&base, Some(CONTENT_TYPE), batch(1, 1, 1, &records)).await;
        assert_eq!(
            (s, serde_json::from_str::<UploadAck>(&b).unwrap().duplicate),
            (200, true),
            "{name}"
        );
        a.flush().await.unwrap();

        let cluster: Vec<SlaRow> = get(&base, "/sla?scope=cluster").await;
        assert_eq!(cluster.len(), 1, "{name}");
        assert_eq!((cluster[0].probes, cluster[0].timeouts), (3, 1), "{name}");
        let pairs: Vec<SlaRow> = get(&base, "/sla?scope=tor_pair&key=tor-a-%3Etor-b").await;
        assert_eq!(pairs.len(), 1, "{name}");
        assert_eq!(
            (
                pairs[0].key.as_str(),
                pairs[0].probes,
                pairs[0].network_rtt_ns.p50
            ),
            ("tor-a->tor-b", 2, Some(30_000))
        );
        let start = cluster[0].period_start_ms;
        let none: Vec<SlaRow> = get(&base, &format!("/sla?scope=rnic&from_ms={}", start + 1)).await;
        assert!(none.is_empty(), "{name}");
        // RNIC 2 only probed, and its one probe timed out: it has no figures.
        let rnics: Vec<SlaRow> = get(
            &base,
            &format!("/sla?scope=rnic&from_ms={start}&to_ms={}", start + 1),
        )
        .await;
        assert_eq!(
            rnics.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
            ["1", "3"],
            "{name}"
        );
        let first: Vec<SlaRow> = get(&base, "/sla?scope=rnic&limit=1").await;
        assert_eq!((first.len(), first[0].key.as_str()), (1, "1"), "{name}");

        let latest: Vec<SlaRow> = get(&base, "/sla/latest?scope=rnic&key=3").await;
        assert_eq!(
            (latest.len(), latest[0].probes, latest[0].timeouts),
            (1, 2, 1),
            "{name}"
        );
        assert!(latest.iter().all(|r| r.scope == SlaScope::Rnic));

        let stats: IngestStats = get(&base, "/ingest/stats").await;
        assert_eq!(
            (
                stats.batches,
                stats.duplicate_batches,
                stats.records_accepted
            ),
            (1, 1, 3),
            "{name}"
        );
        assert_eq!(
            (stats.hosts[0].host_id, stats.hosts[0].agent_dropped),
            (1, 3)
        );

        for bad in [
            "/sla?scope=galaxy",
            "/sla",
            "/sla?scope=rnic&limit=0",
            "/sla?scope=rnic&limit=10001",
            "/sla?scope=rnic&from_ms=yesterday",
            "/sla?scope=rnic&colour=red",
            "/sla/latest?scope=x",
        ] {
            let (s, b) = call(format!("{base}{bad}"), None, None).await;
            assert_eq!(s, 400, "{name} {bad}: {b}");
            assert!(!error_text(&b).is_empty());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_write_ahead_log_is_bounded_and_trimmed_once_periods_are_stored() {
    let (_, db) = rocemesh_store::test_databases().await.remove(0);
    seed(&db, &[(1, 1, "tor-a"), (2, 1, "tor-a")]).await;
    // A long period: on a loaded machine the posts below may take seconds, and records of a
    // period already closed would be dropped as late instead of meeting the full log.
    let period = 60_000;
    let cfg = rocemesh_analyzer::AnalyzerConfig {
        period_ms: period as u64,
        grace_ms: 0,
        wal_max_bytes: 20_000,
        ..Default::default()
    };
    let a = rocemesh_analyzer::Analyzer::new(db.clone(), cfg)
        .await
        .unwrap();
    let base = serve(a.clone()).await;
    let now = rocemesh_proto::now_unix_ms();
    let records: Vec<_> = (0..100).map(|_| rec(1, 2, now, true, 9_000)).collect();
    let logged = || async {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM ingest_wal")
            .fetch_one(db.pool())
            .await
            .unwrap();
        n
    };
    // 100 records are 4,840 bytes: four fit under 20,000, the fifth is refused.
    for seq in 1..=4 {
        let (s, b) = post(&base, Some(CONTENT_TYPE), batch(1, 1, seq, &records)).await;
        assert_eq!(s, 200, "{b}");
    }
    assert_eq!(
        logged().await,
        4,
        "each accepted batch is logged before its answer"
    );
    let (s, b) = post(&base, Some(CONTENT_TYPE), batch(1, 1, 5, &records)).await;
    assert_eq!(s, 503, "{b}");
    assert!(error_text(&b).contains("write-ahead log is full"), "{b}");
    let stats: IngestStats = get(&base, "/ingest/stats").await;
    assert_eq!(
        stats.records_accepted, 400,
        "the refused batch changed nothing"
    );
    // Once the period is stored, its batches leave the log and uploads are taken again.
    a.tick(now + period).await.unwrap();
    assert_eq!(logged().await, 0);
    let (s, b) = post(&base, Some(CONTENT_TYPE), batch(1, 1, 5, &records)).await;
    assert_eq!(s, 200, "{b}");
}
