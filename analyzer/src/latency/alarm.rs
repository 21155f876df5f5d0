//! What a fired detector leaves on a pair: an alarm holding the level the pair had
//! before, kept until a later window's median is back near that level; and the
//! snapshot of all alarms that latency tomography reads.

use rocemesh_anomaly::{ShortTermVerdict, WindowFeatures, ZTest};
use rocemesh_proto::api::LatencyWindowStats;
use std::collections::HashMap;

/// (prober RNIC id, target RNIC id).
pub(crate) type PairKey = (u32, u32);

/// An RNIC pair whose latency detectors fired and whose latency has not come back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PairAlarm {
    /// End of the window that raised it, ms since the Unix epoch.
    pub since_ms: i64,
    /// The pair's level before the anomaly (look-back median of window medians, or
    /// the long-term baseline's median), ns.
    pub reference_ns: f64,
    /// Probes above this RTT are slow; a window whose median falls below it ends the
    /// alarm (halfway between the reference and the detectors' material rise).
    pub slow_above_ns: f64,
    /// The pair's latest judged window.
    pub window: WindowFeatures,
    /// The short-term (LOF) verdict that fired, if it did.
    pub short_term: Option<ShortTermVerdict>,
    /// The long-term z-test that fired, if it did.
    pub long_term: Option<ZTest>,
}

impl PairAlarm {
    /// Which detectors fired, for evidence.
    pub(crate) fn detector(&self) -> String {
        let names = [
            self.short_term.map(|_| "short_term_lof"),
            self.long_term.map(|_| "long_term_ztest"),
        ];
        names.into_iter().flatten().collect::<Vec<_>>().join("+")
    }

    /// True when a probe of the pair with this network RTT counts as slow.
    pub(crate) fn is_slow(&self, rtt_ns: u32) -> bool {
        f64::from(rtt_ns) > self.slow_above_ns
    }

    /// The window statistics in the wire form.
    pub(crate) fn window_stats(&self) -> LatencyWindowStats {
        let w = &self.window;
        LatencyWindowStats {
            p25_ns: w.p25,
            p50_ns: w.p50,
            p75_ns: w.p75,
            min_ns: w.min,
            mean_ns: w.mean,
            std_ns: w.std,
            max_ns: w.max,
        }
    }
}

/// The alarmed pairs after one close, shared read-only with a diagnosis tick.
#[derive(Debug, Clone, Default)]
pub(crate) struct Verdicts {
    alarms: HashMap<PairKey, PairAlarm>,
}

impl Verdicts {
    /// Snapshot of the given alarms.
    pub(crate) fn new(alarms: HashMap<PairKey, PairAlarm>) -> Self {
        Self { alarms }
    }

    /// The alarm of a pair, if it has one.
    pub(crate) fn get(&self, prober: u32, target: u32) -> Option<&PairAlarm> {
        self.alarms.get(&(prober, target))
    }

    /// True when the pair is alarmed and this RTT is above its slow threshold.
    pub(crate) fn is_slow(&self, prober: u32, target: u32, rtt_ns: u32) -> bool {
        self.get(prober, target).is_some_and(|a| a.is_slow(rtt_ns))
    }

    /// Every alarmed pair with its alarm.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&PairKey, &PairAlarm)> + '_ {
        self.alarms.iter()
    }

    /// True when no pair is alarmed.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.alarms.is_empty()
    }
}
