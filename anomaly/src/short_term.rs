//! Short-term detector (SkeletonHunter §5.2): LOF of the newest window's
//! features against the previous windows of a look-back (5 minutes = 10
//! windows of 30 s), gated by a material rise of the window's central latency.
//!
//! Scaling: each feature is taken as `ln(max(x, 1 ns))` (latencies are
//! multiplicative; the log makes a x2 rise the same distance at 10 µs and at
//! 1 ms), then standardized per feature over the look-back set, with the
//! standard deviation floored at `min_scale` so a look-back of identical
//! windows does not turn a 0.1 % wobble into an infinite distance.
//!
//! Decision: anomaly when `LOF > lof_threshold` AND the change is material,
//! i.e. both
//! - shift: the window's median is more than `min_shift` above the median of
//!   the look-back windows' medians (a rise, not a drop or a tail spike), and
//! - novelty: against EVERY look-back window, the median of the absolute
//!   log differences of the three lower order statistics (min, p25, p50)
//!   exceeds `ln(1 + min_shift)`. This is "cannot be clustered into previous
//!   windows": a periodic congestion burst that already occurred within the
//!   look-back has a near twin there and does not fire; a step lifts the
//!   uncongested probes too (min, p25), so it stands apart from normal
//!   windows and from burst windows whose upper half it may resemble.
//!
//! LOF alone would fire on heavy-tail spikes (max, std move) and on a burst
//! with only one precedent in the look-back (k = 5 neighbours cannot all be
//! bursts); the gates remove those.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::{
    Error,
    features::{FEATURE_DIM, WindowFeatures},
    lof::{Point, lof},
    scratch::Scratch,
};

/// Knobs of the short-term detector.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ShortTermConfig {
    /// Look-back windows kept per pair (10 x 30 s = 5 minutes).
    pub lookback: usize,
    /// LOF neighbourhood size; needs `k + 1 <= min_history`.
    pub k: usize,
    /// Windows required before a window is judged (default: a full look-back,
    /// so a burst cycle up to 5 minutes long has been seen at least once).
    pub min_history: usize,
    /// LOF above which a window is an outlier. 1.5: LOF is ~1 inside a
    /// cluster; on synthetic stable traffic (10 reference windows, k = 5) its
    /// median is 1.03 and its p90 1.45, the windows above being tail spikes
    /// (test `lof_quantiles_on_stable_traffic_justify_the_threshold`), which
    /// the `min_shift` gates then discard. A step scores 2.5 to 10+.
    pub lof_threshold: f64,
    /// Relative change (0.25 = +25 %) needed for an outlier to be material:
    /// the median's rise over the look-back median, and the lower order
    /// statistics' distance to the nearest look-back window (module doc).
    /// 0.25 sits above the episode-to-episode wobble of bursty pairs with 60
    /// probes per window (0.15 and 0.2 let recurring bursts fire in the
    /// synthetic suite) and below a +30 % step.
    pub min_shift: f64,
    /// Floor of the per-feature standard deviation in ln units (0.01 ~ 1 %).
    pub min_scale: f64,
}

impl Default for ShortTermConfig {
    fn default() -> Self {
        Self {
            lookback: 10,
            k: 5,
            min_history: 10,
            lof_threshold: 1.5,
            min_shift: 0.25,
            min_scale: 0.01,
        }
    }
}

impl ShortTermConfig {
    /// Rejects settings the detector cannot honour (k = 0, k + 1 > history, ...).
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self.k == 0 {
            return bad("short-term k must be >= 1".into());
        }
        if self.min_history < self.k + 1 || self.min_history > self.lookback {
            return bad(format!(
                "short-term min_history {} must be within k + 1 = {} ..= lookback {}",
                self.min_history,
                self.k + 1,
                self.lookback
            ));
        }
        if self.lookback > 1024 {
            return bad(format!(
                "short-term lookback {} exceeds 1024",
                self.lookback
            ));
        }
        for (name, v) in [
            ("lof_threshold", self.lof_threshold),
            ("min_shift", self.min_shift),
            ("min_scale", self.min_scale),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("short-term {name} must be finite and > 0, got {v}"));
            }
        }
        Ok(())
    }
}

/// Outcome of scoring one window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ShortTermVerdict {
    /// Local outlier factor against the look-back.
    pub lof: f64,
    /// Relative rise of the window's median over the look-back median.
    pub shift: f64,
    /// Relative distance to the most similar look-back window: over the
    /// look-back windows j, the minimum of the median of
    /// `|ln q - ln q_j|` for q in (min, p25, p50), as `exp(.) - 1`.
    pub novelty: f64,
    /// `lof > lof_threshold && shift > min_shift && novelty > min_shift`.
    pub anomaly: bool,
}

