//! `rocemesh demo`: one command that shows the whole loop working.
//!
//! `--loopback` (no root): a server and several agents on 127.0.0.0/8 addresses in one
//! process, printing live SLA figures every analysis period; after a baseline one
//! agent is stopped, so its RNICs' probes time out in the figures.

mod loopback;
mod table;

use anyhow::{Result, bail};
use clap::Args;

/// Demo options.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Run on loopback addresses without root (the only mode until the namespace testbed).
    #[arg(long)]
    pub loopback: bool,
    /// Hosts (one agent each).
    #[arg(long, default_value_t = 4)]
    pub hosts: u8,
    /// RNICs per host.
    #[arg(long, default_value_t = 2)]
    pub rnics_per_host: u8,
    /// ToRs the hosts are spread over.
    #[arg(long, default_value_t = 2)]
    pub tors: u8,
    /// Analysis period in ms (short, so figures appear quickly).
    #[arg(long, default_value_t = 5_000)]
    pub period_ms: u64,
    /// Stop one agent after this many seconds (0: never), to show the timeouts it causes.
    #[arg(long, default_value_t = 20)]
    pub stop_agent_after_secs: u64,
    /// Exit after this many seconds (0: run until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub duration_secs: u64,
    /// HTTP listen address of the demo server (API stays up while the demo runs).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> Result<()> {
    if !args.loopback {
        bail!("only `rocemesh demo --loopback` exists so far (the network-namespace fabric demo needs the testbed)");
    }
    loopback::run(args)
}
