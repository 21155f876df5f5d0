//! Section "agent": CPU share and memory of real `rocemesh agent` processes at 8 RNICs ×
//! 150 probes/s on the UDP transport, tracing on. The prober side and the responder side
//! run as two processes in two network namespaces on a bridge ([`crate::netns`]): one
//! agent (8 RNICs, each under its own ToR with one RNIC of the other) probes, the other
//! (`probing = false`) only answers, so each process pays its own side and the sum is
//! what one agent of a symmetric mesh pays (it probes as much as it is probed). Receive
//! paths run in threaded NAPI, as on a NIC, not in the sender's context as on loopback.
//! Baseline: the same binary idle (one RNIC, no peers). The server is a real
//! `rocemesh server` process on the bridge.

use crate::http::Client;
use crate::netns::{BRIDGE_IP, Pair};
use crate::procfs::CpuSample;
use crate::report::Row;
use crate::server_proc::{Scratch, ServerProc};
use crate::{Opts, procfs, runtime};
use anyhow::{Context, Result};
use hyper::Method;
use rocemesh_proto::api::{API_PREFIX, HostInfo, SlaRow};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SECTION: &str = "agent";
const RNICS: u8 = 8;
const PPS: f64 = 150.0;
/// Targets of issue 19.
const CPU_TARGET_PCT: f64 = 1.0;
const RSS_TARGET_MB: f64 = 20.0;
/// How often memory is sampled (the peak also comes from VmHWM).
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Server settings: every RNIC probes its ToR at [`PPS`]; inter-ToR lists at a rate too
/// low to matter (the controller has no switch to turn them off); short periods so one
/// has finished within the measurement.
fn server_sections() -> String {
    format!(
        "[controller]\ntormesh_pps = {PPS}\nintertor_link_pps = 0.01\npinglist_poll = \"1s\"\n\
         [analyzer]\nperiod = \"10s\"\ngrace = \"6s\"\n"
    )
}

/// A `rocemesh agent` process in a namespace; killed on drop.
struct AgentProc(Child);

