//! Deterministic synthetic throughput of a DP x TP x PP training job, for
//! tests, benches and simulators (it only makes series; it sends nothing).
//!
//! Layout: global rank `r = t + TP * (p + PP * d)` for TP rank `t`, pipeline
//! stage `p` and DP replica `d`; host `r / rnics_per_host`, rail
//! `r % rnics_per_host`, RNIC id `first_id + r`. Each replica must fill whole
//! hosts (`TP * PP` a multiple of `rnics_per_host`), which is what keeps the
//! RNICs of one host in one replica (SkeletonHunter Eq. 3).
//!
//! Per iteration `i` (start `i * period` plus a job-wide jitter): stage `p`
//! sends activations to stage `p + 1` at `p * pipeline_offset`, gets
//! gradients back in reverse stage order from `period / 3`, and all-reduces
//! its gradients with its DP group (ring: `2 (DP-1)/DP` of the bucket per
//! RNIC) from `2 period / 3 + p * pipeline_offset`: stage `k` bursts before
//! stage `k + 1`. Transfers between GPUs of one host use NVLink and add no
//! RNIC bytes; a transfer across hosts and rails leaves through the sender
//! host's RNIC on the receiver's rail (PXN). Each transfer has its own timing jitter, seen by both of its
//! endpoints; every sample gets Gaussian noise.

use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::{Endpoint, Error, Observation, pairs::Pair};

/// Parameters of a synthetic job.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SyntheticJob {
    /// Tensor-parallel degree.
    pub tp: usize,
    /// Pipeline-parallel degree (stages).
    pub pp: usize,
    /// Data-parallel degree (replicas).
    pub dp: usize,
    /// RNICs (= GPUs) per host.
    pub rnics_per_host: usize,
    /// Samples per series.
    pub samples: usize,
    /// Sampling interval in seconds.
    pub interval_s: f64,
    /// Training iteration period in seconds.
    pub period_s: f64,
    /// Delay between the bursts of consecutive pipeline stages, seconds.
    pub pipeline_offset_s: f64,
    /// Gradient bucket all-reduced per GPU per iteration, bytes.
    pub allreduce_bytes: f64,
    /// Activations (and gradients) passed between stages per iteration, bytes.
    pub activation_bytes: f64,
    /// Duration of an all-reduce burst, seconds (activation bursts last a third).
    pub burst_s: f64,
    /// Noise standard deviation as a fraction of the peak bytes per sample.
    pub noise: f64,
    /// Standard deviation of the job-wide iteration start, seconds.
    pub iteration_jitter_s: f64,
    /// Standard deviation of each transfer's own start, seconds.
    pub transfer_jitter_s: f64,
    /// RNIC id of global rank 0.
    pub first_id: u32,
    /// Seed: equal parameters and seed give equal series.
    pub seed: u64,
}

/// Series of a synthetic job and the structure that produced them.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticTrace {
    /// One observation per RNIC, in rank order.
    pub observations: Vec<Observation>,
    /// True DP groups (same TP rank and stage across replicas), each sorted.
    pub groups: Vec<Vec<u32>>,
    /// Pairs that really exchange bytes over the network, sorted.
    pub talking_pairs: Vec<Pair>,
}

impl SyntheticJob {
    /// A job with the given parallelism and defaults for everything else:
    /// 8 RNICs per host, 240 one-second samples, 10 s iterations, 0.4 s per
    /// stage, 5 % noise and 0.2 s / 0.1 s jitter.
    pub fn new(tp: usize, pp: usize, dp: usize) -> Self {
        Self {
            tp,
            pp,
            dp,
            rnics_per_host: 8,
            samples: 240,
            interval_s: 1.0,
            period_s: 10.0,
            pipeline_offset_s: 0.4,
            allreduce_bytes: 4e9,
            activation_bytes: 5e8,
            burst_s: 1.5,
            noise: 0.05,
            iteration_jitter_s: 0.2,
            transfer_jitter_s: 0.1,
            first_id: 1000,
            seed: 1,
        }
    }

    /// The 512-GPU dense job of SkeletonHunter Fig. 8: TP=8, PP=8, DP=8 on
    /// 64 hosts of 8 RNICs.
    pub fn fig8() -> Self {
        Self::new(8, 8, 8)
    }

