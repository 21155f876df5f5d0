//! The user-facing description of an emulated training job and its validation against a
//! fabric (placement capacity, and every traffic phase fitting inside one iteration).

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::spec::FabricSpec;

/// Longest job name accepted (it appears in log file names and the state file).
pub const MAX_JOB_NAME_LEN: usize = 32;

/// Shortest iteration accepted: helpers pace in milliseconds, so shorter ones blur.
pub const MIN_ITERATION_MS: u32 = 50;

/// Longest iteration accepted (ten minutes).
pub const MAX_ITERATION_MS: u32 = 600_000;

/// Highest burst rate accepted per RNIC: the emulator is a shape, not a load test.
pub const MAX_BURST_MBPS: u32 = 1000;

fn default_burst_mbps() -> u32 {
    16
}

/// Longest computation phase of a ring job, milliseconds.
pub const MAX_COMPUTE_MS: u32 = 60_000;

/// How a job's ranks move their data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Collective {
    /// Open loop: every transfer starts on the job's common clock, whatever its peers do
    /// (traffic shapes for skeleton inference).
    #[default]
    Paced,
    /// Closed loop: each iteration computes, then runs a ring all-reduce over TCP among the
    /// data-parallel ranks, each step waiting for the previous step's chunk. A rank that
    /// computes long, stops or loses packets holds its peers back, as in a real job (task
    /// health). Needs `tp = pp = 1`; `iteration_ms`, `pp_offset_ms`, `activation_bytes` and
    /// `jitter_ms` do not apply: the iteration period emerges.
    Ring {
        /// Wall time of the computation phase, milliseconds.
        compute_ms: u32,
        /// CPU time the computation burns within it (busy loop; the rest sleeps), so CPU
        /// starvation of the rank's process stretches it.
        busy_ms: u32,
    },
}

/// A synthetic DP × PP × TP training job (SkeletonHunter §3.2) placed on consecutive hosts of a
/// fabric from `first_host` on, one GPU per RNIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Job name, unique among the fabric's running jobs (lowercase letters, digits, `-`).
    pub name: String,
    /// Tensor-parallel degree (GPUs of one TP group; NVLink inside a host).
    pub tp: u32,
    /// Pipeline-parallel degree (stages).
    pub pp: u32,
    /// Data-parallel degree (replicas).
    pub dp: u32,
    /// Training iteration period in milliseconds.
    pub iteration_ms: u32,
    /// Delay between the bursts of consecutive pipeline stages, milliseconds.
    pub pp_offset_ms: u32,
    /// Gradient bucket each GPU all-reduces per iteration, bytes (a ring sends
    /// `2 (dp-1)/dp` of it per RNIC).
    pub allreduce_bytes: u64,
    /// Activations each GPU passes to the next stage (and gradients back) per iteration, bytes.
    pub activation_bytes: u64,
    /// Each collective starts up to this many milliseconds late (uniform, per iteration).
    pub jitter_ms: u32,
    /// Seed of the jitter: equal specs give equal timing.
    pub seed: u64,
    /// Index of the first host the job occupies.
    #[serde(default)]
    pub first_host: u32,
    /// Sending rate of one RNIC during a burst, Mbit/s.
    #[serde(default = "default_burst_mbps")]
    pub burst_mbps: u32,
    /// Open-loop paced transfers (default) or a closed-loop ring.
    #[serde(default)]
    pub collective: Collective,
}

impl JobSpec {
    /// The reference job of the tests and the skeleton eval: TP=2 PP=2 DP=4 on 16 GPUs
    /// from host 0 (4 hosts × 4 RNICs), 1 s iterations, stages 120 ms apart, 150 kB
    /// all-reduce and 20 kB activations per GPU, 80 ms jitter, 16 Mbit/s bursts.
    pub fn tp2_pp2_dp4(name: &str) -> JobSpec {
        JobSpec {
            name: name.into(),
            tp: 2,
            pp: 2,
            dp: 4,
            iteration_ms: 1000,
            pp_offset_ms: 120,
            allreduce_bytes: 150_000,
            activation_bytes: 20_000,
            jitter_ms: 80,
            seed: 7,
            first_host: 0,
            burst_mbps: 16,
            collective: Collective::Paced,
        }
    }

