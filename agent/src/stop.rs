//! A stop flag the control-plane threads can sleep on, so shutdown never waits out a period.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Set once at shutdown; sleepers wake at once.
#[derive(Debug, Default)]
pub(crate) struct StopSignal {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl StopSignal {
    /// Requests the stop and wakes every sleeper.
    pub(crate) fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }

    /// True once stopped.
    pub(crate) fn is_stopped(&self) -> bool {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps up to `d`; returns true if the stop was requested meanwhile.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        let mut g = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        while !*g {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = self
                .cv
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *g
    }
}