    /// Total RNICs of the job.
    pub fn rnics(&self) -> usize {
        self.tp * self.pp * self.dp
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |what: &str| Err(Error::InvalidParameter(what.to_string()));
        if self.tp == 0 || self.pp == 0 || self.dp == 0 || self.rnics_per_host == 0 {
            return bad("tp, pp, dp and rnics_per_host must be >= 1");
        }
        if !(self.tp * self.pp).is_multiple_of(self.rnics_per_host) {
            return bad("tp * pp must be a multiple of rnics_per_host (replicas fill whole hosts)");
        }
        if self.rnics() > 1 << 20 || self.samples == 0 || self.samples > 1 << 20 {
            return bad("rnics and samples must be in 1..=2^20");
        }
        let positive = [self.interval_s, self.period_s, self.burst_s];
        let non_negative = [
            self.pipeline_offset_s,
            self.allreduce_bytes,
            self.activation_bytes,
            self.noise,
            self.iteration_jitter_s,
            self.transfer_jitter_s,
        ];
        if positive.iter().any(|v| !v.is_finite() || *v <= 0.0)
            || non_negative.iter().any(|v| !v.is_finite() || *v < 0.0)
        {
            return bad("times must be finite and > 0, sizes, noise and jitter finite and >= 0");
        }
        Ok(())
    }

    /// Renders the series. Deterministic in `self` (including the seed).
    pub fn generate(&self) -> Result<SyntheticTrace, Error> {
        self.validate()?;
        let mut job = Render::new(self);
        let span = self.samples as f64 * self.interval_s;
        let iterations = (span / self.period_s).ceil() as i64 + 1;
        for i in -1..iterations {
            job.iteration(i as f64 * self.period_s);
            job.record_talking = false;
        }
        job.add_noise();
        Ok(job.finish())
    }
}

/// Work state of one generation.
struct Render<'a> {
    job: &'a SyntheticJob,
    rng: StdRng,
    series: Vec<Vec<f64>>,
    talking: Vec<Pair>,
    /// Every iteration repeats the same transfers; pairs are noted once.
    record_talking: bool,
}

impl<'a> Render<'a> {
    fn new(job: &'a SyntheticJob) -> Self {
        Self {
            job,
            rng: StdRng::seed_from_u64(job.seed),
            series: vec![vec![0.0; job.samples]; job.rnics()],
            talking: Vec::new(),
            record_talking: true,
        }
    }

    fn rank(&self, t: usize, p: usize, d: usize) -> usize {
        t + self.job.tp * (p + self.job.pp * d)
    }

    fn host(&self, rank: usize) -> usize {
        rank / self.job.rnics_per_host
    }

    /// RNIC that carries `from`'s bytes to `to` across hosts: the one on
    /// `from`'s host and `to`'s rail (NCCL's PXN: NVLink to the GPU on the
    /// right rail, then the network stays on that rail).
    fn relay(&self, from: usize, to: usize) -> usize {
        let rph = self.job.rnics_per_host;
        self.host(from) * rph + to % rph
    }

