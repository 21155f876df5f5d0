//! Scale-out of the controller (`[controller.scaleout]`, PostgreSQL only): every instance
//! heartbeats; the holder of the `controller/leader` lease alone runs registration and
//! pinglist generation (the registry writer), the others forward those two requests to
//! it. Every instance follows the analyzer shard leases, so the leader tells each agent
//! the analyzer owning its home ToR's shard: in the registration answer and in the
//! `x-rocemesh-analyzer` header of every pinglist poll (agents move when owners change).

use rocemesh_store::Db;
use rocemesh_store::coord::{self, CONTROLLER_ROLE, ScaleoutConfig};
use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

/// The lease of the controller that runs registrations and pinglist generation.
pub const LEADER_LEASE: &str = "controller/leader";

/// What the last round learned.
#[derive(Debug, Default, Clone)]
struct View {
    /// Until when this instance surely leads (0: it does not).
    leading_until: i64,
    /// The leader's URL when another instance leads.
    leader_url: Option<String>,
    /// Analyzer URL per shard.
    owners: HashMap<u32, String>,
}

/// This controller's membership in a scale-out deployment.
pub struct Leadership {
    id: String,
    cfg: ScaleoutConfig,
    view: RwLock<View>,
}

/// What a round changed that the controller must act on.
#[derive(Debug, PartialEq, Eq)]
pub enum Round {
    /// This instance just became the leader: reload the registry from the database.
    BecameLeader,
    /// Nothing to do.
    Steady,
}

impl Leadership {
    /// Joins with a fresh instance id; `None` when scale-out is off; refuses SQLite.
    pub fn new(db: &Db, cfg: &ScaleoutConfig) -> anyhow::Result<Option<Self>> {
        if !cfg.joins(db, CONTROLLER_ROLE)? {
            return Ok(None);
        }
        Ok(Some(Self {
            id: coord::instance_id(CONTROLLER_ROLE),
            cfg: cfg.clone(),
            view: RwLock::new(View::default()),
        }))
    }

    fn view(&self) -> View {
        self.view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// One round at `now_ms`: heartbeat, take or renew the leader lease, read who leads
    /// and which analyzer owns each shard.
    pub async fn round(&self, db: &Db, now_ms: i64) -> anyhow::Result<Round> {
        let url = self.cfg.advertise_url.as_deref().unwrap_or_default();
        coord::heartbeat(db, &self.id, CONTROLLER_ROLE, url, now_ms).await?;
        let until = now_ms + self.cfg.lease_ms as i64;
        let leads = coord::acquire(db, LEADER_LEASE, &self.id, now_ms, until).await?;
        let leader_url = match coord::holder(db, LEADER_LEASE, now_ms).await? {
            Some(h) if !leads => coord::instance_url(db, &h).await?,
            _ => None,
        };
        let owners = coord::shard_owners(db, now_ms).await?;
        let was_leading = self.leads(now_ms);
        *self.view.write().unwrap_or_else(PoisonError::into_inner) = View {
            leading_until: if leads { until } else { 0 },
            leader_url,
            owners,
        };
        Ok(if leads && !was_leading {
            tracing::info!(instance = %self.id, "controller leads");
            Round::BecameLeader
        } else {
            Round::Steady
        })
    }

    /// True while this instance surely holds the leader lease.
    pub fn leads(&self, now_ms: i64) -> bool {
        now_ms <= self.view().leading_until
    }

    /// Where to forward registrations and pinglist polls: the leader's URL when another
    /// instance leads.
    pub fn forward_to(&self, now_ms: i64) -> Option<String> {
        (!self.leads(now_ms))
            .then(|| self.view().leader_url)
            .flatten()
    }

    /// The analyzer owning the shard of ToR `tor`, if a live one does.
    pub fn analyzer_for(&self, tor: &str) -> Option<String> {
        let shard = coord::shard_of(tor, self.cfg.shards);
        self.view().owners.get(&shard).cloned()
    }

    /// How often [`Self::round`] runs.
    pub fn renew_every(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.cfg.renew_ms)
    }

    /// Leaves at shutdown: the leader lease goes at once.
    pub async fn leave(&self, db: &Db) -> anyhow::Result<()> {
        coord::leave(db, &self.id).await
    }
}
