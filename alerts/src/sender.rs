//! Delivers claimed outbox rows: one signed POST per (receiver, priority, kind) group,
//! receivers in parallel, then the outcome of every row is recorded.

use crate::outbox::{self, Claimed, Outcome};
use crate::payload::{self, Notification};
use crate::receiver::Receiver;
use crate::signature;
use rand::Rng;
use rocemesh_proto::now_unix_ms;
use rocemesh_store::Db;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Alerts by delivery outcome since this process started (`rocemesh_alert_deliveries`).
#[derive(Debug, Default)]
pub struct Deliveries {
    delivered: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
}

impl Deliveries {
    /// Counts the alerts of one group by the outcome of its attempt (a group released
    /// untried is not counted).
    fn count(&self, outcome: &Outcome, alerts: usize) {
        let counter = match outcome {
            Outcome::Delivered => &self.delivered,
            Outcome::Retry { .. } => &self.retried,
            Outcome::Failed { .. } => &self.failed,
            Outcome::Released { .. } => return,
        };
        counter.fetch_add(alerts as u64, Ordering::Relaxed);
    }

    /// (outcome label, alerts): delivered (2xx), retried (a failed attempt to be
    /// retried), failed (given up).
    pub fn totals(&self) -> [(&'static str, u64); 3] {
        [
            ("delivered", self.delivered.load(Ordering::Relaxed)),
            ("retried", self.retried.load(Ordering::Relaxed)),
            ("failed", self.failed.load(Ordering::Relaxed)),
        ]
    }
}

/// Delivery settings (from the config).
#[derive(Debug, Clone)]
pub struct Policy {
    /// First retry delay.
    pub retry_initial_ms: u64,
    /// Longest retry delay.
    pub retry_max_ms: u64,
    /// Attempts after which a permanent 4xx gives up.
    pub permanent_after_attempts: u32,
    /// Undelivered rows older than this are given up.
    pub retention_ms: u64,
    /// The payloads' `externalURL`.
    pub external_url: String,
}

impl Policy {
    /// Retry delay after `attempts` failed attempts: exponential, capped, with the upper
    /// half jittered so receivers that failed together do not retry together.
    pub fn backoff_ms(&self, attempts: u32) -> u64 {
        let exp = self
            .retry_initial_ms
            .saturating_mul(1u64 << attempts.saturating_sub(1).min(40))
            .min(self.retry_max_ms);
        let half = exp / 2;
        half + rand::rng().random_range(0..=exp - half)
    }
}

/// What one POST produced.
#[derive(Debug)]
enum Reply {
    /// An HTTP status.
    Status(u16),
    /// No HTTP answer (connect error, timeout, ...).
    Transport(String),
}

/// POSTs `body` (blocking client, run off the async workers).
async fn post(agent: ureq::Agent, receiver: &Receiver, body: Vec<u8>) -> Reply {
    let url = receiver.url.clone();
    let sig = receiver
        .secret
        .as_ref()
        .map(|s| signature::sign(s.as_bytes(), &body));
    let joined = tokio::task::spawn_blocking(move || {
        let mut req = agent.post(&url).header("Content-Type", "application/json");
        if let Some(sig) = sig {
            req = req.header(signature::HEADER, sig);
        }
        match req.send(&body[..]) {
            Ok(resp) => Reply::Status(resp.status().as_u16()),
            Err(e) => Reply::Transport(rocemesh_proto::http_client::describe_error(&e)),
        }
    })
    .await;
    joined.unwrap_or_else(|e| Reply::Transport(format!("sender task failed: {e}")))
}

/// The outcome of a group's rows after `reply`.
fn judge(policy: &Policy, rows: &[Claimed], reply: &Reply, now: i64) -> Outcome {
    let attempts = rows.iter().map(|r| r.attempts).max().unwrap_or(0) + 1;
    let attempts = u32::try_from(attempts).unwrap_or(u32::MAX);
    let error = match reply {
        Reply::Status(s) if (200..300).contains(s) => return Outcome::Delivered,
        Reply::Status(s) => format!("HTTP {s}"),
        Reply::Transport(e) => e.clone(),
    };
    let permanent =
        matches!(reply, Reply::Status(s) if (400..500).contains(s) && *s != 408 && *s != 429);
    if permanent && attempts >= policy.permanent_after_attempts {
        return Outcome::Failed {
            error: format!("{error} (permanent after {attempts} attempts)"),
        };
    }
    let oldest = rows.iter().map(|r| r.created_ms).min().unwrap_or(now);
    let retention = i64::try_from(policy.retention_ms).unwrap_or(i64::MAX);
    if now.saturating_sub(oldest) >= retention {
        return Outcome::Failed {
            error: format!("{error}; expired: undelivered within the retention time"),
        };
    }
    let delay = i64::try_from(policy.backoff_ms(attempts)).unwrap_or(i64::MAX);
    Outcome::Retry {
        due_ms: now.saturating_add(delay),
        error,
    }
}

/// Groups of one receiver's rows, oldest group first: (priority, kind) -> rows.
fn groups(rows: Vec<Claimed>) -> Vec<((String, String), Vec<Claimed>)> {
    let mut by_key: BTreeMap<(String, String), Vec<Claimed>> = BTreeMap::new();
    for r in rows {
        by_key
            .entry((r.priority.clone(), r.kind.clone()))
            .or_default()
            .push(r);
    }
    let mut out: Vec<_> = by_key.into_iter().collect();
    out.sort_by_key(|(_, rows)| rows.first().map_or(0, |r| r.id));
    out
}

/// The request body of one group.
pub fn body_of(
    receiver: &str,
    key: &(String, String),
    rows: &[Claimed],
    policy: &Policy,
) -> Notification {
    let alerts = rows.iter().map(|r| r.alert.clone()).collect();
    payload::notification(receiver, &key.0, &key.1, &policy.external_url, alerts)
}

/// Sends one receiver's rows group by group. After a failure that is not permanent the
/// receiver's remaining groups are not tried this round (released to the retry time).
async fn deliver_to(
    db: Db,
    agent: ureq::Agent,
    policy: Arc<Policy>,
    deliveries: Arc<Deliveries>,
    receiver: Receiver,
    rows: Vec<Claimed>,
) {
    let mut retry_at: Option<i64> = None;
    for (key, rows) in groups(rows) {
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let outcome = match retry_at {
            Some(due_ms) => Outcome::Released { due_ms },
            None => match serde_json::to_vec(&body_of(&receiver.name, &key, &rows, &policy)) {
                Ok(body) => {
                    let reply = post(agent.clone(), &receiver, body).await;
                    judge(&policy, &rows, &reply, now_unix_ms())
                }
                Err(e) => Outcome::Failed {
                    error: format!("cannot encode the payload: {e}"),
                },
            },
        };
        deliveries.count(&outcome, ids.len());
        match &outcome {
            Outcome::Delivered => {
                tracing::info!(receiver = %receiver.name, alerts = ids.len(), priority = %key.0, kind = %key.1, "alerts delivered");
            }
            Outcome::Retry { due_ms, error } => {
                tracing::warn!(receiver = %receiver.name, alerts = ids.len(), %error, retry_in_ms = due_ms - now_unix_ms(), "alert delivery failed; will retry");
                retry_at = Some(*due_ms);
            }
            Outcome::Failed { error } => {
                tracing::error!(receiver = %receiver.name, alerts = ids.len(), %error, "alert delivery given up");
            }
            Outcome::Released { .. } => {}
        }
        if let Err(e) = outbox::finish(&db, &ids, &outcome, now_unix_ms()).await {
            // The rows stay claimed until their lease ends, then go out again.
            tracing::error!(receiver = %receiver.name, "cannot record alert delivery: {e:#}");
        }
    }
}

/// Claims the due rows and delivers them; returns when every claimed row has its outcome
/// recorded (so a graceful stop never leaves a row in flight).
pub async fn send_due(
    db: &Db,
    agent: &ureq::Agent,
    policy: &Arc<Policy>,
    deliveries: &Arc<Deliveries>,
    receivers: &[Receiver],
    lease_ms: i64,
) -> anyhow::Result<usize> {
    let now = now_unix_ms();
    let claimed = outbox::claim(db, now, now + lease_ms).await?;
    let n = claimed.len();
    let mut by_receiver: BTreeMap<String, Vec<Claimed>> = BTreeMap::new();
    for c in claimed {
        by_receiver.entry(c.receiver.clone()).or_default().push(c);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (name, rows) in by_receiver {
        match receivers.iter().find(|r| r.name == name) {
            Some(r) => {
                tasks.spawn(deliver_to(
                    db.clone(),
                    agent.clone(),
                    policy.clone(),
                    deliveries.clone(),
                    r.clone(),
                    rows,
                ));
            }
            None => {
                let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
                let gone = Outcome::Failed {
                    error: "receiver removed".to_string(),
                };
                outbox::finish(db, &ids, &gone, now).await?;
                deliveries.count(&gone, ids.len());
            }
        }
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            tracing::error!("alert delivery task failed: {e}");
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            retry_initial_ms: 1_000,
            retry_max_ms: 60_000,
            permanent_after_attempts: 3,
            retention_ms: 3_600_000,
            external_url: String::new(),
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_cap() {
        let p = policy();
        for (attempts, lo, hi) in [
            (1, 500, 1_000),
            (2, 1_000, 2_000),
            (4, 4_000, 8_000),
            (30, 30_000, 60_000),
        ] {
            for _ in 0..50 {
                let d = p.backoff_ms(attempts);
                assert!((lo..=hi).contains(&d), "attempt {attempts}: {d}");
            }
        }
    }
}
