//! `rocemesh-bench`: runs every benchmark section, prints one Markdown table with each
//! figure's target and same-run baseline, and writes the rows as JSON.
//!
//! `cargo run --release -p rocemesh-bench -- [--only SECTION]... [--json FILE] [--quick]`

mod agent;
mod analyzer;
mod analyzer_proc;
mod bounded;
mod controller;
mod fleet;
mod http;
mod kernels;
mod latency;
mod load;
mod netns;
mod procfs;
mod report;
mod server_proc;

use anyhow::{Result, bail};
use clap::Parser;
use report::Row;
use std::path::PathBuf;

/// Command-line options shared by every section.
#[derive(Debug, Parser)]
#[command(about = "rocemesh benchmarks: one table of figures, targets and baselines")]
pub struct Opts {
    /// Run only these sections (repeatable); default all.
    #[arg(long)]
    only: Vec<String>,
    /// Also write the rows as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Smaller scales and shorter runs (a smoke test of the bench itself).
    #[arg(long)]
    pub quick: bool,
    /// Analyzer section: ToRs of 64 RNICs in its runs (the second period figure uses five
    /// times as many), e.g. 160 for 10k RNICs with `--quick`'s run lengths.
    #[arg(long)]
    pub analyzer_tors: Option<u32>,
    /// The `rocemesh` binary the server and agent processes run; default: next to this one.
    #[arg(long, default_value_os_t = sibling_rocemesh())]
    pub rocemesh: PathBuf,
    /// Analyzer section: the `rocemesh` binary of the commit to compare against; its
    /// analyzer process is measured in the same run and is the baseline of the process rows.
    #[arg(long)]
    pub base_rocemesh: Option<PathBuf>,
}

/// `rocemesh` in the directory of this executable (both are built into one target dir).
fn sibling_rocemesh() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("rocemesh")))
        .unwrap_or_else(|| PathBuf::from("rocemesh"))
}

/// The tokio runtime a section drives its clients on.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// A benchmark section: its name and the function that measures its rows.
type Section = (&'static str, fn(&Opts) -> Result<Vec<Row>>);

/// Every section, in table order.
const SECTIONS: &[Section] = &[
    ("controller", controller::run),
    ("analyzer", analyzer::run),
    ("load", load::run),
    ("agent", agent::run),
    ("kernels", kernels::run),
];

fn main() -> Result<()> {
    let opts = Opts::parse();
    for name in &opts.only {
        if !SECTIONS.iter().any(|(n, _)| n == name) {
            let known: Vec<_> = SECTIONS.iter().map(|(n, _)| *n).collect();
            bail!("unknown section {name:?}; sections: {known:?}");
        }
    }
    let mut rows = Vec::new();
    for (name, run) in SECTIONS {
        if !opts.only.is_empty() && !opts.only.iter().any(|n| n == name) {
            continue;
        }
        eprintln!("== {name}");
        rows.extend(run(&opts)?);
    }
    println!("{}", report::markdown(&rows));
    if let Some(path) = &opts.json {
        std::fs::write(path, serde_json::to_vec_pretty(&rows)?)?;
    }
    Ok(())
}
