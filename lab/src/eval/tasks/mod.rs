//! `rocemesh-lab eval --suite tasks`: hang/slow verdicts, stragglers and probe-matrix
//! attributions on seeded random training jobs in the simulator (ranks, sampling interval,
//! rhythm, skeleton pairs, fault and faulty rank drawn from the seed), scored per class;
//! with `--testbed`, on ring jobs run on namespace fabrics ([`testbed`]).

mod testbed;

use super::EvalArgs;
use anyhow::{Result, bail};
use rocemesh_sim::jobsuite;

/// Jobs when `--random` names none: twenty of each fault class.
const DEFAULT_JOBS: u32 = 120;

/// The suite's size (`--random`, else `default`) and seed (`--seed`, else a fresh one).
fn size_and_seed(args: &EvalArgs, default: u32) -> Result<(u32, u64)> {
    let n = args.random.unwrap_or(default);
    if n == 0 {
        bail!("--random must be at least 1");
    }
    let seed = args
        .seed
        .unwrap_or_else(|| rocemesh_proto::now_unix_ns() as u64);
    Ok((n, seed))
}

/// Runs the suite and prints its table (or JSON).
pub(super) fn run(args: &EvalArgs) -> Result<()> {
    if args.testbed {
        return testbed::run(args);
    }
    let (n, seed) = size_and_seed(args, DEFAULT_JOBS)?;
    eprintln!(
        "eval: task suite, {n} jobs, seed {seed} (replay: --suite tasks --random {n} --seed {seed})"
    );
    let report = jobsuite::run(seed, n);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
        for j in report.jobs.iter().filter(|j| !j.wrong.is_empty()) {
            println!("#{} {}: {}", j.index, j.fault, j.wrong.join("; "));
        }
    }
    Ok(())
}
