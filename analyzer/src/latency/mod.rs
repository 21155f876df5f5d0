//! Per RNIC-pair latency anomaly detection on ingested results (SkeletonHunter §5.2).
//!
//! Ingest hands every accepted batch to [`PairLatency::take`]: the network RTT of each
//! successful probe goes into its (prober, target) pair's short window, chosen by send
//! time (windows are aligned to the Unix epoch). Each diagnosis tick calls
//! [`PairLatency::close`]: short windows that ended `close_after_ms` ago are closed and
//! scored by the pair's [`LatencyMonitor`] (7 statistics, LOF against the look-back);
//! long windows that ended are fitted (the first full one) or z-tested against the
//! pair's log-normal baseline (a pair's first, partial long window is discarded).
//!
//! A detector that fires raises a [`PairAlarm`] holding the pair's level before the
//! rise. The short-term detector fires once per step (the next windows have a twin in
//! the look-back), so the alarm stays until a later window's median is back near that
//! level, which is when the fault has cleared. Alarmed pairs are what latency
//! tomography reads ([`Verdicts`]): their probes above the alarm's threshold count as
//! slow, so the component their slow flows share is blamed, with the pairs as evidence.
//!
//! Memory is bounded: at most `max_pairs` pairs (~1 KiB of detector state each plus at
//! most `max_samples_per_window` RTTs per open window), idle pairs are evicted.

mod alarm;
mod pair;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use alarm::PairAlarm;
pub(crate) use alarm::{PairKey, Verdicts};

use crate::config::LatencyConfig;
use pair::{Judge, PairState};
use rocemesh_anomaly::{LatencyMonitor, Scratch};
use rocemesh_proto::{ProbeResult, ProbeStatus};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

/// What the detectors did since start (for logs and operators).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LatencyStats {
    /// Pairs tracked now.
    pub pairs: u64,
    /// Pairs alarmed now.
    pub alarmed_pairs: u64,
    /// RTT samples taken.
    pub samples: u64,
    /// Samples for a short window already closed.
    pub late_samples: u64,
    /// Samples too far in the future (clock skew) to hold.
    pub future_samples: u64,
    /// Samples beyond the per-window cap.
    pub capped_samples: u64,
    /// Samples of new pairs refused because `max_pairs` pairs are tracked.
    pub refused_samples: u64,
    /// Pairs forgotten after `idle_evict_ms` without samples.
    pub evicted_pairs: u64,
    /// Short windows judged.
    pub windows: u64,
    /// Short windows with too few samples to judge.
    pub sparse_windows: u64,
    /// Short-term (LOF) anomalies.
    pub short_term_alarms: u64,
    /// Long windows that became a pair's baseline.
    pub long_windows_fitted: u64,
    /// Long windows z-tested.
    pub long_windows_tested: u64,
    /// Long windows with too few samples.
    pub long_windows_skipped: u64,
    /// Long-term (z-test) anomalies.
    pub long_term_alarms: u64,
}

/// The detectors of every RNIC pair.
#[derive(Debug)]
pub(crate) struct PairLatency {
    enabled: bool,
    /// Every new pair starts as a clone of this (config validated once).
    template: LatencyMonitor,
    short_ms: i64,
    long_ms: i64,
    close_after_ms: i64,
    idle_evict_ms: i64,
    max_pairs: usize,
    max_samples: usize,
    min_samples: usize,
    short_margin: f64,
    long_margin: f64,
    min_rise_ns: f64,
    /// Short windows at or beyond `through + ahead` are refused (bounds open windows).
    ahead: i64,
    /// Short windows below this index are closed.
    through: i64,
    /// Boxed (a pair's state is ~600 bytes) and hashed with foldhash: looked up once
    /// per successful probe.
    pairs: foldhash::HashMap<PairKey, Box<PairState>>,
    verdicts: Arc<Verdicts>,
    stats: LatencyStats,
    samples: Vec<f64>,
    scratch: Scratch,
}