/// Short-term state of one RNIC pair: a bounded ring of the last `lookback`
/// windows' log features (28 bytes each). Scoring borrows its buffers from a
/// [`Scratch`] shared by all pairs.
#[derive(Debug, Clone)]
pub struct ShortTermDetector {
    config: ShortTermConfig,
    history: VecDeque<Stored>,
}

/// A look-back window's log features as kept: `f32` holds a log latency to ~1e-7
/// relative, far below `min_scale` (1 %), at half the bytes of a [`Point`].
type Stored = [f32; FEATURE_DIM];

const P25: usize = 0;
const P50: usize = 1;
const MIN: usize = 3;

impl ShortTermDetector {
    /// A detector with an empty look-back.
    pub fn new(config: ShortTermConfig) -> Result<Self, Error> {
        config.validate()?;
        Ok(Self {
            config,
            history: VecDeque::new(),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &ShortTermConfig {
        &self.config
    }

    /// Windows currently in the look-back.
    pub fn history_len(&self) -> usize {
        self.history.len()
    }

    /// Scores `window` against the look-back without recording it.
    /// [`Error::NotEnoughHistory`] until `min_history` windows were observed.
    pub fn score(
        &self,
        window: &WindowFeatures,
        scratch: &mut Scratch,
    ) -> Result<ShortTermVerdict, Error> {
        window.validate()?;
        if self.history.len() < self.config.min_history {
            return Err(Error::NotEnoughHistory {
                have: self.history.len(),
                need: self.config.min_history,
            });
        }
        let query = log_point(window);
        let Scratch {
            lookback,
            scaled,
            medians,
            lof: lof_scratch,
            ..
        } = scratch;
        lookback.clear();
        lookback.extend(self.history.iter().map(|p| p.map(f64::from)));
        let (mean, scale) = standardization(lookback, self.config.min_scale);
        let standardize =
            |p: &Point| -> Point { std::array::from_fn(|d| (p[d] - mean[d]) / scale[d]) };
        scaled.clear();
        scaled.extend(lookback.iter().map(standardize));
        let lof = lof(scaled, &standardize(&query), self.config.k, lof_scratch);
        medians.clear();
        medians.extend(lookback.iter().map(|p| p[P50]));
        let mid = medians.len() / 2;
        let (_, median, _) = medians.select_nth_unstable_by(mid, f64::total_cmp);
        let shift = (query[P50] - *median).exp() - 1.0;
        let novelty = lookback
            .iter()
            .map(|p| {
                let mut d = [MIN, P25, P50].map(|q| (query[q] - p[q]).abs());
                d.sort_unstable_by(f64::total_cmp);
                d[1]
            })
            .fold(f64::INFINITY, f64::min)
            .exp()
            - 1.0;
        let material = shift > self.config.min_shift && novelty > self.config.min_shift;
        Ok(ShortTermVerdict {
            lof,
            shift,
            novelty,
            anomaly: lof > self.config.lof_threshold && material,
        })
    }

    /// Scores `window` (when the look-back is full enough) and then records
    /// it, evicting the oldest window. `Ok(None)` while warming up; an invalid
    /// window is an error and is not recorded. Anomalous windows are recorded
    /// too: a lasting shift becomes the short-term norm after one look-back
    /// (the long-term detector keeps reporting it).
    pub fn observe(
        &mut self,
        window: &WindowFeatures,
        scratch: &mut Scratch,
    ) -> Result<Option<ShortTermVerdict>, Error> {
        let verdict = match self.score(window, scratch) {
            Ok(v) => Some(v),
            Err(Error::NotEnoughHistory { .. }) => None,
            Err(e) => return Err(e),
        };
        if self.history.len() == self.config.lookback {
            self.history.pop_front();
        } else {
            // Exactly the look-back: grown by doubling (or a clone of a detector, which
            // keeps no spare capacity) it would end at 16 slots for 10.
            self.history
                .reserve_exact(self.config.lookback - self.history.len());
        }
        self.history.push_back(log_point(window).map(|x| x as f32));
        Ok(verdict)
    }
}

/// Per-feature mean and standard deviation (floored at `min_scale`) over `lookback`.
fn standardization(lookback: &[Point], min_scale: f64) -> (Point, Point) {
    let n = lookback.len() as f64;
    let mean: Point = std::array::from_fn(|d| lookback.iter().map(|p| p[d]).sum::<f64>() / n);
    let scale: Point = std::array::from_fn(|d| {
        let var = lookback
            .iter()
            .map(|p| (p[d] - mean[d]).powi(2))
            .sum::<f64>()
            / n;
        var.sqrt().max(min_scale)
    });
    (mean, scale)
}

fn log_point(w: &WindowFeatures) -> Point {
    let a = w.to_array();
    std::array::from_fn(|d| a[d].max(1.0).ln())
}

const _: () = assert!(FEATURE_DIM == 7);

#[cfg(test)]
mod tests {
    use super::*;

    fn window(center: f64, spread: f64) -> WindowFeatures {
        WindowFeatures {
            p25: center - spread,
            p50: center,
            p75: center + spread,
            min: center - 3.0 * spread,
            mean: center + 0.1 * spread,
            std: 1.5 * spread,
            max: center + 6.0 * spread,
        }
    }

    /// Ten windows around 20 µs with a deterministic 1-2 % wobble.
    fn warmed(config: ShortTermConfig) -> ShortTermDetector {
        let mut det = ShortTermDetector::new(config).unwrap();
        for i in 0..config.lookback {
            let wobble = 1.0 + 0.01 * ((i * 7 % 5) as f64 - 2.0);
            assert_eq!(
                det.observe(&window(20_000.0 * wobble, 1_000.0), &mut Scratch::default())
                    .unwrap(),
                None
            );
        }
        det
    }

    #[test]
    fn warm_up_returns_none_then_scores() {
        let mut det = warmed(ShortTermConfig::default());
        let v = det
            .observe(&window(20_100.0, 1_000.0), &mut Scratch::default())
            .unwrap()
            .unwrap();
        assert!(!v.anomaly, "{v:?}");
        assert_eq!(det.history_len(), 10);
    }

    #[test]
    fn step_fires_and_then_becomes_the_norm() {
        let mut det = warmed(ShortTermConfig::default());
        let v = det
            .observe(&window(40_000.0, 2_000.0), &mut Scratch::default())
            .unwrap()
            .unwrap();
        assert!(v.anomaly && v.lof > 3.0 && v.shift > 0.8, "{v:?}");
        // The same level again is no longer above every look-back window.
        let v = det
            .observe(&window(40_000.0, 2_000.0), &mut Scratch::default())
            .unwrap()
            .unwrap();
        assert!(!v.anomaly, "{v:?}");
    }

    #[test]
    fn recurring_burst_in_lookback_does_not_fire() {
        let mut det = ShortTermDetector::new(ShortTermConfig::default()).unwrap();
        let burst = window(45_000.0, 9_000.0);
        for i in 0..30 {
            let w = if i % 5 == 4 {
                burst
            } else {
                window(20_000.0, 1_000.0)
            };
            if let Some(v) = det.observe(&w, &mut Scratch::default()).unwrap() {
                assert!(!v.anomaly, "window {i}: {v:?}");
            }
        }
    }

    #[test]
    fn step_below_the_burst_level_still_fires() {
        let mut det = ShortTermDetector::new(ShortTermConfig::default()).unwrap();
        let burst = window(45_000.0, 9_000.0);
        for i in 0..10 {
            let w = if i % 3 == 0 {
                burst
            } else {
                window(20_000.0, 1_000.0)
            };
            det.observe(&w, &mut Scratch::default()).unwrap();
        }
        let v = det
            .observe(&window(28_000.0, 1_400.0), &mut Scratch::default())
            .unwrap()
            .unwrap();
        assert!(v.anomaly && v.novelty > 0.3, "{v:?}");
    }

    #[test]
    fn tail_spike_without_central_shift_does_not_fire() {
        let det = warmed(ShortTermConfig::default());
        let mut w = window(20_000.0, 1_000.0);
        w.max *= 20.0;
        w.std *= 10.0;
        let v = det.score(&w, &mut Scratch::default()).unwrap();
        assert!(v.lof > 1.5 && !v.anomaly, "{v:?}");
    }

    #[test]
    fn one_scratch_shared_by_many_pairs_scores_as_fresh_buffers_do() {
        // Pairs of different look-backs scored in turn through one scratch: what a
        // pair left in it must never reach the next pair's verdict.
        let pairs: Vec<ShortTermDetector> = (0..6)
            .map(|p| {
                let mut det = ShortTermDetector::new(ShortTermConfig::default()).unwrap();
                for i in 0..10 + p {
                    let level = 10_000.0 * (1.0 + p as f64) * (1.0 + 0.02 * (i % 4) as f64);
                    det.observe(
                        &window(level, 400.0 * (1 + i % 3) as f64),
                        &mut Scratch::default(),
                    )
                    .unwrap();
                }
                det
            })
            .collect();
        let mut shared = Scratch::default();
        for round in 0..3 {
            for (p, det) in pairs.iter().enumerate() {
                let w = window(
                    10_000.0 * (1.0 + p as f64) * (1.0 + 0.4 * round as f64),
                    500.0,
                );
                assert_eq!(
                    det.score(&w, &mut shared).unwrap(),
                    det.score(&w, &mut Scratch::default()).unwrap(),
                    "pair {p}, round {round}"
                );
            }
        }
    }

    #[test]
    fn a_cloned_detector_keeps_exactly_its_look_back() {
        // The analyzer makes every pair's detector by cloning one template: the
        // look-back must not end at the doubling growth's 16 slots for 10.
        let template = ShortTermDetector::new(ShortTermConfig::default()).unwrap();
        let mut det = template.clone();
        for i in 0..25 {
            det.observe(
                &window(20_000.0 + i as f64, 1_000.0),
                &mut Scratch::default(),
            )
            .unwrap();
            assert!(det.history.capacity() <= det.config.lookback, "window {i}");
        }
        assert_eq!(det.history_len(), det.config.lookback);
    }

    #[test]
    fn bad_config_and_input_are_clear_errors() {
        let cfg = ShortTermConfig {
            k: 10,
            ..Default::default()
        };
        assert!(matches!(
            ShortTermDetector::new(cfg),
            Err(Error::InvalidConfig(_))
        ));
        let cfg = ShortTermConfig {
            k: 0,
            ..Default::default()
        };
        assert!(matches!(
            ShortTermDetector::new(cfg),
            Err(Error::InvalidConfig(_))
        ));
        let cfg = ShortTermConfig {
            lof_threshold: f64::NAN,
            ..Default::default()
        };
        assert!(matches!(
            ShortTermDetector::new(cfg),
            Err(Error::InvalidConfig(_))
        ));

        let mut det = ShortTermDetector::new(ShortTermConfig::default()).unwrap();
        assert_eq!(
            det.score(&window(20_000.0, 1_000.0), &mut Scratch::default()),
            Err(Error::NotEnoughHistory { have: 0, need: 10 })
        );
        let mut bad = window(20_000.0, 1_000.0);
        bad.mean = f64::INFINITY;
        assert!(matches!(
            det.observe(&bad, &mut Scratch::default()),
            Err(Error::InvalidFeature { name: "mean", .. })
        ));
        assert_eq!(
            det.history_len(),
            0,
            "an invalid window must not be recorded"
        );
    }

    #[test]
    fn rise_of_upper_quartiles_only_is_not_material() {
        // A congestion episode: the upper half moves, min and p25 stay.
        let det = warmed(ShortTermConfig::default());
        let mut w = window(20_000.0, 1_000.0);
        w.p50 *= 1.6;
        w.p75 *= 1.8;
        w.mean *= 1.3;
        let v = det.score(&w, &mut Scratch::default()).unwrap();
        assert!(
            v.lof > 1.5 && v.shift > 0.4 && v.novelty < 0.05 && !v.anomaly,
            "{v:?}"
        );
        // The whole distribution moves: a step.
        w.p25 *= 1.5;
        w.min *= 1.5;
        let v = det.score(&w, &mut Scratch::default()).unwrap();
        assert!(v.anomaly && v.novelty > 0.4, "{v:?}");
    }

    #[test]
    fn identical_lookback_is_finite() {
        let mut det = ShortTermDetector::new(ShortTermConfig::default()).unwrap();
        for _ in 0..10 {
            det.observe(&window(20_000.0, 0.0), &mut Scratch::default())
                .unwrap();
        }
        let same = det
            .score(&window(20_000.0, 0.0), &mut Scratch::default())
            .unwrap();
        assert!(same.lof.is_finite() && !same.anomaly, "{same:?}");
        let up = det
            .score(&window(30_000.0, 0.0), &mut Scratch::default())
            .unwrap();
        assert!(up.lof.is_finite() && up.anomaly, "{up:?}");
    }
}
