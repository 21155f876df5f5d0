//! One host's ranks of a closed-loop ring job ([`crate::job::Collective::Ring`]): each iteration a
//! rank computes (burns `busy_ms` of its own CPU time, sleeps out the rest of `compute_ms`), then
//! runs a ring all-reduce over TCP with its data-parallel peers: `2 (n - 1)` steps, each sending
//! one chunk of `allreduce_bytes / n` to the next rank at `burst_mbps` and receiving one from the
//! previous rank, a step's send waiting for the previous step's chunk. Transfers are
//! receiver-driven as NCCL's are: a rank grants its predecessor a one-byte credit per step when it
//! is ready to receive, and a sender waits for the credit, so a rank still computing neither sends
//! nor receives. Dependencies are real: a rank that computes long, is stopped or whose link loses
//! packets (TCP retransmits) delays every peer, and a dead one hangs the job.
//!
//! Loss recovery is made RoCE-like: an RC queue pair has no selective retransmission and recovers a
//! lost tail only after its retransmission timeout, so loss stretches a collective. Linux TCP's
//! SACK, RACK and tail-loss probes make loss almost free at the testbed's sub-millisecond RTT, so
//! the helper switches them off in its host namespace (`tcp_sack`, `tcp_recovery`,
//! `tcp_early_retrans`, per network namespace) before connecting; a lost tail then costs TCP's
//! 200 ms minimum RTO.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use socket2::{Domain, Protocol, Socket, Type};

use crate::job::{JOB_PORT, Plan, Recorder, RingIteration, RnicRef};

/// Bytes written per pacing step.
const PIECE: usize = 16 * 1024;
/// How long a rank keeps trying to reach its ring successor (peers start one by one).
const CONNECT_FOR: Duration = Duration::from_secs(30);

/// Binds the ranks of `host`, announces readiness and runs them until one fails, each
/// iteration of each rank appended to the record at `record`.
pub(super) fn run(
    plan: &Plan,
    host: usize,
    (compute_ms, busy_ms): (u32, u32),
    record: &Path,
) -> Result<()> {
    let n = plan.ranks.len();
    let chunk = (plan.spec.allreduce_bytes / n as u64).max(1) as usize;
    let timing = Timing {
        compute: Duration::from_millis(u64::from(compute_ms)),
        busy: Duration::from_millis(u64::from(busy_ms)),
        bytes_per_sec: f64::from(plan.spec.burst_mbps) * 1e6 / 8.0,
        chunk,
        steps: 2 * (n - 1),
    };
    roce_like_loss_recovery()?;
    let recorder = Arc::new(Recorder::create(record)?);
    let mine: Vec<usize> = (0..n).filter(|&r| plan.ranks[r].host == host).collect();
    let listeners = mine
        .iter()
        .map(|&r| {
            let ip = plan.ranks[r].ip;
            TcpListener::bind((ip, JOB_PORT)).with_context(|| format!("binding {ip}:{JOB_PORT}"))
        })
        .collect::<Result<Vec<_>>>()?;
    super::announce_ready()?;
    let (failed_tx, failed_rx) = mpsc::channel::<anyhow::Error>();
    for (listener, &r) in listeners.into_iter().zip(&mine) {
        let me = plan.ranks[r].clone();
        let next = plan.ranks[(r + 1) % n].clone();
        let timing = timing.clone();
        let failed = failed_tx.clone();
        let recorder = Arc::clone(&recorder);
        std::thread::spawn(move || {
            let e = rank((r, &me), &next, listener, &timing, &recorder).unwrap_err();
            let _ = failed.send(e.context(format!("rank on {}", me.name)));
        });
    }
    drop(failed_tx);
    Err(failed_rx.recv().context("no rank on this host")?)
}

#[derive(Debug, Clone)]
struct Timing {
    compute: Duration,
    busy: Duration,
    bytes_per_sec: f64,
    chunk: usize,
    steps: usize,
}

