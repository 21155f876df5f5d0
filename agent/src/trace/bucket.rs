//! Token bucket limiting how many TRACE packets an agent sends: switches answer
//! traceroute from their CPU and rate-limit it, so the agent must stay well below that.

use std::time::{Duration, Instant};

/// `rate` tokens per second, at most `burst` saved up.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket refilling at `rate` per second (clamped to a tiny positive rate).
    pub(crate) fn new(rate: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            rate: rate.max(1e-3),
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        self.last = self.last.max(now);
    }

    /// Takes one token if there is one.
    pub(crate) fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the next token will be available (`now` if one is).
    pub(crate) fn next_token_at(&mut self, now: Instant) -> Instant {
        self.refill(now);
        if self.tokens >= 1.0 {
            now
        } else {
            now + Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_steady_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(40.0, 8, t0);
        assert_eq!((0..20).filter(|_| b.try_take(t0)).count(), 8);
        assert_eq!(b.next_token_at(t0), t0 + Duration::from_millis(25));
        // Over 10 s at 40/s: 400 more, never more than the burst at once.
        let mut taken = 0;
        for ms in 1..=10_000u64 {
            let now = t0 + Duration::from_millis(ms);
            while b.try_take(now) {
                taken += 1;
            }
        }
        assert!((399..=401).contains(&taken), "{taken}");
        let later = t0 + Duration::from_secs(3600);
        assert_eq!((0..20).filter(|_| b.try_take(later)).count(), 8);
    }
}
