//! The tracer thread: one per agent, apart from the engines so probe timestamps are never
//! disturbed. Each trace gets two UDP sockets bound to the 5-tuple's source (shared with
//! the engine's send socket through SO_REUSEADDR/SO_REUSEPORT):
//! - a listener connected to the destination, so the kernel hands it the ICMP errors of
//!   that 4-tuple (a connected socket wins the lookup) on its error queue (`IP_RECVERR`):
//!   no raw socket, no root;
//! - an unconnected sender, like the engine's probe sockets: a connected socket stamps its
//!   packets with a random per-socket flow hash (`sk_txhash`) that a Linux router on the
//!   same host (veth, netns fabrics) uses for ECMP instead of the 5-tuple, so TRACEs sent
//!   from it could take another path than the probes.

use super::bucket::TokenBucket;
use super::feed::{TraceFeed, TraceRequest};
use super::icmp::parse_icmp_error;
use super::session::Session;
use super::table::{AnomalyOutcome, MAX_TUPLES, TraceKey, TraceTable};
use crate::stats::Counters;
use crate::sys::{ControlBuf, Epoll, recv_raw, setsockopt};
use crate::upload::buffer::ResultBuffer;
use rocemesh_proto::path::TracedPath;
use rocemesh_proto::{Packet, ProbeClass};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Traces running at once (each holds one socket).
const MAX_ACTIVE: usize = 16;
/// Requests queued from the engines.
const REQUEST_QUEUE: usize = 4096;
/// Longest sleep: how soon a request or stop is noticed when idle.
const IDLE_WAKE: Duration = Duration::from_millis(100);

/// Tracer settings (from `AgentConfig`).
#[derive(Debug, Clone)]
pub struct TracerOptions {
    /// Highest TTL sent.
    pub max_hops: u8,
    /// TRACE packets per second for the whole agent.
    pub pps: f64,
    /// How often each 5-tuple is traced again.
    pub refresh: Duration,
    /// DSCP of TRACE packets (the probes' own, so they are forwarded alike).
    pub dscp: Option<u8>,
}

