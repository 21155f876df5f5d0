//! STFT features of RNIC throughput series (SkeletonHunter §5.1, Fig. 13).
//!
//! Per RNIC: the frame-averaged STFT magnitude spectrum (Hann window, DC
//! dropped, scaled to unit length so that traffic volume does not dominate),
//! the phase of the iteration frequency relative to the whole task (the burst
//! time shift that orders pipeline stages), how stable that phase is, and how
//! much of the power sits on the iteration frequency and its harmonics.

use std::f64::consts::TAU;

use rustfft::{FftPlanner, num_complex::Complex};

use crate::{Error, Observation};

/// STFT parameters.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FeatureConfig {
    /// Window length in samples; must cover at least two iterations.
    pub window: usize,
    /// Hop between frames in samples.
    pub hop: usize,
    /// Harmonics of the iteration frequency counted as periodic power.
    pub harmonics: usize,
}

impl Default for FeatureConfig {
    fn default() -> Self {
        Self {
            window: 64,
            hop: 16,
            harmonics: 3,
        }
    }
}

/// Features of one RNIC.
#[derive(Debug, Clone, PartialEq)]
pub struct RnicFeatures {
    /// Frame-averaged STFT magnitudes at the iteration frequency and its
    /// harmonics up to Nyquist (the burst shape; noise-only bins left out),
    /// unit length (all zero for a constant series).
    pub spectrum: Vec<f64>,
    /// Phases (radians, in (-pi, pi]) at the iteration frequency and its
    /// first harmonics, relative to the task: the burst time shift. At the
    /// iteration frequency (index 0) a later burst has a smaller phase;
    /// harmonics multiply the shift, sharpening close stages.
    pub phases: Vec<f64>,
    /// Stability of that phase across frames, 0 (random) to 1 (constant).
    pub coherence: f64,
    /// Share of power on the iteration comb divided by the share white noise
    /// would have there: about 1 for noise, well above 1 for burst cycles.
    pub periodicity: f64,
}

/// Features of a task's RNICs, in the order of the observations.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFeatures {
    /// Estimated iteration period in samples (the strongest harmonic-sum
    /// peak; with windows much longer than the period it can come out as a
    /// half or a third of the true period, which still orders the bursts).
    pub period_samples: f64,
    /// Per-RNIC features.
    pub rnics: Vec<RnicFeatures>,
}

impl FeatureConfig {
    /// Checks the parameters against a series length.
    pub fn validate(&self, len: usize) -> Result<(), Error> {
        let window_ok = (8..=1 << 16).contains(&self.window);
        if !window_ok || self.hop == 0 || !(1..=16).contains(&self.harmonics) {
            return Err(Error::InvalidParameter(
                "STFT window must be in 8..=65536, hop >= 1, harmonics in 1..=16".into(),
            ));
        }
        if len < self.window {
            return Err(Error::SeriesTooShort {
                len,
                window: self.window,
            });
        }
        Ok(())
    }
}

