//! Registry rows in the database (migration 0001): loading at start, one transaction per
//! registration, cascading delete of a decommissioned host.

use super::{HostRecord, Placement, RegistrationPlan, RnicRecord};
use crate::topology::Topology;
use anyhow::Context;
use rocemesh_store::Db;
use sqlx::Row;
use std::net::IpAddr;

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

type RnicRow = (
    i64,
    i64,
    String,
    String,
    Option<String>,
    i64,
    i64,
    String,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    i64,
    i64,
);

/// Narrows a database integer to the API's width, naming the column when it does not fit.
pub(crate) fn narrow<T: TryFrom<i64>>(v: i64, what: &str) -> anyhow::Result<T> {
    T::try_from(v).map_err(|_| anyhow::anyhow!("{what} {v} in the database is out of range"))
}

fn parse_ip(s: &str, what: &str) -> anyhow::Result<IpAddr> {
    s.parse()
        .with_context(|| format!("{what} {s:?} in the database is not an IP address"))
}

/// Reads every host and RNIC. RNIC ToRs are re-resolved against the current topology
/// file; rows whose ToR changed are rewritten so the analyzer sees the same ToRs.
pub(crate) async fn load(
    db: &Db,
    topology: &Topology,
) -> anyhow::Result<(Vec<HostRecord>, Vec<RnicRecord>)> {
    let host_rows: Vec<(i64, String, i64, i64, i64)> = sqlx::query_as(
        "SELECT id, name, epoch, registrations, registered_at_ms FROM hosts ORDER BY id",
    )
    .fetch_all(db.pool())
    .await
    .context("cannot load hosts")?;
    let mut hosts = Vec::with_capacity(host_rows.len());
    for (id, name, epoch, registrations, registered_at_ms) in host_rows {
        hosts.push(HostRecord {
            id: narrow(id, "host id")?,
            name,
            epoch: narrow(epoch, "host epoch")?,
            registrations,
            registered_at_ms,
        });
    }
    let rnic_rows: Vec<RnicRow> = sqlx::query_as(
        "SELECT id, host_id, ifname, ip, gid, qpn, port, tor, tor_hint, rail, rail_hint, gateway, epoch, registered_at_ms \
         FROM rnics ORDER BY id",
    )
    .fetch_all(db.pool())
    .await
    .context("cannot load RNICs")?;
    let host_names: std::collections::HashMap<u32, &str> =
        hosts.iter().map(|h| (h.id, h.name.as_str())).collect();
    let mut rnics = Vec::with_capacity(rnic_rows.len());
    let mut moved = Vec::new();
    for (
        id,
        host_id,
        ifname,
        ip,
        gid,
        qpn,
        port,
        tor,
        tor_hint,
        rail,
        rail_hint,
        gateway,
        epoch,
        registered_at_ms,
    ) in rnic_rows
    {
        let host_id: u32 = narrow(host_id, "RNIC host_id")?;
        let host = host_names
            .get(&host_id)
            .context("RNIC row without its host")?;
        let gateway = gateway.map(|g| parse_ip(&g, "gateway")).transpose()?;
        let mut record = RnicRecord {
            id: narrow(id, "RNIC id")?,
            host_id,
            ifname,
            ip: parse_ip(&ip, "RNIC ip")?,
            gid,
            qpn: narrow(qpn, "qpn")?,
            port: narrow(port, "port")?,
            tor,
            tor_hint,
            rail: rail.map(|r| narrow(r, "rail")).transpose()?,
            rail_hint: rail_hint.map(|r| narrow(r, "rail_hint")).transpose()?,
            gateway,
            epoch: narrow(epoch, "RNIC epoch")?,
            registered_at_ms,
        };
        let placed = Placement::of(&record, host, topology);
        if !placed.same_as(&record) {
            record.tor.clone_from(&placed.tor);
            record.rail = placed.rail;
            moved.push(placed);
        }
        rnics.push(record);
    }
    if !moved.is_empty() {
        tracing::info!(
            rnics = moved.len(),
            "topology changed since last run: rewriting RNIC ToRs"
        );
        save_placement(db, &moved).await?;
    }
    Ok((hosts, rnics))
}

