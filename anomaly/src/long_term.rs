//! Long-term detector (SkeletonHunter §5.2, Fig. 14): fit a log-normal to a
//! pair's RTTs over a long window (30 min) and z-test later windows against it,
//! to catch slow degradation that short-term LOF absorbs window by window.
//!
//! Test: one-sided z of the window's mean ln RTT against the baseline,
//! `z = (ȳ - μ) / (σ / √n)`, `p = P(Z > z)` (a latency drop is not a fault).
//! With thousands of probes per window any tiny drift is "significant", so an
//! anomaly also needs a material effect: `ȳ - μ > min_ln_shift` (default 0.1,
//! i.e. the geometric-mean RTT up by more than ~10.5 %).
//!
//! Refit policy: only a non-anomalous window updates the baseline, as an
//! exponentially weighted pool of sufficient statistics (the old sums times
//! `memory`, plus the window's sums). An anomaly never moves the baseline, so a step or a
//! creep keeps alarming until an operator calls [`LongTermDetector::reset`];
//! drift slower than about `min_ln_shift * (1 - memory) / memory` per window
//! (≈ 3.3 % per 30 min with the defaults) is absorbed as legitimate change.

use serde::{Deserialize, Serialize};
use statrs::function::erf::erfc;

use crate::{Error, log_summary::LogSummary};

/// Knobs of the long-term detector.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LongTermConfig {
    /// Significance level of the one-sided z-test.
    pub alpha: f64,
    /// Minimal material rise of the mean ln RTT (0.1 ≈ +10.5 % geometric mean).
    pub min_ln_shift: f64,
    /// Valid samples a long window needs to be fitted or tested.
    pub min_samples: u64,
    /// Weight of the previous baseline when a normal window is pooled into it
    /// (0 = baseline is the last normal window; must be < 1).
    pub memory: f64,
    /// Floor of the baseline σ (ln units), so constant RTTs give a finite z.
    pub min_sigma: f64,
}

impl Default for LongTermConfig {
    fn default() -> Self {
        Self {
            alpha: 1e-3,
            min_ln_shift: 0.1,
            min_samples: 30,
            memory: 0.75,
            min_sigma: 0.01,
        }
    }
}

impl LongTermConfig {
    /// Rejects out-of-range settings.
    pub fn validate(&self) -> Result<(), Error> {
        let checks = [
            ("alpha", self.alpha > 0.0 && self.alpha < 1.0),
            (
                "min_ln_shift",
                self.min_ln_shift.is_finite() && self.min_ln_shift >= 0.0,
            ),
            ("min_samples", self.min_samples >= 2),
            ("memory", (0.0..1.0).contains(&self.memory)),
            (
                "min_sigma",
                self.min_sigma.is_finite() && self.min_sigma > 0.0,
            ),
        ];
        match checks.iter().find(|(_, ok)| !ok) {
            Some((name, _)) => Err(Error::InvalidConfig(format!(
                "long-term {name} out of range in {self:?}"
            ))),
            None => Ok(()),
        }
    }
}

/// Log-normal parameters: ln RTT ~ N(mu, sigma²), RTT in ns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LogNormalFit {
    /// Mean of ln RTT (exp(mu) is the median RTT in ns).
    pub mu: f64,
    /// Standard deviation of ln RTT (MLE, floored at `min_sigma`).
    pub sigma: f64,
    /// Effective number of samples behind the fit.
    pub weight: f64,
}

/// Result of one z-test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ZTest {
    /// Baseline the window was tested against.
    pub baseline: LogNormalFit,
    /// Mean ln RTT of the tested window.
    pub window_mu: f64,
    /// `window_mu - baseline.mu`.
    pub ln_shift: f64,
    /// z statistic.
    pub z: f64,
    /// One-sided p-value P(Z > z).
    pub p_value: f64,
    /// `p_value < alpha && ln_shift > min_ln_shift`.
    pub anomaly: bool,
}

/// What closing a long window did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum LongTermVerdict {
    /// No baseline existed: this window became it.
    Fitted(LogNormalFit),
    /// The window was tested (and pooled into the baseline if normal).
    Tested(ZTest),
}

impl LongTermVerdict {
    /// True when the window was tested and found anomalous.
    pub fn is_anomaly(&self) -> bool {
        matches!(self, Self::Tested(t) if t.anomaly)
    }
}

/// Weighted sufficient statistics of the baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pooled {
    weight: f64,
    sum_ln: f64,
    sum_ln2: f64,
}

impl Pooled {
    fn fit(&self, min_sigma: f64) -> LogNormalFit {
        let mu = self.sum_ln / self.weight;
        let var = (self.sum_ln2 / self.weight - mu * mu).max(0.0);
        LogNormalFit {
            mu,
            sigma: var.sqrt().max(min_sigma),
            weight: self.weight,
        }
    }
}

/// Long-term state of one RNIC pair: the pooled baseline (24 bytes).
#[derive(Debug, Clone)]
pub struct LongTermDetector {
    config: LongTermConfig,
    baseline: Option<Pooled>,
}

impl LongTermDetector {
    /// A detector without a baseline (the first long window will fit it).
    pub fn new(config: LongTermConfig) -> Result<Self, Error> {
        config.validate()?;
        Ok(Self {
            config,
            baseline: None,
        })
    }

    /// The current baseline fit, if any.
    pub fn baseline(&self) -> Option<LogNormalFit> {
        self.baseline.map(|b| b.fit(self.config.min_sigma))
    }

    /// Forgets the baseline (operator accepted a new latency level).
    pub fn reset(&mut self) {
        self.baseline = None;
    }

