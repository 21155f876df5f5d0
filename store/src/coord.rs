//! Scale-out coordination in the database (migration 0007): instances announce themselves
//! with heartbeats, hold named leases that expire unless renewed, and publish a summary
//! of their shards' flows for the others (tables `instances`, `leases`, `flow_summaries`). Controllers elect a
//! pinglist leader with one lease; analyzers split the ToRs into shards, each shard a
//! lease, and balance them to a fair share ([`balance_shards`]).
//!
//! A lease is taken or renewed by one conditional upsert that succeeds only for its
//! holder or once it expired, so two instances never hold it at once; its holder acts on
//! it only until the expiry it wrote. Times are the instances' unix ms (clocks
//! NTP-synchronized: a lease lasts seconds, skew is milliseconds).

use crate::Db;
use anyhow::Context;
use std::collections::{BTreeSet, HashMap};

/// Prefix of the shard lease names (`shard/<n>`).
const SHARD_PREFIX: &str = "shard/";

/// Notes that instance `id` with `role` is alive at `now_ms`, reachable at `url`.
pub async fn heartbeat(
    db: &Db,
    id: &str,
    role: &str,
    url: &str,
    now_ms: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO instances (id, role, url, heartbeat_ms) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (id) DO UPDATE SET role = excluded.role, url = excluded.url, \
         heartbeat_ms = excluded.heartbeat_ms",
    )
    .bind(id)
    .bind(role)
    .bind(url)
    .bind(now_ms)
    .execute(db.pool())
    .await
    .with_context(|| format!("heartbeat of instance {id}"))?;
    Ok(())
}

/// Removes instance `id` and releases its leases (a clean shutdown: no one waits for
/// them to expire).
pub async fn leave(db: &Db, id: &str) -> anyhow::Result<()> {
    sqlx::query("DELETE FROM leases WHERE holder = $1")
        .bind(id)
        .execute(db.pool())
        .await?;
    sqlx::query("DELETE FROM instances WHERE id = $1")
        .bind(id)
        .execute(db.pool())
        .await?;
    Ok(())
}

/// Ids of the instances with `role` whose heartbeat is newer than `since_ms`, sorted.
pub async fn live_instances(db: &Db, role: &str, since_ms: i64) -> anyhow::Result<Vec<String>> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT id FROM instances WHERE role = $1 AND heartbeat_ms > $2 ORDER BY id",
    )
    .bind(role)
    .bind(since_ms)
    .fetch_all(db.pool())
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// Takes or renews lease `name` for `holder` until `until_ms`; true when `holder` has it
/// now (it held it already, or nobody did, or the last holder's lease ended before `now_ms`).
pub async fn acquire(
    db: &Db,
    name: &str,
    holder: &str,
    now_ms: i64,
    until_ms: i64,
) -> anyhow::Result<bool> {
    let won: Option<(String,)> = sqlx::query_as(
        "INSERT INTO leases (name, holder, expires_ms) VALUES ($1, $2, $3) \
         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms \
         WHERE leases.holder = excluded.holder OR leases.expires_ms < $4 \
         RETURNING holder",
    )
    .bind(name)
    .bind(holder)
    .bind(until_ms)
    .bind(now_ms)
    .fetch_optional(db.pool())
    .await
    .with_context(|| format!("taking lease {name}"))?;
    Ok(won.is_some())
}

/// Gives lease `name` up if `holder` has it.
pub async fn release(db: &Db, name: &str, holder: &str) -> anyhow::Result<()> {
    sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
        .bind(name)
        .bind(holder)
        .execute(db.pool())
        .await?;
    Ok(())
}

/// A lease as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Its holder's instance id.
    pub holder: String,
    /// When it ends unless renewed.
    pub expires_ms: i64,
}

