//! One scored run in process: build the fabric, register every agent, a fault-free
//! warm-up, the faults from then to the end, and the score of what the analyzer and
//! Algorithm 1 reported from the onset on. Shared by `rocemesh-lab sim` and the bench.

use crate::faults::FaultSpec;
use crate::inproc::{InProcess, Timing};
use crate::score::{Score, Truth};
use crate::sim::{Sim, SimConfig, SimStats};
use rocemesh_analyzer::AnalyzerConfig;
use rocemesh_controller::ControllerConfig;
use serde::Serialize;
use std::time::Instant;

/// What to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The fabric and agents.
    pub config: SimConfig,
    /// Faults, all starting at the end of the warm-up and lasting to the end.
    pub faults: Vec<FaultSpec>,
    /// Fault-free time first, s.
    pub warmup_s: u32,
    /// Whole run, s (virtual time).
    pub seconds: u32,
}

/// A scored run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// RNICs simulated.
    pub rnics: usize,
    /// Hosts (agents) simulated.
    pub hosts: usize,
    /// Switches.
    pub switches: usize,
    /// Switch-to-switch links.
    pub links: usize,
    /// Wall-clock time to build the fabric, ms.
    pub build_ms: f64,
    /// Wall-clock time to register every agent and fetch its pinglist, ms.
    pub register_ms: f64,
    /// Wall-clock time of the run, ms.
    pub run_ms: f64,
    /// Virtual seconds run.
    pub seconds: u32,
    /// The injected faults' ground truth.
    pub truth: Vec<Truth>,
    /// The analyzer's score from the onset on.
    pub score: Score,
    /// Algorithm 1's score on the same data.
    pub baseline: Score,
    /// Simulation counters.
    pub stats: SimStats,
    /// Where the time went.
    pub timing: Timing,
}

/// Runs `s` against a real controller and analyzer in this process.
pub async fn run_in_process(
    s: &Scenario,
    controller: ControllerConfig,
    analyzer: AnalyzerConfig,
) -> anyhow::Result<Report> {
    anyhow::ensure!(
        s.warmup_s < s.seconds,
        "the run ({} s) must be longer than the warm-up ({} s)",
        s.seconds,
        s.warmup_s
    );
    let t = Instant::now();
    let sim = Sim::new(s.config.clone())?;
    let build_ms = ms(t);
    let (rnics, hosts) = (sim.fabric().rnics.len(), sim.fabric().hosts.len());
    let (switches, links) = (sim.fabric().switches.len(), sim.fabric().links.len());
    let mut run = InProcess::start(sim, controller, analyzer).await?;
    let t = Instant::now();
    run.register_all().await?;
    let register_ms = ms(t);
    let t = Instant::now();
    run.run_for(i64::from(s.warmup_s) * 1_000).await?;
    let onset = run.now_ms();
    for f in &s.faults {
        run.sim_mut().inject(f.clone(), onset, None)?;
    }
    run.run_for(i64::from(s.seconds - s.warmup_s) * 1_000)
        .await?;
    Ok(Report {
        rnics,
        hosts,
        switches,
        links,
        build_ms,
        register_ms,
        run_ms: ms(t),
        seconds: s.seconds,
        truth: run.sim().truth(),
        score: run.score(onset),
        baseline: run.baseline_score(onset),
        stats: run.sim().stats(),
        timing: run.timing(),
    })
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}