/// A running tracer thread.
#[derive(Debug)]
pub struct TracerHandle {
    tx: SyncSender<TraceRequest>,
    counters: Arc<Counters>,
    refresh: Duration,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl TracerHandle {
    /// Starts the tracer; traced paths go to `paths` for upload. Sockets are created by
    /// the new thread, so it must be spawned in the network namespace of the RNICs.
    pub fn spawn(
        opts: TracerOptions,
        counters: Arc<Counters>,
        paths: Arc<ResultBuffer>,
    ) -> io::Result<Self> {
        let (tx, rx) = sync_channel(REQUEST_QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let refresh = opts.refresh;
        let (c, st) = (counters.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("tracer".into())
            .spawn(move || match Tracer::new(opts, c, paths, rx, st) {
                Ok(t) => t.run(),
                Err(e) => {
                    tracing::error!(error = %e, "tracer cannot start; no paths will be traced")
                }
            })?;
        Ok(Self {
            tx,
            counters,
            refresh,
            stop,
            thread,
        })
    }

    /// A feed for one engine.
    pub fn feed(&self) -> TraceFeed {
        TraceFeed::new(self.tx.clone(), self.counters.clone(), self.refresh)
    }

    /// A handle the uploader uses to have every latest path uploaded again.
    pub fn resender(&self) -> PathResender {
        PathResender {
            tx: self.tx.clone(),
        }
    }

    /// Stops the tracer (traces in progress are abandoned) and joins it.
    pub fn stop(self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("tracer thread panicked"))
    }
}

/// Asks the tracer to upload the latest path of every 5-tuple again: a fresh analyzer
/// (restart, or another instance after a shard move) has none, and without them it sees
/// every flow as untraced until the periodic refresh.
#[derive(Debug, Clone)]
pub struct PathResender {
    tx: SyncSender<TraceRequest>,
}

impl PathResender {
    /// Queues the request (dropped when the tracer's queue is full or it has stopped).
    pub fn resend(&self) {
        let _ = self.tx.try_send(TraceRequest::Resend);
    }
}

/// One trace in progress.
struct Active {
    id: u64,
    key: TraceKey,
    /// Receives the ICMP errors.
    listener: Socket,
    /// Sends the TRACE packets.
    sender: Socket,
    session: Session,
}

struct Tracer {
    opts: TracerOptions,
    counters: Arc<Counters>,
    paths: Arc<ResultBuffer>,
    requests: Receiver<TraceRequest>,
    stop: Arc<AtomicBool>,
    table: TraceTable,
    bucket: TokenBucket,
    active: Vec<Active>,
    next_id: u64,
    epoll: Epoll,
    next_expiry: Instant,
}

impl Tracer {
    fn new(
        opts: TracerOptions,
        counters: Arc<Counters>,
        paths: Arc<ResultBuffer>,
        requests: Receiver<TraceRequest>,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Self> {
        let epoll = Epoll::new()?;
        let now = Instant::now();
        Ok(Self {
            table: TraceTable::new(opts.refresh, MAX_TUPLES),
            bucket: TokenBucket::new(opts.pps, u32::from(opts.max_hops), now),
            opts,
            counters,
            paths,
            requests,
            stop,
            active: Vec::with_capacity(MAX_ACTIVE),
            next_id: rand::random::<u32>() as u64,
            epoll,
            next_expiry: now,
        })
    }

    fn run(mut self) {
        let mut ready = [libc::epoll_event { events: 0, u64: 0 }; MAX_ACTIVE];
        let mut control = ControlBuf::default();
        while !self.stop.load(Ordering::Relaxed) {
            self.apply_requests();
            let now = Instant::now();
            if now >= self.next_expiry {
                self.table.expire(now);
                self.next_expiry = now + self.opts.refresh / 4;
            }
            self.start_traces(now);
            self.send_ttls(now);
            self.finish_traces();
            let wait = self.sleep_time(Instant::now());
            // An interrupted or failed wait reads nothing; the loop goes on.
            let n = self.epoll.wait(&mut ready, wait).unwrap_or(0);
            for ev in &ready[..n] {
                let id = ev.u64;
                if let Some(a) = self.active.iter_mut().find(|a| a.id == id) {
                    drain(a, &mut control, &self.counters);
                }
            }
            let now = Instant::now();
            self.active.iter_mut().for_each(|a| a.session.on_time(now));
        }
    }

    fn apply_requests(&mut self) {
        let now = Instant::now();
        while let Ok(r) = self.requests.try_recv() {
            let refused = match r {
                TraceRequest::Pinglist { src, keys } => self.table.set_pinglist(src, &keys, now),
                TraceRequest::Learned(key) => usize::from(!self.table.learned(key, now)),
                TraceRequest::Anomaly(key) => {
                    if self.table.anomaly(key, now) == AnomalyOutcome::Active {
                        self.active
                            .iter_mut()
                            .filter(|a| a.key == key)
                            .for_each(|a| a.session.mark_anomaly());
                    }
                    0
                }
                TraceRequest::Resend => {
                    let mut n = 0usize;
                    for p in self.table.paths_to_resend() {
                        self.paths.push_path(p.clone());
                        n += 1;
                    }
                    tracing::info!(paths = n, "fresh analyzer: traced paths queued again");
                    0
                }
            };
            self.counters.trace_drops.fetch_add(refused as u64, Relaxed);
        }
    }

    fn start_traces(&mut self, now: Instant) {
        while self.active.len() < MAX_ACTIVE {
            let Some((key, urgent)) = self.table.next(now) else {
                break;
            };
            match open_sockets(&key, self.opts.dscp) {
                Ok((listener, sender)) => {
                    self.next_id += 1;
                    let id = self.next_id;
                    if let Err(e) = self.epoll.add(listener.as_raw_fd(), id) {
                        // Its answers go unread: the trace ends at its deadline, pathless.
                        tracing::debug!(?key, error = %e, "cannot watch a trace socket");
                    }
                    let mut session = Session::new(id as u32, self.opts.max_hops);
                    if urgent {
                        // Started because of a timeout: silence may be the fault, not arrival.
                        session.mark_anomaly();
                    }
                    let a = Active {
                        id,
                        key,
                        listener,
                        sender,
                        session,
                    };
                    // Urgent traces go first in line for tokens.
                    if urgent {
                        self.active.insert(0, a)
                    } else {
                        self.active.push(a)
                    }
                    self.counters.traces_started.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    tracing::debug!(?key, error = %e, "cannot open a trace socket");
                    self.table.finished(key, now, None);
                }
            }
        }
    }

    fn send_ttls(&mut self, now: Instant) {
        for a in &mut self.active {
            let Some(ttl) = a.session.next_ttl() else {
                continue;
            };
            if !self.bucket.try_take(now) {
                break;
            }
            let payload = Packet::probe(ProbeClass::TorMesh, a.session.seq(ttl), 0, 0, 0, 0, 0)
                .trace()
                .encode();
            match send_with_ttl(&a.sender, &a.key, ttl, &payload) {
                Ok(()) => {
                    a.session.sent(ttl, now);
                    self.counters.trace_packets_sent.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    tracing::debug!(key = ?a.key, error = %e, "TRACE send failed");
                    a.session.abort();
                }
            }
        }
    }

    fn finish_traces(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.active.len() {
            if !self.active[i].session.is_done() {
                i += 1;
                continue;
            }
            let a = self.active.remove(i);
            let (hops, reached) = a.session.result();
            tracing::debug!(
                key = ?a.key,
                reached,
                hops = ?hops,
                "trace finished"
            );
            let path = TracedPath {
                src: a.key.src,
                dst: a.key.dst,
                src_port: a.key.src_port,
                dst_port: a.key.dst_port,
                traced_at_unix_ns: rocemesh_proto::now_unix_ns(),
                reached,
                ack_direction: a.key.ack_direction,
                hops,
            };
            self.paths.push_path(path.clone());
            self.table.finished(a.key, now, Some(path));
        }
    }

    fn sleep_time(&mut self, now: Instant) -> Duration {
        let mut until = now + IDLE_WAKE;
        for a in &self.active {
            if let Some(d) = a.session.deadline() {
                until = until.min(d);
            }
        }
        if self.active.iter().any(|a| a.session.next_ttl().is_some()) {
            until = until.min(self.bucket.next_token_at(now));
        }
        if self.active.len() < MAX_ACTIVE
            && let Some(d) = self.table.next_due(now)
        {
            until = until.min(d);
        }
        until.saturating_duration_since(now)
    }
}

/// Reads every ICMP error (and stray datagram) queued on a trace socket.
fn drain(a: &mut Active, control: &mut ControlBuf, counters: &Counters) {
    let fd = a.listener.as_raw_fd();
    let mut buf = [0u8; 128];
    while let Ok(r) = recv_raw(fd, &mut buf, true, control) {
        if let Some(ans) = parse_icmp_error(control, r.controllen, &buf[..r.len.min(buf.len())]) {
            counters.icmp_answers.fetch_add(1, Relaxed);
            a.session.on_answer(&ans);
        }
    }
    while recv_raw(fd, &mut buf, false, control).is_ok() {}
}

/// The (listener, sender) pair of a trace of `key`.
fn open_sockets(key: &TraceKey, dscp: Option<u8>) -> io::Result<(Socket, Socket)> {
    let listener = bound_socket(key, dscp)?;
    let on: libc::c_int = 1;
    if key.src.is_ipv4() {
        setsockopt(listener.as_raw_fd(), libc::SOL_IP, libc::IP_RECVERR, &on)?;
    } else {
        setsockopt(
            listener.as_raw_fd(),
            libc::SOL_IPV6,
            libc::IPV6_RECVERR,
            &on,
        )?;
    }
    listener.connect(&SockAddr::from(SocketAddr::new(key.dst, key.dst_port)))?;
    Ok((listener, bound_socket(key, dscp)?))
}

/// A non-blocking UDP socket bound to the source of `key`, sharing the port.
fn bound_socket(key: &TraceKey, dscp: Option<u8>) -> io::Result<Socket> {
    let v4 = key.src.is_ipv4();
    let socket = Socket::new(
        if v4 { Domain::IPV4 } else { Domain::IPV6 },
        Type::DGRAM.cloexec(),
        Some(Protocol::UDP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    if let Some(d) = dscp {
        let tos = u32::from(d) << 2;
        if v4 {
            socket.set_tos_v4(tos)?
        } else {
            socket.set_tclass_v6(tos)?
        }
    }
    socket.bind(&SockAddr::from(SocketAddr::new(key.src, key.src_port)))?;
    Ok(socket)
}

/// Sends one TRACE along `key` with IP TTL / hop limit `ttl`.
fn send_with_ttl(sender: &Socket, key: &TraceKey, ttl: u8, payload: &[u8]) -> io::Result<()> {
    if key.dst.is_ipv4() {
        sender.set_ttl_v4(u32::from(ttl))?
    } else {
        sender.set_unicast_hops_v6(u32::from(ttl))?
    }
    sender
        .send_to(
            payload,
            &SockAddr::from(SocketAddr::new(key.dst, key.dst_port)),
        )
        .map(|_| ())
}
