//! Throwaway databases for tests of the crates built on the store: every call gives
//! fresh, migrated, empty databases so tests never see each other's rows.

use crate::{Backend, Db};
use anyhow::Context;
use sqlx::Connection;
use std::sync::atomic::{AtomicU64, Ordering};

/// Environment variable naming a PostgreSQL admin URL (a role allowed to create databases).
const PG_URL_VAR: &str = "ROCEMESH_TEST_PG_URL";

/// A fresh SQLite database in a temporary directory (removed when the last clone of the
/// returned `Db` drops) and, when `ROCEMESH_TEST_PG_URL` is set, a freshly created
/// PostgreSQL database. Without that variable the PostgreSQL half is skipped with a note
/// on stderr, except under `CI`, where skipping would hide a missing test and panics.
pub async fn test_databases() -> Vec<(&'static str, Db)> {
    let mut dbs = vec![(
        "sqlite",
        sqlite_db().await.expect("create test SQLite database"),
    )];
    match std::env::var(PG_URL_VAR) {
        Ok(admin_url) => dbs.push((
            "postgres",
            postgres_db(&admin_url)
                .await
                .expect("create test PostgreSQL database"),
        )),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("ROCEMESH_TEST_PG_URL must be set in CI")
        }
        Err(_) => eprintln!("skipping PostgreSQL: ROCEMESH_TEST_PG_URL not set"),
    }
    dbs
}

async fn sqlite_db() -> anyhow::Result<Db> {
    let dir = tempfile::Builder::new()
        .prefix("rocemesh-test-")
        .tempdir()?;
    let path = dir.path().join("test.db");
    let path = path.to_str().context("temporary path is not UTF-8")?;
    let mut db = Db::connect(path).await?;
    db._temp_dir = Some(std::sync::Arc::new(dir));
    Ok(db)
}

async fn postgres_db(admin_url: &str) -> anyhow::Result<Db> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let name = format!(
        "rocemesh_test_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = sqlx::PgConnection::connect(admin_url)
        .await
        .with_context(|| format!("cannot connect to {}", crate::redact_url(admin_url)))?;
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await?;
    admin.close().await?;
    let db = Db::connect(&database_url(admin_url, &name)).await?;
    anyhow::ensure!(
        db.backend() == Backend::Postgres,
        "{PG_URL_VAR} is not a PostgreSQL URL"
    );
    Ok(db)
}

/// `admin_url` with its database name replaced by `name`, query string kept.
fn database_url(admin_url: &str, name: &str) -> String {
    let (base, query) = match admin_url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (admin_url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::database_url;

    #[test]
    fn database_name_is_swapped_in() {
        assert_eq!(
            database_url("postgres://u@h:1/postgres", "t1"),
            "postgres://u@h:1/t1"
        );
        assert_eq!(
            database_url("postgres://u@h:1", "t1"),
            "postgres://u@h:1/t1"
        );
        assert_eq!(
            database_url("postgres://u@h/db?sslmode=disable", "t1"),
            "postgres://u@h/t1?sslmode=disable"
        );
    }
}