/// Computes STFT features. Series must already be validated (equal length,
/// finite, non-negative).
pub fn extract(
    observations: &[Observation],
    config: &FeatureConfig,
) -> Result<TaskFeatures, Error> {
    let len = observations.first().map_or(0, |o| o.bytes.len());
    config.validate(len)?;
    let stft = Stft::new(config, len);
    let spectra: Vec<Vec<f64>> = observations.iter().map(|o| stft.power(&o.bytes)).collect();
    let fundamental = stft.fundamental(&spectra);
    // The iteration frequency itself is always kept (it may sit at Nyquist).
    let harmonics: Vec<f64> = (1..=config.harmonics)
        .map(|h| h as f64 * fundamental)
        .enumerate()
        .filter(|&(i, b)| i == 0 || b < stft.bins() as f64)
        .map(|(_, b)| b)
        .collect();

    // Per-frame coefficients at the iteration frequency and its harmonics,
    // and the task-wide phase of each frame at the iteration frequency (its
    // h-th power cancels the job-wide iteration jitter at harmonic h).
    let coefficients: Vec<Vec<Vec<Complex<f64>>>> = observations
        .iter()
        .map(|o| stft.coefficients(&o.bytes, &harmonics))
        .collect();
    let mut reference = vec![Complex::new(0.0, 0.0); stft.frames];
    for c in &coefficients {
        for (r, x) in reference.iter_mut().zip(&c[0]) {
            if x.norm() > 0.0 {
                *r += x / x.norm();
            }
        }
    }
    let reference: Vec<Complex<f64>> = reference
        .iter()
        .map(|r| {
            if r.norm() > 0.0 {
                r.conj() / r.norm()
            } else {
                *r
            }
        })
        .collect();
    let rnics = spectra
        .iter()
        .zip(&coefficients)
        .map(|(power, coeff)| {
            let aligned: Vec<Complex<f64>> = coeff
                .iter()
                .zip(1..)
                .map(|(frames, h)| {
                    frames
                        .iter()
                        .zip(&reference)
                        .map(|(x, r)| x * r.powi(h))
                        .sum()
                })
                .collect();
            let total: f64 = coeff[0].iter().map(|x| x.norm()).sum();
            let magnitude: Vec<f64> = power.iter().map(|p| p.sqrt()).collect();
            let comb = (1..)
                .map(|h| h as f64 * fundamental)
                .take_while(|&b| b <= stft.bins() as f64)
                .map(|b| Stft::at(&magnitude, b))
                .collect();
            RnicFeatures {
                spectrum: unit(comb),
                phases: aligned.iter().map(|a| a.arg()).collect(),
                coherence: if total > 0.0 {
                    aligned[0].norm() / total
                } else {
                    0.0
                },
                periodicity: stft.periodicity(power, fundamental),
            }
        })
        .collect();
    Ok(TaskFeatures {
        period_samples: config.window as f64 / fundamental,
        rnics,
    })
}

/// The STFT the features are built on, alone: magnitudes of bins
/// `0..=window/2` per frame (frame-major), periodic Hann window, series mean
/// removed, frames `hop` apart without padding, unscaled. Exists so the
/// kernel can be checked and timed against `scipy.signal.stft` (bench crate).
pub fn stft_magnitudes(x: &[f64], config: &FeatureConfig) -> Result<Vec<Vec<f64>>, Error> {
    config.validate(x.len())?;
    let stft = Stft::new(config, x.len());
    let mut frames = Vec::with_capacity(stft.frames);
    stft.for_each_frame(x, |spectrum| {
        frames.push(spectrum[..=stft.bins()].iter().map(|c| c.norm()).collect());
    });
    Ok(frames)
}

