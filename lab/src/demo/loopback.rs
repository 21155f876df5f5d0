//! The no-root demo: server + agents on 127.0.0.0/8, live SLA table, one agent stopped.

use super::{DemoArgs, table};
use anyhow::{Context, Result, bail};
use rocemesh::config::ServerConfig;
use rocemesh::server::{self, Roles};
use rocemesh_agent::{AgentConfig, AgentHandle, RnicConfig};
use rocemesh_proto::api::SlaRow;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// Loopback address of RNIC `r` of host `h` (127.77.h+1.r+1).
fn rnic_ip(h: u8, r: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 77, h + 1, r + 1))
}

fn agent_config(url: &str, h: u8, args: &DemoArgs) -> Result<AgentConfig> {
    let rnics = (0..args.rnics_per_host)
        .map(|r| {
            RnicConfig::parse(&format!(
                "rnic{r}={},tor=tor-{},rail={r}",
                rnic_ip(h, r),
                h % args.tors
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut cfg = AgentConfig::new(url, rnics);
    cfg.host = format!("demo-host-{h}");
    Ok(cfg)
}

fn fetch_latest(url: &str, scope: &str) -> Result<Vec<SlaRow>> {
    let mut resp = ureq::get(&format!("{url}/api/v1/sla/latest?scope={scope}"))
        .call()
        .with_context(|| format!("GET {url}/api/v1/sla/latest"))?;
    Ok(resp.body_mut().read_json()?)
}

fn print_period(url: &str, last: &mut i64) -> Result<()> {
    let cluster = fetch_latest(url, "cluster")?;
    let Some(c) = cluster.first() else {
        return Ok(());
    };
    if c.period_start_ms == *last {
        return Ok(());
    }
    *last = c.period_start_ms;
    let mut pairs = fetch_latest(url, "tor_pair")?;
    pairs.sort_by(|a, b| a.key.cmp(&b.key));
    let secs_of_day = (c.period_start_ms / 1000).rem_euclid(86_400);
    println!(
        "\n-- period {:02}:{:02}:{:02} UTC, {} s --",
        secs_of_day / 3600,
        secs_of_day / 60 % 60,
        secs_of_day % 60,
        c.period_ms / 1000
    );
    println!("{}", table::header());
    println!("{}", table::row(c));
    for p in &pairs {
        println!("{}", table::row(p));
    }
    Ok(())
}

/// Runs the loopback demo until `--duration-secs` or Ctrl-C.
pub(super) fn run(args: DemoArgs) -> Result<()> {
    if !(2..=50).contains(&args.hosts) || !(1..=8).contains(&args.rnics_per_host) {
        bail!("--hosts must be 2..=50 and --rnics-per-host 1..=8");
    }
    if args.tors == 0 || args.tors > args.hosts {
        bail!("--tors must be between 1 and --hosts");
    }
    let dir = std::env::temp_dir().join(format!("rocemesh-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cfg = ServerConfig {
        listen: args.listen,
        ..ServerConfig::default()
    };
    cfg.database = format!("sqlite://{}", dir.join("demo.db").display());
    cfg.controller.upload_period_ms = 1_000;
    cfg.controller.pinglist_poll_ms = 2_000;
    cfg.analyzer.period_ms = args.period_ms;
    cfg.analyzer.grace_ms = 1_500;
    cfg.analyzer.diagnosis.paths_settle_ms = 1_500;

    let rt = rocemesh::cli::runtime()?;
    let srv = rt.block_on(server::start(cfg, Roles::Both))?;
    let url = srv.url();
    println!(
        "rocemesh-lab demo: server {url} (try {url}/api/v1/rnics), {} agents x {} RNICs on 127.77.x.y under {} ToRs, SQLite {}",
        args.hosts,
        args.rnics_per_host,
        args.tors,
        dir.display()
    );
    let mut agents: Vec<Option<AgentHandle>> = Vec::new();
    for h in 0..args.hosts {
        agents.push(Some(rocemesh_agent::start(agent_config(&url, h, &args)?)?));
    }
    println!(
        "agents started; figures appear once per {} ms period (network RTT from kernel timestamps)",
        args.period_ms
    );

    let started = Instant::now();
    let mut last_period = 0;
    let mut stopped = false;
    loop {
        let interrupted = rt.block_on(async {
            tokio::select! {
                _ = server::termination() => true,
                _ = tokio::time::sleep(Duration::from_millis(500)) => false,
            }
        });
        let elapsed = started.elapsed().as_secs();
        if interrupted || (args.duration_secs > 0 && elapsed >= args.duration_secs) {
            break;
        }
        if !stopped && args.stop_agent_after_secs > 0 && elapsed >= args.stop_agent_after_secs {
            stopped = true;
            let h = args.hosts - 1;
            if let Some(agent) = agents[h as usize].take() {
                agent.shutdown()?;
            }
            println!(
                "\n>>> stopped the agent of demo-host-{h}: probes to its RNICs ({}..) now time out (tor-{} pairs)",
                rnic_ip(h, 0),
                h % args.tors
            );
        }
        if let Err(e) = print_period(&url, &mut last_period) {
            eprintln!("demo: reading SLA figures failed: {e:#}");
        }
    }
    for agent in agents.into_iter().flatten() {
        agent.shutdown()?;
    }
    rt.block_on(srv.shutdown())?;
    let _ = std::fs::remove_dir_all(&dir);
    println!("demo finished");
    Ok(())
}
