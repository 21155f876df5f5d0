//! One RNIC's engine: sends due probes, answers probes, matches ACKs and TX stamps; an
//! [`EventLoop`] thread drives it (alone, or with the other RNICs' engines).

use super::event_loop::{Driven, EventLoop, LoopThread};
use super::guard::{GuardSettings, ProbeGuard};
use super::prober::{AckOutcome, Prober};
use super::responder::{Responder, ack_src_port};
use super::schedule::Schedule;
use crate::service::TimeoutFeed;
use crate::stats::Counters;
use crate::trace::{TraceFeed, TraceKey};
use crate::transport::{Endpoint, Transport, TransportEvent, wire_dst_port};
use crate::upload::buffer::ResultBuffer;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rocemesh_proto::api::{PingTarget, ProbeList};
use rocemesh_proto::probe_auth::Flow;
use rocemesh_proto::{Packet, PacketKind, ProbeClass, ProbeResult};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest sleep: how soon a command or stop request is noticed when idle.
const IDLE_WAKE: Duration = Duration::from_millis(50);
/// Results are handed to the shared buffer in batches of at most this many.
const RESULT_BATCH: usize = 256;
/// Commands queued per engine (pinglist updates are rare).
const COMMAND_QUEUE: usize = 8;

/// Who an engine is: fixed for the life of the agent.
#[derive(Debug)]
pub struct EngineIdentity {
    /// Thread name (e.g. `rnic-mlx5_0`).
    pub name: String,
    /// Our per-start QPN.
    pub qpn: u32,
    /// Per-start prober token.
    pub token: u64,
    /// The port ACKs are sent to (every agent's main port).
    pub port: u16,
    /// Bound of outstanding probes.
    pub max_outstanding: usize,
    /// Where to report 5-tuples to trace (`None`: path tracing off).
    pub trace: Option<TraceFeed>,
    /// Where to report service targets whose probes time out (their QPN may be stale).
    pub service_timeouts: Option<Arc<TimeoutFeed>>,
}

/// A change the control plane hands an engine.
#[derive(Debug)]
pub enum Command {
    /// Our controller-assigned RNIC id.
    RnicId(u32),
    /// New lists to probe, and the probe timeout.
    Lists(Vec<ProbeList>, Duration),
    /// The traced service flows to probe now (replaces the previous set; empty = none).
    ServiceTargets(Vec<PingTarget>),
    /// Probe keys and answer limits from the controller (engines start with
    /// [`GuardSettings::open`]; an agent sends [`GuardSettings::closed`] first).
    Guard(Arc<GuardSettings>),
}

/// Control of one engine running on an [`EventLoop`] thread (alone or with others).
#[derive(Debug)]
pub struct EngineHandle {
    commands: SyncSender<Command>,
    stop: Arc<AtomicBool>,
    /// Closed (or signalled) once the loop has flushed and dropped this engine.
    done: Mutex<Receiver<()>>,
    thread: Arc<LoopThread>,
}

impl EngineHandle {
    /// Starts the engine alone on its own event loop thread.
    pub fn spawn<T: Transport + 'static>(
        id: EngineIdentity,
        transport: T,
        counters: Arc<Counters>,
        results: Arc<ResultBuffer>,
    ) -> std::io::Result<Self> {
        let mut event_loop = EventLoop::new(id.name.clone());
        let handle = event_loop.add(id, transport, counters, results);
        event_loop.spawn()?;
        Ok(handle)
    }

    /// Queues a command; a full queue (engine wedged) is reported, never blocks.
    pub fn send(&self, cmd: Command) -> anyhow::Result<()> {
        match self.commands.try_send(cmd) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => anyhow::bail!("engine command queue full"),
            Err(TrySendError::Disconnected(_)) => anyhow::bail!("engine thread has exited"),
        }
    }

    /// Asks the engine to stop without waiting (stopping many engines at once).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops the engine, flushing its pending results; the last engine of a loop also
    /// joins the loop's thread.
    pub fn stop(self) -> anyhow::Result<()> {
        self.request_stop();
        // An error means the loop dropped the engine already (its transport failed, or
        // the thread panicked: the join below tells).
        let _ = self
            .done
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .recv();
        match Arc::try_unwrap(self.thread) {
            Ok(t) => t.join(),
            Err(_) => Ok(()),
        }
    }
}

