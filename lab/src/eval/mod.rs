//! `rocemesh-lab eval`: the localization suite. Each scenario runs on a fresh lab (fabric,
//! server, agents): baseline → fault → recovery; the problems the analyzer reported are
//! scored against the injected ground truth, never assumed. Plain R-Pingmesh Alg. 1
//! voting, computed by the analyzer on the same data, is scored alongside as a baseline.

mod latency;
pub mod random;
mod run;
pub mod scenarios;
mod skeleton;
mod tasks;

use crate::lab::{Lab, LabTiming};
use anyhow::{Result, bail};
use clap::Args;
use rocemesh_testbed::FabricSpec;
use std::time::Duration;

/// Which evaluation to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Suite {
    /// Fault scenarios on namespace fabrics (root).
    Localization,
    /// Traffic-skeleton inference on synthetic jobs with known groups.
    Skeleton,
    /// Latency anomaly detectors on labelled synthetic RNIC-pair series.
    Latency,
    /// Task hang/slow verdicts and attributions on simulated training jobs (--random N
    /// jobs, --seed; --testbed: on namespace fabrics).
    Tasks,
}

/// Options of the evaluation run.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The suite.
    #[arg(long, value_enum, default_value_t = Suite::Localization)]
    pub suite: Suite,
    /// Scenario to run (repeatable); default: all.
    #[arg(long = "scenario")]
    pub scenarios: Vec<String>,
    /// Only the quick subset (what CI runs).
    #[arg(long)]
    pub quick: bool,
    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    pub list: bool,
    /// Seconds of fault-free baseline before the injection.
    #[arg(long, default_value_t = 10)]
    pub baseline_secs: u64,
    /// Seconds the fault lasts.
    #[arg(long, default_value_t = 15)]
    pub fault_secs: u64,
    /// Seconds of observation after the fault is cleared.
    #[arg(long, default_value_t = 15)]
    pub recovery_secs: u64,
    /// Namespace prefix of the lab fabric.
    #[arg(long, default_value = "rmev")]
    pub prefix: String,
    /// Run N seeded random scenarios (fabric shapes, faults, positions drawn from
    /// --seed) instead of the fixed ones.
    #[arg(long, value_name = "N")]
    pub random: Option<u32>,
    /// Seed of --random (default: a fresh one, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// With --random: run only scenario I of the suite (replays a failing one).
    #[arg(long, value_name = "I")]
    pub only: Option<u32>,
    /// Task suite: run ring jobs on namespace fabrics (root) instead of simulated jobs.
    #[arg(long)]
    pub testbed: bool,
    /// Fabric of the fixed scenarios, ToRs x spines (2 hosts per ToR, 1 RNIC each); at
    /// least 3x2, the fabric their named components live in.
    #[arg(long, value_name = "TORSxSPINES", default_value = "3x2", value_parser = fabric_shape)]
    pub fabric: (u8, u8),
}

/// Parses `--fabric`: "4x3" is 4 ToRs and 3 spines, 3–16 ToRs and 2–8 spines.
fn fabric_shape(s: &str) -> Result<(u8, u8), String> {
    let (tors, spines) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("{s:?} is not TORSxSPINES, e.g. 4x3"))?;
    let n = |v: &str| {
        v.trim()
            .parse::<u8>()
            .map_err(|e| format!("{v:?} in {s:?}: {e}"))
    };
    let (tors, spines) = (n(tors)?, n(spines)?);
    if !(3..=16).contains(&tors) || !(2..=8).contains(&spines) {
        return Err(format!(
            "{s:?}: the fixed scenarios need 3–16 ToRs and 2–8 spines"
        ));
    }
    Ok((tors, spines))
}

/// The fabric every scenario runs on: 3 ToRs × 2 spines × 2 hosts per ToR, 1 RNIC each.
/// Three ToRs, because with two every flow through a spine crosses both ToRs' links to
/// it, so a loss no trace breaks on cannot be told apart from the other ToR's link.
pub fn lab_spec(prefix: &str) -> FabricSpec {
    FabricSpec {
        prefix: prefix.to_string(),
        tors: 3,
        spines: 2,
        hosts_per_tor: 2,
        rnics_per_host: 1,
        ..FabricSpec::default()
    }
}

