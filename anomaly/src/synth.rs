//! Deterministic synthetic RTTs of one RNIC pair, window by window, with the
//! ground truth of when latency became anomalous. For tests, benches and
//! `rocemesh-lab eval --suite latency`; windows are time-compressed (a window is
//! `samples_per_window` probes, whatever its nominal 30 s).
//!
//! Sample model: `ln rtt = ln base + level(w) + jitter(w) + sigma * N(0,1)`,
//! with `jitter(w) ~ N(0, 0.01)` per window (route/queue wobble). On top:
//! heavy-tail spikes (a sample x U(3, 10) with probability `spike_prob`);
//! periodic burst congestion (whole windows: every `period` windows, for
//! `length` windows, a share `fraction` of the probes congested x `factor`:
//! a training iteration's all-reduce occupies a fixed duty cycle of every
//! iteration and probes are evenly spaced, so the share is stratified,
//! `floor(fraction * n + U(0,1))` probes at random positions, not binomial);
//! and at most
//! one fault: a step (`level = ln factor` from `onset`) or a creep
//! (`level = (w - onset + 1) ln(1 + rate)`). RTTs are rounded to whole ns.

use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::{Deserialize, Serialize};

/// Families of pairs in the synthetic suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PairKind {
    /// Log-normal noise and tail spikes only.
    Stable,
    /// Stable plus periodic burst congestion.
    Bursty,
    /// A step increase at `onset`.
    Step,
    /// Burst congestion and a step increase.
    BurstyStep,
    /// A slow multiplicative creep from `onset`.
    Creep,
}

impl PairKind {
    /// Every kind, in report order.
    pub const ALL: [PairKind; 5] = [
        PairKind::Stable,
        PairKind::Bursty,
        PairKind::Step,
        PairKind::BurstyStep,
        PairKind::Creep,
    ];
}

/// Periodic congestion episodes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    /// Windows from one episode's start to the next.
    pub period: usize,
    /// Windows an episode lasts.
    pub length: usize,
    /// Window index (mod period) at which episodes start.
    pub phase: usize,
    /// Probability that a probe in an episode window is congested.
    pub fraction: f64,
    /// RTT multiplier of a congested probe.
    pub factor: f64,
}

impl Burst {
    fn active(&self, w: usize) -> bool {
        (w + self.period - self.phase % self.period) % self.period < self.length
    }
}

/// The injected latency fault.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Fault {
    /// RTT x `factor` from window `onset` on.
    Step {
        /// First affected window.
        onset: usize,
        /// Multiplier.
        factor: f64,
    },
    /// RTT x (1 + `rate`) more every window from `onset` on.
    Creep {
        /// First affected window.
        onset: usize,
        /// Relative growth per window.
        rate: f64,
    },
}

impl Fault {
    /// First anomalous window.
    pub fn onset(&self) -> usize {
        match *self {
            Fault::Step { onset, .. } | Fault::Creep { onset, .. } => onset,
        }
    }

    fn ln_level(&self, w: usize) -> f64 {
        match *self {
            Fault::Step { onset, factor } if w >= onset => factor.ln(),
            Fault::Creep { onset, rate } if w >= onset => (w - onset + 1) as f64 * rate.ln_1p(),
            _ => 0.0,
        }
    }
}

/// Everything that defines one synthetic pair.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairSpec {
    /// Family.
    pub kind: PairKind,
    /// Median RTT without congestion (ns).
    pub base_ns: f64,
    /// Standard deviation of ln RTT.
    pub sigma: f64,
    /// Probability that a probe is a heavy-tail spike.
    pub spike_prob: f64,
    /// Periodic congestion, if any.
    pub burst: Option<Burst>,
    /// Injected fault, if any.
    pub fault: Option<Fault>,
    /// Seed of the sample stream.
    pub seed: u64,
}

