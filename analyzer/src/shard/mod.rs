//! Scale-out: several analyzer instances over one PostgreSQL, each owning shards of the
//! ToRs (see docs/scaleout.md).
//!
//! Every `renew_ms`, [`Shards::balance`] renews this instance's shard leases, takes its
//! fair share of free or orphaned shards ([`rocemesh_store::coord::balance_shards`]) and
//! tries for the tomography lease; when the scope changes, the problems it answers for
//! are re-read from the database (a taken-over shard's active problems continue, none
//! is filed twice). Every diagnosis tick ([`Shards::diagnose`]) merges the other
//! instances' published liveness (and, for the tomography holder, their loss
//! observations), keeps the findings in scope and publishes its own summary.

pub(crate) mod scope;
pub(crate) mod summary;

pub(crate) use rocemesh_store::coord::ScaleoutConfig;

use crate::diagnosis::{Shared, policy};
use crate::{Analyzer, read, write};
use rocemesh_store::Db;
use rocemesh_store::coord::{self, ANALYZER_ROLE};
use scope::{Scope, ShardMap};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use summary::Summary;

/// The lease of the instance that runs the cross-shard tomography.
pub(crate) const TOMOGRAPHY_LEASE: &str = "analyzer/tomography";
/// The lease of the instance that writes node verdicts (Kubernetes conditions, taints).
pub const NODE_VERDICTS_LEASE: &str = "analyzer/node-verdicts";

/// This instance's membership in a scale-out deployment.
pub struct Shards {
    id: String,
    url: String,
    cfg: ScaleoutConfig,
    /// The scope and until when its leases are sure to hold (`None` before the first
    /// successful round: nothing is diagnosed until then).
    scope: RwLock<Option<(Arc<Scope>, i64)>>,
}

impl Shards {
    /// Joins with a fresh instance id; refuses SQLite (one file, one instance).
    pub fn new(db: &Db, cfg: &ScaleoutConfig) -> anyhow::Result<Option<Self>> {
        if !cfg.joins(db, ANALYZER_ROLE)? {
            return Ok(None);
        }
        let url = cfg.advertise_url.clone().unwrap_or_default();
        Ok(Some(Self {
            id: coord::instance_id(ANALYZER_ROLE),
            url,
            cfg: cfg.clone(),
            scope: RwLock::new(None),
        }))
    }

    /// This instance's id in the `instances` and `leases` tables.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Takes or renews lease `name` (a task only one instance may run) at `now_ms`; true
    /// while this instance holds it.
    pub async fn lead(&self, db: &Db, name: &str, now_ms: i64) -> anyhow::Result<bool> {
        let until = now_ms + self.cfg.lease_ms as i64;
        coord::acquire(db, name, &self.id, now_ms, until).await
    }

    /// The current scope, while its leases hold at `now_ms`.
    pub fn scope(&self, now_ms: i64) -> Option<Arc<Scope>> {
        read(&self.scope).and_then(|(s, until)| (now_ms <= until).then_some(s))
    }

    /// One round of leases at `now_ms`; on a scope change, first stores what the old scope
    /// found, then re-reads the active problems of the new one.
    pub async fn balance(&self, analyzer: &Analyzer, now_ms: i64) -> anyhow::Result<()> {
        let db = analyzer.db();
        let lease = self.cfg.lease_ms as i64;
        let held = coord::balance_shards(db, (&self.id, &self.url), self.cfg.shards, now_ms, lease)
            .await?;
        let tomography =
            coord::acquire(db, TOMOGRAPHY_LEASE, &self.id, now_ms, now_ms + lease).await?;
        let old = read(&self.scope).map(|(s, _)| s);
        let taken = |n: &u32| {
            old.as_ref()
                .and_then(|o| o.shards.get(n).copied())
                .unwrap_or(now_ms)
        };
        let shards: BTreeMap<u32, i64> = held.iter().map(|n| (*n, taken(n))).collect();
        let new = Arc::new(Scope {
            shards,
            count: self.cfg.shards,
            tomography,
        });
        let changed = old.as_deref() != Some(&*new);
        if changed {
            tracing::info!(
                instance = %self.id,
                shards = ?new.shards.keys().collect::<Vec<_>>(),
                tomography,
                "analyzer scope changed"
            );
            analyzer.diagnosis().persist(db, now_ms).await?;
            let map = ShardMap::new(&analyzer.registry(), new.count);
            let stored = db.problems().load_active().await?;
            let hold = policy::takeover_hold_ms(&analyzer.cfg.diagnosis);
            analyzer
                .diagnosis()
                .rescope(|p| new.keeps_problem(&map, p), stored, now_ms, hold);
            let gained = new.tomography && !old.as_ref().is_some_and(|o| o.tomography)
                || new.shards.values().any(|&taken| taken == now_ms);
            if gained {
                analyzer.diagnosis().await_paths(now_ms);
            }
        }
        write(&self.scope, Some((new, now_ms + lease)));
        Ok(())
    }

    /// One diagnosis tick as a shard at `now_ms` (nothing while no lease is sure to hold):
    /// merge the others' fresh summaries, diagnose, publish this instance's summary.
    pub async fn diagnose(&self, analyzer: &Arc<Analyzer>, now_ms: i64) -> anyhow::Result<()> {
        let Some(scope) = self.scope(now_ms) else {
            return Ok(());
        };
        let db = analyzer.db();
        let fresh_since = now_ms - 2 * analyzer.cfg.diagnosis.tick_ms.max(self.cfg.renew_ms) as i64;
        // Liveness of agents that have not uploaded here yet stays useful as long as a
        // host-down verdict would wait for them.
        let liveness_since = now_ms - analyzer.cfg.diagnosis.host_down_after_ms as i64;
        let others = summary::others(db, &self.id, liveness_since, now_ms).await?;
        let a = Arc::clone(analyzer);
        let s = Arc::clone(&scope);
        let own = tokio::task::spawn_blocking(move || {
            let registry = a.registry();
            let map = ShardMap::new(&registry, s.count);
            let grace = a.cfg.diagnosis.host_down_after_ms as i64;
            let keep = |c: &_| s.keeps_candidate(&map, c, now_ms, grace);
            let (mut loss, mut hosts) = (Vec::new(), Vec::new());
            for o in others {
                if s.tomography && o.live && o.tick_ms >= fresh_since {
                    loss.extend(o.summary.loss);
                }
                hosts.extend(o.summary.hosts);
            }
            let shared = Shared {
                keep: &keep,
                loss,
                hosts,
            };
            let own = a.diagnosis().analyze_in(&registry, now_ms, Some(shared));
            Summary {
                loss: summary::compact(own),
                hosts: a.diagnosis().own_hosts(),
            }
        })
        .await?;
        summary::publish(db, &self.id, now_ms, &own).await?;
        analyzer.diagnosis().persist(db, now_ms).await
    }

    /// Leaves the deployment at shutdown: releases every lease at once.
    pub async fn leave(&self, db: &Db) -> anyhow::Result<()> {
        coord::leave(db, &self.id).await
    }

    /// How often [`Self::balance`] runs.
    pub fn renew_every(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.cfg.renew_ms)
    }
}
