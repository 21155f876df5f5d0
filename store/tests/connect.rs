//! Connecting, migrating and reconnecting real databases.

use rocemesh_store::{Backend, Db};

#[tokio::test]
async fn sqlite_file_is_created_in_wal_mode_and_migrated_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let db = Db::connect(path.to_str().unwrap()).await.unwrap();
    assert_eq!(db.backend(), Backend::Sqlite);
    assert!(path.exists());
    let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    let (fk,): (i64,) = sqlx::query_as("PRAGMA foreign_keys")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(fk, 1);
    let (busy,): (i64,) = sqlx::query_as("PRAGMA busy_timeout")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert!(busy >= 1000, "busy_timeout {busy} ms");
    sqlx::query(
        "INSERT INTO hosts (name, epoch, registrations, registered_at_ms) VALUES ($1, $2, $3, $4)",
    )
    .bind("h1")
    .bind(7i64)
    .bind(1i64)
    .bind(0i64)
    .execute(db.pool())
    .await
    .unwrap();
    db.pool().close().await;

    // Reopening through the URL form runs no migration twice and keeps the rows.
    let again = Db::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM hosts")
        .fetch_one(again.pool())
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn unreachable_database_error_names_url_without_password() {
    let err = Db::connect("postgres://user:hunter2@127.0.0.1:1/nowhere")
        .await
        .err()
        .unwrap();
    let text = format!("{err:#}");
    assert!(
        text.contains("postgres://user:***@127.0.0.1:1/nowhere"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");

    let err = Db::connect("/nonexistent-dir-rocemesh/x.db")
        .await
        .err()
        .unwrap();
    assert!(format!("{err:#}").contains("/nonexistent-dir-rocemesh/x.db"));
}

#[tokio::test]
async fn sqlite_files_holding_secrets_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    // A new file, whatever the umask.
    let fresh = dir.path().join("fresh.db");
    let db = Db::connect(fresh.to_str().unwrap()).await.unwrap();
    assert_eq!(mode(&fresh), 0o600);
    let wal = dir.path().join("fresh.db-wal");
    assert!(!wal.exists() || mode(&wal) == 0o600);
    db.pool().close().await;
    // An existing world-readable file (made by an older version) is tightened at start.
    let old = dir.path().join("old.db");
    std::fs::write(&old, b"").unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
    let db = Db::connect(old.to_str().unwrap()).await.unwrap();
    sqlx::query(
        "INSERT INTO hosts (name, epoch, registrations, registered_at_ms) VALUES ('h', 1, 1, 0)",
    )
    .execute(db.pool())
    .await
    .unwrap();
    for f in ["old.db", "old.db-wal", "old.db-shm"] {
        let p = dir.path().join(f);
        if p.exists() {
            assert_eq!(mode(&p), 0o600, "{f}");
        }
    }
}