impl PairSpec {
    /// A random pair of `kind` (bursts congest 20-60 % of an episode's
    /// probes: above ~70 % the min and p25 come from a handful of
    /// uncongested probes and a recurring burst can look new to the
    /// short-term gate, a limit stated in the crate report), its fault placed so that a long-term baseline
    /// exists first (onset in long window 1 or later) and, for a creep, so
    /// that the long window after the onset's ends within `windows`.
    pub fn random(
        kind: PairKind,
        windows: usize,
        windows_per_long: usize,
        rng: &mut StdRng,
    ) -> Self {
        let bursty = matches!(kind, PairKind::Bursty | PairKind::BurstyStep);
        let burst = bursty.then(|| {
            let period = rng.random_range(3..=10);
            Burst {
                period,
                length: if period >= 6 {
                    rng.random_range(1..=2)
                } else {
                    1
                },
                phase: rng.random_range(0..period),
                fraction: rng.random_range(0.2..0.6),
                factor: rng.random_range(1.5..3.0),
            }
        });
        let wpl = windows_per_long.max(1);
        let fault = match kind {
            PairKind::Stable | PairKind::Bursty => None,
            PairKind::Step | PairKind::BurstyStep => Some(Fault::Step {
                onset: rng.random_range(wpl..windows.saturating_sub(2).max(wpl + 1)),
                factor: rng.random_range(1.3..3.0),
            }),
            PairKind::Creep => Some(Fault::Creep {
                onset: rng.random_range(wpl..windows.saturating_sub(wpl).max(wpl + 1)),
                rate: rng.random_range(0.005..0.015),
            }),
        };
        Self {
            kind,
            base_ns: rng.random_range(8_000.0..60_000.0),
            sigma: rng.random_range(0.08..0.25),
            spike_prob: rng.random_range(0.0..0.01),
            burst,
            fault,
            seed: rng.random(),
        }
    }

    /// The sample stream of this pair.
    pub fn generator(&self, samples_per_window: usize) -> PairGenerator {
        PairGenerator {
            spec: *self,
            samples_per_window,
            rng: StdRng::seed_from_u64(self.seed),
            next_window: 0,
        }
    }
}

/// Produces a pair's windows in order; the same spec always yields the same samples.
#[derive(Debug, Clone)]
pub struct PairGenerator {
    spec: PairSpec,
    samples_per_window: usize,
    rng: StdRng,
    next_window: usize,
}

impl PairGenerator {
    /// Fills `out` with the next window's RTTs (ns) and returns its index.
    pub fn next_window(&mut self, out: &mut Vec<f64>) -> usize {
        let w = self.next_window;
        self.next_window += 1;
        let s = &self.spec;
        let congested = s.burst.filter(|b| b.active(w));
        let center = s.base_ns.ln()
            + s.fault.map_or(0.0, |f| f.ln_level(w))
            + 0.01 * standard_normal(&mut self.rng);
        let n = self.samples_per_window;
        let mut to_congest = congested.map_or(0, |b| {
            ((b.fraction * n as f64 + self.rng.random::<f64>()).floor() as usize).min(n)
        });
        let factor_ln = congested.map_or(0.0, |b| b.factor.ln());
        out.clear();
        for left in (1..=n).rev() {
            let mut ln = center + s.sigma * standard_normal(&mut self.rng);
            // Selection sampling: each remaining probe is congested with
            // probability (still to congest) / (probes left).
            if to_congest > 0 && self.rng.random_range(0..left) < to_congest {
                to_congest -= 1;
                ln += factor_ln;
            }
            if self.rng.random_bool(s.spike_prob) {
                ln += self.rng.random_range(3.0f64..10.0).ln();
            }
            out.push(ln.exp().round().max(1.0));
        }
        w
    }
}

/// Box-Muller standard normal (rand 0.9 has no Normal without rand_distr).
fn standard_normal(rng: &mut StdRng) -> f64 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_samples_and_median_near_base() {
        let mut rng = StdRng::seed_from_u64(7);
        let spec = PairSpec::random(PairKind::Stable, 100, 20, &mut rng);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let (mut ga, mut gb) = (spec.generator(2000), spec.generator(2000));
        ga.next_window(&mut a);
        gb.next_window(&mut b);
        assert_eq!(a, b);
        a.sort_by(f64::total_cmp);
        let ratio = a[1000] / spec.base_ns;
        assert!((0.95..1.05).contains(&ratio), "{ratio}");
    }

    #[test]
    fn step_raises_the_level_from_onset() {
        let spec = PairSpec {
            kind: PairKind::Step,
            base_ns: 10_000.0,
            sigma: 0.1,
            spike_prob: 0.0,
            burst: None,
            fault: Some(Fault::Step {
                onset: 2,
                factor: 2.0,
            }),
            seed: 1,
        };
        let mut g = spec.generator(500);
        let mut out = Vec::new();
        let mut medians = Vec::new();
        for _ in 0..4 {
            g.next_window(&mut out);
            out.sort_by(f64::total_cmp);
            medians.push(out[250]);
        }
        assert!(
            medians[1] < 11_000.0 && medians[2] > 18_000.0,
            "{medians:?}"
        );
    }

    #[test]
    fn bursts_follow_the_period() {
        let b = Burst {
            period: 4,
            length: 1,
            phase: 2,
            fraction: 0.5,
            factor: 2.0,
        };
        let active: Vec<usize> = (0..12).filter(|&w| b.active(w)).collect();
        assert_eq!(active, [2, 6, 10]);
    }
}
