//! Where each GPU of a job sits and which RNIC-to-RNIC transfers one iteration makes: the single
//! source of both the traffic the helpers send and the ground truth scored against inference.
//!
//! Placement: global rank `r = ((dp_index · pp) + stage) · tp + tp_index` runs on host
//! `first_host + r / rnics_per_host`, local GPU (and RNIC, rail) `r % rnics_per_host`. A transfer
//! between GPUs of one host uses NVLink and adds no RNIC bytes; across hosts it leaves the sender
//! host through the RNIC on the receiver's rail (PXN), so all RNIC traffic stays in its rail.
//!
//! One iteration, stage `k` shifted by `k · pp_offset_ms` (stage k bursts before stage k + 1),
//! each collective further delayed by its own jitter:
//! - forward activations stage k → k + 1 from `0`,
//! - backward gradients stage k + 1 → k from `iteration / 4`,
//! - ring all-reduce among the GPUs of one (stage, tp_index) across replicas from `iteration / 2`.

use std::net::Ipv4Addr;

use anyhow::{Context, Result};

use super::spec::JobSpec;
use crate::topology::Topology;

/// A job's GPU coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gpu {
    pub dp_index: u32,
    pub stage: u32,
    pub tp_index: u32,
}

/// One RNIC of the fabric as the plan uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RnicRef {
    pub name: String,
    pub ip: Ipv4Addr,
    pub host: usize,
    pub rail: usize,
}

/// Traffic phase of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Forward,
    Backward,
    AllReduce,
}

/// Bytes one RNIC sends to another once per iteration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Transfer {
    pub phase: Phase,
    pub from: RnicRef,
    pub to: RnicRef,
    /// Start within the iteration before jitter, milliseconds.
    pub offset_ms: f64,
    pub bytes: u64,
    /// Transfers of one collective share this key, hence their jitter.
    pub collective: u64,
}

/// The whole job on a concrete fabric.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub spec: JobSpec,
    /// RNIC of each global rank.
    pub ranks: Vec<RnicRef>,
    pub transfers: Vec<Transfer>,
}

impl Plan {
    /// Places `spec` on `topology` (call [`JobSpec::validate`] first) and lists its transfers.
    pub(crate) fn new(topology: &Topology, spec: &JobSpec) -> Result<Plan> {
        spec.validate(&topology.spec)?;
        let rph = usize::from(topology.spec.rnics_per_host);
        let rnic = |host: usize, rail: usize| -> Result<RnicRef> {
            let r = topology
                .hosts
                .get(host)
                .and_then(|h| h.rnics.get(rail))
                .with_context(|| format!("host {host} has no RNIC {rail}"))?;
            Ok(RnicRef {
                name: r.name.clone(),
                ip: r.ip,
                host,
                rail,
            })
        };
        let first = spec.first_host as usize;
        let ranks = (0..spec.gpus() as usize)
            .map(|r| rnic(first + r / rph, r % rph))
            .collect::<Result<Vec<_>>>()?;
        let mut plan = Plan {
            spec: spec.clone(),
            ranks,
            transfers: Vec::new(),
        };
        plan.add_pipeline(&rnic)?;
        plan.add_allreduce(&rnic)?;
        Ok(plan)
    }

    /// Global rank of a GPU.
    pub(crate) fn rank(&self, g: Gpu) -> usize {
        let s = &self.spec;
        (((g.dp_index * s.pp + g.stage) * s.tp) + g.tp_index) as usize
    }

    /// Coordinates of a global rank.
    pub(crate) fn gpu(&self, rank: usize) -> Gpu {
        let (tp, pp) = (self.spec.tp as usize, self.spec.pp as usize);
        Gpu {
            tp_index: (rank % tp) as u32,
            stage: ((rank / tp) % pp) as u32,
            dp_index: (rank / (tp * pp)) as u32,
        }
    }

