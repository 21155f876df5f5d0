//! The controller's clock for what it dates and rotates (registrations, tasks, the
//! pinglists' rotation): the wall clock, or a virtual one a simulation moves, so a seeded
//! simulated run gets the same pinglists whenever it is replayed. Probe keys always follow
//! the wall clock: their expiry is a security property.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Milliseconds since the Unix epoch, from the wall clock or a shared virtual one.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    virtual_ms: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// A clock that reads `now`, which its owner moves.
    pub fn virtual_at(now: Arc<AtomicI64>) -> Self {
        Self {
            virtual_ms: Some(now),
        }
    }

    /// The time now.
    pub fn now_ms(&self) -> i64 {
        match &self.virtual_ms {
            Some(v) => v.load(Ordering::Relaxed),
            None => rocemesh_proto::now_unix_ms(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_clock_reads_what_its_owner_set() {
        let now = Arc::new(AtomicI64::new(1_800_000_000_000));
        let clock = Clock::virtual_at(Arc::clone(&now));
        assert_eq!(clock.now_ms(), 1_800_000_000_000);
        now.store(1_800_000_020_000, Ordering::Relaxed);
        assert_eq!(clock.now_ms(), 1_800_000_020_000);
        let wall = Clock::default().now_ms();
        assert!((wall - rocemesh_proto::now_unix_ms()).abs() < 60_000);
    }
}
