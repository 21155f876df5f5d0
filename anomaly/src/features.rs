//! The 7-number summary of one RNIC pair's RTTs in one short window
//! (SkeletonHunter §5.2: p25, p50, p75, min, mean, std, max).

use serde::{Deserialize, Serialize};

use crate::Error;

/// Number of features per window.
pub const FEATURE_DIM: usize = 7;

/// Feature names, in [`WindowFeatures::to_array`] order (for reports and errors).
pub const FEATURE_NAMES: [&str; FEATURE_DIM] = ["p25", "p50", "p75", "min", "mean", "std", "max"];

/// Latency distribution of one window, all in nanoseconds. The short-term
/// detector compares these vectors instead of raw samples, so a pair's history
/// costs 56 bytes per window whatever the probe rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowFeatures {
    /// 25th percentile.
    pub p25: f64,
    /// Median.
    pub p50: f64,
    /// 75th percentile.
    pub p75: f64,
    /// Smallest sample.
    pub min: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Population standard deviation (0 for a single sample).
    pub std: f64,
    /// Largest sample.
    pub max: f64,
}

/// How many samples of a window were used and how many were skipped as invalid,
/// so the caller can surface broken timestamping instead of losing it silently.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleTally {
    /// Finite, strictly positive samples that entered the statistics.
    pub accepted: u64,
    /// NaN, infinite, zero or negative samples that were skipped.
    pub rejected: u64,
}

/// True for a sample that can enter latency statistics (finite and > 0 ns; the
/// log scale has no place for 0, and a zero network RTT is a timestamp artefact).
pub fn is_valid_rtt(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

impl WindowFeatures {
    /// Features of one window's RTT samples (ns). Invalid samples are skipped
    /// and counted; a window without any valid sample is [`Error::EmptyWindow`].
    /// `scratch` is reused between calls (one buffer can serve every pair), so
    /// steady-state extraction does not allocate.
    pub fn from_samples(
        samples: &[f64],
        scratch: &mut Vec<f64>,
    ) -> Result<(Self, SampleTally), Error> {
        scratch.clear();
        scratch.extend(samples.iter().copied().filter(|&x| is_valid_rtt(x)));
        let tally = SampleTally {
            accepted: scratch.len() as u64,
            rejected: (samples.len() - scratch.len()) as u64,
        };
        if scratch.is_empty() {
            return Err(Error::EmptyWindow {
                rejected: tally.rejected,
            });
        }
        scratch.sort_unstable_by(f64::total_cmp);
        let n = scratch.len() as f64;
        let mean = scratch.iter().sum::<f64>() / n;
        let var = scratch.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        let features = Self {
            p25: quantile_sorted(scratch, 0.25),
            p50: quantile_sorted(scratch, 0.50),
            p75: quantile_sorted(scratch, 0.75),
            min: scratch[0],
            mean,
            std: var.sqrt(),
            max: scratch[scratch.len() - 1],
        };
        Ok((features, tally))
    }

    /// The features as an array in [`FEATURE_NAMES`] order.
    pub fn to_array(&self) -> [f64; FEATURE_DIM] {
        [
            self.p25, self.p50, self.p75, self.min, self.mean, self.std, self.max,
        ]
    }

    /// Checks a vector that did not come from [`Self::from_samples`] (e.g. read
    /// back from storage): every latency feature finite and > 0, std finite and >= 0.
    pub fn validate(&self) -> Result<(), Error> {
        for (name, value) in FEATURE_NAMES.iter().zip(self.to_array()) {
            let ok = if *name == "std" {
                value.is_finite() && value >= 0.0
            } else {
                is_valid_rtt(value)
            };
            if !ok {
                return Err(Error::InvalidFeature { name, value });
            }
        }
        Ok(())
    }
}

/// Linear-interpolation quantile (Hyndman-Fan type 7, numpy's default) of a
/// non-empty sorted slice.
fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(samples: &[f64]) -> Result<(WindowFeatures, SampleTally), Error> {
        WindowFeatures::from_samples(samples, &mut Vec::new())
    }

    #[test]
    fn five_samples_give_exact_quantiles_and_moments() {
        let (f, t) = features(&[50.0, 10.0, 40.0, 20.0, 30.0]).unwrap();
        assert_eq!(
            (f.min, f.p25, f.p50, f.p75, f.max),
            (10.0, 20.0, 30.0, 40.0, 50.0)
        );
        assert_eq!(f.mean, 30.0);
        assert!((f.std - 200.0f64.sqrt()).abs() < 1e-12);
        assert_eq!(
            t,
            SampleTally {
                accepted: 5,
                rejected: 0
            }
        );
    }

    #[test]
    fn one_and_two_samples_are_finite() {
        let (f, _) = features(&[7.0]).unwrap();
        assert_eq!(f.to_array(), [7.0, 7.0, 7.0, 7.0, 7.0, 0.0, 7.0]);
        let (f, _) = features(&[10.0, 20.0]).unwrap();
        assert_eq!((f.p25, f.p50, f.p75), (12.5, 15.0, 17.5));
        assert_eq!(f.std, 5.0);
        f.validate().unwrap();
    }

    #[test]
    fn invalid_samples_are_skipped_and_counted() {
        let (f, t) = features(&[f64::NAN, 100.0, -3.0, f64::INFINITY, 0.0, 300.0]).unwrap();
        assert_eq!(
            t,
            SampleTally {
                accepted: 2,
                rejected: 4
            }
        );
        assert_eq!((f.min, f.max, f.mean), (100.0, 300.0, 200.0));
    }

    #[test]
    fn empty_or_all_invalid_window_is_an_error() {
        assert_eq!(
            features(&[]).unwrap_err(),
            Error::EmptyWindow { rejected: 0 }
        );
        assert_eq!(
            features(&[f64::NAN, f64::NEG_INFINITY, -1.0]).unwrap_err(),
            Error::EmptyWindow { rejected: 3 }
        );
    }

    #[test]
    fn validate_rejects_nan_and_non_positive_latency() {
        let (mut f, _) = features(&[10.0, 20.0]).unwrap();
        f.p50 = f64::NAN;
        assert!(matches!(
            f.validate(),
            Err(Error::InvalidFeature { name: "p50", .. })
        ));
        f.p50 = 15.0;
        f.min = 0.0;
        assert!(matches!(
            f.validate(),
            Err(Error::InvalidFeature { name: "min", .. })
        ));
        f.min = 10.0;
        f.std = -1.0;
        assert!(matches!(
            f.validate(),
            Err(Error::InvalidFeature { name: "std", .. })
        ));
    }
}