    /// Records a transfer between two ranks unless both are on one host (NVLink).
    fn push(
        &mut self,
        rnic: &impl Fn(usize, usize) -> Result<RnicRef>,
        (phase, collective): (Phase, u64),
        (a, b): (usize, usize),
        offset_ms: f64,
        bytes: u64,
    ) -> Result<()> {
        let (src, dst) = (&self.ranks[a], &self.ranks[b]);
        if src.host == dst.host || bytes == 0 {
            return Ok(());
        }
        let transfer = Transfer {
            phase,
            from: rnic(src.host, dst.rail)?,
            to: dst.clone(),
            offset_ms,
            bytes,
            collective,
        };
        self.transfers.push(transfer);
        Ok(())
    }

    fn add_pipeline(&mut self, rnic: &impl Fn(usize, usize) -> Result<RnicRef>) -> Result<()> {
        let s = self.spec.clone();
        let quarter = f64::from(s.iteration_ms) / 4.0;
        for dp_index in 0..s.dp {
            for stage in 0..s.pp.saturating_sub(1) {
                let shift = f64::from(stage) * f64::from(s.pp_offset_ms);
                let key = collective_key(0, dp_index, stage);
                for tp_index in 0..s.tp {
                    let lower = self.rank(Gpu {
                        dp_index,
                        stage,
                        tp_index,
                    });
                    let upper = self.rank(Gpu {
                        dp_index,
                        stage: stage + 1,
                        tp_index,
                    });
                    let bytes = s.activation_bytes;
                    self.push(rnic, (Phase::Forward, key), (lower, upper), shift, bytes)?;
                    let back = (Phase::Backward, key + 1);
                    self.push(rnic, back, (upper, lower), quarter + shift, bytes)?;
                }
            }
        }
        Ok(())
    }

    fn add_allreduce(&mut self, rnic: &impl Fn(usize, usize) -> Result<RnicRef>) -> Result<()> {
        let s = self.spec.clone();
        if s.dp < 2 {
            return Ok(());
        }
        let half = f64::from(s.iteration_ms) / 2.0;
        for stage in 0..s.pp {
            let offset = half + f64::from(stage) * f64::from(s.pp_offset_ms);
            for tp_index in 0..s.tp {
                let key = (Phase::AllReduce, collective_key(2, stage, tp_index));
                for dp_index in 0..s.dp {
                    let me = self.rank(Gpu {
                        dp_index,
                        stage,
                        tp_index,
                    });
                    let next = Gpu {
                        dp_index: (dp_index + 1) % s.dp,
                        stage,
                        tp_index,
                    };
                    let next = self.rank(next);
                    self.push(rnic, key, (me, next), offset, s.ring_bytes())?;
                }
            }
        }
        Ok(())
    }

    /// Transfers sent by `host`'s RNICs.
    pub(crate) fn sent_by(&self, host: usize) -> impl Iterator<Item = &Transfer> {
        self.transfers.iter().filter(move |t| t.from.host == host)
    }

    /// RNICs of `host` that send or receive job traffic, each once.
    pub(crate) fn endpoints_on(&self, host: usize) -> Vec<&RnicRef> {
        let mut v: Vec<&RnicRef> = Vec::new();
        for r in self.transfers.iter().flat_map(|t| [&t.from, &t.to]) {
            if r.host == host && !v.iter().any(|x| x.name == r.name) {
                v.push(r);
            }
        }
        v
    }

    /// Hosts with job traffic, ascending.
    pub(crate) fn busy_hosts(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .transfers
            .iter()
            .flat_map(|t| [t.from.host, t.to.host])
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Hosts the job occupies (first..first + gpus / rnics_per_host).
    pub(crate) fn hosts(&self) -> std::ops::Range<usize> {
        let first = self.ranks.first().map_or(0, |r| r.host);
        let last = self.ranks.last().map_or(0, |r| r.host + 1);
        first..last
    }
}

/// Key shared by the transfers of one collective: phase code, then two indices.
fn collective_key(phase: u64, a: u32, b: u32) -> u64 {
    (phase << 56) ^ (u64::from(a) << 28) ^ u64::from(b)
}

/// Deterministic delay in `[0, jitter_ms)` of collective `key` in iteration `iteration`:
/// every helper computes the same value without talking to the others (splitmix64).
pub(crate) fn jitter_ms(seed: u64, iteration: u64, key: u64, jitter_ms: u32) -> f64 {
    let mut z = seed
        ^ iteration.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ key.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64 * f64::from(jitter_ms)
}

#[cfg(test)]
mod tests {
    use super::super::spec::tests::{fabric, job};
    use super::*;

