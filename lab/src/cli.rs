//! Command-line surface of the `rocemesh-lab` binary and dispatch to the tools.

use anyhow::Result;
use clap::{Parser, Subcommand};

/// rocemesh-lab: demonstrations and evaluations of rocemesh on namespace and simulated fabrics.
#[derive(Debug, Parser)]
#[command(name = "rocemesh-lab", version, about)]
pub struct Cli {
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true)]
    pub log_json: bool,
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The tools of the binary; they print their own output and log warnings only.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// One-command demonstration (namespace fabric as root; `--loopback` without root).
    Demo(crate::demo::DemoArgs),
    /// Network-namespace fabric and fault injection.
    #[command(subcommand)]
    Testbed(crate::testbed::TestbedCmd),
    /// Localization suite: scenarios on fresh fabrics, scored against the ground truth.
    Eval(crate::eval::EvalArgs),
    /// Simulated fabric (leaf-spine, fat-tree, rail) driving the real controller and analyzer.
    ///
    /// Scores what was found against the injected faults.
    Sim(crate::sim::SimArgs),
}

/// Runs the parsed command to completion.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(args) => crate::demo::run(args),
        Command::Testbed(cmd) => crate::testbed::run(cmd),
        Command::Eval(args) => crate::eval::run(args),
        Command::Sim(args) => crate::sim::run(args),
    }
}
