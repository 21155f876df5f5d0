//! What is deployed (migrations 0001, 0004, 0010, 0012): the `hosts` and `rnics` the
//! controller registers as agents come up, and the `tasks` with their `task_endpoints`
//! users declare. The controller writes them; the analyzer and the impact loop read the
//! RNICs and the endpoints joined to them.

use crate::Db;
use anyhow::Context;
use rocemesh_proto::api::TaskEndpoint;
use sqlx::Row;
use std::collections::BTreeMap;
use std::net::IpAddr;

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// Endpoint rows per INSERT: 8 binds each stays far below both engines' bind limits.
const ROWS_PER_INSERT: usize = 500;

/// The inventory repository of a [`Db`].
#[derive(Debug, Clone, Copy)]
pub struct Inventory<'a> {
    db: &'a Db,
}

impl Db {
    /// The registered hosts and RNICs, and the declared tasks.
    pub fn inventory(&self) -> Inventory<'_> {
        Inventory { db: self }
    }
}

/// A host as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct HostRecord {
    /// Registry id.
    pub id: u32,
    /// Host name.
    pub name: String,
    /// Registration epoch (bumped on every registration).
    pub epoch: u32,
    /// Registrations so far.
    pub registrations: i64,
    /// When it last registered.
    pub registered_at_ms: i64,
}

/// An RNIC as recorded, with its ToR already resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct RnicRecord {
    /// Registry id.
    pub id: u32,
    /// Its host's id.
    pub host_id: u32,
    /// Interface name on the host.
    pub ifname: String,
    /// Its address.
    pub ip: IpAddr,
    /// Its RoCE GID, when it has one.
    pub gid: Option<String>,
    /// Its probe QP number.
    pub qpn: u32,
    /// Its probe UDP port.
    pub port: u16,
    /// The ToR in force.
    pub tor: String,
    /// The ToR the agent gave.
    pub tor_hint: Option<String>,
    /// The rail in force (the agent's hint, else the node labels).
    pub rail: Option<u32>,
    /// The rail the agent gave.
    pub rail_hint: Option<u32>,
    /// Its default gateway.
    pub gateway: Option<IpAddr>,
    /// Its registration epoch.
    pub epoch: u32,
    /// When it last registered.
    pub registered_at_ms: i64,
}

/// What one registration writes: ids are `None` for rows still to be inserted.
#[derive(Debug)]
pub struct RegistrationPlan {
    /// The host's id, when it registered before.
    pub host_id: Option<u32>,
    /// The host row.
    pub host: HostRecord,
    /// Its RNICs, with their ids when they exist already.
    pub rnics: Vec<(Option<u32>, RnicRecord)>,
    /// Ids of its RNICs that are gone.
    pub removed: Vec<u32>,
}

/// A stored task with its endpoints in spec order.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTask {
    /// Task id.
    pub id: u32,
    /// Task name.
    pub name: String,
    /// Its endpoints.
    pub endpoints: Vec<TaskEndpoint>,
}

/// An RNIC with its host's name, as the analyzer's registry reads it (ids unchecked).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RegisteredRnic {
    /// Registry id.
    pub id: i64,
    /// Its host's id.
    pub host_id: i64,
    /// The ToR in force.
    pub tor: Option<String>,
    /// Interface name.
    pub ifname: String,
    /// Its address, as stored.
    pub ip: String,
    /// Its probe QP number.
    pub qpn: i64,
    /// Its registration epoch.
    pub epoch: i64,
    /// When it last registered.
    pub registered_at_ms: i64,
    /// Its host's name.
    pub host: String,
}

/// A registered RNIC some task names as an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TaskMember {
    /// The RNIC's registry id.
    pub rnic_id: i64,
    /// The task's name.
    pub task: String,
    /// The task's id.
    pub task_id: i64,
}

/// The Kubernetes labels a task endpoint gives a registered RNIC.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct EndpointLabelRow {
    /// The RNIC's registry id.
    pub rnic_id: i64,
    /// The task's name.
    pub task: String,
    /// The endpoint's namespace.
    pub namespace: Option<String>,
    /// The endpoint's pod.
    pub pod: Option<String>,
}

/// A task endpoint with its RNIC's registration, if the RNIC registered.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct EndpointRow {
    /// The task's id.
    pub task_id: i64,
    /// Host name.
    pub host: String,
    /// RNIC name on the host.
    pub rnic: String,
    /// The RNIC's registry id.
    pub rnic_id: Option<i64>,
    /// Its address, as stored.
    pub ip: Option<String>,
    /// Its ToR.
    pub tor: Option<String>,
}

