//! The receivers in force: the config file's (read-only) plus the API's (table
//! `alert_receivers`).

use crate::receiver::{Filters, Receiver, Source};
use anyhow::Context;
use rocemesh_proto::now_unix_ms;
use rocemesh_store::Db;
use sqlx::Row;

/// Why a change to the receivers was refused.
#[derive(Debug)]
pub enum ChangeError {
    /// The name belongs to a config-file receiver.
    ReadOnly(String),
    /// A receiver with this name exists already.
    Exists(String),
    /// No receiver with this name.
    NotFound(String),
    /// The database failed.
    Db(anyhow::Error),
}

impl std::fmt::Display for ChangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ReadOnly(n) => write!(
                f,
                "receiver {n:?} comes from the config file and is read-only"
            ),
            Self::Exists(n) => write!(f, "receiver {n:?} exists already"),
            Self::NotFound(n) => write!(f, "no receiver {n:?}"),
            Self::Db(e) => write!(f, "database error: {e:#}"),
        }
    }
}

impl std::error::Error for ChangeError {}

/// JSON text of a filter list.
fn to_json<T: serde::Serialize>(v: &T) -> Result<String, ChangeError> {
    serde_json::to_string(v).map_err(|e| ChangeError::Db(e.into()))
}

/// Config receivers first, then the stored ones by name.
pub async fn list(db: &Db, config: &[Receiver]) -> anyhow::Result<Vec<Receiver>> {
    let rows = sqlx::query(
        "SELECT name, url, secret, priorities, components FROM alert_receivers ORDER BY name",
    )
    .fetch_all(db.pool())
    .await
    .context("listing alert receivers")?;
    let mut out = config.to_vec();
    for r in rows {
        let name: String = r.try_get(0)?;
        let priorities: String = r.try_get(3)?;
        let components: String = r.try_get(4)?;
        let filters = Filters {
            priorities: serde_json::from_str(&priorities)
                .with_context(|| format!("receiver {name:?}: bad priorities in the database"))?,
            components: serde_json::from_str(&components)
                .with_context(|| format!("receiver {name:?}: bad components in the database"))?,
        };
        out.push(Receiver {
            url: r.try_get(1)?,
            secret: r.try_get(2)?,
            filters,
            source: Source::Api,
            name,
        });
    }
    Ok(out)
}

/// Stores a new API receiver; names are unique across config and API receivers.
pub async fn add(db: &Db, config: &[Receiver], r: &Receiver) -> Result<(), ChangeError> {
    if config.iter().any(|c| c.name == r.name) {
        return Err(ChangeError::ReadOnly(r.name.clone()));
    }
    let done = sqlx::query(
        "INSERT INTO alert_receivers (name, url, secret, priorities, components, created_ms) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING",
    )
    .bind(r.name.as_str())
    .bind(r.url.as_str())
    .bind(r.secret.as_deref())
    .bind(to_json(&r.filters.priorities)?)
    .bind(to_json(&r.filters.components)?)
    .bind(now_unix_ms())
    .execute(db.pool())
    .await
    .map_err(|e| ChangeError::Db(e.into()))?;
    if done.rows_affected() == 0 {
        return Err(ChangeError::Exists(r.name.clone()));
    }
    Ok(())
}

/// Deletes an API receiver; its pending notifications fail with "receiver removed".
pub async fn remove(db: &Db, config: &[Receiver], name: &str) -> Result<(), ChangeError> {
    if config.iter().any(|c| c.name == name) {
        return Err(ChangeError::ReadOnly(name.to_string()));
    }
    let done = sqlx::query("DELETE FROM alert_receivers WHERE name = $1")
        .bind(name)
        .execute(db.pool())
        .await
        .map_err(|e| ChangeError::Db(e.into()))?;
    if done.rows_affected() == 0 {
        return Err(ChangeError::NotFound(name.to_string()));
    }
    Ok(())
}
