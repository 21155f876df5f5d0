//! The `host_liveness` table: each host's last upload, saved so a restarted analyzer
//! does not take every host for down.

use anyhow::Context;
use rocemesh_store::Db;
use sqlx::Row;

/// Rows per multi-row statement of [`save_liveness`] (three parameters each).
const LIVENESS_CHUNK: usize = 300;

/// Saves (host id, epoch, last upload ms) rows; a stored row is only ever moved forward.
pub(crate) async fn save_liveness(db: &Db, rows: &[(u32, u32, i64)]) -> anyhow::Result<()> {
    for chunk in rows.chunks(LIVENESS_CHUNK) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3))
            .collect();
        let sql = format!(
            "INSERT INTO host_liveness (host_id, epoch, last_upload_ms) VALUES {} \
             ON CONFLICT (host_id) DO UPDATE SET epoch = excluded.epoch, \
             last_upload_ms = excluded.last_upload_ms \
             WHERE host_liveness.last_upload_ms < excluded.last_upload_ms",
            values.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for &(host, epoch, at) in chunk {
            q = q.bind(i64::from(host)).bind(i64::from(epoch)).bind(at);
        }
        q.execute(db.pool()).await.context("saving host liveness")?;
    }
    Ok(())
}

/// Every saved (host id, epoch, last upload ms).
pub(crate) async fn load_liveness(db: &Db) -> anyhow::Result<Vec<(u32, u32, i64)>> {
    let rows = sqlx::query("SELECT host_id, epoch, last_upload_ms FROM host_liveness")
        .fetch_all(db.pool())
        .await
        .context("loading host liveness")?;
    rows.iter()
        .map(|r| {
            let host: i64 = r.try_get(0)?;
            let epoch: i64 = r.try_get(1)?;
            Ok((
                u32::try_from(host).context("host id out of range in host_liveness")?,
                u32::try_from(epoch).context("epoch out of range in host_liveness")?,
                r.try_get(2)?,
            ))
        })
        .collect()
}
