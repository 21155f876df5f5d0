//! Address handles cached per (destination GID, flow label), bounded LRU.
//!
//! Creating an AH is a verb call (a syscall on some providers), so a prober sending to
//! many targets on many flow labels keeps the hot ones. Handles are shared as `Arc`:
//! an evicted or invalidated handle is only destroyed (its `Drop`) once the last send
//! still using it has completed and released its clone.

use crate::gid::Gid;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What an address handle is created for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AhKey {
    /// Destination GID.
    pub dgid: Gid,
    /// GRH flow label (selects the RoCEv2 UDP source port).
    pub flow_label: u32,
}

/// A bounded least-recently-used map from [`AhKey`] to shared handles.
#[derive(Debug)]
pub struct AhCache<H> {
    capacity: usize,
    clock: u64,
    entries: HashMap<AhKey, (Arc<H>, u64)>,
    by_age: BTreeMap<u64, AhKey>,
}

impl<H> AhCache<H> {
    /// A cache holding at most `capacity` handles (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            clock: 0,
            entries: HashMap::new(),
            by_age: BTreeMap::new(),
        }
    }

    /// Number of cached handles.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no handle is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The handle for `key`, created with `create` on a miss (evicting the least
    /// recently used handle when full). A failed `create` changes nothing.
    pub fn get_or_create<E>(
        &mut self,
        key: AhKey,
        create: impl FnOnce() -> Result<H, E>,
    ) -> Result<Arc<H>, E> {
        self.clock += 1;
        let now = self.clock;
        if let Some((handle, used)) = self.entries.get_mut(&key) {
            self.by_age.remove(used);
            *used = now;
            self.by_age.insert(now, key);
            return Ok(Arc::clone(handle));
        }
        let handle = Arc::new(create()?);
        while self.entries.len() >= self.capacity {
            let Some((_, oldest)) = self.by_age.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        self.entries.insert(key, (Arc::clone(&handle), now));
        self.by_age.insert(now, key);
        Ok(handle)
    }

    /// Drops every handle towards `dgid` (the peer moved or its GID changed); returns how many.
    pub fn invalidate_gid(&mut self, dgid: Gid) -> usize {
        let stale: Vec<(AhKey, u64)> = self
            .entries
            .iter()
            .filter(|(k, _)| k.dgid == dgid)
            .map(|(k, (_, used))| (*k, *used))
            .collect();
        for (key, used) in &stale {
            self.entries.remove(key);
            self.by_age.remove(used);
        }
        stale.len()
    }

    /// Drops every handle (e.g. after a local GID table or port change).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.by_age.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fake handle that counts its destruction, like `ibv_destroy_ah` would.
    struct Fake<'a>(u32, &'a AtomicUsize);
    impl Drop for Fake<'_> {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn key(last: u8, fl: u32) -> AhKey {
        AhKey {
            dgid: Gid::from_ip(std::net::IpAddr::from([10, 0, 0, last])),
            flow_label: fl,
        }
    }

    #[test]
    fn hits_reuse_and_misses_create() {
        let drops = AtomicUsize::new(0);
        let mut c = AhCache::new(4);
        let mut created = 0;
        for _ in 0..3 {
            let h = c.get_or_create(key(1, 7), || {
                created += 1;
                Ok::<_, ()>(Fake(1, &drops))
            });
            assert_eq!(h.unwrap().0, 1);
        }
        assert_eq!(created, 1);
        // same GID, other flow label: another handle
        c.get_or_create(key(1, 8), || Ok::<_, ()>(Fake(2, &drops)))
            .unwrap();
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn the_least_recently_used_is_evicted_and_destroyed() {
        let drops = AtomicUsize::new(0);
        let mut c = AhCache::new(2);
        c.get_or_create(key(1, 1), || Ok::<_, ()>(Fake(1, &drops)))
            .unwrap();
        c.get_or_create(key(2, 1), || Ok::<_, ()>(Fake(2, &drops)))
            .unwrap();
        c.get_or_create(key(1, 1), || Ok::<_, ()>(Fake(99, &drops)))
            .unwrap(); // touch 1
        c.get_or_create(key(3, 1), || Ok::<_, ()>(Fake(3, &drops)))
            .unwrap(); // evicts 2
        assert_eq!(c.len(), 2);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "a hit creates nothing; Fake(2) was evicted"
        );
        let again = c
            .get_or_create(key(2, 1), || Ok::<_, ()>(Fake(22, &drops)))
            .unwrap();
        assert_eq!(again.0, 22);
        let one = c
            .get_or_create(key(3, 1), || Ok::<_, ()>(Fake(0, &drops)))
            .unwrap();
        assert_eq!(one.0, 3);
    }

    #[test]
    fn an_evicted_handle_in_use_lives_until_released() {
        let drops = AtomicUsize::new(0);
        let mut c = AhCache::new(1);
        let in_flight = c
            .get_or_create(key(1, 1), || Ok::<_, ()>(Fake(1, &drops)))
            .unwrap();
        c.get_or_create(key(2, 1), || Ok::<_, ()>(Fake(2, &drops)))
            .unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(in_flight);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_failed_create_changes_nothing() {
        let drops = AtomicUsize::new(0);
        let mut c = AhCache::new(1);
        c.get_or_create(key(1, 1), || Ok::<_, &str>(Fake(1, &drops)))
            .unwrap();
        assert_eq!(
            c.get_or_create(key(2, 1), || Err("ENOMEM")).err(),
            Some("ENOMEM")
        );
        assert_eq!(c.len(), 1);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        assert_eq!(
            c.get_or_create(key(1, 1), || Err("unused")).map(|h| h.0),
            Ok(1)
        );
    }

    #[test]
    fn invalidation_drops_one_peer_or_everything() {
        let drops = AtomicUsize::new(0);
        let mut c = AhCache::new(8);
        for fl in 1..=3 {
            c.get_or_create(key(1, fl), || Ok::<_, ()>(Fake(fl, &drops)))
                .unwrap();
        }
        c.get_or_create(key(2, 1), || Ok::<_, ()>(Fake(9, &drops)))
            .unwrap();
        assert_eq!(c.invalidate_gid(key(1, 0).dgid), 3);
        assert_eq!((c.len(), drops.load(Ordering::SeqCst)), (1, 3));
        assert_eq!(c.invalidate_gid(key(1, 0).dgid), 0);
        // LRU order survives invalidation: filling up evicts cleanly
        for fl in 10..20 {
            c.get_or_create(key(3, fl), || Ok::<_, ()>(Fake(fl, &drops)))
                .unwrap();
        }
        assert_eq!(c.len(), 8);
        c.clear();
        assert!(c.is_empty());
        assert_eq!(drops.load(Ordering::SeqCst), 3 + 11);
    }
}
