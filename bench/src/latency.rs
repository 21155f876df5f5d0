//! Request latencies of one kind and their percentiles.

use std::time::Duration;

/// Latencies of one request kind plus its error count.
#[derive(Debug, Default, Clone)]
pub(crate) struct Latencies {
    samples: Vec<Duration>,
    /// Requests that failed (transport error, timeout or an unexpected status).
    pub errors: u64,
}

impl Latencies {
    /// Records one successful request.
    pub(crate) fn record(&mut self, d: Duration) {
        self.samples.push(d);
    }

    /// Adds another set's samples and errors.
    pub(crate) fn merge(&mut self, other: Latencies) {
        self.samples.extend(other.samples);
        self.errors += other.errors;
    }

    /// Successful requests.
    pub(crate) fn count(&self) -> usize {
        self.samples.len()
    }

    /// The `q`-quantile (0..=1, nearest rank) in ms; 0 without samples.
    pub(crate) fn quantile_ms(&mut self, q: f64) -> f64 {
        if self.samples.is_empty() {
            return 0.0;
        }
        self.samples.sort_unstable();
        let rank = ((q * self.samples.len() as f64).ceil() as usize).clamp(1, self.samples.len());
        self.samples[rank - 1].as_secs_f64() * 1e3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let mut l = Latencies::default();
        assert_eq!(l.quantile_ms(0.5), 0.0);
        for ms in (1..=100).rev() {
            l.record(Duration::from_millis(ms));
        }
        let mut other = Latencies {
            errors: 2,
            ..Default::default()
        };
        other.record(Duration::from_millis(1000));
        l.merge(other);
        assert_eq!(l.count(), 101);
        assert_eq!(l.errors, 2);
        assert_eq!(l.quantile_ms(0.5), 51.0);
        assert_eq!(l.quantile_ms(0.99), 100.0);
        assert_eq!(l.quantile_ms(1.0), 1000.0);
    }
}
