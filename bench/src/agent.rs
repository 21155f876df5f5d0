//! Section "agent": CPU share and memory of a real `rocemesh agent` process with 8 RNICs
//! (loopback addresses, one ToR) probing each other at 150 probes/s each on the UDP
//! transport and answering the same, against the same binary idle (one RNIC, no peers)
//! as the in-run baseline. The server is a real `rocemesh server` process.
//!
//! Loopback caveat: the kernel's receive path for loopback traffic runs in the sender's
//! context, so the agent is also charged for work a real NIC would do.

use crate::http::Client;
use crate::report::Row;
use crate::server_proc::{Scratch, ServerProc};
use crate::{Opts, procfs, runtime};
use anyhow::{Context, Result};
use hyper::Method;
use rocemesh_proto::api::{API_PREFIX, HostInfo, SlaRow};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SECTION: &str = "agent";
const RNICS: u8 = 8;
const PPS: f64 = 150.0;
/// Targets of issue 7 / the foundation issue.
const CPU_TARGET_PCT: f64 = 1.0;
const RSS_TARGET_MB: f64 = 20.0;

/// Server settings: every RNIC probes its ToR at [`PPS`]; short periods so one has
/// finished within the measurement.
fn server_sections() -> String {
    format!(
        "[controller]\ntormesh_pps = {PPS}\npinglist_poll = \"1s\"\n[analyzer]\nperiod = \"10s\"\ngrace = \"6s\"\n"
    )
}

/// A `rocemesh agent` process; killed on drop.
struct AgentProc(Child);

impl AgentProc {
    fn spawn(opts: &Opts, url: &str, rnics: u8) -> Result<Self> {
        let mut cmd = Command::new(&opts.rocemesh);
        cmd.env("RUST_LOG", "warn").stdout(Stdio::null()).args([
            "agent",
            "--controller",
            url,
            "--host",
            &format!("bench-{rnics}"),
        ]);
        for r in 1..=rnics {
            cmd.args([
                "--rnic",
                &format!("r{r}=127.99.{rnics}.{r},tor=bench-tor-{rnics}"),
            ]);
        }
        Ok(Self(cmd.spawn().context("spawning rocemesh agent")?))
    }

    /// (CPU % of one core over `window` after `warmup`, RSS MB, peak RSS MB).
    fn measure(&self, warmup: Duration, window: Duration) -> Result<(f64, f64, f64)> {
        let pid = self.0.id();
        std::thread::sleep(warmup);
        let a = procfs::cpu(pid)?;
        std::thread::sleep(window);
        let b = procfs::cpu(pid)?;
        Ok((
            procfs::cpu_percent(&a, &b),
            procfs::rss_mb(pid)?,
            procfs::status_mb(pid, "VmHWM:")?,
        ))
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the section.
pub fn run(opts: &Opts) -> Result<Vec<Row>> {
    // The busy window stays 30 s even in quick runs: the analyzer's last finished period
    // (10 s + 6 s grace) must lie wholly after the agent's start-up.
    let (idle_window, busy_window) = if opts.quick { (5, 30) } else { (10, 30) };
    let scratch = Scratch::new(SECTION)?;
    let server = ServerProc::start(&opts.rocemesh, scratch.path(), &server_sections())?;
    let rt = runtime()?;
    let client = Client::new(server.url());

    let idle = AgentProc::spawn(opts, server.url(), 1)?;
    let (idle_cpu, idle_rss, _) =
        idle.measure(Duration::from_secs(3), Duration::from_secs(idle_window))?;
    drop(idle);
    // Otherwise the busy agent would also probe the dead one inter-ToR.
    rt.block_on(decommission(&client, "bench-1"))?;

    let busy = AgentProc::spawn(opts, server.url(), RNICS)?;
    let (cpu, rss, hwm) = busy.measure(Duration::from_secs(5), Duration::from_secs(busy_window))?;
    let rate = rt.block_on(probes_per_second(&client))?;
    drop(busy);
    server.stop();

    let scale = format!("{RNICS} RNICs x {PPS} probes/s, UDP on loopback");
    Ok(vec![
        Row::new(
            SECTION,
            format!("probes/s completed (analyzer, last period; {scale})"),
            rate,
            "probes/s",
        )
        .at_least(f64::from(RNICS) * PPS * 0.95),
        Row::new(
            SECTION,
            format!("agent CPU, % of one core ({scale})"),
            cpu,
            "%",
        )
        .at_most(CPU_TARGET_PCT)
        .baseline(format!("idle agent (1 RNIC, no peers): {idle_cpu:.2} %")),
        Row::new(SECTION, "agent RSS, steady state", rss, "MB")
            .at_most(RSS_TARGET_MB)
            .baseline(format!("idle agent: {idle_rss:.1} MB")),
        Row::new(SECTION, "agent peak RSS (VmHWM, incl. start-up)", hwm, "MB")
            .at_most(RSS_TARGET_MB),
    ])
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