/// Every lease whose name starts with `prefix`, by name.
pub async fn leases(db: &Db, prefix: &str) -> anyhow::Result<HashMap<String, Lease>> {
    let rows: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT name, holder, expires_ms FROM leases WHERE name LIKE $1")
            .bind(format!("{prefix}%"))
            .fetch_all(db.pool())
            .await?;
    Ok(rows
        .into_iter()
        .map(|(name, holder, expires_ms)| (name, Lease { holder, expires_ms }))
        .collect())
}

/// The holder of lease `name` at `now_ms`, if any.
pub async fn holder(db: &Db, name: &str, now_ms: i64) -> anyhow::Result<Option<String>> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT holder FROM leases WHERE name = $1 AND expires_ms >= $2")
            .bind(name)
            .bind(now_ms)
            .fetch_optional(db.pool())
            .await?;
    Ok(row.map(|(h,)| h))
}

/// The URL of instance `id` as it announced it.
pub async fn instance_url(db: &Db, id: &str) -> anyhow::Result<Option<String>> {
    let row: Option<(String,)> = sqlx::query_as("SELECT url FROM instances WHERE id = $1")
        .bind(id)
        .fetch_optional(db.pool())
        .await?;
    Ok(row.map(|(u,)| u))
}

/// The lease name of shard `n`.
pub fn shard_lease(n: u32) -> String {
    format!("{SHARD_PREFIX}{n}")
}

/// The shard of a ToR among `shards`: FNV-1a of its name, so every instance agrees
/// without a shared table.
pub fn shard_of(tor: &str, shards: u32) -> u32 {
    let h = tor.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (h % u64::from(shards.max(1))) as u32
}

/// Per shard, the URL of the instance holding it at `now_ms` (shards without a live
/// holder are absent).
pub async fn shard_owners(db: &Db, now_ms: i64) -> anyhow::Result<HashMap<u32, String>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT l.name, i.url FROM leases l JOIN instances i ON i.id = l.holder \
         WHERE l.name LIKE $1 AND l.expires_ms >= $2",
    )
    .bind(format!("{SHARD_PREFIX}%"))
    .bind(now_ms)
    .fetch_all(db.pool())
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(name, url)| Some((name.strip_prefix(SHARD_PREFIX)?.parse().ok()?, url)))
        .collect())
}

/// Stores `body` as instance `holder`'s newest flow summary, made at `tick_ms`.
pub async fn publish_summary(
    db: &Db,
    holder: &str,
    tick_ms: i64,
    body: &str,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO flow_summaries (holder, tick_ms, body) VALUES ($1, $2, $3) \
         ON CONFLICT (holder) DO UPDATE SET tick_ms = excluded.tick_ms, body = excluded.body",
    )
    .bind(holder)
    .bind(tick_ms)
    .bind(body)
    .execute(db.pool())
    .await
    .context("publishing the flow summary")?;
    Ok(())
}

/// Another instance's flow summary as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredSummary {
    /// The instance that made it.
    pub holder: String,
    /// What it said (the analyzer's encoding).
    pub body: String,
    /// When it was made.
    pub tick_ms: i64,
    /// Whether its maker held a shard lease when it was read.
    pub live: bool,
}

/// The flow summaries other than `me`'s made since `since_ms`, `live` as of `now_ms`.
pub async fn summaries(
    db: &Db,
    me: &str,
    since_ms: i64,
    now_ms: i64,
) -> anyhow::Result<Vec<StoredSummary>> {
    sqlx::query_as(
        "SELECT f.holder, f.body, f.tick_ms, EXISTS (SELECT 1 FROM leases l WHERE \
         l.holder = f.holder AND l.name LIKE 'shard/%' AND l.expires_ms >= $3) AS live \
         FROM flow_summaries f WHERE f.holder <> $1 AND f.tick_ms >= $2",
    )
    .bind(me)
    .bind(since_ms)
    .bind(now_ms)
    .fetch_all(db.pool())
    .await
    .context("reading other shards' flow summaries")
}