impl PairLatency {
    /// Detectors per `cfg`, ticked every `tick_ms`, starting at `now_ms`.
    pub(crate) fn new(cfg: &LatencyConfig, tick_ms: u64, now_ms: i64) -> anyhow::Result<Self> {
        cfg.validate()?;
        let short_ms = cfg.short_window_ms as i64;
        let close_after_ms = cfg.close_after_ms as i64;
        Ok(Self {
            enabled: cfg.enabled,
            template: LatencyMonitor::new(&cfg.monitor())?,
            short_ms,
            long_ms: cfg.long_window_ms as i64,
            close_after_ms,
            idle_evict_ms: cfg.idle_evict_ms as i64,
            max_pairs: cfg.max_pairs,
            max_samples: cfg.max_samples_per_window,
            min_samples: cfg.min_samples_per_window,
            short_margin: cfg.min_shift,
            long_margin: cfg.min_ln_shift.exp_m1(),
            min_rise_ns: cfg.min_rise_us as f64 * 1e3,
            ahead: (close_after_ms + tick_ms as i64).div_euclid(short_ms) + 3,
            through: (now_ms - close_after_ms).div_euclid(short_ms),
            pairs: foldhash::HashMap::default(),
            verdicts: Arc::new(Verdicts::default()),
            stats: LatencyStats::default(),
            samples: Vec::new(),
            scratch: Scratch::default(),
        })
    }

    /// Takes the successful probes of an accepted batch received at `now_ms`.
    pub(crate) fn take(&mut self, records: impl Iterator<Item = ProbeResult>, now_ms: i64) {
        if !self.enabled {
            return;
        }
        for r in records {
            if r.status != ProbeStatus::Ok || r.network_rtt_ns == 0 {
                continue;
            }
            let w = ((r.send_unix_ns / 1_000_000) as i64).div_euclid(self.short_ms);
            if w < self.through {
                self.stats.late_samples += 1;
                continue;
            }
            if w >= self.through + self.ahead {
                self.stats.future_samples += 1;
                continue;
            }
            let n = self.pairs.len();
            let pair = match self.pairs.entry((r.prober_rnic, r.target_rnic)) {
                Entry::Occupied(o) => o.into_mut(),
                Entry::Vacant(_) if n >= self.max_pairs => {
                    self.stats.refused_samples += 1;
                    continue;
                }
                Entry::Vacant(v) => v.insert(Box::new(PairState::new(
                    self.template.clone(),
                    w,
                    self.short_ms,
                    self.long_ms,
                    now_ms,
                ))),
            };
            if pair.push(w, r.network_rtt_ns, self.max_samples, now_ms) {
                self.stats.samples += 1;
            } else {
                self.stats.capped_samples += 1;
            }
        }
    }

    /// Closes the windows that ended `close_after_ms` before `now_ms`, evicts idle
    /// pairs, and returns the alarmed pairs (unchanged when no window closed).
    pub(crate) fn close(&mut self, now_ms: i64) -> Arc<Verdicts> {
        let through = (now_ms - self.close_after_ms).div_euclid(self.short_ms);
        if !self.enabled || through <= self.through {
            return Arc::clone(&self.verdicts);
        }
        self.through = through;
        let mut judge = Judge {
            short_ms: self.short_ms,
            long_ms: self.long_ms,
            min_samples: self.min_samples,
            short_margin: self.short_margin,
            long_margin: self.long_margin,
            min_rise_ns: self.min_rise_ns,
            stats: &mut self.stats,
            samples: std::mem::take(&mut self.samples),
            scratch: std::mem::take(&mut self.scratch),
        };
        let mut alarms = HashMap::new();
        let idle_evict_ms = self.idle_evict_ms;
        self.pairs.retain(|key, pair| {
            pair.close(through, &mut judge);
            if pair.is_drained() && now_ms - pair.last_seen_ms > idle_evict_ms {
                judge.stats.evicted_pairs += 1;
                return false;
            }
            if let Some(a) = &pair.alarm {
                alarms.insert(*key, (**a).clone());
            }
            true
        });
        self.samples = judge.samples;
        self.scratch = judge.scratch;
        self.stats.pairs = self.pairs.len() as u64;
        self.stats.alarmed_pairs = alarms.len() as u64;
        self.verdicts = Arc::new(Verdicts::new(alarms));
        Arc::clone(&self.verdicts)
    }

    /// Counters since start.
    pub(crate) fn stats(&self) -> LatencyStats {
        self.stats.clone()
    }
}
