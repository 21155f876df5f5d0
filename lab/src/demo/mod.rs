//! `rocemesh-lab demo`: one command that shows the whole loop working.
//!
//! Default (root): a network-namespace fabric, a server and one agent per host; after a
//! baseline a fault is injected and the problem found is printed (what and where).
//! `--loopback` (no root): a server and several agents on 127.0.0.0/8 addresses in one
//! process, printing live SLA figures every analysis period; after a baseline one
//! agent is stopped, so its RNICs' probes time out in the figures.

mod fabric;
mod loopback;
mod table;

use anyhow::Result;
use clap::Args;

/// Demo options.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Run on loopback addresses without root instead of a namespace fabric.
    #[arg(long)]
    pub loopback: bool,
    /// Fabric demo: the fault to inject after the baseline (testbed fault JSON).
    #[arg(long, default_value = r#"{"kind":"link_down","link":"t0-s1"}"#)]
    pub fault: String,
    /// Fabric demo: seconds of baseline before the fault.
    #[arg(long, default_value_t = 15)]
    pub baseline_secs: u64,
    /// Loopback demo: hosts (one agent each).
    #[arg(long, default_value_t = 4)]
    pub hosts: u8,
    /// Loopback demo: RNICs per host.
    #[arg(long, default_value_t = 2)]
    pub rnics_per_host: u8,
    /// Loopback demo: ToRs the hosts are spread over.
    #[arg(long, default_value_t = 2)]
    pub tors: u8,
    /// Loopback demo: analysis period in ms (short, so figures appear quickly).
    #[arg(long, default_value_t = 5_000)]
    pub period_ms: u64,
    /// Loopback demo: stop one agent after this many seconds (0: never).
    #[arg(long, default_value_t = 20)]
    pub stop_agent_after_secs: u64,
    /// Exit after this many seconds (0: run until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub duration_secs: u64,
    /// Loopback demo: HTTP listen address of the server (API stays up while the demo runs).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> Result<()> {
    if args.loopback {
        loopback::run(args)
    } else {
        fabric::run(args)
    }
}