/// Global rank `r` on `me` forever: connect to the successor (a sender thread), accept the
/// predecessor, then compute and all-reduce, recording each all-reduce. Returns only on
/// error.
fn rank(
    (r, me): (usize, &RnicRef),
    next: &RnicRef,
    listener: TcpListener,
    t: &Timing,
    recorder: &Recorder,
) -> Result<()> {
    let (step_tx, step_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<Result<()>>();
    let (from, to, timing) = (me.ip, next.ip, t.clone());
    std::thread::spawn(move || {
        let sent = connect(SocketAddrV4::new(from, 0), SocketAddrV4::new(to, JOB_PORT)).and_then(
            |mut out| {
                let buf = vec![0x5au8; timing.chunk];
                let mut credit = [0u8; 1];
                while step_rx.recv().is_ok() {
                    out.read_exact(&mut credit)
                        .context("waiting for the ring successor's credit")?;
                    send_paced(&mut out, &buf, timing.bytes_per_sec)?;
                    if done_tx.send(Ok(())).is_err() {
                        break;
                    }
                }
                Ok(())
            },
        );
        if let Err(e) = sent {
            let _ = done_tx.send(Err(e));
        }
    });
    let (mut input, _) = listener
        .accept()
        .context("accepting the ring predecessor")?;
    input.set_nodelay(true)?;
    let mut buf = vec![0u8; t.chunk];
    let mut iteration = 0;
    loop {
        compute(t.busy, t.compute);
        let start_unix_ms = rocemesh_proto::now_unix_ms();
        for _ in 0..t.steps {
            input
                .write_all(&[1])
                .context("granting the ring predecessor a credit")?;
            step_tx.send(()).context("the sender thread ended")?;
            input
                .read_exact(&mut buf)
                .context("receiving from the ring predecessor")?;
        }
        for _ in 0..t.steps {
            done_rx.recv().context("the sender thread ended")??;
        }
        recorder.record(&RingIteration {
            rank: r,
            iteration,
            start_unix_ms,
            end_unix_ms: rocemesh_proto::now_unix_ms(),
        })?;
        iteration += 1;
    }
}

/// Switches off TCP's selective and early loss recovery in this network namespace.
fn roce_like_loss_recovery() -> Result<()> {
    for knob in ["tcp_sack", "tcp_recovery", "tcp_early_retrans"] {
        let path = format!("/proc/sys/net/ipv4/{knob}");
        std::fs::write(&path, "0").with_context(|| format!("writing 0 to {path}"))?;
    }
    Ok(())
}

/// Connects `from` → `to`, retrying while the successor's helper is not up yet.
fn connect(from: SocketAddrV4, to: SocketAddrV4) -> Result<TcpStream> {
    let deadline = Instant::now() + CONNECT_FOR;
    loop {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
        socket.bind(&SocketAddr::V4(from).into())?;
        match socket.connect(&SocketAddr::V4(to).into()) {
            Ok(()) => {
                let stream: TcpStream = socket.into();
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e)
                if matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::TimedOut)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e).with_context(|| format!("connecting {from} -> {to}")),
        }
    }
}

/// Writes `buf` at `bytes_per_sec` (TCP blocks when the receiver stalls).
fn send_paced(out: &mut TcpStream, buf: &[u8], bytes_per_sec: f64) -> Result<()> {
    let start = Instant::now();
    for (i, piece) in buf.chunks(PIECE).enumerate() {
        let due = Duration::from_secs_f64((i * PIECE) as f64 / bytes_per_sec);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        out.write_all(piece)
            .context("sending to the ring successor")?;
    }
    Ok(())
}

/// Burns `busy` of this thread's CPU time, then sleeps until `total` has passed.
fn compute(busy: Duration, total: Duration) {
    let start = Instant::now();
    let cpu0 = thread_cpu();
    let mut x = 0u64;
    while thread_cpu().saturating_sub(cpu0) < busy {
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
    if let Some(rest) = total.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computing_burns_the_cpu_time_asked_and_lasts_the_wall_time() {
        let start = Instant::now();
        let cpu0 = thread_cpu();
        compute(Duration::from_millis(20), Duration::from_millis(60));
        let cpu = thread_cpu() - cpu0;
        assert!(cpu >= Duration::from_millis(20), "{cpu:?}");
        assert!(start.elapsed() >= Duration::from_millis(60));
    }

    #[test]
    fn a_paced_send_takes_its_bytes_over_the_rate() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut v = Vec::new();
            s.read_to_end(&mut v).unwrap();
            v.len()
        });
        let mut out = TcpStream::connect(addr).unwrap();
        let start = Instant::now();
        // 64 KiB at 1 MB/s: the last piece is due after 48 ms.
        send_paced(&mut out, &[1u8; 64 * 1024], 1e6).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(48));
        drop(out);
        assert_eq!(reader.join().unwrap(), 64 * 1024);
    }
}