/// Builds an engine for `thread`'s loop: the engine, its handle, and the sender the loop
/// signals once the engine is flushed and dropped.
pub(super) fn build<T: Transport + 'static>(
    id: EngineIdentity,
    transport: T,
    counters: Arc<Counters>,
    results: Arc<ResultBuffer>,
    thread: Arc<LoopThread>,
) -> (Box<dyn Driven>, EngineHandle, SyncSender<()>) {
    let (commands, rx) = sync_channel(COMMAND_QUEUE);
    let (done_tx, done) = sync_channel(1);
    let stop = Arc::new(AtomicBool::new(false));
    let engine = Engine {
        prober: Prober::new(id.qpn, id.token, id.max_outstanding),
        responder: Responder::new(id.qpn, id.port),
        guard: ProbeGuard::new(Arc::new(GuardSettings::open())),
        schedule: Schedule::default(),
        transport,
        counters,
        results,
        batch: Vec::with_capacity(RESULT_BATCH),
        rng: StdRng::from_rng(&mut rand::rng()),
        epoch: Instant::now(),
        commands: rx,
        stop: stop.clone(),
        trace: id.trace,
        service_timeouts: id.service_timeouts,
    };
    let handle = EngineHandle {
        commands,
        stop,
        done: Mutex::new(done),
        thread,
    };
    (Box::new(engine), handle, done_tx)
}

/// Gives `target` the destination port its probes carry on the wire, so that their
/// results, their traces and the traces of their timeouts name the probe's real 5-tuple
/// (a verbs host's probes go to RoCEv2's 4791, whatever port the agent registered).
fn on_the_wire<T: Transport>(target: &mut PingTarget) {
    target.port = wire_dst_port::<T>(target.port);
}

struct Engine<T> {
    prober: Prober,
    responder: Responder,
    guard: ProbeGuard,
    schedule: Schedule,
    transport: T,
    counters: Arc<Counters>,
    results: Arc<ResultBuffer>,
    batch: Vec<ProbeResult>,
    rng: StdRng,
    /// Origin of the schedule's nanosecond clock.
    epoch: Instant,
    commands: Receiver<Command>,
    stop: Arc<AtomicBool>,
    trace: Option<TraceFeed>,
    service_timeouts: Option<Arc<TimeoutFeed>>,
}

impl<T: Transport> Engine<T> {
    /// Timer work at `now`: commands, due probes, expired probes and ACK2 deadlines.
    fn on_wake(&mut self, now: Instant) {
        self.apply_commands();
        self.send_due(now);
        self.prober.expire(now, &mut self.batch);
        self.report_timeouts(now);
        self.responder
            .expire(now, &mut self.transport, &self.counters);
    }

    /// Handles every event the transport has without blocking.
    fn drain(&mut self) {
        // Probe keys handed over before a packet arrived apply to that packet.
        self.apply_commands();
        while let Some(ev) = self.transport.next_event() {
            self.handle(ev);
        }
        self.prober.flush_awaiting(&mut self.batch);
    }

    fn apply_commands(&mut self) {
        while let Ok(cmd) = self.commands.try_recv() {
            match cmd {
                Command::RnicId(id) => {
                    self.prober.set_rnic_id(id);
                    self.responder.set_rnic_id(id);
                }
                Command::Lists(mut lists, timeout) => {
                    for e in lists.iter_mut().flat_map(|l| &mut l.entries) {
                        on_the_wire::<T>(e);
                    }
                    self.prober.set_timeout(timeout);
                    if let Some(t) = &self.trace {
                        t.pinglist(self.transport.local_ip(), &lists);
                    }
                    let now = self.clock_ns(Instant::now());
                    self.schedule.set_lists(lists, now, &mut self.rng);
                }
                Command::ServiceTargets(mut targets) => {
                    targets.iter_mut().for_each(on_the_wire::<T>);
                    let now = self.clock_ns(Instant::now());
                    self.schedule.set_service(targets, now, &mut self.rng);
                }
                Command::Guard(settings) => {
                    self.responder.set_sealer(settings.clone());
                    self.guard.set(settings);
                }
            }
        }
    }

