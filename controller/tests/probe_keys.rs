//! The cluster probe key service over real HTTP and a real database (SQLite, and
//! PostgreSQL when configured): keys stored, shared, rotated with the previous one kept,
//! and handed out in registration and pinglist replies.

mod common;

use common::*;
use rocemesh_controller::config::ProbeAuthMode;
use rocemesh_controller::{ControllerConfig, ControllerState};
use rocemesh_proto::api::{Pinglist, ProbeAuth, RegisterResponse};
use rocemesh_proto::probe_auth::decode_key;
use rocemesh_store::{Db, test_databases};
use std::net::SocketAddr;

/// Key rotation age (ms): a key this old is replaced.
const ROTATE_MS: i64 = 600_000;
/// Key lead (ms, two pinglist polls): a new key signs this long after it is published,
/// long enough that a slow machine never sees it sign before the test ages it.
const LEAD_MS: i64 = 60_000;

/// Polls every 30 s: new keys are published 60 s before they sign.
fn cfg() -> ControllerConfig {
    ControllerConfig {
        rotation_period_ms: 1 << 50,
        pinglist_poll_ms: LEAD_MS as u64 / 2,
        probe_key_rotate_s: ROTATE_MS as u64 / 1_000,
        ..Default::default()
    }
}

async fn keys_in_db(db: &Db) -> Vec<(i64, String)> {
    sqlx::query_as("SELECT id, key_hex FROM probe_keys ORDER BY id")
        .fetch_all(db.pool())
        .await
        .unwrap()
}

/// Makes every stored key `ms` older (instead of waiting for a rotation).
async fn age_keys(db: &Db, ms: i64) {
    sqlx::query("UPDATE probe_keys SET created_ms = created_ms - $1")
        .bind(ms)
        .execute(db.pool())
        .await
        .unwrap();
}

async fn poll(addr: SocketAddr, host_id: u32) -> Pinglist {
    get(addr, &format!("/api/v1/pinglists/{host_id}"))
        .await
        .json()
}

fn ids(auth: &ProbeAuth) -> (Option<u8>, Vec<u8>) {
    (auth.sign_key, auth.keys.iter().map(|k| k.id).collect())
}

#[tokio::test]
async fn keys_are_stored_rotated_and_the_previous_kept() {
    for (backend, db) in test_databases().await {
        let state = ControllerState::new(db.clone(), cfg()).await.unwrap();
        let srv = serve_state(state.clone()).await;
        let reg: RegisterResponse = register(
            srv.addr,
            &registration("h1", 1, &[("eth0", "10.0.0.1", Some("t1"))]),
        )
        .await
        .json();
        let auth = reg.probe_auth.expect("keys in the registration reply");
        assert_eq!(ids(&auth), (Some(1), vec![1]), "{backend}");
        let stored = keys_in_db(&db).await;
        assert_eq!(stored.len(), 1, "{backend}");
        assert_eq!(
            auth.keys[0].key, stored[0].1,
            "{backend}: the served key is the stored one"
        );
        assert!(decode_key(&stored[0].1).is_some_and(|k| k != [0; 32]));
        assert!(
            auth.source_pps > 1_000.0 && auth.source_burst >= 16,
            "{auth:?}"
        );
        let first = poll(srv.addr, reg.host_id).await;
        assert_eq!(first.probe_auth.as_ref(), Some(&auth));
        assert!(first.version.ends_with("-k1.1"), "{}", first.version);

        // A second controller on the same database serves the same key.
        let other = serve(db.clone(), cfg()).await;
        assert_eq!(
            poll(other.addr, reg.host_id).await.probe_auth,
            Some(auth.clone()),
            "{backend}"
        );

        // Due: key 2 is published but not yet signed with (agents learn it first).
        age_keys(&db, ROTATE_MS + 1_000).await;
        state
            .refresh_probe_keys(rocemesh_proto::now_unix_ms())
            .await
            .unwrap();
        let during = poll(srv.addr, reg.host_id).await;
        assert_ne!(during.version, first.version, "a rotation changes the ETag");
        assert_eq!(
            ids(during.probe_auth.as_ref().unwrap()),
            (Some(1), vec![1, 2]),
            "{backend}"
        );
        // After the lead time key 2 signs and key 1 is still accepted.
        age_keys(&db, LEAD_MS + 500).await;
        state
            .refresh_probe_keys(rocemesh_proto::now_unix_ms())
            .await
            .unwrap();
        assert_eq!(
            ids(&poll(srv.addr, reg.host_id).await.probe_auth.unwrap()),
            (Some(2), vec![1, 2])
        );
        // The next rotation retires key 1.
        age_keys(&db, ROTATE_MS + 1_000).await;
        state
            .refresh_probe_keys(rocemesh_proto::now_unix_ms())
            .await
            .unwrap();
        age_keys(&db, LEAD_MS + 500).await;
        state
            .refresh_probe_keys(rocemesh_proto::now_unix_ms())
            .await
            .unwrap();
        let after = poll(srv.addr, reg.host_id).await.probe_auth.unwrap();
        assert_eq!(ids(&after), (Some(3), vec![2, 3]), "{backend}");
        let stored = keys_in_db(&db).await;
        assert_eq!(
            stored.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(after.keys[1].key, stored[2].1);
        assert_ne!(stored[1].1, stored[2].1, "every key is fresh");
    }
}

#[tokio::test]
async fn off_mode_hands_out_no_keys_but_the_limit() {
    for (backend, db) in test_databases().await {
        let srv = serve(
            db.clone(),
            ControllerConfig {
                probe_auth: ProbeAuthMode::Off,
                ..cfg()
            },
        )
        .await;
        let reg: RegisterResponse = register(
            srv.addr,
            &registration("h1", 1, &[("eth0", "10.0.0.1", Some("t1"))]),
        )
        .await
        .json();
        let auth = reg.probe_auth.unwrap();
        assert_eq!(ids(&auth), (None, vec![]), "{backend}");
        assert!(auth.source_pps > 0.0);
        assert!(keys_in_db(&db).await.is_empty(), "{backend}");
        assert!(!poll(srv.addr, reg.host_id).await.version.contains("-k"));
    }
}

#[tokio::test]
async fn a_rotation_shorter_than_the_key_lead_is_refused() {
    let err = ControllerConfig {
        pinglist_poll_ms: 60_000,
        probe_key_rotate_s: 200,
        ..cfg()
    }
    .validate()
    .unwrap_err();
    assert!(err.to_string().contains("probe_key_rotate ("), "{err}");
}