impl AgentProc {
    /// Starts an agent in `ns` named `host` over `ips` (RNIC i under ToR `bench-tor-i`).
    fn spawn(
        opts: &Opts,
        dir: &Path,
        ns: &str,
        url: &str,
        host: &str,
        ips: &[Ipv4Addr],
        probing: bool,
    ) -> Result<Self> {
        let mut toml =
            format!("host = \"{host}\"\ncontroller_url = \"{url}\"\nprobing = {probing}\n");
        for (i, ip) in ips.iter().enumerate() {
            toml.push_str(&format!(
                "[[rnics]]\nname = \"r{i}\"\nip = \"{ip}\"\ntor = \"bench-tor-{i}\"\n"
            ));
        }
        let config = dir.join(format!("{host}.toml"));
        std::fs::write(&config, toml).context("writing an agent config")?;
        let mut cmd = Command::new("ip");
        // `ip netns exec` execs the program: the child's pid is the agent's.
        cmd.args(["netns", "exec", ns])
            .arg(&opts.rocemesh)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .args(["agent", "--config"])
            .arg(&config);
        Ok(Self(cmd.spawn().context("spawning rocemesh agent")?))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one process used over a window.
struct Usage {
    cpu_pct: f64,
    /// Resident memory at the end of the window, MB.
    rss_mb: f64,
    /// Highest resident memory since the process started (VmHWM), MB.
    peak_mb: f64,
}

/// Samples `procs` from their start: after `warmup` CPU is counted over `window`;
/// memory is watched throughout (so a start-up peak shows in VmHWM).
fn measure(procs: &[&AgentProc], warmup: Duration, window: Duration) -> Result<Vec<Usage>> {
    let start = Instant::now();
    let mut first: Option<Vec<CpuSample>> = None;
    loop {
        let t = start.elapsed();
        if first.is_none() && t >= warmup {
            first = Some(
                procs
                    .iter()
                    .map(|p| procfs::cpu(p.pid()))
                    .collect::<Result<_>>()?,
            );
        }
        if t >= warmup + window {
            break;
        }
        for p in procs {
            procfs::rss_mb(p.pid()).context("an agent exited during the measurement")?;
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
    let first = first.context("no first CPU sample")?;
    procs
        .iter()
        .zip(first)
        .map(|(p, a)| {
            let b = procfs::cpu(p.pid())?;
            Ok(Usage {
                cpu_pct: procfs::cpu_percent(&a, &b),
                rss_mb: procfs::rss_mb(p.pid())?,
                peak_mb: procfs::status_mb(p.pid(), "VmHWM:")?,
            })
        })
        .collect()
}

/// Runs the section.
pub(crate) fn run(opts: &Opts) -> Result<Vec<Row>> {
    // The busy window stays 30 s even in quick runs: the analyzer's last finished period
    // (10 s + 6 s grace) must lie wholly after the agents' start-up.
    let (idle_window, busy_window) = if opts.quick { (5, 30) } else { (10, 30) };
    let scratch = Scratch::new(SECTION)?;
    let pair = Pair::up(RNICS)?;
    let server = ServerProc::start_on(
        &opts.rocemesh,
        scratch.path(),
        &server_sections(),
        BRIDGE_IP.into(),
    )?;
    let rt = runtime()?;
    let client = Client::new(server.url());
    let spawn = |ns, host, ips: &[Ipv4Addr], probing| {
        AgentProc::spawn(opts, scratch.path(), ns, server.url(), host, ips, probing)
    };

    // The idle agent borrows the prober's first address; it is gone (and decommissioned)
    // before the prober starts.
    let idle = spawn(pair.prober.name, "bench-idle", &pair.prober.ips[..1], true)?;
    let idle_use = measure(
        &[&idle],
        Duration::from_secs(3),
        Duration::from_secs(idle_window),
    )?
    .remove(0);
    drop(idle);
    // Otherwise the busy agents would also probe the dead one inter-ToR.
    rt.block_on(decommission(&client, "bench-idle"))?;

    let responder = spawn(
        pair.responder.name,
        "bench-responder",
        &pair.responder.ips,
        false,
    )?;
    let prober = spawn(pair.prober.name, "bench-prober", &pair.prober.ips, true)?;
    let used = measure(
        &[&prober, &responder],
        Duration::from_secs(5),
        Duration::from_secs(busy_window),
    )?;
    let rate = rt.block_on(probes_per_second(&client))?;
    drop((prober, responder));
    server.stop();
    drop(pair);

    let scale = format!("{RNICS} RNICs x {PPS} probes/s, UDP, tracing on");
    let idle_cpu = format!("idle agent (1 RNIC, no peers): {:.2} %", idle_use.cpu_pct);
    let (p, r) = (&used[0], &used[1]);
    let mut rows = vec![
        Row::new(
            SECTION,
            format!("probes/s completed (analyzer, last period; {scale})"),
            rate,
            "probes/s",
        )
        .at_least(f64::from(RNICS) * PPS * 0.95),
        Row::new(
            SECTION,
            format!("prober agent CPU, % of one core ({scale})"),
            p.cpu_pct,
            "%",
        )
        .baseline(idle_cpu.clone()),
        Row::new(
            SECTION,
            format!("responder agent CPU, % of one core (answering {scale})"),
            r.cpu_pct,
            "%",
        )
        .baseline(idle_cpu.clone()),
        Row::new(
            SECTION,
            "agent CPU, prober + responder (one agent of a symmetric mesh)",
            p.cpu_pct + r.cpu_pct,
            "%",
        )
        .at_most(CPU_TARGET_PCT)
        .baseline(idle_cpu),
    ];
    for (side, u) in [("prober", p), ("responder", r)] {
        rows.push(
            Row::new(
                SECTION,
                format!("{side} agent RSS, steady state"),
                u.rss_mb,
                "MB",
            )
            .at_most(RSS_TARGET_MB)
            .baseline(format!("idle agent: {:.1} MB", idle_use.rss_mb)),
        );
        rows.push(
            Row::new(
                SECTION,
                format!("{side} agent peak RSS (VmHWM, incl. start-up)"),
                u.peak_mb,
                "MB",
            )
            .at_most(RSS_TARGET_MB)
            .baseline(format!("idle agent: {:.1} MB", idle_use.peak_mb)),
        );
    }
    Ok(rows)
}

/// Deletes the host named `host` from the registry.
async fn decommission(client: &Client, host: &str) -> Result<()> {
    let hosts: Vec<HostInfo> = client
        .get(&format!("{API_PREFIX}/hosts"), None)
        .await?
        .json()?;
    for h in hosts.iter().filter(|h| h.host == host) {
        let answer = client
            .send(
                Method::DELETE,
                &format!("{API_PREFIX}/hosts/{}", h.id),
                None,
                None,
                bytes::Bytes::new(),
            )
            .await?;
        anyhow::ensure!(
            answer.status.is_success(),
            "decommissioning {host}: HTTP {}",
            answer.status
        );
    }
    Ok(())
}

/// Probe results per second the analyzer counted in the last finished cluster period.
async fn probes_per_second(client: &Client) -> Result<f64> {
    let rows: Vec<SlaRow> = client
        .get(&format!("{API_PREFIX}/sla/latest?scope=cluster"), None)
        .await?
        .json()?;
    Ok(rows
        .first()
        .map_or(0.0, |r| r.probes as f64 / (r.period_ms as f64 / 1000.0)))
}
