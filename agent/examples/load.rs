//! CPU and memory cost of the probing engines: 8 RNICs on 127.0.6.x, each probing the
//! other seven at 150 probes/s (and answering theirs), measured from /proc/self.
//!
//! `cargo run --release -p rocemesh-agent --example load [seconds]`

use rocemesh_agent::Counters;
use rocemesh_agent::EventLoop;
use rocemesh_agent::ResultBuffer;
use rocemesh_agent::{Command, EngineIdentity};
use rocemesh_agent::{TracerHandle, TracerOptions};
use rocemesh_agent::{UdpOptions, UdpTransport};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{PingTarget, ProbeList};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RNICS: u32 = 8;
const PPS: f64 = 150.0;
const PORT: u16 = 47_990;

fn cpu_ticks() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let after = stat.rsplit_once(')').map(|(_, s)| s).unwrap_or_default();
    let f: Vec<&str> = after.split_whitespace().collect();
    Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
}

fn rss_kb() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .unwrap_or("VmRSS: 0 kB");
    Ok(line.split_whitespace().nth(1).unwrap_or("0").parse()?)
}

fn main() -> anyhow::Result<()> {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let counters = Arc::new(Counters::default());
    let results = Arc::new(ResultBuffer::new(100_000, counters.clone()));
    let ip = |i: u32| format!("127.0.6.{}", i + 1).parse().expect("valid ip");
    let qpn = |i: u32| 0x1000 + i;
    // Path tracing at the agent's defaults, as in a real agent.
    let topts = TracerOptions {
        max_hops: 8,
        pps: 40.0,
        refresh: Duration::from_secs(60),
        dscp: None,
    };
    let tracer = TracerHandle::spawn(topts, counters.clone(), results.clone())?;
    let mut engines = Vec::new();
    let mut lists = Vec::new();
    // One thread for every RNIC, as in the agent.
    let mut event_loop = EventLoop::new("rnics");
    for i in 0..RNICS {
        let opts = UdpOptions {
            ip: ip(i),
            port: PORT,
            dscp: None,
            hardware_timestamps_on: None,
            max_send_sockets: 512,
        };
        let t = UdpTransport::open(opts, counters.clone())?;
        let id = EngineIdentity {
            name: format!("rnic{i}"),
            qpn: qpn(i),
            token: 42 + i as u64,
            port: PORT,
            max_outstanding: 16_384,
            trace: Some(tracer.feed()),
            service_timeouts: None,
        };
        let e = event_loop.add(id, t, counters.clone(), results.clone());
        e.send(Command::RnicId(i + 1))?;
        let entries = (0..RNICS)
            .filter(|j| *j != i)
            .flat_map(|j| (0..4u16).map(move |k| (j, k)))
            .map(|(j, k)| PingTarget {
                rnic_id: j + 1,
                ip: ip(j),
                port: PORT,
                qpn: qpn(j),
                src_port: 50_000 + (j as u16) * 8 + k,
            })
            .collect();
        lists.push(ProbeList {
            class: ProbeClass::TorMesh,
            pps: PPS,
            entries,
        });
        engines.push(e);
    }
    event_loop.spawn()?;
    for (e, list) in engines.iter().zip(lists) {
        e.send(Command::Lists(vec![list], Duration::from_millis(500)))?;
    }
    std::thread::sleep(Duration::from_secs(2));
    let (c0, t0) = (cpu_ticks()?, Instant::now());
    std::thread::sleep(Duration::from_secs(secs));
    let (c1, dt) = (cpu_ticks()?, t0.elapsed());
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = (c1 - c0) as f64 / hz / dt.as_secs_f64() * 100.0;
    let s = counters.snapshot(results.len());
    println!(
        "{RNICS} RNICs x {PPS} pps: CPU {cpu:.2} % of one core, RSS {} kB, sent {}, results {:?}, by source {:?}",
        rss_kb()?,
        s.probes_sent,
        s.results_by_status,
        s.results_by_ts_source
    );
    println!(
        "tracing: {} traces, {} TRACE packets, {} paths",
        s.traces_started,
        s.trace_packets_sent,
        results.paths_len()
    );
    for e in &engines {
        e.request_stop();
    }
    for e in engines {
        e.stop()?;
    }
    tracer.stop()?;
    Ok(())
}
