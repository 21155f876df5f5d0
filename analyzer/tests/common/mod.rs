//! Helpers shared by the analyzer integration tests.
#![allow(dead_code, unused_imports)] // each test binary uses a different subset

use rocemesh_analyzer::{Analyzer, AnalyzerConfig};
use rocemesh_proto::ProbeResult;
use rocemesh_proto::api::ErrorBody;
use rocemesh_proto::batch::{BatchHeader, encode_batch};
use rocemesh_store::Db;
use std::sync::Arc;

pub(crate) const PERIOD: i64 = 20_000;
pub(crate) const GRACE: i64 = 7_000;

/// A time 10 s into a period, near the real clock (the HTTP path stamps real time).
pub(crate) fn mid_period_now() -> i64 {
    rocemesh_proto::now_unix_ms() / PERIOD * PERIOD + 10_000
}

/// Registers RNICs `(id, host_id, tor)` the way the controller would.
pub(crate) async fn seed(db: &Db, rnics: &[(u32, u32, &str)]) {
    for &(id, host, tor) in rnics {
        sqlx::query(
            "INSERT INTO hosts (id, name, epoch, registrations, registered_at_ms) VALUES ($1, $2, 1, 1, 0) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(i64::from(host))
        .bind(format!("host-{host}"))
        .execute(db.pool())
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO rnics (id, host_id, ifname, ip, qpn, port, tor, epoch, registered_at_ms) \
             VALUES ($1, $2, $3, $4, 7, 4791, $5, 1, 0)",
        )
        .bind(i64::from(id))
        .bind(i64::from(host))
        .bind(format!("eth{id}"))
        .bind(format!("10.0.0.{id}"))
        .bind(tor)
        .execute(db.pool())
        .await
        .unwrap();
    }
}

/// Creates task `id` named `name` with endpoints `(host, rnic)`, in order, all ready.
pub(crate) async fn seed_task(db: &Db, id: i64, name: &str, endpoints: &[(String, String)]) {
    sqlx::query("INSERT INTO tasks (id, name, created_at_ms, updated_at_ms) VALUES ($1, $2, 0, 0)")
        .bind(id)
        .bind(name)
        .execute(db.pool())
        .await
        .unwrap();
    for (pos, (host, rnic)) in endpoints.iter().enumerate() {
        sqlx::query(
            "INSERT INTO task_endpoints (task_id, pos, host, rnic, rail, ready) \
             VALUES ($1, $2, $3, $4, 0, 1)",
        )
        .bind(id)
        .bind(pos as i64)
        .bind(host.as_str())
        .bind(rnic.as_str())
        .execute(db.pool())
        .await
        .unwrap();
    }
}

/// The standard test fabric: RNICs 1, 2 on tor-a (host 1), 3 on tor-b (host 2).
pub(crate) async fn analyzer(db: &Db) -> Arc<Analyzer> {
    seed(db, &[(1, 1, "tor-a"), (2, 1, "tor-a"), (3, 2, "tor-b")]).await;
    Analyzer::new(db.clone(), AnalyzerConfig::default())
        .await
        .unwrap()
}

/// A probe result (ok with that network RTT, or a timeout) of `prober` → `target`.
pub(crate) use rocemesh_proto::testing::probe_result as rec;

pub(crate) fn batch(host_id: u32, epoch: u32, batch_seq: u64, records: &[ProbeResult]) -> Vec<u8> {
    encode_batch(
        BatchHeader {
            host_id,
            epoch,
            batch_seq,
            dropped: 3,
        },
        records,
    )
}

/// Serves the analyzer's router on an ephemeral port; returns the base URL.
pub(crate) async fn serve(a: Arc<Analyzer>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, rocemesh_analyzer::router(a))
            .await
            .unwrap()
    });
    format!("http://{addr}/api/v1")
}

/// One blocking request; returns (status, body text).
pub(crate) async fn call(
    url: String,
    content_type: Option<&'static str>,
    body: Option<Vec<u8>>,
) -> (u16, String) {
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut resp = match body {
            Some(b) => {
                let mut req = agent.post(&url);
                if let Some(ct) = content_type {
                    req = req.header("Content-Type", ct);
                }
                req.send(&b[..]).unwrap()
            }
            None => agent.get(&url).call().unwrap(),
        };
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap())
    })
    .await
    .unwrap()
}

pub(crate) async fn get<T: serde::de::DeserializeOwned>(base: &str, path: &str) -> T {
    let (status, body) = call(format!("{base}{path}"), None, None).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

pub(crate) fn error_text(body: &str) -> String {
    serde_json::from_str::<ErrorBody>(body)
        .unwrap_or_else(|_| panic!("not an ErrorBody: {body}"))
        .error
}
