//! `rocemesh-lab testbed up|down|fault|clear|status|map`: drive the namespace fabric by hand.

use crate::lab::{helper_command, require_root};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use rocemesh_testbed::{Fabric, FabricSpec, Fault};
use std::path::PathBuf;

/// Testbed subcommands.
#[derive(Debug, Subcommand)]
pub enum TestbedCmd {
    /// Build a fabric (idempotent: a fabric with the same prefix is rebuilt).
    Up(UpArgs),
    /// Remove a fabric and everything it started, even after a crash.
    Down(PrefixArg),
    /// Inject a fault, e.g. '{"kind":"loss","link":"t0-s1","direction":"both","percent":10}';
    /// kinds: loss, flow_drop, delay, corrupt, congestion, link_down, link_flap, rnic_down,
    /// rnic_flap, spine_down, cpu_starve. Prints the fault id and its ground truth.
    Fault {
        /// Which fabric.
        #[command(flatten)]
        prefix: PrefixArg,
        /// The fault as JSON.
        fault: String,
    },
    /// Clear one fault (`--id`) or all.
    Clear {
        /// Which fabric.
        #[command(flatten)]
        prefix: PrefixArg,
        /// Fault id printed by `fault`; without it every fault is cleared.
        #[arg(long)]
        id: Option<u16>,
    },
    /// Print the topology and the active faults as JSON.
    Status(PrefixArg),
    /// Print the analyzer fabric map (TOML) of a fabric.
    Map(PrefixArg),
    /// Synthetic training-job traffic between host namespaces.
    #[command(subcommand)]
    Job(JobCmd),
    /// Fault helper process (NFQUEUE delay/corruption, background traffic); internal.
    #[command(hide = true)]
    Helper {
        /// Helper arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Training-job traffic subcommands.
#[derive(Debug, Subcommand)]
pub enum JobCmd {
    /// Start a job from a JSON JobSpec, e.g. '{"name":"j1","tp":2,"pp":2,"dp":4,
    /// "iteration_ms":2000,"pp_offset_ms":100,"allreduce_bytes":2000000,
    /// "activation_bytes":200000,"jitter_ms":10,"seed":1}'; prints its ground truth.
    Start {
        /// Which fabric.
        #[command(flatten)]
        prefix: PrefixArg,
        /// The job as JSON.
        spec: String,
    },
    /// Stop a job by name.
    Stop {
        /// Which fabric.
        #[command(flatten)]
        prefix: PrefixArg,
        /// Job name.
        name: String,
    },
    /// List running jobs with their ground truth (JSON).
    List(PrefixArg),
}

/// The fabric's name prefix.
#[derive(Debug, Args)]
pub struct PrefixArg {
    /// Namespace name prefix of the fabric.
    #[arg(long, default_value = "rmtb")]
    pub prefix: String,
}

/// Fabric shape for `up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Spec file (JSON or TOML FabricSpec); flags below are ignored when given.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Namespace name prefix.
    #[arg(long, default_value = "rmtb")]
    pub prefix: String,
    /// ToR (leaf) routers.
    #[arg(long, default_value_t = 2)]
    pub tors: u8,
    /// Spine routers.
    #[arg(long, default_value_t = 2)]
    pub spines: u8,
    /// Hosts per ToR.
    #[arg(long, default_value_t = 2)]
    pub hosts_per_tor: u8,
    /// RNICs per host.
    #[arg(long, default_value_t = 1)]
    pub rnics_per_host: u8,
    /// Rail-optimized wiring (RNIC i of every host on ToR i of its pod).
    #[arg(long)]
    pub rail_optimized: bool,
    /// Add the management network (agents in hosts reach 198.19.x.1 in the root namespace, x from the prefix).
    #[arg(long)]
    pub management: bool,
}

impl UpArgs {
    fn spec(&self) -> Result<FabricSpec> {
        if let Some(path) = &self.spec {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            return match serde_json::from_str(&text) {
                Ok(s) => Ok(s),
                Err(_) => toml::from_str(&text).with_context(|| {
                    format!("parsing {} (JSON or TOML FabricSpec)", path.display())
                }),
            };
        }
        Ok(FabricSpec {
            prefix: self.prefix.clone(),
            tors: self.tors,
            spines: self.spines,
            hosts_per_tor: self.hosts_per_tor,
            rnics_per_host: self.rnics_per_host,
            rail_optimized: self.rail_optimized,
            management: self.management,
        })
    }
}

fn open(prefix: &str) -> Result<Fabric> {
    Ok(Fabric::open(prefix)
        .with_context(|| format!("no fabric {prefix:?} is up"))?
        .with_helper(helper_command()?))
}

/// Runs a testbed subcommand.
pub fn run(cmd: TestbedCmd) -> Result<()> {
    if let TestbedCmd::Helper { args } = &cmd {
        return rocemesh_testbed::helper::run(args);
    }
    require_root("rocemesh-lab testbed")?;
    match cmd {
        TestbedCmd::Up(args) => {
            let fabric = Fabric::up(&args.spec()?)?;
            println!("{}", serde_json::to_string_pretty(fabric.topology())?);
        }
        TestbedCmd::Down(p) => Fabric::down(&p.prefix)?,
        TestbedCmd::Fault { prefix, fault } => {
            let fault: Fault = serde_json::from_str(&fault).context("parsing the fault JSON")?;
            let handle = open(&prefix.prefix)?.apply(&fault)?;
            println!("{}", serde_json::to_string(&handle)?);
        }
        TestbedCmd::Clear { prefix, id } => {
            let fabric = open(&prefix.prefix)?;
            match id {
                Some(id) => fabric.clear(id)?,
                None => fabric.clear_all()?,
            }
        }
        TestbedCmd::Status(p) => {
            let fabric = open(&p.prefix)?;
            let status = serde_json::json!({ "topology": fabric.topology(), "faults": fabric.active_faults()? });
            println!("{}", serde_json::to_string_pretty(&status)?);
        }
        TestbedCmd::Map(p) => print!(
            "{}",
            crate::lab::fabric_map_toml(open(&p.prefix)?.topology())?
        ),
        TestbedCmd::Job(JobCmd::Start { prefix, spec }) => {
            let spec: rocemesh_testbed::JobSpec =
                serde_json::from_str(&spec).context("parsing the job JSON")?;
            let handle = open(&prefix.prefix)?.start_job(&spec)?;
            println!("{}", serde_json::to_string(handle.truth())?);
        }
        TestbedCmd::Job(JobCmd::Stop { prefix, name }) => open(&prefix.prefix)?.stop_job(&name)?,
        TestbedCmd::Job(JobCmd::List(p)) => println!(
            "{}",
            serde_json::to_string_pretty(&open(&p.prefix)?.jobs()?)?
        ),
        TestbedCmd::Helper { .. } => unreachable!("handled above"),
    }
    Ok(())
}