/// What one balancing round should do, decided from the lease table alone.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ShardPlan {
    /// Shards this instance holds and keeps (renews).
    pub keep: Vec<u32>,
    /// Shards this instance holds beyond its fair share: released for a newcomer.
    pub release: Vec<u32>,
    /// Free or expired shards to try to take, in order, until the share is reached.
    pub take: Vec<u32>,
    /// The fair share: ceil(shards / live instances).
    pub share: usize,
}

/// Plans a round for instance `me` among `live` analyzers (`me` counts even when its
/// heartbeat is not stored yet): keep up to the fair share of the shards it holds (lowest
/// first), release the rest, and list the free or expired shards to take, starting at an
/// offset derived from `me` so that instances starting together do not all race for the
/// same shard first.
pub fn plan_shards(
    me: &str,
    live: usize,
    shards: u32,
    held: &HashMap<String, Lease>,
    now_ms: i64,
) -> ShardPlan {
    let share = (shards as usize).div_ceil(live.max(1));
    let mine: BTreeSet<u32> = (0..shards)
        .filter(|n| held.get(&shard_lease(*n)).is_some_and(|l| l.holder == me))
        .collect();
    let keep: Vec<u32> = mine.iter().take(share).copied().collect();
    let release: Vec<u32> = mine.iter().skip(share).copied().collect();
    let free = |n: &u32| {
        held.get(&shard_lease(*n))
            .is_none_or(|l| l.expires_ms < now_ms)
    };
    let start = shard_of(me, shards);
    let take = if keep.len() < share {
        (0..shards)
            .map(|i| (start + i) % shards)
            .filter(|n| !mine.contains(n) && free(n))
            .collect()
    } else {
        Vec::new()
    };
    ShardPlan {
        keep,
        release,
        take,
        share,
    }
}

/// One balancing round of analyzer `me` at `now_ms`: heartbeat, then keep, release and
/// take shard leases (each until `now_ms + ttl_ms`) per [`plan_shards`]. Returns the
/// shards `me` holds now, each valid until `now_ms + ttl_ms`.
pub async fn balance_shards(
    db: &Db,
    (me, url): (&str, &str),
    shards: u32,
    now_ms: i64,
    ttl_ms: i64,
) -> anyhow::Result<BTreeSet<u32>> {
    heartbeat(db, me, ANALYZER_ROLE, url, now_ms).await?;
    let mut live = live_instances(db, ANALYZER_ROLE, now_ms - ttl_ms).await?;
    if !live.iter().any(|id| id == me) {
        live.push(me.to_string());
    }
    let plan = plan_shards(
        me,
        live.len(),
        shards,
        &leases(db, SHARD_PREFIX).await?,
        now_ms,
    );
    for n in &plan.release {
        release(db, &shard_lease(*n), me).await?;
    }
    let until = now_ms + ttl_ms;
    let mut owned = BTreeSet::new();
    for n in plan.keep.iter().chain(&plan.take) {
        if owned.len() >= plan.share {
            break;
        }
        if acquire(db, &shard_lease(*n), me, now_ms, until).await? {
            owned.insert(*n);
        }
    }
    Ok(owned)
}

/// The role name analyzers register with.
pub const ANALYZER_ROLE: &str = "analyzer";
/// The role name controllers register with.
pub const CONTROLLER_ROLE: &str = "controller";

/// A fresh instance id: host-unique (pid) and restart-unique (start time).
pub fn instance_id(role: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{role}-{}-{:x}", std::process::id(), nanos % (1 << 48))
}