/// Runs the selected suite and prints the report.
pub fn run(args: EvalArgs) -> Result<()> {
    if args.suite == Suite::Tasks {
        return tasks::run(&args);
    }
    if args.suite == Suite::Latency {
        let report = latency::run()?;
        println!(
            "{}",
            if args.json {
                serde_json::to_string_pretty(&report)?
            } else {
                serde_json::to_string(&report["summary"])?
            }
        );
        return Ok(());
    }
    if args.suite == Suite::Skeleton {
        let report = skeleton::run(&args)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            for c in &report.cases {
                println!(
                    "{:<24} {:>5} RNICs  correct {:<5} accuracy {:>5}  pairs full {:>9} basic {:>8} ({:.1}x) pinglist {:>8} ({:.1} % smaller)  {:.0} ms{}",
                    c.name,
                    c.rnics,
                    c.correct,
                    c.grouping_accuracy
                        .map_or("-".into(), |a| format!("{a:.3}")),
                    c.full_mesh_pairs,
                    c.basic_pairs,
                    c.basic_reduction_x,
                    c.pinglist_pairs,
                    c.pinglist_reduction_pct,
                    c.infer_ms,
                    c.fallback
                        .as_ref()
                        .map_or(String::new(), |r| format!("  fallback: {r}"))
                );
            }
            println!("{}", serde_json::to_string(&report.summary)?);
        }
        return Ok(());
    }
    if let Some(n) = args.random {
        return run_random(&args, n);
    }
    let all = scenarios::all();
    if args.list {
        for s in &all {
            println!("{}{}", s.name, if s.quick { " (quick)" } else { "" });
        }
        return Ok(());
    }
    for name in &args.scenarios {
        if !all.iter().any(|s| s.name == name) {
            bail!("unknown scenario {name:?}; `rocemesh-lab eval --list` shows them");
        }
    }
    crate::lab::require_root("rocemesh-lab eval")?;
    let selected: Vec<_> = all
        .iter()
        .filter(|s| {
            if args.scenarios.is_empty() {
                !args.quick || s.quick
            } else {
                args.scenarios.iter().any(|n| n == s.name)
            }
        })
        .collect();
    let phases = phases(&args);
    let mut outcomes = Vec::new();
    for s in selected {
        eprintln!("eval: {} ...", s.name);
        let (tors, spines) = args.fabric;
        let spec = FabricSpec {
            tors,
            spines,
            ..lab_spec(&args.prefix)
        };
        let mut lab = Lab::up(spec, &LabTiming::default())?;
        let outcome = run::run_scenario(&mut lab, s.name, |l| s.inject(l), &phases)?;
        eprintln!("eval: {}", run::one_line(&outcome));
        outcomes.push(outcome);
    }
    print_report(&run::Report::new(None, outcomes), args.json)
}

fn phases(args: &EvalArgs) -> run::Phases {
    run::Phases {
        baseline: Duration::from_secs(args.baseline_secs),
        fault: Duration::from_secs(args.fault_secs),
        recovery: Duration::from_secs(args.recovery_secs),
    }
}

fn print_report(report: &run::Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

/// The indices `--random n` runs: all, or the one `--only` names.
fn indices(args: &EvalArgs, n: u32) -> Result<Vec<u32>> {
    Ok(match args.only {
        Some(i) if i >= n => bail!("--only {i} is not below --random {n}"),
        Some(i) => vec![i],
        None => (0..n).collect(),
    })
}

/// `--random N`: N drawn scenarios, each on a fresh lab of its drawn shape.
fn run_random(args: &EvalArgs, n: u32) -> Result<()> {
    let seed = args
        .seed
        .unwrap_or_else(|| rocemesh_proto::now_unix_ns() as u64);
    let drawn = indices(args, n)?
        .into_iter()
        .map(|i| random::draw(seed, i, &args.prefix))
        .collect::<Result<Vec<_>>>()?;
    crate::lab::require_root("rocemesh-lab eval --random")?;
    eprintln!("eval: random suite, seed {seed} (replay: --random {n} --seed {seed} [--only I])");
    let phases = phases(args);
    let mut outcomes = Vec::new();
    for d in &drawn {
        eprintln!(
            "eval: random-{} on {}x{} ToRs x spines, {} host(s)/ToR, {} RNIC(s)/host{}: {}",
            d.index,
            d.spec.tors,
            d.spec.spines,
            d.spec.hosts_per_tor,
            d.spec.rnics_per_host,
            if d.spec.rail_optimized { ", rail" } else { "" },
            serde_json::to_string(&d.faults)?
        );
        let mut lab = Lab::up(d.spec.clone(), &LabTiming::default())?;
        let name = format!("random-{}", d.index);
        let outcome = run::run_scenario(&mut lab, &name, |l| random::inject(l, d), &phases)?;
        eprintln!("eval: {}", run::one_line(&outcome));
        outcomes.push(outcome);
    }
    print_report(&run::Report::new(Some(seed), outcomes), args.json)
}

#[cfg(test)]
mod tests {
    use super::fabric_shape;

    #[test]
    fn a_fabric_shape_is_tors_by_spines_within_what_the_scenarios_name() {
        assert_eq!(fabric_shape("4x3"), Ok((4, 3)));
        assert_eq!(fabric_shape("16X8"), Ok((16, 8)));
        for bad in [
            "2x2", "4x1", "17x2", "4x9", "4by3", "x3", "4x", "-1x2", "300x2",
        ] {
            let e = fabric_shape(bad).expect_err(bad);
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