/// Narrows a database integer to the API's width, naming the column when it does not fit.
fn narrow<T: TryFrom<i64>>(v: i64, what: &str) -> anyhow::Result<T> {
    T::try_from(v).map_err(|_| anyhow::anyhow!("{what} {v} in the database is out of range"))
}

fn parse_ip(s: &str, what: &str) -> anyhow::Result<IpAddr> {
    s.parse()
        .with_context(|| format!("{what} {s:?} in the database is not an IP address"))
}

type RnicColumns = (
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

type EndpointColumns = (
    i64,
    i64,
    String,
    String,
    Option<i64>,
    Option<String>,
    Option<String>,
    i64,
);

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

impl Inventory<'_> {
    /// Every host and RNIC, by id.
    pub async fn hosts_and_rnics(&self) -> anyhow::Result<(Vec<HostRecord>, Vec<RnicRecord>)> {
        let host_rows: Vec<(i64, String, i64, i64, i64)> = sqlx::query_as(
            "SELECT id, name, epoch, registrations, registered_at_ms FROM hosts ORDER BY id",
        )
        .fetch_all(self.db.pool())
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
        let rnic_rows: Vec<RnicColumns> = sqlx::query_as(
            "SELECT id, host_id, ifname, ip, gid, qpn, port, tor, tor_hint, rail, rail_hint, gateway, epoch, registered_at_ms \
             FROM rnics ORDER BY id",
        )
        .fetch_all(self.db.pool())
        .await
        .context("cannot load RNICs")?;
        let mut rnics = Vec::with_capacity(rnic_rows.len());
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
            rnics.push(RnicRecord {
                id: narrow(id, "RNIC id")?,
                host_id: narrow(host_id, "RNIC host_id")?,
                ifname,
                ip: parse_ip(&ip, "RNIC ip")?,
                gid,
                qpn: narrow(qpn, "qpn")?,
                port: narrow(port, "port")?,
                tor,
                tor_hint,
                rail: rail.map(|r| narrow(r, "rail")).transpose()?,
                rail_hint: rail_hint.map(|r| narrow(r, "rail_hint")).transpose()?,
                gateway: gateway.map(|g| parse_ip(&g, "gateway")).transpose()?,
                epoch: narrow(epoch, "RNIC epoch")?,
                registered_at_ms,
            });
        }
        Ok((hosts, rnics))
    }

    /// Writes new places (id, ToR, rail) of RNICs in one transaction.
    pub async fn save_placement(&self, moved: &[(u32, &str, Option<u32>)]) -> anyhow::Result<()> {
        let mut tx = self.db.pool().begin().await?;
        for &(id, tor, rail) in moved {
            sqlx::query("UPDATE rnics SET tor = $1, rail = $2 WHERE id = $3")
                .bind(tor)
                .bind(rail.map(i64::from))
                .bind(i64::from(id))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit()
            .await
            .context("cannot rewrite RNIC ToRs and rails")
    }

    /// Writes a registration in one transaction; returns the host id and the RNIC ids in
    /// the plan's order. Nothing is written when it fails.
    pub async fn save_registration(
        &self,
        plan: &RegistrationPlan,
        upload_key_sha256: &str,
    ) -> anyhow::Result<(u32, Vec<u32>)> {
        let mut tx = self.db.pool().begin().await?;
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

    /// Deletes a host and (by cascade) its RNICs. Returns whether a row was deleted.
    pub async fn delete_host(&self, host_id: u32) -> anyhow::Result<bool> {
        let mut tx = self.db.pool().begin().await?;
        // Explicit RNIC delete too: the cascade is the schema's promise, this is belt and
        // braces for SQLite connections opened without foreign_keys.
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

    /// The SHA-256 fingerprint of host `host_id`'s upload key: `None` for an unknown
    /// host, `Some(None)` for a host registered without one.
    pub async fn upload_key_sha256(&self, host_id: u32) -> anyhow::Result<Option<Option<String>>> {
        let row: Option<(Option<String>,)> =
            sqlx::query_as("SELECT upload_key_sha256 FROM hosts WHERE id = $1")
                .bind(i64::from(host_id))
                .fetch_optional(self.db.pool())
                .await?;
        Ok(row.map(|(f,)| f))
    }

    /// Every RNIC with its host's name.
    pub async fn registered_rnics(&self) -> anyhow::Result<Vec<RegisteredRnic>> {
        sqlx::query_as(
            "SELECT r.id, r.host_id, r.tor, r.ifname, r.ip, r.qpn, r.epoch, r.registered_at_ms, \
             h.name AS host FROM rnics r JOIN hosts h ON h.id = r.host_id",
        )
        .fetch_all(self.db.pool())
        .await
        .context("reading the RNIC registry")
    }

    /// Every (registered RNIC, task) pair where the task names the RNIC as an endpoint.
    pub async fn task_members(&self) -> anyhow::Result<Vec<TaskMember>> {
        sqlx::query_as(
            "SELECT r.id AS rnic_id, t.name AS task, t.id AS task_id FROM task_endpoints e \
             JOIN tasks t ON t.id = e.task_id \
             JOIN hosts h ON h.name = e.host \
             JOIN rnics r ON r.host_id = h.id AND r.ifname = e.rnic",
        )
        .fetch_all(self.db.pool())
        .await
        .context("reading task endpoints")
    }

    /// The namespace and pod labels task endpoints give registered RNICs, by RNIC id,
    /// task name and endpoint position (endpoints without either label are left out).
    pub async fn endpoint_labels(&self) -> anyhow::Result<Vec<EndpointLabelRow>> {
        sqlx::query_as(
            "SELECT r.id AS rnic_id, t.name AS task, e.namespace, e.pod FROM task_endpoints e \
             JOIN tasks t ON t.id = e.task_id \
             JOIN hosts h ON h.name = e.host \
             JOIN rnics r ON r.host_id = h.id AND r.ifname = e.rnic \
             WHERE e.namespace IS NOT NULL OR e.pod IS NOT NULL \
             ORDER BY r.id, t.name, e.pos",
        )
        .fetch_all(self.db.pool())
        .await
        .context("reading task endpoint labels")
    }

    /// Every task endpoint with its RNIC's registration, by task and position.
    pub async fn endpoints(&self) -> anyhow::Result<Vec<EndpointRow>> {
        sqlx::query_as(
            "SELECT e.task_id, e.host, e.rnic, r.id AS rnic_id, r.ip, r.tor FROM task_endpoints e \
             LEFT JOIN hosts h ON h.name = e.host \
             LEFT JOIN rnics r ON r.host_id = h.id AND r.ifname = e.rnic \
             ORDER BY e.task_id, e.pos",
        )
        .fetch_all(self.db.pool())
        .await
        .context("reading task endpoints")
    }

    /// Every task's id.
    pub async fn task_ids(&self) -> anyhow::Result<Vec<i64>> {
        let ids: Vec<(i64,)> = sqlx::query_as("SELECT id FROM tasks")
            .fetch_all(self.db.pool())
            .await
            .context("reading tasks")?;
        Ok(ids.into_iter().map(|(id,)| id).collect())
    }

    /// True when task `id` exists.
    pub async fn task_exists(&self, id: u32) -> anyhow::Result<bool> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT id FROM tasks WHERE id = $1")
            .bind(i64::from(id))
            .fetch_optional(self.db.pool())
            .await
            .context("looking up a task")?;
        Ok(row.is_some())
    }

    /// A cheap summary of the task and registry tables, which changes whenever a task
    /// or an RNIC registration does.
    pub async fn fingerprint(&self) -> anyhow::Result<[i64; 5]> {
        let (a, b, c, d, e): (i64, i64, i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM tasks), (SELECT COALESCE(MAX(updated_at_ms), 0) FROM tasks), \
             (SELECT COUNT(*) FROM task_endpoints), (SELECT COUNT(*) FROM rnics), \
             (SELECT COALESCE(MAX(registered_at_ms), 0) FROM rnics)",
        )
        .fetch_one(self.db.pool())
        .await
        .context("summarizing tasks and registry")?;
        Ok([a, b, c, d, e])
    }

    /// Every task with its endpoints in spec order.
    pub async fn tasks(&self) -> anyhow::Result<Vec<StoredTask>> {
        let task_rows: Vec<(i64, String)> =
            sqlx::query_as("SELECT id, name FROM tasks ORDER BY id")
                .fetch_all(self.db.pool())
                .await
                .context("cannot load tasks")?;
        let mut tasks = BTreeMap::new();
        for (id, name) in task_rows {
            let id: u32 = narrow(id, "task id")?;
            tasks.insert(
                id,
                StoredTask {
                    id,
                    name,
                    endpoints: Vec::new(),
                },
            );
        }
        let rows: Vec<EndpointColumns> = sqlx::query_as(
            "SELECT task_id, pos, host, rnic, rail, namespace, pod, ready FROM task_endpoints ORDER BY task_id, pos",
        )
        .fetch_all(self.db.pool())
        .await
        .context("cannot load task endpoints")?;
        for (task_id, _pos, host, rnic, rail, namespace, pod, ready) in rows {
            let task_id: u32 = narrow(task_id, "task_endpoints.task_id")?;
            let task = tasks
                .get_mut(&task_id)
                .context("task endpoint row without its task")?;
            let rail = rail.map(|r| narrow(r, "task endpoint rail")).transpose()?;
            task.endpoints.push(TaskEndpoint {
                host,
                rnic,
                rail,
                namespace,
                pod,
                ready: ready != 0,
            });
        }
        Ok(tasks.into_values().collect())
    }

    /// Inserts a task and its endpoints; returns its id. Nothing is written when it fails.
    pub async fn insert_task(
        &self,
        name: &str,
        endpoints: &[TaskEndpoint],
        now_ms: i64,
    ) -> anyhow::Result<u32> {
        let mut tx = self.db.pool().begin().await?;
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO tasks (name, created_at_ms, updated_at_ms) VALUES ($1, $2, $2) RETURNING id",
        )
        .bind(name)
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await?;
        insert_endpoints(&mut tx, id, endpoints).await?;
        tx.commit().await?;
        narrow(id, "new task id")
    }

    /// Replaces a task's name and endpoints in one transaction.
    pub async fn replace_task(
        &self,
        id: u32,
        name: &str,
        endpoints: &[TaskEndpoint],
        now_ms: i64,
    ) -> anyhow::Result<()> {
        let id = i64::from(id);
        let mut tx = self.db.pool().begin().await?;
        sqlx::query("UPDATE tasks SET name = $1, updated_at_ms = $2 WHERE id = $3")
            .bind(name)
            .bind(now_ms)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM task_endpoints WHERE task_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        insert_endpoints(&mut tx, id, endpoints).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Marks the endpoint at `pos` of task `id` ready or not ready.
    pub async fn set_ready(&self, id: u32, pos: usize, ready: bool) -> anyhow::Result<()> {
        sqlx::query("UPDATE task_endpoints SET ready = $1 WHERE task_id = $2 AND pos = $3")
            .bind(i64::from(ready))
            .bind(i64::from(id))
            .bind(pos as i64)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Deletes a task and its endpoints.
    pub async fn delete_task(&self, id: u32) -> anyhow::Result<()> {
        let mut tx = self.db.pool().begin().await?;
        // Explicit endpoint delete too, as for RNICs: SQLite connections may lack foreign_keys.
        sqlx::query("DELETE FROM task_endpoints WHERE task_id = $1")
            .bind(i64::from(id))
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM tasks WHERE id = $1")
            .bind(i64::from(id))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Writes endpoints in multi-row inserts, so a 100k-endpoint task is a few hundred
/// statements, not 100k round trips.
async fn insert_endpoints(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    task_id: i64,
    endpoints: &[TaskEndpoint],
) -> anyhow::Result<()> {
    for (chunk_no, chunk) in endpoints.chunks(ROWS_PER_INSERT).enumerate() {
        let values: Vec<String> = (0..chunk.len())
            .map(|r| {
                let b = r * 8;
                format!(
                    "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4,
                    b + 5,
                    b + 6,
                    b + 7,
                    b + 8
                )
            })
            .collect();
        let sql = format!(
            "INSERT INTO task_endpoints (task_id, pos, host, rnic, rail, namespace, pod, ready) VALUES {}",
            values.join(", ")
        );
        // Only a full chunk's text recurs; a last, shorter one is not kept prepared.
        let mut q = sqlx::query(&sql).persistent(chunk.len() == ROWS_PER_INSERT);
        for (i, e) in chunk.iter().enumerate() {
            let pos = (chunk_no * ROWS_PER_INSERT + i) as i64;
            q = q
                .bind(task_id)
                .bind(pos)
                .bind(e.host.clone())
                .bind(e.rnic.clone())
                .bind(e.rail.map(i64::from))
                .bind(e.namespace.clone())
                .bind(e.pod.clone())
                .bind(i64::from(e.ready));
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}
