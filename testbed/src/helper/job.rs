//! One host's share of an emulated training job: paced UDP bursts from its RNICs on the
//! job's common clock (a [`Collective::Ring`] job runs in [`super::ring`] instead). Every
//! RNIC of the host that takes part binds [`JOB_PORT`] so arriving traffic meets a socket
//! (no ICMP port-unreachable replies); nothing reads it, the kernel drops what overflows the
//! receive buffer after the RNIC counted it, which keeps the helper cheap.

use std::net::{SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use crate::job::{Collective, DATAGRAM, JOB_PORT, JobSpec, Plan, jitter_ms};
use crate::spec::FabricSpec;
use crate::topology::Topology;

/// Wake-up interval while a burst is being sent.
const TICK_MS: f64 = 2.0;

/// One transfer of this host, repeated every iteration.
struct Flow {
    socket: usize,
    dst: SocketAddrV4,
    offset_ms: f64,
    packets: u64,
    collective: u64,
    iteration: u64,
    sent: u64,
}

/// Parses the arguments (untrusted: validated like any spec), binds, announces readiness and
/// sends forever.
pub(super) fn run(fabric: &str, job: &str, host: usize, start_unix_ms: u64) -> Result<()> {
    let fabric: FabricSpec = serde_json::from_str(fabric).context("parsing FABRIC_SPEC")?;
    fabric.validate()?;
    let job: JobSpec = serde_json::from_str(job).context("parsing JOB_SPEC")?;
    let topology = Topology::new(&fabric);
    if host >= topology.hosts.len() {
        bail!(
            "HOST {host} is not in a fabric of {} hosts",
            topology.hosts.len()
        );
    }
    let plan = Plan::new(&topology, &job)?;
    if let Collective::Ring {
        compute_ms,
        busy_ms,
    } = job.collective
    {
        let record = crate::job::record_path(&fabric.prefix, &job.name, &topology.hosts[host].name);
        return super::ring::run(&plan, host, (compute_ms, busy_ms), &record);
    }
    let endpoints = plan.endpoints_on(host);
    let sockets = endpoints
        .iter()
        .map(|r| {
            UdpSocket::bind((r.ip, JOB_PORT))
                .with_context(|| format!("binding {}:{JOB_PORT}", r.ip))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut flows: Vec<Flow> = plan
        .sent_by(host)
        .filter_map(|t| {
            Some(Flow {
                socket: endpoints.iter().position(|e| e.name == t.from.name)?,
                dst: SocketAddrV4::new(t.to.ip, JOB_PORT),
                offset_ms: t.offset_ms,
                packets: t.bytes.div_ceil(DATAGRAM as u64),
                collective: t.collective,
                iteration: u64::MAX,
                sent: 0,
            })
        })
        .collect();
    super::announce_ready()?;
    let epoch = job_epoch(start_unix_ms);
    let packets_per_ms = f64::from(job.burst_mbps) * 1000.0 / 8.0 / DATAGRAM as f64;
    let iteration_ms = f64::from(job.iteration_ms);
    let buf = [0x6au8; DATAGRAM];
    loop {
        let now = ms_since(epoch);
        let mut next = now + iteration_ms;
        if now >= 0.0 {
            let it = (now / iteration_ms) as u64;
            for f in &mut flows {
                if f.iteration != it {
                    f.iteration = it;
                    f.sent = 0;
                }
                let base = it as f64 * iteration_ms + f.offset_ms;
                let start = base + jitter_ms(job.seed, it, f.collective, job.jitter_ms);
                if now < start {
                    next = next.min(start);
                    continue;
                }
                let due = f.packets.min(((now - start) * packets_per_ms) as u64 + 1);
                while f.sent < due {
                    // A full queue (e.g. a downed link under test) loses datagrams, like a fabric.
                    let _ = sockets[f.socket].send_to(&buf, f.dst);
                    f.sent += 1;
                }
                next = next.min(if f.sent < f.packets {
                    now + TICK_MS
                } else {
                    base + iteration_ms
                });
            }
        } else {
            next = 0.0;
        }
        let wait = (next - ms_since(epoch)).clamp(0.2, iteration_ms);
        std::thread::sleep(Duration::from_secs_f64(wait / 1000.0));
    }
}

/// The `Instant` of unix time `start_unix_ms` (the job's iteration 0).
fn job_epoch(start_unix_ms: u64) -> Instant {
    let now_instant = Instant::now();
    let now_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let start = Duration::from_millis(start_unix_ms);
    match now_unix.checked_sub(start) {
        Some(ago) => now_instant.checked_sub(ago).unwrap_or(now_instant),
        None => now_instant + (start - now_unix),
    }
}

/// Milliseconds since `epoch`, negative before it.
fn ms_since(epoch: Instant) -> f64 {
    let now = Instant::now();
    match now.checked_duration_since(epoch) {
        Some(d) => d.as_secs_f64() * 1000.0,
        None => -(epoch.duration_since(now).as_secs_f64() * 1000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_follows_the_shared_unix_clock() {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let past = ms_since(job_epoch(now_ms - 1500));
        assert!((1490.0..1600.0).contains(&past), "{past}");
        let future = ms_since(job_epoch(now_ms + 800));
        assert!((-810.0..-700.0).contains(&future), "{future}");
    }
}