    fn gaussian(&mut self) -> f64 {
        // Box-Muller; 1 - u keeps the logarithm finite.
        let u: f64 = self.rng.random();
        let v: f64 = self.rng.random();
        (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    fn iteration(&mut self, nominal_start: f64) {
        let j = self.job;
        let t0 = nominal_start + j.iteration_jitter_s * self.gaussian();
        let activation_s = j.burst_s / 3.0;
        for d in 0..j.dp {
            for p in 0..j.pp.saturating_sub(1) {
                for t in 0..j.tp {
                    let (a, b) = (self.rank(t, p, d), self.rank(t, p + 1, d));
                    let forward = t0 + p as f64 * j.pipeline_offset_s;
                    let backward =
                        t0 + j.period_s / 3.0 + (j.pp - 2 - p) as f64 * j.pipeline_offset_s;
                    for (start, from, to) in [(forward, a, b), (backward, b, a)] {
                        let start = start + j.transfer_jitter_s * self.gaussian();
                        let via = self.relay(from, to);
                        self.transfer(&[via, to], start, activation_s, j.activation_bytes);
                    }
                }
            }
        }
        if j.dp < 2 {
            return;
        }
        let ring_bytes = j.allreduce_bytes * 2.0 * (j.dp - 1) as f64 / j.dp as f64;
        for p in 0..j.pp {
            for t in 0..j.tp {
                let members: Vec<usize> = (0..j.dp).map(|d| self.rank(t, p, d)).collect();
                let start = t0
                    + 2.0 * j.period_s / 3.0
                    + p as f64 * j.pipeline_offset_s
                    + j.transfer_jitter_s * self.gaussian();
                self.transfer(&members, start, j.burst_s, ring_bytes);
            }
        }
    }

    /// Adds `bytes` to every member RNIC over `[start, start + duration)` if
    /// the members span more than one host (otherwise NVLink carries it).
    fn transfer(&mut self, members: &[usize], start: f64, duration: f64, bytes: f64) {
        let first_host = self.host(members[0]);
        if members.iter().all(|&m| self.host(m) == first_host) {
            return;
        }
        for &m in members {
            add_burst(
                &mut self.series[m],
                self.job.interval_s,
                start,
                duration,
                bytes,
            );
        }
        if !self.record_talking {
            return;
        }
        for (i, &a) in members.iter().enumerate() {
            for &b in &members[i + 1..] {
                if self.host(a) != self.host(b) {
                    let id = |r: usize| self.job.first_id + r as u32;
                    self.talking.push(crate::pairs::ordered(id(a), id(b)));
                }
            }
        }
    }

    fn add_noise(&mut self) {
        let j = self.job;
        let peak = j.allreduce_bytes * 2.0 / j.burst_s * j.interval_s;
        let sigma = j.noise * peak;
        for s in 0..self.series.len() {
            for k in 0..j.samples {
                let noisy = self.series[s][k] + sigma * self.gaussian();
                self.series[s][k] = noisy.max(0.0);
            }
        }
    }

    fn finish(mut self) -> SyntheticTrace {
        let j = self.job;
        let id = |r: usize| j.first_id + r as u32;
        let observations = self
            .series
            .into_iter()
            .enumerate()
            .map(|(r, bytes)| Observation {
                endpoint: Endpoint {
                    id: id(r),
                    host: (r / j.rnics_per_host) as u32,
                    rail: (r % j.rnics_per_host) as u16,
                },
                bytes,
            })
            .collect();
        let mut groups = Vec::with_capacity(j.tp * j.pp);
        for p in 0..j.pp {
            for t in 0..j.tp {
                groups.push((0..j.dp).map(|d| id(t + j.tp * (p + j.pp * d))).collect());
            }
        }
        self.talking.sort_unstable();
        self.talking.dedup();
        SyntheticTrace {
            observations,
            groups,
            talking_pairs: self.talking,
        }
    }
}

/// Spreads `bytes` uniformly over `[start, start + duration)` into the
/// sampling intervals it overlaps.
fn add_burst(series: &mut [f64], interval: f64, start: f64, duration: f64, bytes: f64) {
    let end = start + duration;
    let first = (start / interval).floor().max(0.0) as usize;
    let last = ((end / interval).ceil().max(0.0) as usize).min(series.len());
    for (k, slot) in series.iter_mut().enumerate().take(last).skip(first) {
        let lo = (k as f64 * interval).max(start);
        let hi = ((k + 1) as f64 * interval).min(end);
        if hi > lo {
            *slot += bytes * (hi - lo) / duration;
        }
    }
}

/// Series of a job without training structure: every RNIC sends bursts of
/// random size at random times (debugging containers, ad-hoc tests). Used to
/// show the fidelity check falling back to the basic pinglist.
pub fn unstructured(
    hosts: usize,
    rnics_per_host: usize,
    samples: usize,
    seed: u64,
) -> Vec<Observation> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(hosts * rnics_per_host);
    for h in 0..hosts {
        for r in 0..rnics_per_host {
            let mut bytes = vec![0.0; samples];
            for v in bytes.iter_mut() {
                if rng.random::<f64>() < 0.15 {
                    *v += rng.random::<f64>() * 4e9;
                }
                *v += rng.random::<f64>() * 2e8;
            }
            out.push(Observation {
                endpoint: Endpoint {
                    id: (h * rnics_per_host + r) as u32,
                    host: h as u32,
                    rail: r as u16,
                },
                bytes,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_inside_a_host_add_no_rnic_bytes() {
        // One replica per 4-RNIC host: pipeline traffic stays on NVLink, so
        // only the all-reduce talks, and never within a host.
        let job = SyntheticJob {
            rnics_per_host: 4,
            noise: 0.0,
            ..SyntheticJob::new(2, 2, 4)
        };
        let trace = job.generate().expect("valid job");
        let host = |id: u32| (id - job.first_id) / 4;
        assert!(trace.talking_pairs.iter().all(|&(a, b)| host(a) != host(b)));
        // Talking pairs are exactly the DP groups' pairs: 4 groups x 6.
        assert_eq!(trace.talking_pairs.len(), 4 * 6);
        let total: f64 = trace
            .observations
            .iter()
            .map(|o| o.bytes.iter().sum::<f64>())
            .sum();
        let per_iteration = 16.0 * job.allreduce_bytes * 2.0 * 3.0 / 4.0;
        let iterations = job.samples as f64 * job.interval_s / job.period_s;
        assert!(
            (total / per_iteration - iterations).abs() < 1.5,
            "{}",
            total / per_iteration
        );
    }

    #[test]
    fn burst_bytes_are_conserved_across_intervals() {
        let mut s = vec![0.0; 10];
        add_burst(&mut s, 1.0, 2.5, 1.5, 300.0);
        assert_eq!(s[2], 100.0);
        assert_eq!(s[3], 200.0);
        assert_eq!(s.iter().sum::<f64>(), 300.0);
    }
}
