//! The cluster probe keys (issue 8): random 32-byte keys from the OS RNG, stored in the
//! database so every controller serves the same ones, rotated every
//! `probe_key_rotate_s`, and handed to agents in registration and pinglist replies with
//! the per-source answer limit.
//!
//! A new key is published a lead time (two pinglist polls) before anyone signs with it,
//! and the previous key stays accepted, so agents that poll at different moments never
//! refuse each other's probes: at any time agents get the previous, the signing and (in
//! the lead window) the next key.

use crate::config::ProbeAuthMode;
use anyhow::Context;
use rand::TryRngCore;
use rocemesh_proto::api::{ProbeAuth, ProbeKey};
use rocemesh_proto::probe_auth::{KEY_LEN, decode_key, encode_key};
use rocemesh_store::Db;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

/// How often the key table is read again (other controllers' rotations) and rotation is due.
pub(crate) const REFRESH: Duration = Duration::from_secs(5);
/// Keys kept in the table; older rows are pruned.
const KEEP: i64 = 8;

/// One key row.
#[derive(Clone)]
struct StoredKey {
    id: i64,
    key: [u8; KEY_LEN],
    created_ms: i64,
}

/// Key rotation and the answer limit agents are told.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyPolicy {
    /// Whether probes must be tagged.
    pub mode: ProbeAuthMode,
    /// Age at which a new key is made.
    pub rotate_ms: i64,
    /// How long a new key is only accepted before it is signed with.
    pub lead_ms: i64,
    /// Sustained answers per source per second agents allow.
    pub source_pps: f64,
    /// Burst per source agents allow.
    pub source_burst: u32,
    /// How far a PROBE's send time may be from its responder's clock.
    pub tag_window: std::time::Duration,
}

/// The key service of one controller.
pub(crate) struct ProbeKeys {
    db: Db,
    policy: KeyPolicy,
    /// The newest rows, ascending by id.
    keys: RwLock<Arc<Vec<StoredKey>>>,
}

impl ProbeKeys {
    /// Loads the keys (making the first one, or a due one) and, with authentication on,
    /// keeps them fresh on a background task until the service is dropped.
    pub(crate) async fn start(db: Db, policy: KeyPolicy) -> anyhow::Result<Arc<Self>> {
        let keys = Arc::new(Self {
            db,
            policy,
            keys: RwLock::new(Arc::new(Vec::new())),
        });
        if policy.mode == ProbeAuthMode::Off {
            return Ok(keys);
        }
        keys.refresh(rocemesh_proto::now_unix_ms()).await?;
        let weak = Arc::downgrade(&keys);
        tokio::spawn(refresh_loop(weak));
        Ok(keys)
    }

    /// Reads the table and adds a key when the newest is `rotate_ms` old (or none exists).
    pub(crate) async fn refresh(&self, now_ms: i64) -> anyhow::Result<()> {
        let mut keys = load(&self.db).await?;
        let due = keys
            .last()
            .is_none_or(|k| now_ms - k.created_ms >= self.policy.rotate_ms);
        if due {
            let id = keys.last().map_or(1, |k| k.id + 1);
            insert(&self.db, id, now_ms).await?;
            keys = load(&self.db).await?;
            tracing::info!(key_id = id, "new probe key");
        }
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
        Ok(())
    }

    /// What agents are told at `now_ms`.
    pub(crate) fn current(&self, now_ms: i64) -> ProbeAuth {
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner()).clone();
        let (sign_key, keys) = match self.policy.mode {
            ProbeAuthMode::Off => (None, Vec::new()),
            ProbeAuthMode::Required => match select(&keys, now_ms, self.policy.lead_ms) {
                Some((sign, window)) => (
                    Some(wire_id(sign.id)),
                    window
                        .iter()
                        .map(|k| ProbeKey {
                            id: wire_id(k.id),
                            key: encode_key(&k.key),
                        })
                        .collect(),
                ),
                None => (None, Vec::new()),
            },
        };
        ProbeAuth {
            sign_key,
            keys,
            source_pps: self.policy.source_pps,
            source_burst: self.policy.source_burst,
            tag_window: self.policy.tag_window,
        }
    }
}

