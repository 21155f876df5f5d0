//! `rocemesh-lab sim`: a simulated fabric (leaf-spine, fat-tree or rail) driving the real
//! controller and analyzer, in process and in virtual time, or a running server over
//! HTTP (`--server`, wall-clock time); prints what was found against the injected
//! ground truth with precision, recall, top-1 and time to localize, and the same scores
//! of R-Pingmesh's Algorithm 1 on the same data.

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use rocemesh_analyzer::AnalyzerConfig;
use rocemesh_controller::ControllerConfig;
use rocemesh_sim::http::HttpDriver;
use rocemesh_sim::random::{self, Outcome, Scale, Totals};
use rocemesh_sim::scenario::{Report, Scenario, run_in_process};
use rocemesh_sim::score::{Score, Truth};
use rocemesh_sim::{FaultSpec, Shape, Sim, SimConfig};
use std::time::Duration;

/// Fabric kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Topology {
    /// Two-tier Clos.
    LeafSpine,
    /// k-ary three-tier fat-tree.
    FatTree,
    /// Rail-optimized (RNIC i of a host on rail ToR i of its group).
    Rail,
}

/// Options of `rocemesh-lab sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Fabric kind.
    #[arg(long, value_enum, default_value_t = Topology::LeafSpine)]
    pub topology: Topology,
    /// Leaf-spine: ToRs.
    #[arg(long, default_value_t = 16)]
    pub tors: u32,
    /// Leaf-spine and rail: spines.
    #[arg(long, default_value_t = 4)]
    pub spines: u32,
    /// Leaf-spine: hosts per ToR.
    #[arg(long, default_value_t = 8)]
    pub hosts_per_tor: u32,
    /// Leaf-spine and fat-tree: RNICs per host.
    #[arg(long, default_value_t = 8)]
    pub rnics_per_host: u32,
    /// Fat-tree arity (k = 48: 27,648 hosts).
    #[arg(long, default_value_t = 8)]
    pub k: u32,
    /// Rail: host groups.
    #[arg(long, default_value_t = 4)]
    pub groups: u32,
    /// Rail: hosts per group.
    #[arg(long, default_value_t = 16)]
    pub hosts_per_group: u32,
    /// Rail: rails (RNICs per host).
    #[arg(long, default_value_t = 8)]
    pub rails: u32,
    /// A fault as JSON, e.g. '{"kind":"link_down","link":"t0-s1"}' (repeatable); kinds:
    /// link_loss, link_down, link_flap, link_delay, switch_down, switch_loss, switch_flap,
    /// switch_delay, rnic_loss, rnic_down, rnic_flap, rnic_delay, host_down, agent_restart,
    /// cpu_noise.
    #[arg(long = "fault")]
    pub faults: Vec<String>,
    /// Fault-free seconds before the faults start.
    #[arg(long, default_value_t = 30)]
    pub warmup: u32,
    /// Whole run, seconds (virtual time in process, wall clock with --server).
    #[arg(long, default_value_t = 60)]
    pub seconds: u32,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Drive a running server at this URL over HTTP instead of in process (its analyzer
    /// must read the map written by --write-map).
    #[arg(long)]
    pub server: Option<String>,
    /// Bearer token (agent role) for --server.
    #[arg(long, env = "ROCEMESH_TOKEN")]
    pub token: Option<String>,
    /// Write the fabric map (the analyzer's `fabric_map` file) here and exit.
    #[arg(long)]
    pub write_map: Option<std::path::PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Run N seeded random scenarios (shapes, faults, positions drawn from --seed)
    /// instead of one fabric; prints each truth and verdict and a summary.
    #[arg(long, value_name = "N")]
    pub random: Option<u32>,
    /// With --random: fabric sizes to draw (lab: 2–6 ToRs, large: 1k–10k RNICs).
    #[arg(long, value_enum, default_value_t = RandomScale::Large)]
    pub scale: RandomScale,
    /// With --random: run only scenario I of the suite (replays a failing one).
    #[arg(long, value_name = "I")]
    pub only: Option<u32>,
}

/// Fabric sizes of a random suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RandomScale {
    /// 2–6 ToRs × 2–4 spines, 1–2 RNICs per host, rail-optimized too.
    Lab,
    /// 1,000–10,000 RNICs: leaf-spine, fat-tree or rail-optimized.
    Large,
}

impl SimArgs {
    fn shape(&self) -> Shape {
        match self.topology {
            Topology::LeafSpine => Shape::LeafSpine {
                tors: self.tors,
                spines: self.spines,
                hosts_per_tor: self.hosts_per_tor,
                rnics_per_host: self.rnics_per_host,
            },
            Topology::FatTree => Shape::FatTree {
                k: self.k,
                rnics_per_host: self.rnics_per_host,
            },
            Topology::Rail => Shape::Rail {
                groups: self.groups,
                hosts_per_group: self.hosts_per_group,
                rails: self.rails,
                spines: self.spines,
            },
        }
    }