/// Writes new places (ToR, rail) of RNICs in one transaction.
pub(crate) async fn save_placement(db: &Db, moved: &[Placement]) -> anyhow::Result<()> {
    let mut tx = db.pool().begin().await?;
    for p in moved {
        sqlx::query("UPDATE rnics SET tor = $1, rail = $2 WHERE id = $3")
            .bind(&p.tor)
            .bind(p.rail.map(i64::from))
            .bind(i64::from(p.id))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit()
        .await
        .context("cannot rewrite RNIC ToRs and rails")
}

/// Writes a registration in one transaction; returns the host id and the RNIC ids in
/// the plan's order. Nothing is written when it fails.
pub(crate) async fn save_registration(
    db: &Db,
    plan: &RegistrationPlan,
    upload_key_sha256: &str,
) -> anyhow::Result<(u32, Vec<u32>)> {
    let mut tx = db.pool().begin().await?;
    let h = &plan.host;
    let host_id = match plan.host_id {
        Some(id) => {
            sqlx::query("UPDATE hosts SET epoch = $1, registrations = $2, registered_at_ms = $3, upload_key_sha256 = $4 WHERE id = $5")
                .bind(i64::from(h.epoch))
                .bind(h.registrations)
                .bind(h.registered_at_ms)
                .bind(upload_key_sha256)
                .bind(i64::from(id))
                .execute(&mut *tx)
                .await?;
            id
        }
        None => {
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO hosts (name, epoch, registrations, registered_at_ms, upload_key_sha256) VALUES ($1, $2, $3, $4, $5) RETURNING id",
            )
            .bind(&h.name)
            .bind(i64::from(h.epoch))
            .bind(h.registrations)
            .bind(h.registered_at_ms)
            .bind(upload_key_sha256)
            .fetch_one(&mut *tx)
            .await?;
            narrow(id, "new host id")?
        }
    };
    for id in &plan.removed {
        sqlx::query("DELETE FROM rnics WHERE id = $1")
            .bind(i64::from(*id))
            .execute(&mut *tx)
            .await?;
    }
    let mut ids = Vec::with_capacity(plan.rnics.len());
    for (id, r) in &plan.rnics {
        let id = match id {
            Some(id) => {
                bind_rnic_fields(
                    sqlx::query(
                        "UPDATE rnics SET ip = $1, gid = $2, qpn = $3, port = $4, tor = $5, tor_hint = $6, rail = $7, \
                         gateway = $8, epoch = $9, registered_at_ms = $10, rail_hint = $11 WHERE id = $12",
                    ),
                    r,
                )
                .bind(i64::from(*id))
                .execute(&mut *tx)
                .await?;
                *id
            }
            None => {
                let row = bind_rnic_fields(
                    sqlx::query(
                        "INSERT INTO rnics (ip, gid, qpn, port, tor, tor_hint, rail, gateway, epoch, registered_at_ms, \
                         rail_hint, host_id, ifname) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id",
                    ),
                    r,
                )
                .bind(i64::from(host_id))
                .bind(&r.ifname)
                .fetch_one(&mut *tx)
                .await?;
                narrow(row.try_get::<i64, _>(0)?, "new RNIC id")?
            }
        };
        ids.push(id);
    }
    tx.commit().await?;
    Ok((host_id, ids))
}

/// Binds `$1..=$11`: the RNIC columns a registration sets, shared by insert and update.
fn bind_rnic_fields<'q>(q: AnyQuery<'q>, r: &RnicRecord) -> AnyQuery<'q> {
    q.bind(r.ip.to_string())
        .bind(r.gid.clone())
        .bind(i64::from(r.qpn))
        .bind(i64::from(r.port))
        .bind(r.tor.clone())
        .bind(r.tor_hint.clone())
        .bind(r.rail.map(i64::from))
        .bind(r.gateway.map(|g| g.to_string()))
        .bind(i64::from(r.epoch))
        .bind(r.registered_at_ms)
        .bind(r.rail_hint.map(i64::from))
}

/// Deletes a host and (by cascade) its RNICs. Returns whether a row was deleted.
pub(crate) async fn delete_host(db: &Db, host_id: u32) -> anyhow::Result<bool> {
    let mut tx = db.pool().begin().await?;
    // Explicit RNIC delete too: the cascade is the schema's promise, this is belt and braces
    // for SQLite connections opened without foreign_keys.
    sqlx::query("DELETE FROM rnics WHERE host_id = $1")
        .bind(i64::from(host_id))
        .execute(&mut *tx)
        .await?;
    let done = sqlx::query("DELETE FROM hosts WHERE id = $1")
        .bind(i64::from(host_id))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}