/// A pinglist version that changes with the keys handed out, so a rotation reaches every
/// agent at its next poll (unchanged when authentication is off).
pub(crate) fn versioned(version: &str, auth: &ProbeAuth) -> String {
    match (auth.sign_key, auth.keys.last()) {
        (Some(sign), Some(newest)) => format!("{version}-k{sign}.{}", newest.id),
        _ => version.to_string(),
    }
}

/// Id of a key on the wire (byte 48): ids are consecutive, so the few keys handed out at
/// once never share a byte.
fn wire_id(id: i64) -> u8 {
    id.rem_euclid(256) as u8
}

/// The signing key at `now_ms` (the newest published at least `lead_ms` ago, else the
/// oldest) and the keys agents accept: the one before it, it, and those after it.
fn select(keys: &[StoredKey], now_ms: i64, lead_ms: i64) -> Option<(&StoredKey, &[StoredKey])> {
    let sign = keys
        .iter()
        .rposition(|k| k.created_ms + lead_ms <= now_ms)
        .unwrap_or(0);
    let first = sign.saturating_sub(1);
    let last = keys.len().min(first + rocemesh_proto::probe_auth::MAX_KEYS);
    Some((keys.get(sign)?, &keys[first..last]))
}

async fn refresh_loop(keys: Weak<ProbeKeys>) {
    let mut failing = false;
    loop {
        tokio::time::sleep(REFRESH).await;
        let Some(keys) = keys.upgrade() else {
            return;
        };
        match keys.refresh(rocemesh_proto::now_unix_ms()).await {
            Ok(()) => failing = false,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %format!("{e:#}"), "cannot refresh the probe keys; serving the ones loaded");
                }
                failing = true;
            }
        }
    }
}

async fn load(db: &Db) -> anyhow::Result<Vec<StoredKey>> {
    let rows: Vec<(i64, String, i64)> =
        sqlx::query_as("SELECT id, key_hex, created_ms FROM probe_keys ORDER BY id DESC LIMIT $1")
            .bind(KEEP)
            .fetch_all(db.pool())
            .await
            .context("cannot load probe keys")?;
    let mut keys = rows
        .into_iter()
        .map(|(id, hex, created_ms)| {
            let key = decode_key(&hex).with_context(|| {
                format!("probe key {id} in the database is not 32 bytes of hex")
            })?;
            Ok(StoredKey {
                id,
                key,
                created_ms,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    keys.reverse();
    Ok(keys)
}

/// Adds key `id` (a no-op when another controller added it first) and prunes old rows.
async fn insert(db: &Db, id: i64, now_ms: i64) -> anyhow::Result<()> {
    let mut key = [0u8; KEY_LEN];
    rand::rngs::OsRng
        .try_fill_bytes(&mut key)
        .context("the OS random source failed")?;
    sqlx::query(
        "INSERT INTO probe_keys (id, key_hex, created_ms) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
    )
    .bind(id)
    .bind(encode_key(&key))
    .bind(now_ms)
    .execute(db.pool())
    .await
    .context("cannot store a new probe key")?;
    sqlx::query("DELETE FROM probe_keys WHERE id <= $1")
        .bind(id - KEEP)
        .execute(db.pool())
        .await
        .context("cannot prune old probe keys")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: i64, created_ms: i64) -> StoredKey {
        StoredKey {
            id,
            key: [id as u8; KEY_LEN],
            created_ms,
        }
    }

    #[test]
    fn a_new_key_is_accepted_before_it_signs_and_the_previous_stays() {
        let keys = [key(1, 0), key(2, 1_000), key(3, 2_000)];
        let ids = |now| {
            let (s, w) = select(&keys, now, 500).unwrap();
            (s.id, w.iter().map(|k| k.id).collect::<Vec<_>>())
        };
        // Key 3 is 200 ms old: published, not yet signing.
        assert_eq!(ids(2_200), (2, vec![1, 2, 3]));
        assert_eq!(ids(2_500), (3, vec![2, 3]));
        // Only one key, brand new: it signs at once (nobody holds an older one).
        assert_eq!(select(&keys[..1], 0, 500).unwrap().0.id, 1);
        assert!(select(&[], 0, 500).is_none());
        assert_eq!(wire_id(257), 1);
    }
}
