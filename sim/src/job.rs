//! Training-job traffic with ground truth: the per-rank RNIC throughput series of a
//! data-parallel job doing ring all-reduce, the probe outcomes on its skeleton pairs, and
//! one injected fault — a rank starved of CPU, loss on a rank's link, a rank stopped, a
//! rank's link down, a lossy path under one pair — drawn from a seed.
//!
//! The model, per iteration: each rank computes (a starved rank longer), then the ring
//! collective runs once every rank is ready. Before that a ready rank exchanges a first
//! chunk with each ready neighbour (receiver-driven: nothing moves towards a rank that is
//! not ready), so a late rank shows a late onset while its peers start on time. A lossy
//! link slows its rank's transfer (go-back-N retransmissions) and the whole ring waits: the
//! slow rank stays active for the stretched transfer while its peers send at line rate with
//! gaps. A stopped rank moves nothing from the stop on; its peers drain what is in flight
//! and stall. A dead link does the same to the traffic, and its probes are lost too.
//! Counters are tx + rx per sampling interval; the bytes sent apart are not modelled.

use crate::rng::Rng;
use rocemesh_taskhealth::{PairHealth, Throughput, WindowClass};

/// The injected fault.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JobFault {
    /// No fault.
    Healthy,
    /// One lossy path under one skeleton pair (the job itself stays on rhythm).
    PathLoss {
        /// Source rank of the pair.
        src: usize,
        /// Destination rank of the pair.
        dst: usize,
        /// Fraction of packets lost.
        loss: f64,
    },
    /// The rank's computation takes `factor` times longer.
    CpuStarved {
        /// The starved rank.
        rank: usize,
        /// Slow-down of its computation.
        factor: f64,
    },
    /// The rank's link loses `loss` of its packets, stretching its transfers `stretch`-fold.
    LinkLoss {
        /// The rank behind the lossy link.
        rank: usize,
        /// Fraction of packets lost.
        loss: f64,
        /// Slow-down of its transfers.
        stretch: f64,
    },
    /// The rank's process stops.
    Stopped {
        /// The stopped rank.
        rank: usize,
    },
    /// The rank's link goes down.
    LinkDown {
        /// The rank behind the dead link.
        rank: usize,
    },
}

impl JobFault {
    /// The class every window after the injection should get.
    pub fn class(&self) -> WindowClass {
        match self {
            Self::Healthy | Self::PathLoss { .. } => WindowClass::Healthy,
            Self::CpuStarved { .. } => WindowClass::NonCommunicationSlow,
            Self::LinkLoss { .. } => WindowClass::CommunicationSlow,
            Self::Stopped { .. } => WindowClass::NonCommunicationHang,
            Self::LinkDown { .. } => WindowClass::CommunicationHang,
        }
    }

    /// The straggler rank, when the fault has one.
    pub fn rank(&self) -> Option<usize> {
        match *self {
            Self::CpuStarved { rank, .. }
            | Self::LinkLoss { rank, .. }
            | Self::Stopped { rank }
            | Self::LinkDown { rank } => Some(rank),
            Self::Healthy | Self::PathLoss { .. } => None,
        }
    }

    /// The same fault on rank `rank` (a fault without a rank is returned as it is): the
    /// rank as another numbering of the same job names it.
    pub fn with_rank(self, rank: usize) -> JobFault {
        match self {
            Self::CpuStarved { factor, .. } => Self::CpuStarved { rank, factor },
            Self::LinkLoss { loss, stretch, .. } => Self::LinkLoss {
                rank,
                loss,
                stretch,
            },
            Self::Stopped { .. } => Self::Stopped { rank },
            Self::LinkDown { .. } => Self::LinkDown { rank },
            Self::Healthy | Self::PathLoss { .. } => self,
        }
    }

    /// Short name (`cpu_starved`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::PathLoss { .. } => "path_loss",
            Self::CpuStarved { .. } => "cpu_starved",
            Self::LinkLoss { .. } => "link_loss",
            Self::Stopped { .. } => "stopped",
            Self::LinkDown { .. } => "link_down",
        }
    }
}

/// One drawn job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Ranks (one RNIC each).
    pub ranks: usize,
    /// Sampling interval of the counters, ms.
    pub interval_ms: u32,
    /// Healthy computation per iteration, ms.
    pub compute_ms: f64,
    /// Healthy transfer per iteration, ms.
    pub transfer_ms: f64,
    /// Iterations before the injection.
    pub warmup: usize,
    /// Iterations' worth of time after it.
    pub after: usize,
    /// Skeleton pairs probed, `(src, dst)`.
    pub pairs: Vec<(usize, usize)>,
    /// The fault.
    pub fault: JobFault,
}

