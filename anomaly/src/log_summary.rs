//! Bounded sufficient statistics of ln RTT for one pair over one long window:
//! the log-normal MLE needs only (count, Σ ln x, Σ ln² x), so a 30-minute
//! window costs 32 bytes per pair however many probes it holds.

use serde::{Deserialize, Serialize};

use crate::features::is_valid_rtt;

/// Running (count, Σ ln x, Σ ln² x) of valid RTT samples, plus the count of
/// skipped invalid ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LogSummary {
    /// Valid samples added.
    pub count: u64,
    /// Σ ln x over valid samples (x in ns).
    pub sum_ln: f64,
    /// Σ (ln x)² over valid samples.
    pub sum_ln2: f64,
    /// NaN, infinite, zero or negative samples that were skipped.
    pub rejected: u64,
}

impl LogSummary {
    /// Adds one RTT sample (ns); returns false (and counts it) if it is invalid.
    pub fn push(&mut self, rtt_ns: f64) -> bool {
        if !is_valid_rtt(rtt_ns) {
            self.rejected += 1;
            return false;
        }
        let y = rtt_ns.ln();
        self.count += 1;
        self.sum_ln += y;
        self.sum_ln2 += y * y;
        true
    }

    /// Adds every sample of a slice.
    pub fn extend(&mut self, rtt_ns: &[f64]) {
        for &x in rtt_ns {
            self.push(x);
        }
    }

    /// Combines two summaries (e.g. per-shard partial sums).
    pub fn merge(&mut self, other: &Self) {
        self.count += other.count;
        self.sum_ln += other.sum_ln;
        self.sum_ln2 += other.sum_ln2;
        self.rejected += other.rejected;
    }
}