/// `[controller.scaleout]` / `[analyzer.scaleout]`: one of several instances of its role
/// over one PostgreSQL; off by default (one instance does everything).
#[derive(Clone, Debug, serde::Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ScaleoutConfig {
    /// Runs as one of several instances (needs PostgreSQL).
    pub enabled: bool,
    /// Base URL agents and peers reach this instance at (told to agents by the controller).
    pub advertise_url: Option<String>,
    /// Shards the ToRs are split into (ToR name hash mod `shards`); every instance and
    /// controller of a deployment must use the same number.
    pub shards: u32,
    /// A lease (shard, tomography, controller leader) lasts this long unless renewed; a dead instance's
    /// work is taken over after at most this plus `renew`.
    #[serde(rename = "lease", with = "rocemesh_proto::duration::millis")]
    pub lease_ms: u64,
    /// How often leases are renewed and shards re-balanced.
    #[serde(rename = "renew", with = "rocemesh_proto::duration::millis")]
    pub renew_ms: u64,
}

impl Default for ScaleoutConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            advertise_url: None,
            shards: 16,
            lease_ms: 6_000,
            renew_ms: 2_000,
        }
    }
}

impl ScaleoutConfig {
    /// Whether an instance of `role` (its config section) joins a deployment on `db`:
    /// false when scale-out is off; an error on SQLite (one file, one instance).
    pub fn joins(&self, db: &Db, role: &str) -> anyhow::Result<bool> {
        anyhow::ensure!(
            !self.enabled || db.backend() == crate::Backend::Postgres,
            "{role}.scaleout needs PostgreSQL: with SQLite run a single {role} (scale-out off)"
        );
        Ok(self.enabled)
    }

    /// Refuses settings under which leases would lapse between renewals.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=4_096).contains(&self.shards),
            "scaleout.shards must be 1..=4096, got {}",
            self.shards
        );
        anyhow::ensure!(
            self.renew_ms >= 100 && self.lease_ms >= 2 * self.renew_ms,
            "scaleout: renew ({} ms) must be at least 100ms and lease ({} ms) at least twice it",
            self.renew_ms,
            self.lease_ms
        );
        anyhow::ensure!(
            !self.enabled || self.advertise_url.is_some(),
            "scaleout.advertise_url is required when scale-out is enabled (agents and peers are sent there)"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(rows: &[(u32, &str, i64)]) -> HashMap<String, Lease> {
        rows.iter()
            .map(|(n, h, e)| {
                (
                    shard_lease(*n),
                    Lease {
                        holder: h.to_string(),
                        expires_ms: *e,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn fair_share_keeps_lowest_and_releases_the_rest() {
        let t = held(&[(0, "a", 100), (1, "a", 100), (2, "a", 100), (3, "a", 100)]);
        let p = plan_shards("a", 2, 4, &t, 50);
        assert_eq!(
            (p.share, p.keep, p.release, p.take),
            (2, vec![0, 1], vec![2, 3], vec![])
        );
        // Alone: everything is its share, nothing free is held by anyone else.
        let p = plan_shards("b", 1, 4, &t, 50);
        assert_eq!((p.share, p.take.len()), (4, 0));
    }

    #[test]
    fn expired_and_free_shards_are_taken_up_to_the_share() {
        // "b" died: its leases ended at 40.
        let t = held(&[(0, "a", 100), (1, "b", 40), (2, "a", 100), (3, "b", 40)]);
        let p = plan_shards("a", 1, 5, &t, 50);
        assert_eq!(p.keep, vec![0, 2]);
        let mut take = p.take.clone();
        take.sort();
        assert_eq!(take, vec![1, 3, 4]);
        // A live "b" lease is never a candidate.
        let p = plan_shards("a", 2, 5, &held(&[(1, "b", 100)]), 50);
        assert!(!p.take.contains(&1));
    }

    #[test]
    fn shard_of_is_stable_and_spreads() {
        assert_eq!(shard_of("tor-7", 8), shard_of("tor-7", 8));
        let used: BTreeSet<u32> = (0..64).map(|i| shard_of(&format!("tor-{i}"), 8)).collect();
        assert_eq!(used.len(), 8, "{used:?}");
        assert_eq!(shard_of("x", 0), 0);
    }
}