/// What a job produced, with its truth.
#[derive(Debug, Clone)]
pub struct JobRun {
    /// The job.
    pub spec: JobSpec,
    /// Counters of every rank.
    pub throughput: Throughput,
    /// Probe outcomes of every skeleton pair over the whole series.
    pub pairs: Vec<PairHealth>,
    /// When the fault began to show, ms (same clock as `throughput.start_ms`).
    pub fault_at_ms: i64,
    /// End of the series, ms.
    pub end_ms: i64,
}

/// Line rate in bytes per ms (the unit is arbitrary; the classifier compares ranks).
const RATE: f64 = 1.0e6;
/// Probes per second per skeleton pair (service 5-tuples are probed every 10 ms).
const PROBE_RATE: f64 = 100.0;
/// Loss of a healthy path (independent per probe).
const NOISE_LOSS: f64 = 1e-4;

/// Draws the job of scenario `index` of `seed` with fault class `fault` (0..6:
/// healthy, path loss, CPU starved, link loss, stopped, link down).
pub fn draw(seed: u64, index: u32, fault: u32) -> JobSpec {
    let mut rng = Rng::new(crate::rng::hash(&[seed, u64::from(index), 0x10b]));
    let ranks = 4 + rng.below(29) as usize;
    let interval_ms = [10, 20, 50][rng.below(3) as usize];
    let dt = f64::from(interval_ms);
    let compute_ms = dt * (15.0 + 20.0 * rng.unit());
    let transfer_ms = dt * (10.0 + 15.0 * rng.unit());
    let mut pairs = Vec::new();
    let extra = rng.below(4) as usize;
    for r in 0..ranks {
        let mut dsts = vec![(r + 1) % ranks, (r + ranks - 1) % ranks];
        for _ in 0..extra {
            dsts.push(rng.below(ranks as u64) as usize);
        }
        dsts.sort_unstable();
        dsts.dedup();
        pairs.extend(dsts.into_iter().filter(|d| *d != r).map(|d| (r, d)));
    }
    let rank = rng.below(ranks as u64) as usize;
    let fault = match fault % 6 {
        0 => JobFault::Healthy,
        1 => {
            let (src, dst) = pairs[rng.below(pairs.len() as u64) as usize];
            JobFault::PathLoss {
                src,
                dst,
                loss: 0.01 + 0.04 * rng.unit(),
            }
        }
        2 => JobFault::CpuStarved {
            rank,
            factor: 1.8 + 1.2 * rng.unit(),
        },
        3 => JobFault::LinkLoss {
            rank,
            loss: 0.01 + 0.04 * rng.unit(),
            stretch: 2.5 + 2.5 * rng.unit(),
        },
        4 => JobFault::Stopped { rank },
        _ => JobFault::LinkDown { rank },
    };
    JobSpec {
        ranks,
        interval_ms,
        compute_ms,
        transfer_ms,
        warmup: 6 + rng.below(7) as usize,
        after: 6 + rng.below(7) as usize,
        pairs,
        fault,
    }
}