    /// Number of GPUs (= RNICs) of the job.
    pub fn gpus(&self) -> u64 {
        u64::from(self.tp)
            .saturating_mul(u64::from(self.pp))
            .saturating_mul(u64::from(self.dp))
    }

    /// Milliseconds one RNIC needs to send `bytes` at the burst rate.
    pub fn burst_ms(&self, bytes: u64) -> f64 {
        bytes as f64 * 8.0 / (f64::from(self.burst_mbps.max(1)) * 1000.0)
    }

    /// Bytes one RNIC sends to its ring successor in a DP all-reduce.
    pub fn ring_bytes(&self) -> u64 {
        let dp = u64::from(self.dp.max(1));
        self.allreduce_bytes.saturating_mul(2 * (dp - 1)) / dp
    }

    /// Checks the job can run on `fabric`: sizes, placement (each DP replica fills whole hosts,
    /// so DP peers share a rail) and timing (each phase ends inside its window of the iteration).
    pub fn validate(&self, fabric: &FabricSpec) -> Result<()> {
        let n = &self.name;
        let mut chars = n.chars();
        if !chars.next().is_some_and(|c| c.is_ascii_lowercase())
            || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            || n.len() > MAX_JOB_NAME_LEN
        {
            bail!(
                "job name {n:?} must be 1..={MAX_JOB_NAME_LEN} lowercase letters, digits or '-', starting with a letter"
            );
        }
        if self.tp == 0 || self.pp == 0 || self.dp == 0 {
            bail!("tp, pp and dp must all be at least 1");
        }
        let rph = u64::from(fabric.rnics_per_host);
        let replica = u64::from(self.tp) * u64::from(self.pp);
        if rph == 0 || !replica.is_multiple_of(rph) {
            bail!(
                "tp × pp = {replica} must be a multiple of the {rph} RNICs per host: each DP replica fills whole hosts"
            );
        }
        let hosts_needed = self.gpus() / rph;
        let hosts_free = (fabric.host_count() as u64).saturating_sub(u64::from(self.first_host));
        if hosts_needed > hosts_free {
            bail!(
                "{} GPUs need {hosts_needed} hosts of {rph} RNICs from host {}, the fabric has {} hosts",
                self.gpus(),
                self.first_host,
                fabric.host_count()
            );
        }
        if !(MIN_ITERATION_MS..=MAX_ITERATION_MS).contains(&self.iteration_ms) {
            bail!(
                "iteration_ms {} outside {MIN_ITERATION_MS}..={MAX_ITERATION_MS}",
                self.iteration_ms
            );
        }
        if !(1..=MAX_BURST_MBPS).contains(&self.burst_mbps) {
            bail!(
                "burst_mbps {} outside 1..={MAX_BURST_MBPS}",
                self.burst_mbps
            );
        }
        if let Collective::Ring {
            compute_ms,
            busy_ms,
        } = self.collective
        {
            if self.tp != 1 || self.pp != 1 || self.dp < 2 {
                bail!("a ring job needs tp = pp = 1 and dp >= 2 (one rank per RNIC)");
            }
            if !(1..=MAX_COMPUTE_MS).contains(&compute_ms) || busy_ms > compute_ms {
                bail!(
                    "a ring job needs 1 <= compute_ms <= {MAX_COMPUTE_MS} and busy_ms <= compute_ms"
                );
            }
            return Ok(());
        }
        let iteration = f64::from(self.iteration_ms);
        let shift =
            f64::from(self.pp - 1) * f64::from(self.pp_offset_ms) + f64::from(self.jitter_ms);
        let phases = [
            (
                "forward/backward activations",
                self.pp > 1,
                self.activation_bytes,
                0.25,
            ),
            ("DP all-reduce", self.dp > 1, self.ring_bytes(), 0.5),
        ];
        for (what, used, bytes, share) in phases {
            let end = shift + self.burst_ms(bytes);
            if used && end > iteration * share {
                bail!(
                    "{what} of the last stage end {end:.0} ms into a {:.0} ms window \
                     ({share} of the iteration): lower bytes, offset or jitter, or raise burst_mbps",
                    iteration * share
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The job of the integration test: TP=2 PP=2 DP=4 on 4 hosts × 4 RNICs.
    pub(crate) fn job() -> JobSpec {
        JobSpec::tp2_pp2_dp4("llm-a")
    }

    pub(crate) fn fabric(rail_optimized: bool) -> FabricSpec {
        FabricSpec {
            prefix: "tbjob".into(),
            tors: 4,
            spines: 2,
            hosts_per_tor: if rail_optimized { 4 } else { 1 },
            rnics_per_host: 4,
            rail_optimized,
            management: false,
        }
    }

    #[test]
    fn accepts_the_reference_job_on_both_fabric_kinds() {
        for rail in [true, false] {
            job().validate(&fabric(rail)).unwrap();
        }
        assert_eq!(job().ring_bytes(), 225_000);
        assert!((job().burst_ms(2_000) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn rejects_what_cannot_run() {
        let bad = |f: fn(&mut JobSpec)| {
            let mut j = job();
            f(&mut j);
            j.validate(&fabric(true)).unwrap_err().to_string()
        };
        assert!(bad(|j| j.name = "Bad".into()).contains("job name"));
        assert!(bad(|j| j.name = "a".repeat(33)).contains("job name"));
        assert!(bad(|j| j.tp = 0).contains("at least 1"));
        assert!(bad(|j| j.tp = 1).contains("whole hosts"));
        assert!(bad(|j| j.dp = 5).contains("hosts"));
        assert!(bad(|j| j.first_host = 1).contains("from host 1"));
        assert!(bad(|j| j.iteration_ms = 10).contains("iteration_ms"));
        assert!(bad(|j| j.burst_mbps = 0).contains("burst_mbps"));
        assert!(bad(|j| j.allreduce_bytes = 10_000_000).contains("all-reduce"));
        assert!(bad(|j| j.pp_offset_ms = 300).contains("activations"));
        // Huge values do not overflow.
        assert!(bad(|j| j.allreduce_bytes = u64::MAX).contains("all-reduce"));
        let big = JobSpec {
            tp: u32::MAX,
            pp: u32::MAX,
            dp: u32::MAX,
            ..job()
        };
        assert!(big.validate(&fabric(true)).is_err());
    }

    #[test]
    fn a_ring_needs_one_rank_per_rnic_and_a_sane_computation() {
        let one_rail = FabricSpec {
            rnics_per_host: 1,
            ..fabric(false)
        };
        let ring = |compute_ms, busy_ms| JobSpec {
            tp: 1,
            pp: 1,
            dp: 4,
            // The paced phases would not fit: a ring does not use them.
            allreduce_bytes: 10_000_000,
            collective: Collective::Ring {
                compute_ms,
                busy_ms,
            },
            ..job()
        };
        ring(300, 50).validate(&one_rail).unwrap();
        let err = |j: JobSpec| j.validate(&one_rail).unwrap_err().to_string();
        assert!(err(ring(300, 301)).contains("busy_ms"));
        assert!(err(ring(0, 0)).contains("compute_ms"));
        assert!(
            err(JobSpec {
                dp: 1,
                ..ring(300, 50)
            })
            .contains("dp >= 2")
        );
        assert!(
            err(JobSpec {
                tp: 2,
                dp: 2,
                ..ring(300, 50)
            })
            .contains("tp = pp = 1")
        );
        let text = r#"{"name":"j","tp":1,"pp":1,"dp":2,"iteration_ms":500,"pp_offset_ms":0,
            "allreduce_bytes":1000,"activation_bytes":0,"jitter_ms":0,"seed":1,
            "collective":{"kind":"ring","compute_ms":300,"busy_ms":40}}"#;
        let j: JobSpec = serde_json::from_str(text).unwrap();
        assert_eq!(
            j.collective,
            Collective::Ring {
                compute_ms: 300,
                busy_ms: 40
            }
        );
    }

    #[test]
    fn json_defaults_and_unknown_fields() {
        let text = r#"{"name":"j","tp":4,"pp":1,"dp":2,"iteration_ms":500,"pp_offset_ms":0,
            "allreduce_bytes":1000,"activation_bytes":0,"jitter_ms":0,"seed":1}"#;
        let j: JobSpec = serde_json::from_str(text).unwrap();
        assert_eq!((j.first_host, j.burst_mbps), (0, 16));
        let extra = text.replace("\"seed\":1", "\"seed\":1,\"x\":2");
        assert!(serde_json::from_str::<JobSpec>(&extra).is_err());
    }
}