    /// Fits or tests one closed long window. A window with fewer than
    /// `min_samples` valid samples is [`Error::TooFewSamples`] and changes nothing.
    pub fn observe(&mut self, window: &LogSummary) -> Result<LongTermVerdict, Error> {
        if window.count < self.config.min_samples {
            return Err(Error::TooFewSamples {
                have: window.count,
                need: self.config.min_samples,
            });
        }
        let pooled_window = Pooled {
            weight: window.count as f64,
            sum_ln: window.sum_ln,
            sum_ln2: window.sum_ln2,
        };
        let Some(base) = self.baseline else {
            self.baseline = Some(pooled_window);
            return Ok(LongTermVerdict::Fitted(
                pooled_window.fit(self.config.min_sigma),
            ));
        };
        let baseline = base.fit(self.config.min_sigma);
        let n = window.count as f64;
        let window_mu = window.sum_ln / n;
        let ln_shift = window_mu - baseline.mu;
        let z = ln_shift / (baseline.sigma / n.sqrt());
        let p_value = 0.5 * erfc(z / std::f64::consts::SQRT_2);
        let anomaly = p_value < self.config.alpha && ln_shift > self.config.min_ln_shift;
        if !anomaly {
            let m = self.config.memory;
            self.baseline = Some(Pooled {
                weight: base.weight * m + pooled_window.weight,
                sum_ln: base.sum_ln * m + pooled_window.sum_ln,
                sum_ln2: base.sum_ln2 * m + pooled_window.sum_ln2,
            });
        }
        Ok(LongTermVerdict::Tested(ZTest {
            baseline,
            window_mu,
            ln_shift,
            z,
            p_value,
            anomaly,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic samples with exact ln mean `mu` and ln std `sigma`:
    /// alternating exp(mu ± sigma).
    fn summary(mu: f64, sigma: f64, n: usize) -> LogSummary {
        let mut s = LogSummary::default();
        for i in 0..n {
            let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
            s.push((mu + sign * sigma).exp());
        }
        s
    }

    #[test]
    fn first_window_fits_mle() {
        let mut det = LongTermDetector::new(LongTermConfig::default()).unwrap();
        let v = det.observe(&summary(10.0, 0.2, 1000)).unwrap();
        let LongTermVerdict::Fitted(fit) = v else {
            panic!("{v:?}")
        };
        assert!(
            (fit.mu - 10.0).abs() < 1e-9 && (fit.sigma - 0.2).abs() < 1e-9,
            "{fit:?}"
        );
        assert!(!v.is_anomaly());
    }

    #[test]
    fn material_rise_fires_and_does_not_refit() {
        let mut det = LongTermDetector::new(LongTermConfig::default()).unwrap();
        det.observe(&summary(10.0, 0.2, 1000)).unwrap();
        let v = det.observe(&summary(10.3, 0.2, 1000)).unwrap();
        let LongTermVerdict::Tested(t) = v else {
            panic!("{v:?}")
        };
        assert!(t.anomaly && t.z > 40.0 && t.p_value < 1e-100, "{t:?}");
        assert_eq!(
            det.baseline().unwrap().mu,
            10.0,
            "anomalous windows never refit"
        );
        assert!(det.observe(&summary(10.3, 0.2, 1000)).unwrap().is_anomaly());
    }

    #[test]
    fn significant_but_immaterial_drift_is_pooled() {
        let mut det = LongTermDetector::new(LongTermConfig::default()).unwrap();
        det.observe(&summary(10.0, 0.2, 100_000)).unwrap();
        let v = det.observe(&summary(10.05, 0.2, 100_000)).unwrap();
        let LongTermVerdict::Tested(t) = v else {
            panic!("{v:?}")
        };
        assert!(t.p_value < 1e-10 && !t.anomaly, "{t:?}");
        let mu = det.baseline().unwrap().mu;
        assert!(mu > 10.02 && mu < 10.03, "pooled with memory 0.75: {mu}");
    }

    #[test]
    fn drop_in_latency_is_not_anomalous() {
        let mut det = LongTermDetector::new(LongTermConfig::default()).unwrap();
        det.observe(&summary(10.0, 0.2, 1000)).unwrap();
        let LongTermVerdict::Tested(t) = det.observe(&summary(9.0, 0.2, 1000)).unwrap() else {
            panic!()
        };
        assert!(!t.anomaly && t.p_value > 0.99, "{t:?}");
    }

    #[test]
    fn too_few_samples_and_bad_config_are_errors() {
        let mut det = LongTermDetector::new(LongTermConfig::default()).unwrap();
        let mut s = LogSummary::default();
        s.extend(&[f64::NAN, -1.0, 0.0, f64::INFINITY, 1000.0]);
        assert_eq!((s.count, s.rejected), (1, 4));
        assert_eq!(
            det.observe(&s),
            Err(Error::TooFewSamples { have: 1, need: 30 })
        );
        assert_eq!(det.baseline(), None);
        for cfg in [
            LongTermConfig {
                alpha: 0.0,
                ..Default::default()
            },
            LongTermConfig {
                memory: 1.0,
                ..Default::default()
            },
            LongTermConfig {
                min_sigma: f64::NAN,
                ..Default::default()
            },
        ] {
            assert!(matches!(
                LongTermDetector::new(cfg),
                Err(Error::InvalidConfig(_))
            ));
        }
    }

    #[test]
    fn constant_rtts_give_finite_statistics() {
        let mut det = LongTermDetector::new(LongTermConfig::default()).unwrap();
        det.observe(&summary(10.0, 0.0, 100)).unwrap();
        let LongTermVerdict::Tested(t) = det.observe(&summary(10.0, 0.0, 100)).unwrap() else {
            panic!()
        };
        assert!(
            t.z.is_finite() && t.p_value.is_finite() && !t.anomaly,
            "{t:?}"
        );
    }
}
