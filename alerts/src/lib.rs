//! Alert webhooks: the analyzer's problems become Alertmanager-compatible notifications
//! (webhook payload version "4") delivered to HTTP receivers, signed with HMAC-SHA256,
//! through a durable outbox in the database.
//!
//! [`run`] loops every `poll_ms`: [`source`] reads the `problems` table and, in one
//! transaction per decision, records what it saw and enqueues outbox rows (a firing one
//! when an episode becomes active with a known priority, a resolved one when it ends; one
//! of each per episode per receiver, ever); [`sender`] claims the due rows, groups them
//! per (receiver, priority, kind), POSTs them, and records delivered / retry with
//! exponential backoff / failed. Everything is in the database, so a restart loses and
//! repeats nothing — except for the one window no outbox closes: a crash after the
//! receiver got a POST and before its delivery was committed sends it again after the
//! claim lease ends. Receivers come from the `[alerts]` config (read-only) and
//! [`router`]'s API (stored).

pub mod api;
pub mod config;
pub mod outbox;
pub mod payload;
pub mod receiver;
pub mod receiver_store;
pub mod sender;
pub mod signature;
pub mod source;
#[cfg(feature = "testing")]
pub mod testing;

pub use api::{openapi, router, routes};
pub use config::{AlertsConfig, ReceiverConfig};
pub use payload::{Alert, Notification, Status};
pub use receiver::{Receiver, ReceiverSpec, ReceiverView};

use anyhow::Context;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use rocemesh_store::Db;
use sender::{Deliveries, Policy};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often old outbox rows and de-duplication records are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Extra lease time beyond the slowest possible delivery round.
const LEASE_MARGIN_MS: u64 = 5_000;

/// The alerts service, shared by the API and [`run`].
pub struct Alerts {
    db: Db,
    cfg: AlertsConfig,
    config_receivers: Vec<Receiver>,
    agent: ureq::Agent,
    policy: Arc<Policy>,
    deliveries: Arc<Deliveries>,
}

impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerts")
            .field("config_receivers", &self.config_receivers)
            .finish_non_exhaustive()
    }
}

impl Alerts {
    /// Validates `cfg` (receivers, secret files, knobs); errors name the bad key.
    pub fn new(db: Db, cfg: AlertsConfig) -> anyhow::Result<Arc<Self>> {
        let config_receivers = cfg.validate()?;
        for r in config_receivers.iter().filter(|r| r.secret.is_none()) {
            tracing::warn!(receiver = %r.name, "alert receiver has no secret: its notifications are unsigned");
        }
        let policy = Arc::new(Policy {
            retry_initial_ms: cfg.retry_initial_ms,
            retry_max_ms: cfg.retry_max_ms,
            permanent_after_attempts: cfg.permanent_after_attempts,
            retention_ms: cfg.retention_ms,
            external_url: cfg.external_url.clone(),
        });
        let tls = rocemesh_proto::http_client::ClientTls::load(cfg.ca_file.as_deref())
            .context("alerts.ca_file")?;
        Ok(Arc::new(Self {
            agent: rocemesh_proto::http_client::agent(Duration::from_millis(cfg.timeout_ms), &tls),
            db,
            config_receivers,
            policy,
            deliveries: Arc::default(),
            cfg,
        }))
    }

    /// Every receiver in force: config ones, then API ones.
    pub async fn receivers(&self) -> anyhow::Result<Vec<Receiver>> {
        receiver_store::list(&self.db, &self.config_receivers).await
    }

    /// Claims last at most two request timeouts plus the group wait: by then a live sender
    /// has recorded every outcome, so expired claims are a crashed sender's.
    fn lease_ms(&self) -> i64 {
        let ms = self
            .cfg
            .timeout_ms
            .saturating_mul(2)
            .saturating_add(self.cfg.group_wait_ms)
            .saturating_add(LEASE_MARGIN_MS);
        i64::try_from(ms).unwrap_or(i64::MAX)
    }

    /// When the service first ran on this database (kept across restarts).
    async fn since_ms(&self) -> anyhow::Result<i64> {
        sqlx::query("INSERT INTO alert_meta (name, value) VALUES ('since_ms', $1) ON CONFLICT (name) DO NOTHING")
            .bind(rocemesh_proto::now_unix_ms())
            .execute(self.db.pool())
            .await?;
        let (v,): (i64,) = sqlx::query_as("SELECT value FROM alert_meta WHERE name = 'since_ms'")
            .fetch_one(self.db.pool())
            .await?;
        Ok(v)
    }

    /// One round: problems to outbox, due outbox rows to receivers.
    async fn round(&self, since_ms: i64) -> anyhow::Result<()> {
        let receivers = self.receivers().await?;
        let now = rocemesh_proto::now_unix_ms();
        let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let timing = source::Timing {
            now_ms: now,
            horizon_ms: since_ms.max(now.saturating_sub(ms(self.cfg.retention_ms))),
            priority_wait_ms: ms(self.cfg.priority_wait_ms),
            group_wait_ms: ms(self.cfg.group_wait_ms),
        };
        source::poll(&self.db, &receivers, &self.cfg.external_url, &timing)
            .await
            .context("alerts source")?;
        sender::send_due(
            &self.db,
            &self.agent,
            &self.policy,
            &self.deliveries,
            &receivers,
            self.lease_ms(),
        )
        .await
        .context("alerts sender")?;
        Ok(())
    }
}

/// Webhook deliveries for the server's `/metrics` route.
pub fn collector(alerts: &Alerts) -> Box<dyn Collector> {
    Box::new(DeliveryMetrics(alerts.deliveries.clone()))
}

#[derive(Debug)]
struct DeliveryMetrics(Arc<Deliveries>);

impl Collector for DeliveryMetrics {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let mut m = enc.encode_descriptor(
            "rocemesh_alert_deliveries",
            "Alerts sent to webhook receivers by outcome: delivered (2xx), retried (attempt failed, tried again later), failed (given up).",
            None,
            MetricType::Counter,
        )?;
        for (outcome, n) in self.0.totals() {
            m.encode_family(&[("outcome", outcome)])?
                .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
        }
        Ok(())
    }
}

/// Runs the alerts service until `cancel`; a round in progress (including its HTTP
/// requests) finishes and is recorded first, so a graceful stop leaves nothing in flight.
pub async fn run(alerts: Arc<Alerts>, cancel: CancellationToken) {
    let poll = Duration::from_millis(alerts.cfg.poll_ms);
    let since_ms = loop {
        match alerts.since_ms().await {
            Ok(v) => break v,
            Err(e) => tracing::warn!("alerts: database unavailable ({e:#}); retrying"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(poll) => {}
        }
    };
    let mut last_prune: Option<Instant> = None;
    loop {
        if let Err(e) = alerts.round(since_ms).await {
            tracing::warn!("alerts round failed: {e:#}");
        }
        if last_prune.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
            last_prune = Some(Instant::now());
            let now = rocemesh_proto::now_unix_ms();
            let retention = i64::try_from(alerts.cfg.retention_ms).unwrap_or(i64::MAX);
            match outbox::prune(&alerts.db, now.saturating_sub(retention), now).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, "alert outbox pruned"),
                Err(e) => tracing::warn!("alert outbox pruning failed: {e:#}"),
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(poll) => {}
        }
    }
}
