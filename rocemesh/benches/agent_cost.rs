//! Agent cost benchmark: CPU share and memory of a real `rocemesh agent` process with
//! 8 RNICs probing each other at 150 probes/s each (and answering the same), against the
//! same process idle as the in-run baseline. Prints a table.
//!
//! `cargo bench -p rocemesh --bench agent_cost` (about a minute). Loopback caveat: the
//! kernel's receive path for loopback traffic runs in the sender's context, so the agent
//! is also charged for work a real NIC would do.

use rocemesh::config::ServerConfig;
use rocemesh::server::{self, Roles};
use rocemesh_proto::api::SlaRow;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const RNICS: u8 = 8;
const PPS: f64 = 150.0;

struct Sample {
    cpu_ticks: u64,
    at: Instant,
}

fn sample(pid: u32) -> Sample {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("agent /proc stat");
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f[11].parse().unwrap();
    let stime: u64 = f[12].parse().unwrap();
    Sample {
        cpu_ticks: utime + stime,
        at: Instant::now(),
    }
}

fn status_kb(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn cpu_percent(a: &Sample, b: &Sample) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (b.cpu_ticks - a.cpu_ticks) as f64 / hz / (b.at - a.at).as_secs_f64() * 100.0
}

fn spawn_agent(url: &str, rnics: u8) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocemesh"));
    cmd.env("RUST_LOG", "warn").args([
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
    cmd.spawn().expect("spawn agent")
}

/// Measures one agent over `window` after `warmup`; returns (cpu %, RSS KiB, peak RSS KiB).
fn measure(child: &Child, warmup: Duration, window: Duration) -> (f64, u64, u64) {
    std::thread::sleep(warmup);
    let a = sample(child.id());
    std::thread::sleep(window);
    let b = sample(child.id());
    (
        cpu_percent(&a, &b),
        status_kb(child.id(), "VmRSS:"),
        status_kb(child.id(), "VmHWM:"),
    )
}

fn decommission(url: &str, host: &str) {
    let mut resp = ureq::get(&format!("{url}/api/v1/hosts"))
        .call()
        .expect("hosts");
    let hosts: Vec<rocemesh_proto::api::HostInfo> =
        resp.body_mut().read_json().expect("hosts json");
    for h in hosts.iter().filter(|h| h.host == host) {
        ureq::delete(&format!("{url}/api/v1/hosts/{}", h.id))
            .call()
            .expect("decommission");
    }
}

fn probes_per_second(url: &str) -> f64 {
    let mut resp = ureq::get(&format!("{url}/api/v1/sla/latest?scope=cluster"))
        .call()
        .expect("sla");
    let rows: Vec<SlaRow> = resp.body_mut().read_json().expect("sla json");
    rows.first()
        .map_or(0.0, |r| r.probes as f64 / (r.period_ms as f64 / 1000.0))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` / test discovery
    }
    let dir = std::env::temp_dir().join(format!("rocemesh-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..ServerConfig::default()
    };
    cfg.database = format!("sqlite://{}", dir.join("bench.db").display());
    cfg.controller.tormesh_pps = PPS;
    cfg.controller.pinglist_poll_ms = 1_000;
    cfg.analyzer.period_ms = 10_000;
    cfg.analyzer.grace_ms = 6_000;
    let rt = rocemesh::cli::runtime().unwrap();
    let srv = rt.block_on(server::start(cfg, Roles::Both)).unwrap();
    let url = srv.url();

    let mut idle = spawn_agent(&url, 1);
    let (idle_cpu, idle_rss, _) = measure(&idle, Duration::from_secs(3), Duration::from_secs(10));
    let _ = idle.kill();
    let _ = idle.wait();
    decommission(&url, "bench-1"); // otherwise the busy agent also probes the dead one inter-ToR

    let mut busy = spawn_agent(&url, RNICS);
    let (cpu, rss, hwm) = measure(&busy, Duration::from_secs(5), Duration::from_secs(30));
    let rate = probes_per_second(&url);
    let _ = busy.kill();
    let _ = busy.wait();
    rt.block_on(srv.shutdown()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let target_rate = RNICS as f64 * PPS;
    println!(
        "\nagent cost ({RNICS} RNICs x {PPS} probes/s, UDP transport on loopback, software timestamps)"
    );
    println!("{:<46} {:>12} {:>12}", "metric", "value", "target");
    println!(
        "{:<46} {:>12.0} {:>12.0}",
        "probes/s completed (analyzer, last period)", rate, target_rate
    );
    println!(
        "{:<46} {:>11.2}% {:>12}",
        "agent CPU, % of one core (busy)", cpu, "<= 1 %"
    );
    println!(
        "{:<46} {:>11.2}% {:>12}",
        "agent CPU, % of one core (idle baseline)", idle_cpu, "-"
    );
    println!(
        "{:<46} {:>9.1} MB {:>12}",
        "agent RSS (busy)",
        rss as f64 / 1024.0,
        "<= 20 MB"
    );
    println!(
        "{:<46} {:>9.1} MB {:>12}",
        "agent peak RSS (busy)",
        hwm as f64 / 1024.0,
        "<= 20 MB"
    );
    println!(
        "{:<46} {:>9.1} MB {:>12}",
        "agent RSS (idle baseline)",
        idle_rss as f64 / 1024.0,
        "-"
    );
    println!(
        "{:<46} {:>12.2} {:>12}",
        "CPU busy / idle ratio",
        cpu / idle_cpu.max(0.001),
        "-"
    );
}