    fn plan(spec: &JobSpec, rail: bool) -> Plan {
        Plan::new(&Topology::new(&fabric(rail)), spec).unwrap()
    }

    #[test]
    fn reference_job_keeps_pipeline_on_nvlink_and_rings_in_rail() {
        let p = plan(&job(), true);
        assert_eq!(p.ranks.len(), 16);
        // Replica d fills host d; stage s, TP rank t is local GPU 2s + t.
        assert_eq!(
            p.ranks[p.rank(Gpu {
                dp_index: 2,
                stage: 1,
                tp_index: 0
            })]
            .name,
            "h2r2"
        );
        assert_eq!(
            p.gpu(13),
            Gpu {
                dp_index: 3,
                stage: 0,
                tp_index: 1
            }
        );
        assert!(p.transfers.iter().all(|t| t.phase == Phase::AllReduce));
        // 4 rings of 4 hops, each in one rail, 225 kB per hop.
        assert_eq!(p.transfers.len(), 16);
        for t in &p.transfers {
            assert_eq!(t.from.rail, t.to.rail, "{t:?}");
            assert_eq!(t.to.host, (t.from.host + 1) % 4);
            assert_eq!(t.bytes, 225_000);
        }
        let stage1 = p.transfers.iter().find(|t| t.from.name == "h0r3").unwrap();
        assert_eq!(stage1.offset_ms, 500.0 + 120.0);
        assert_eq!(p.busy_hosts(), vec![0, 1, 2, 3]);
        assert_eq!(p.endpoints_on(1).len(), 4);
    }

    #[test]
    fn pipeline_across_hosts_and_pxn() {
        // TP=4 PP=2 DP=2: stage 0 on host 0, stage 1 on host 1 (in-rail PP).
        let spec = JobSpec {
            tp: 4,
            dp: 2,
            ..job()
        };
        let p = plan(&spec, true);
        let fwd: Vec<_> = p
            .transfers
            .iter()
            .filter(|t| t.phase == Phase::Forward)
            .collect();
        assert_eq!(fwd.len(), 8);
        assert!(
            fwd.iter()
                .all(|t| t.from.rail == t.to.rail && t.offset_ms == 0.0)
        );
        assert!(
            fwd.iter()
                .any(|t| t.from.name == "h2r3" && t.to.name == "h3r3")
        );
        let bwd = p
            .transfers
            .iter()
            .find(|t| t.phase == Phase::Backward)
            .unwrap();
        assert_eq!(bwd.offset_ms, 250.0);
        // TP=2 PP=4 DP=2 (4 hosts): stage 1 (GPUs 2,3 of host 0) feeds stage 2 (GPUs 0,1 of
        // host 1): PXN sends from host 0's RNIC on the receiver's rail.
        let spec = JobSpec {
            pp: 4,
            dp: 2,
            pp_offset_ms: 40,
            ..job()
        };
        let p = plan(&spec, false);
        let pxn: Vec<_> = p
            .transfers
            .iter()
            .filter(|t| t.phase == Phase::Forward && t.from.host == 0)
            .map(|t| (t.from.name.as_str(), t.to.name.as_str(), t.offset_ms))
            .collect();
        assert_eq!(pxn, vec![("h0r0", "h1r0", 40.0), ("h0r1", "h1r1", 40.0)]);
    }

    #[test]
    fn jitter_is_deterministic_bounded_and_varied() {
        let v: Vec<f64> = (0..200).map(|i| jitter_ms(7, i, 3, 80)).collect();
        assert!(v.iter().all(|j| (0.0..80.0).contains(j)));
        assert_eq!(v[5], jitter_ms(7, 5, 3, 80));
        assert_ne!(v[5], jitter_ms(8, 5, 3, 80));
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!((30.0..50.0).contains(&mean), "{mean}");
        assert_eq!(jitter_ms(7, 5, 3, 0), 0.0);
    }
}