/// Scales a vector to unit Euclidean length (zero stays zero).
fn unit(mut v: Vec<f64>) -> Vec<f64> {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// A planned STFT over series of one length.
struct Stft {
    window: Vec<f64>,
    hop: usize,
    frames: usize,
    harmonics: usize,
    fft: std::sync::Arc<dyn rustfft::Fft<f64>>,
}

impl Stft {
    fn new(config: &FeatureConfig, len: usize) -> Self {
        let w = config.window;
        let window = (0..w)
            .map(|n| 0.5 - 0.5 * (TAU * n as f64 / w as f64).cos())
            .collect();
        Self {
            window,
            hop: config.hop,
            frames: (len - w) / config.hop + 1,
            harmonics: config.harmonics,
            fft: FftPlanner::new().plan_fft_forward(w),
        }
    }

    fn bins(&self) -> usize {
        self.window.len() / 2
    }

    /// Windowed, mean-removed frame `f` of `x`.
    fn frame(&self, x: &[f64], f: usize, mean: f64) -> impl Iterator<Item = f64> {
        let start = f * self.hop;
        x[start..start + self.window.len()]
            .iter()
            .zip(&self.window)
            .map(move |(v, w)| (v - mean) * w)
    }

    /// Calls `visit` with the FFT of every windowed, mean-removed frame of
    /// `x` (all `window` bins, frame by frame, one reused buffer).
    fn for_each_frame(&self, x: &[f64], mut visit: impl FnMut(&[Complex<f64>])) {
        let mean = x.iter().sum::<f64>() / x.len() as f64;
        let mut buf = vec![Complex::new(0.0, 0.0); self.window.len()];
        for f in 0..self.frames {
            for (b, v) in buf.iter_mut().zip(self.frame(x, f, mean)) {
                *b = Complex::new(v, 0.0);
            }
            self.fft.process(&mut buf);
            visit(&buf);
        }
    }

    /// Frame-averaged power of bins `1..=window/2`.
    fn power(&self, x: &[f64]) -> Vec<f64> {
        let mut power = vec![0.0; self.bins()];
        self.for_each_frame(x, |spectrum| {
            for (p, c) in power.iter_mut().zip(&spectrum[1..]) {
                *p += c.norm_sqr() / self.frames as f64;
            }
        });
        power
    }

    /// STFT coefficients at (fractional) bins, per bin and frame, with the
    /// phase referred to the series start so that frames line up.
    fn coefficients(&self, x: &[f64], bins: &[f64]) -> Vec<Vec<Complex<f64>>> {
        let mean = x.iter().sum::<f64>() / x.len() as f64;
        let w = self.window.len() as f64;
        bins.iter()
            .map(|&bin| {
                let twiddle: Vec<Complex<f64>> = (0..self.window.len())
                    .map(|n| Complex::from_polar(1.0, -TAU * bin * n as f64 / w))
                    .collect();
                (0..self.frames)
                    .map(|f| {
                        let start =
                            Complex::from_polar(1.0, -TAU * bin * (f * self.hop) as f64 / w);
                        let sum: Complex<f64> = self
                            .frame(x, f, mean)
                            .zip(&twiddle)
                            .map(|(v, t)| t * v)
                            .sum();
                        sum * start
                    })
                    .collect()
            })
            .collect()
    }

    /// Interpolated value of a per-bin quantity (index 0 = bin 1) at a
    /// fractional bin.
    fn at(values: &[f64], bin: f64) -> f64 {
        let i = bin - 1.0;
        let lo = i.floor().max(0.0) as usize;
        let hi = (lo + 1).min(values.len() - 1);
        let frac = (i - lo as f64).clamp(0.0, 1.0);
        values[lo] * (1.0 - frac) + values[hi] * frac
    }

    /// Iteration frequency in (fractional) bins: the harmonic-sum peak of the
    /// task's mean unit magnitude spectrum.
    fn fundamental(&self, spectra: &[Vec<f64>]) -> f64 {
        let bins = self.bins();
        let mut mean = vec![0.0; bins];
        for s in spectra {
            let unit_mag = unit(s.iter().map(|p| p.sqrt()).collect());
            mean.iter_mut().zip(unit_mag).for_each(|(m, v)| *m += v);
        }
        let mut best = (1.0, f64::MIN);
        let mut f0 = 1.0;
        while f0 <= bins as f64 {
            let score: f64 = (1..=self.harmonics)
                .map(|h| h as f64 * f0)
                .filter(|&b| b <= bins as f64)
                .map(|b| Self::at(&mean, b))
                .sum();
            if score > best.1 {
                best = (f0, score);
            }
            f0 += 0.02;
        }
        best.0
    }

    /// Comb enrichment: power within one bin of the first harmonics over the
    /// share of bins they cover.
    fn periodicity(&self, power: &[f64], fundamental: f64) -> f64 {
        let bins = self.bins();
        let mut comb = vec![false; bins];
        for h in 1..=self.harmonics {
            let centre = (h as f64 * fundamental).round() as isize;
            for b in centre - 1..=centre + 1 {
                if (1..=bins as isize).contains(&b) {
                    comb[b as usize - 1] = true;
                }
            }
        }
        let total: f64 = power.iter().sum();
        let on_comb: f64 = power
            .iter()
            .zip(&comb)
            .filter(|(_, c)| **c)
            .map(|(p, _)| p)
            .sum();
        let share = comb.iter().filter(|c| **c).count() as f64 / bins as f64;
        if total > 0.0 {
            on_comb / total / share
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Endpoint;

    /// Bursts of 3 samples every `period` samples starting at `offset`.
    fn bursts(len: usize, period: usize, offset: usize) -> Vec<f64> {
        (0..len)
            .map(|k| {
                if (k + period - offset % period) % period < 3 {
                    100.0
                } else {
                    1.0
                }
            })
            .collect()
    }

    fn observe(series: Vec<Vec<f64>>) -> Vec<Observation> {
        series
            .into_iter()
            .enumerate()
            .map(|(i, bytes)| Observation {
                endpoint: Endpoint {
                    id: i as u32,
                    host: i as u32,
                    rail: 0,
                },
                bytes,
            })
            .collect()
    }

    #[test]
    fn later_bursts_have_smaller_phase_and_period_is_found() {
        let obs = observe(vec![
            bursts(256, 16, 0),
            bursts(256, 16, 2),
            bursts(256, 16, 4),
        ]);
        let f = extract(&obs, &FeatureConfig::default()).expect("valid series");
        assert!(
            (f.period_samples - 16.0).abs() < 0.2,
            "{}",
            f.period_samples
        );
        let p: Vec<f64> = f.rnics.iter().map(|r| r.phases[0]).collect();
        assert!(p[0] > p[1] && p[1] > p[2], "{p:?}");
        // 2 samples of a 16-sample period = 45 degrees.
        assert!((p[0] - p[1] - TAU / 8.0).abs() < 0.05, "{p:?}");
        assert!(
            f.rnics
                .iter()
                .all(|r| r.coherence > 0.99 && r.periodicity > 2.0)
        );
    }

    #[test]
    fn stft_of_a_tone_peaks_at_its_bin() {
        // cos at bin 4 of a 64-sample window: |X[4]| = sum(hann) / 2 = 16 in
        // every frame, the other bins (but the leaking neighbours) ~0.
        let x: Vec<f64> = (0..256)
            .map(|n| (TAU * 4.0 * n as f64 / 64.0).cos())
            .collect();
        let frames = stft_magnitudes(&x, &FeatureConfig::default()).expect("valid series");
        assert_eq!(frames.len(), (256 - 64) / 16 + 1);
        for f in &frames {
            assert_eq!(f.len(), 33);
            assert!((f[4] - 16.0).abs() < 1e-9, "{}", f[4]);
            assert!((f[3] - 8.0).abs() < 1e-9 && f[6] < 1e-9, "{f:?}");
        }
        assert!(stft_magnitudes(&x[..10], &FeatureConfig::default()).is_err());
    }

    #[test]
    fn scale_does_not_change_the_spectrum() {
        let small = bursts(128, 16, 0);
        let big: Vec<f64> = small.iter().map(|v| v * 1000.0).collect();
        let f =
            extract(&observe(vec![small, big]), &FeatureConfig::default()).expect("valid series");
        let diff: f64 = f.rnics[0]
            .spectrum
            .iter()
            .zip(&f.rnics[1].spectrum)
            .map(|(a, b)| (a - b).abs())
            .sum();
        assert!(diff < 1e-9, "{diff}");
    }

    #[test]
    fn white_noise_is_not_periodic() {
        // Deterministic pseudo-random series (LCG), no cycle within 512 samples.
        let mut state = 12345u64;
        let noise: Vec<Vec<f64>> = (0..4)
            .map(|_| {
                (0..512)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (state >> 33) as f64
                    })
                    .collect()
            })
            .collect();
        let f = extract(&observe(noise), &FeatureConfig::default()).expect("valid series");
        assert!(
            f.rnics.iter().all(|r| r.periodicity < 1.5),
            "{:?}",
            f.rnics.iter().map(|r| r.periodicity).collect::<Vec<_>>()
        );
    }
}