    fn scenario(&self) -> Result<Scenario> {
        let faults = self
            .faults
            .iter()
            .map(|f| serde_json::from_str::<FaultSpec>(f).with_context(|| format!("--fault {f}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Scenario {
            config: SimConfig::new(self.shape(), self.seed),
            faults,
            warmup_s: self.warmup,
            seconds: self.seconds,
        })
    }
}

/// Runs `rocemesh-lab sim`.
pub fn run(args: SimArgs) -> Result<()> {
    if let Some(n) = args.random {
        return random_suite(&args, n);
    }
    let scenario = args.scenario()?;
    if let Some(path) = &args.write_map {
        let sim = Sim::new(scenario.config)?;
        std::fs::write(path, sim.fabric_map_toml()?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "fabric map of {} switches written to {}",
            sim.fabric().switches.len(),
            path.display()
        );
        return Ok(());
    }
    if let Some(url) = &args.server {
        return over_http(&scenario, url, args.token.as_deref(), args.json);
    }
    let report = rocemesh::cli::runtime()?.block_on(run_in_process(
        &scenario,
        ControllerConfig::default(),
        AnalyzerConfig::default(),
    ))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

fn over_http(s: &Scenario, url: &str, token: Option<&str>, json: bool) -> Result<()> {
    if s.warmup_s >= s.seconds {
        bail!("--seconds must exceed --warmup");
    }
    let mut d = HttpDriver::new(Sim::new(s.config.clone())?, url, token)?;
    d.register_all()?;
    d.run_for(Duration::from_secs(s.warmup_s.into()))?;
    let onset = rocemesh_proto::now_unix_ms();
    for f in &s.faults {
        d.sim_mut().inject(f.clone(), onset, None)?;
    }
    d.run_for(Duration::from_secs((s.seconds - s.warmup_s).into()))?;
    let score = d.score(onset)?;
    let out = serde_json::json!({
        "rnics": d.sim().fabric().rnics.len(),
        "truth": d.sim().truth(),
        "score": score,
        "stats": d.sim().stats(),
        "requests": d.stats(),
        "last_error": d.last_error(),
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_score("analyzer", &score);
        println!("requests: {:?}", d.stats());
    }
    Ok(())
}

fn print_score(who: &str, s: &Score) {
    println!("{who:<9} {}", s.summary());
    println!("          found {:?} missed {:?}", s.found, s.missed);
}

fn print_report(r: &Report) {
    println!(
        "{} RNICs on {} hosts, {} switches, {} links: built in {:.0} ms, registered in {:.0} ms, {} s simulated in {:.1} s",
        r.rnics,
        r.hosts,
        r.switches,
        r.links,
        r.build_ms,
        r.register_ms,
        r.seconds,
        r.run_ms / 1e3
    );
    println!(
        "{} probe results ({} timeouts), {} traces, {} batches",
        r.stats.probes, r.stats.timeouts, r.stats.traces, r.stats.batches
    );
    for t in &r.truth {
        println!("truth     {:?} {}", t.kind, truth_label(t));
    }
    print_score("analyzer", &r.score);
    print_score("alg1", &r.baseline);
}

fn random_suite(args: &SimArgs, n: u32) -> Result<()> {
    if !args.faults.is_empty() {
        bail!("--fault and --random exclude each other: a random suite draws its faults");
    }
    let scale = match args.scale {
        RandomScale::Lab => Scale::Lab,
        RandomScale::Large => Scale::Large,
    };
    let indices: Vec<u32> = match args.only {
        Some(i) if i >= n => bail!("--only {i} is not below --random {n}"),
        Some(i) => vec![i],
        None => (0..n).collect(),
    };
    let rt = rocemesh::cli::runtime()?;
    let mut outcomes = Vec::with_capacity(indices.len());
    for i in indices {
        let o = rt.block_on(random::run(args.seed, i, scale))?;
        eprintln!("{}", outcome_line(&o));
        outcomes.push(o);
    }
    let totals = Totals::of(&outcomes);
    if args.json {
        let out = serde_json::json!({
            "seed": args.seed,
            "scale": scale,
            "scenarios": outcomes,
            "summary": totals,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("seed {} ({} scenarios)", args.seed, outcomes.len());
        println!("analyzer {}", totals.analyzer.line());
        println!("alg1     {}", totals.baseline.line());
        let wrong: Vec<String> = outcomes
            .iter()
            .filter(|o| !o.score.correct)
            .map(|o| o.index.to_string())
            .collect();
        if !wrong.is_empty() {
            println!(
                "wrong: {} (replay one: rocemesh-lab sim --random {n} --seed {} --scale {} --only I)",
                wrong.join(" "),
                args.seed,
                if scale == Scale::Lab { "lab" } else { "large" }
            );
        }
    }
    Ok(())
}

fn truth_label(t: &Truth) -> String {
    let mut s = format!("{} {}", t.component.label(), t.fault);
    if let Some(d) = &t.direction {
        s.push_str(&format!(" [{} -> {}]", d.from, d.to));
    }
    s
}

/// One scenario: its index, fabric, truth, verdicts and whether it was right.
fn outcome_line(o: &Outcome) -> String {
    let truth: Vec<String> = o.truth.iter().map(truth_label).collect();
    format!(
        "#{:<4} {:<5} {:>6} RNICs {:?}\n      truth {:?}\n      found {:?} ({})\n      alg1  {:?}",
        o.index,
        if o.score.correct { "OK" } else { "WRONG" },
        o.rnics,
        o.shape,
        truth,
        o.score.found,
        o.score.summary(),
        o.baseline.found,
    )
}
