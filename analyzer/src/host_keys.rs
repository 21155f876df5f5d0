//! Which host a caller may upload results as: the fingerprint of each host's upload key
//! (issued by the controller at registration, `hosts.upload_key_sha256`), read on demand
//! and cached. A registration issues a new key, so a key that does not match is checked
//! against the database again, at most once a second per host (a stranger's forged
//! batches cost no more than that).

use rocemesh_proto::host_key;
use rocemesh_store::Db;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Hosts cached at most; a full cache starts over (ids of hosts that do not exist would
/// otherwise grow it without bound).
const MAX_CACHED: usize = 100_000;
/// Shortest interval between two reads of one host's key.
const REREAD_AFTER: Duration = Duration::from_secs(1);

/// What a batch's claim to be from a host came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// The key matches, or the host was registered before keys existed (bound at its
    /// next registration).
    Proven,
    /// No key, a wrong key, or a host nobody registered: the reason.
    Refused(&'static str),
}

#[derive(Debug, Clone)]
struct Entry {
    /// `None`: no such host; `Some(None)`: a host without a key.
    fingerprint: Option<Option<String>>,
    read_at: Instant,
}

/// The cache of host key fingerprints.
#[derive(Debug, Default)]
pub(crate) struct HostKeys {
    cache: Mutex<HashMap<u32, Entry>>,
}

impl HostKeys {
    /// Checks that `presented` is host `host_id`'s current upload key.
    pub(crate) async fn prove(
        &self,
        db: &Db,
        host_id: u32,
        presented: Option<&str>,
    ) -> anyhow::Result<Proof> {
        let cached = self.lock().get(&host_id).cloned();
        if let Some(e) = &cached {
            let proof = judge(e.fingerprint.as_ref(), presented);
            if proof == Proof::Proven || e.read_at.elapsed() < REREAD_AFTER {
                return Ok(proof);
            }
        }
        let entry = Entry {
            fingerprint: db.inventory().upload_key_sha256(host_id).await?,
            read_at: Instant::now(),
        };
        let proof = judge(entry.fingerprint.as_ref(), presented);
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED && !cache.contains_key(&host_id) {
            cache.clear();
        }
        cache.insert(host_id, entry);
        Ok(proof)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Entry>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn judge(fingerprint: Option<&Option<String>>, presented: Option<&str>) -> Proof {
    match (fingerprint, presented) {
        (None, _) => Proof::Refused("no host with this id is registered"),
        (Some(None), _) => Proof::Proven,
        (Some(Some(_)), None) => Proof::Refused("no upload key (x-rocemesh-host-key) presented"),
        (Some(Some(f)), Some(key)) if host_key::matches(f, key) => Proof::Proven,
        (Some(Some(_)), Some(_)) => Proof::Refused("the upload key is not this host's"),
    }
}
