//! Write-ahead log of accepted result batches (`ingest_wal`): a batch is committed here
//! before its upload is answered 200, so a crash between the answer and the period's SLA
//! rows loses nothing: the next start replays the log. Rows go once every period they
//! touch is stored. The log is bounded: past `wal_max_bytes` uploads are answered 503 and
//! agents keep their results until periods are stored again.

use anyhow::Context;
use rocemesh_store::Db;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Rows read per replay query (bounds the memory of a replay).
const REPLAY_PAGE: i64 = 64;

/// Why a batch could not be logged.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// The log holds `wal_max_bytes` already.
    #[error("the write-ahead log is full ({0} bytes): periods are not being stored")]
    Full(u64),
    /// The database refused the write.
    #[error("writing the write-ahead log: {0:#}")]
    Db(anyhow::Error),
}

/// The log's size accounting (the rows live in the database).
#[derive(Debug)]
pub(crate) struct Wal {
    bytes: AtomicU64,
    max_bytes: u64,
}

impl Wal {
    /// Reads the size of what the log holds.
    pub(crate) async fn open(db: &Db, max_bytes: u64) -> anyhow::Result<Self> {
        let wal = Self {
            bytes: AtomicU64::new(0),
            max_bytes,
        };
        wal.recount(db).await?;
        Ok(wal)
    }

    async fn recount(&self, db: &Db) -> anyhow::Result<()> {
        let (bytes,): (i64,) =
            sqlx::query_as("SELECT CAST(COALESCE(SUM(LENGTH(body)), 0) AS BIGINT) FROM ingest_wal")
                .fetch_one(db.pool())
                .await
                .context("measuring the write-ahead log")?;
        self.bytes.store(bytes.max(0) as u64, Relaxed);
        Ok(())
    }

    /// Bytes of batches held.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// Commits `body` (received at `received_ms`, its newest record in the period starting
    /// at `last_period_ms`) before the upload is answered.
    pub(crate) async fn append(
        &self,
        db: &Db,
        received_ms: i64,
        last_period_ms: i64,
        body: &[u8],
    ) -> Result<(), WalError> {
        let held = self.bytes();
        if held.saturating_add(body.len() as u64) > self.max_bytes {
            return Err(WalError::Full(held));
        }
        sqlx::query(
            "INSERT INTO ingest_wal (received_ms, last_period_ms, body) VALUES ($1, $2, $3)",
        )
        .bind(received_ms)
        .bind(last_period_ms)
        .bind(body)
        .execute(db.pool())
        .await
        .map_err(|e| WalError::Db(e.into()))?;
        self.bytes.fetch_add(body.len() as u64, Relaxed);
        Ok(())
    }

    /// Drops every batch whose periods all start at or before `through_ms` (they are
    /// stored).
    pub(crate) async fn release(&self, db: &Db, through_ms: i64) -> anyhow::Result<()> {
        let done = sqlx::query("DELETE FROM ingest_wal WHERE last_period_ms <= $1")
            .bind(through_ms)
            .execute(db.pool())
            .await
            .context("trimming the write-ahead log")?;
        if done.rows_affected() > 0 {
            self.recount(db).await?;
        }
        Ok(())
    }

    /// Hands every logged batch with records after the period starting at `stored_ms`
    /// (the newest stored one; older batches are in `sla_periods` already, a crash just
    /// came before their row went) to `apply`, oldest first; returns how many there were.
    pub(crate) async fn replay(
        db: &Db,
        stored_ms: Option<i64>,
        mut apply: impl FnMut(&[u8]),
    ) -> anyhow::Result<u64> {
        let stored_ms = stored_ms.unwrap_or(i64::MIN);
        let mut after = i64::MIN;
        let mut n = 0;
        loop {
            let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(
                "SELECT id, body FROM ingest_wal WHERE id > $1 AND last_period_ms > $2 ORDER BY id LIMIT $3",
            )
            .bind(after)
            .bind(stored_ms)
            .bind(REPLAY_PAGE)
            .fetch_all(db.pool())
            .await
            .context("replaying the write-ahead log")?;
            let Some((last, _)) = rows.last() else {
                return Ok(n);
            };
            after = *last;
            for (_, body) in &rows {
                apply(body);
                n += 1;
            }
        }
    }
}