    fn clock_ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    fn send_due(&mut self, now: Instant) {
        let now_ns = self.clock_ns(now);
        while let Some((class, target)) = self.schedule.pop_due(now_ns, &mut self.rng) {
            let Some(probe) = self.prober.next_probe(class, target) else {
                self.counters.outstanding_overflow.fetch_add(1, Relaxed);
                continue;
            };
            let to = Endpoint {
                ip: target.ip,
                port: target.port,
                qpn: target.qpn,
            };
            let t1_wall_ns = rocemesh_proto::now_unix_ns();
            let t1 = Instant::now();
            let probe = probe.with_src_port(target.src_port);
            let flow = Flow {
                src: self.transport.local_ip(),
                // Port 0 sends from the main port (the transport's rule).
                src_port: match target.src_port {
                    0 => self.responder.ack_port(),
                    p => p,
                },
                dst: target.ip,
                dst_port: target.port,
            };
            let wire = self.guard.settings().encode(&probe, &flow);
            match self.transport.send(wire.as_bytes(), to, target.src_port) {
                Ok(tx) => {
                    self.counters.probes_sent.fetch_add(1, Relaxed);
                    if class == ProbeClass::Service {
                        self.counters.service_probes.fetch_add(1, Relaxed);
                    }
                    self.prober.sent(&probe, target, t1, t1_wall_ns, tx);
                }
                Err(_) => {
                    self.counters.send_errors.fetch_add(1, Relaxed);
                }
            }
        }
    }

    /// Asks the tracer to trace the 5-tuples of timed-out probes ahead of its queue, and
    /// tells the service tracker which service targets went silent.
    fn report_timeouts(&mut self, now: Instant) {
        let src = self.transport.local_ip();
        let timeouts = self.prober.take_timeouts();
        for (class, target) in timeouts {
            if class == ProbeClass::Service
                && let Some(feed) = &self.service_timeouts
            {
                feed.report(target.ip);
            }
            if let Some(t) = &mut self.trace {
                t.timed_out(
                    TraceKey {
                        src,
                        dst: target.ip,
                        src_port: target.src_port,
                        dst_port: target.port,
                        ack_direction: false,
                    },
                    now,
                );
            }
        }
    }

    /// When this engine next has timer work (at most [`IDLE_WAKE`] from `now`).
    fn next_wake(&self, now: Instant) -> Instant {
        let mut until = now + IDLE_WAKE;
        if let Some(due) = self.schedule.next_due_ns() {
            until = until.min(self.epoch + Duration::from_nanos(due));
        }
        for d in [self.prober.next_deadline(), self.responder.next_deadline()]
            .into_iter()
            .flatten()
        {
            until = until.min(d);
        }
        until
    }