/// Runs `spec` with the randomness of `seed`.
pub fn run(spec: &JobSpec, seed: u64) -> JobRun {
    let mut rng = Rng::new(crate::rng::hash(&[seed, 0x10b_5eed]));
    let n = spec.ranks;
    let dt = f64::from(spec.interval_ms);
    let period = spec.compute_ms + spec.transfer_ms;
    let fault_at = spec.warmup as f64 * period + rng.unit() * period;
    let end = fault_at + spec.after as f64 * period + 6.0 * period;
    let samples = (end / dt).ceil() as usize;
    let mut bytes = vec![vec![0.0; samples]; n];
    let put = |r: usize, from: f64, to: f64, rate: f64, bytes: &mut Vec<Vec<f64>>| {
        // Spreads `rate` bytes/ms over [from, to) onto the sample grid.
        let mut t = from.max(0.0);
        while t < to {
            let i = (t / dt) as usize;
            if i >= samples {
                break;
            }
            let edge = ((i + 1) as f64 * dt).min(to);
            bytes[r][i] += rate * (edge - t);
            t = edge;
        }
    };
    let stop = match spec.fault {
        JobFault::Stopped { rank } | JobFault::LinkDown { rank } => Some((rank, fault_at)),
        _ => None,
    };
    let alive = |r: usize, t: f64| stop.is_none_or(|(s, at)| s != r || t < at);
    let chunk = spec.transfer_ms / n as f64;
    let mut ready: Vec<f64> = (0..n).map(|_| rng.unit() * dt).collect();
    let mut t_end = 0.0;
    // When the fault first shows: the first starved computation, else the injection.
    let mut effective = match spec.fault {
        JobFault::CpuStarved { .. } => None,
        _ => Some(fault_at),
    };
    while t_end < end {
        let start = ready.iter().copied().fold(0.0, f64::max);
        // A rank stopped before the collective: it never starts.
        let stalled = stop.is_some_and(|(_, at)| at < start);
        // First chunks between ready neighbours, before the collective can run.
        for r in 0..n {
            let next = (r + 1) % n;
            let at = ready[r].max(ready[next]);
            if (at < start || stalled) && alive(r, at) && alive(next, at) {
                put(r, at, at + chunk, RATE, &mut bytes);
                put(next, at, at + chunk, RATE, &mut bytes);
            }
        }
        if stalled {
            // Peers stall after their first chunks.
            break;
        }
        let (slow, stretch) = match spec.fault {
            JobFault::LinkLoss { rank, stretch, .. } if start >= fault_at => (Some(rank), stretch),
            _ => (None, 1.0),
        };
        let dur = spec.transfer_ms * stretch * (1.0 + 0.05 * rng.normal()).max(0.8);
        let halt = stop
            .map(|(_, at)| at)
            .filter(|at| *at >= start && *at < start + dur);
        for r in 0..n {
            // Peers drain in-flight chunks for a short while after a stop.
            let until = match (halt, stop) {
                (Some(at), Some((s, _))) if s == r => at,
                (Some(at), _) => (at + 2.0 * chunk.max(dt)).min(start + dur),
                (None, _) => start + dur,
            };
            let rate = RATE * (1.0 + 0.1 * rng.normal()).max(0.5);
            if Some(r) == slow || slow.is_none() {
                put(r, start, until, rate / stretch, &mut bytes);
            } else {
                // Line-rate bursts with gaps: active one sample in `stretch`.
                let mut t = start;
                while t < until {
                    if rng.chance(1.0 / stretch) {
                        put(r, t, (t + dt).min(until), rate, &mut bytes);
                    }
                    t += dt;
                }
            }
        }
        if halt.is_some() {
            break;
        }
        t_end = start + dur;
        for (r, ready) in ready.iter_mut().enumerate() {
            let starved = match spec.fault {
                JobFault::CpuStarved { rank, factor } if rank == r && t_end >= fault_at => {
                    effective.get_or_insert(t_end);
                    factor
                }
                _ => 1.0,
            };
            *ready = t_end + spec.compute_ms * starved * (1.0 + 0.03 * rng.normal()).max(0.8);
        }
    }
    // Idle-time noise far below the burst rate.
    for s in bytes.iter_mut().flatten() {
        *s += RATE * dt * 0.005 * rng.unit();
    }
    let pairs = spec
        .pairs
        .iter()
        .map(|&(src, dst)| probes(spec, src, dst, fault_at, end, &mut rng))
        .collect();
    let start_ms = 1_700_000_000_000;
    JobRun {
        spec: spec.clone(),
        throughput: Throughput {
            interval_ms: spec.interval_ms,
            start_ms,
            bytes,
            sent: Vec::new(),
            groups: Vec::new(),
        },
        pairs,
        fault_at_ms: start_ms + effective.unwrap_or(end) as i64,
        end_ms: start_ms + (samples as f64 * dt) as i64,
    }
}

/// Probe outcomes of one pair: healthy noise before the fault, the fault's loss after.
fn probes(
    spec: &JobSpec,
    src: usize,
    dst: usize,
    fault_at: f64,
    end: f64,
    rng: &mut Rng,
) -> PairHealth {
    let before = (fault_at / 1000.0 * PROBE_RATE) as u64;
    let after = ((end - fault_at) / 1000.0 * PROBE_RATE) as u64;
    let touches = |r: usize| src == r || dst == r;
    let loss = match spec.fault {
        JobFault::PathLoss {
            src: s,
            dst: d,
            loss,
        } if (s, d) == (src, dst) => loss,
        JobFault::LinkLoss { rank, loss, .. } if touches(rank) => loss,
        JobFault::LinkDown { rank } if touches(rank) => 1.0,
        _ => NOISE_LOSS,
    };
    let lost = binomial(before, NOISE_LOSS, rng) + binomial(after, loss, rng);
    PairHealth {
        src,
        dst,
        probes: before + after,
        lost,
        rtt_us: Some(8.0 * (1.0 + 0.05 * rng.normal()).max(0.5)),
        local: false,
    }
}

fn binomial(n: u64, p: f64, rng: &mut Rng) -> u64 {
    (0..n).filter(|_| rng.chance(p)).count() as u64
}