    fn handle(&mut self, ev: TransportEvent) {
        match ev {
            TransportEvent::TxStamp(token, stamp) => {
                if !self
                    .responder
                    .on_tx_stamp(token, stamp, &mut self.transport, &self.counters)
                {
                    self.prober.on_tx_stamp(token, stamp, &mut self.batch);
                }
            }
            TransportEvent::Rx(rx) => {
                let now = Instant::now();
                let pkt = match Packet::decode(rx.payload()) {
                    Ok(p) => p,
                    Err(e) => {
                        self.counters.count_drop(&e);
                        return;
                    }
                };
                // What the sender's tag must have been made for: this flow as we see it.
                let flow = Flow {
                    src: rx.peer_ip,
                    src_port: ack_src_port(&pkt, &rx),
                    dst: self.transport.local_ip(),
                    dst_port: self.responder.ack_port(),
                };
                if let Err(r) = self.guard.admit(&pkt, rx.payload(), &flow, now) {
                    self.counters.count_reject(r.reason());
                    return;
                }
                match pkt.kind {
                    PacketKind::Probe => {
                        if self.responder.on_probe(
                            &pkt,
                            &rx,
                            now,
                            &mut self.transport,
                            &self.counters,
                        ) && let Some(t) = &mut self.trace
                        {
                            let src = self.transport.local_ip();
                            let key = TraceKey {
                                src,
                                dst: rx.peer_ip,
                                src_port: ack_src_port(&pkt, &rx),
                                dst_port: wire_dst_port::<T>(self.responder.ack_port()),
                                ack_direction: true,
                            };
                            t.answered(key, now);
                        }
                    }
                    PacketKind::Ack1 | PacketKind::Ack2 => {
                        match self.prober.on_ack(&pkt, rx.stamp, now, &mut self.batch) {
                            AckOutcome::Unmatched => &self.counters.unmatched_ack,
                            AckOutcome::Recorded => &self.counters.acks_received,
                        }
                        .fetch_add(1, Relaxed);
                    }
                    // A traceroute packet that reached its destination: counted, never answered.
                    PacketKind::Trace => {
                        self.counters.trace_received.fetch_add(1, Relaxed);
                    }
                }
            }
        }
        if self.batch.len() >= RESULT_BATCH {
            self.flush_results();
        }
    }

    fn flush_results(&mut self) {
        for r in &self.batch {
            self.counters.count_result(r.status, r.ts_source);
        }
        self.results.push_all(&mut self.batch);
    }
}

impl<T: Transport> Driven for Engine<T> {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn on_wake(&mut self, now: Instant) {
        Engine::on_wake(self, now);
    }

    fn drain(&mut self) {
        Engine::drain(self);
    }

    fn wait(&mut self, timeout: Duration) -> std::io::Result<()> {
        self.transport.wait(timeout)
    }

    fn ready(&mut self, events: u32) -> std::io::Result<()> {
        self.transport.ready(events)
    }

    fn needs_poll(&self) -> bool {
        self.transport.poll_within().is_some()
    }

    fn next_wake(&self, now: Instant) -> Instant {
        let t = Engine::next_wake(self, now);
        self.transport.poll_within().map_or(t, |p| t.min(now + p))
    }

    fn wait_fd(&self) -> Option<RawFd> {
        self.transport.wait_fd()
    }

    fn flush(&mut self) {
        self.flush_results();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{UdpTransport, VerbsTransport};

    fn target() -> PingTarget {
        PingTarget {
            rnic_id: 7,
            ip: "198.18.1.2".parse().unwrap(),
            port: crate::config::DEFAULT_PORT,
            qpn: 99,
            src_port: 0xC123,
        }
    }

    #[test]
    fn verbs_probes_and_their_traces_use_the_rocev2_port() {
        let mut t = target();
        on_the_wire::<VerbsTransport>(&mut t);
        assert_eq!(t.port, 4791, "a UD datagram always goes to RoCEv2's port");
        assert_eq!((t.src_port, t.ip, t.qpn), (0xC123, target().ip, 99));
        // The trace keys the feed derives from those lists follow the same 5-tuple.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let feed = TraceFeed::new(tx, Arc::new(Counters::default()), Duration::from_secs(60));
        let src = "198.18.0.2".parse().unwrap();
        feed.pinglist(
            src,
            &[ProbeList {
                class: ProbeClass::InterTor,
                pps: 10.0,
                entries: vec![t],
            }],
        );
        let Ok(crate::trace::feed::TraceRequest::Pinglist { keys, .. }) = rx.try_recv() else {
            panic!("no pinglist request");
        };
        assert_eq!(keys.len(), 1);
        assert_eq!((keys[0].src_port, keys[0].dst_port), (0xC123, 4791));
        // Our ACKs on a verbs host are RoCEv2 datagrams too.
        assert_eq!(
            wire_dst_port::<VerbsTransport>(crate::config::DEFAULT_PORT),
            4791
        );
    }

    #[test]
    fn udp_probes_keep_the_registered_port() {
        let mut t = target();
        on_the_wire::<UdpTransport>(&mut t);
        assert_eq!(t, target());
        assert_eq!(wire_dst_port::<UdpTransport>(5000), 5000);
    }
}
