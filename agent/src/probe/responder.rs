//! The responder: answers each PROBE for our QPN with ACK1 at once, then ACK2 carrying
//! ④−③ as soon as ACK1's TX stamp ④ is known (or application times after ~10 ms).

use super::guard::GuardSettings;
use crate::stats::Counters;
use crate::transport::{Endpoint, RxDatagram, Stamp, Transport, TxToken};
use rocemesh_proto::probe_auth::Flow;
use rocemesh_proto::{Packet, TimestampSource};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// How long ACK2 waits for ACK1's TX stamp before using application times.
pub(crate) const TX_STAMP_WAIT: Duration = Duration::from_millis(10);
/// Most ACK2s waiting for a TX stamp at once; beyond it ACK2 goes out with app times.
pub(crate) const MAX_PENDING: usize = 4096;

/// An ACK1 sent whose ACK2 still waits for ④.
#[derive(Debug)]
struct PendingAck2 {
    probe: Packet,
    to: Endpoint,
    src_port: u16,
    t3: Option<Stamp>,
    t3_app: Instant,
    t4_app: Instant,
    deadline: Instant,
}

/// Responder state of one RNIC.
#[derive(Debug)]
pub(crate) struct Responder {
    qpn: u32,
    rnic_id: u32,
    port: u16,
    pending: HashMap<TxToken, PendingAck2>,
    order: VecDeque<TxToken>,
    /// Tags our ACKs when probe authentication is on.
    sealer: Arc<GuardSettings>,
}

impl Responder {
    /// A responder with QPN `qpn` whose ACKs go to the probers' port `port`.
    pub(crate) fn new(qpn: u32, port: u16) -> Self {
        Self {
            qpn,
            rnic_id: 0,
            port,
            pending: HashMap::new(),
            order: VecDeque::new(),
            sealer: Arc::new(GuardSettings::open()),
        }
    }

    /// The probe settings our ACKs are tagged under from now on.
    pub(crate) fn set_sealer(&mut self, sealer: Arc<GuardSettings>) {
        self.sealer = sealer;
    }

    /// Sets our controller-assigned id; PROBEs naming another id are then dropped.
    pub(crate) fn set_rnic_id(&mut self, id: u32) {
        self.rnic_id = id;
    }

    /// Handles a PROBE received as `rx` (③ = its RX stamp, `t3_app` = when we read it);
    /// returns true when it was answered.
    pub(crate) fn on_probe<T: Transport>(
        &mut self,
        probe: &Packet,
        rx: &RxDatagram,
        t3_app: Instant,
        transport: &mut T,
        counters: &Counters,
    ) -> bool {
        if probe.target_qpn != self.qpn || (self.rnic_id != 0 && probe.target_rnic != self.rnic_id)
        {
            counters.stale_qpn.fetch_add(1, Relaxed);
            return false;
        }
        let to = Endpoint {
            ip: rx.peer_ip,
            port: self.port,
            qpn: probe.prober_qpn,
        };
        let src_port = ack_src_port(probe, rx);
        let wire = self
            .sealer
            .encode(&probe.ack1(self.qpn), &ack_flow(transport, to, src_port));
        let token = match transport.send(wire.as_bytes(), to, src_port) {
            Ok(t) => t,
            Err(_) => {
                counters.send_errors.fetch_add(1, Relaxed);
                return false;
            }
        };
        counters.acks_sent.fetch_add(1, Relaxed);
        let t4_app = Instant::now();
        let p = PendingAck2 {
            probe: *probe,
            to,
            src_port,
            t3: rx.stamp,
            t3_app,
            t4_app,
            deadline: t4_app + TX_STAMP_WAIT,
        };
        if p.t3.is_none() || self.pending.len() >= MAX_PENDING {
            self.send_ack2(&p, None, transport, counters);
        } else {
            self.pending.insert(token, p);
            self.order.push_back(token);
        }
        true
    }

    /// The port our ACKs go to (the probers' main port).
    pub(crate) fn ack_port(&self) -> u16 {
        self.port
    }

    /// Takes ④ for an ACK1; returns false when the token is not one of ours.
    pub(crate) fn on_tx_stamp<T: Transport>(
        &mut self,
        token: TxToken,
        t4: Stamp,
        transport: &mut T,
        counters: &Counters,
    ) -> bool {
        let Some(p) = self.pending.get(&token) else {
            return false;
        };
        // Only a stamp on ③'s clock helps; otherwise wait for a better one or the deadline.
        if p.t3.is_some_and(|t3| t3.source == t4.source)
            && let Some(p) = self.pending.remove(&token)
        {
            self.send_ack2(&p, Some(t4), transport, counters);
        }
        true
    }

    /// Sends ACK2 with application times for every ACK1 whose ④ did not come in time.
    pub(crate) fn expire<T: Transport>(
        &mut self,
        now: Instant,
        transport: &mut T,
        counters: &Counters,
    ) {
        while let Some(token) = self.order.front().copied() {
            match self.pending.get(&token) {
                Some(p) if p.deadline > now => break,
                Some(_) => {
                    if let Some(p) = self.pending.remove(&token) {
                        self.send_ack2(&p, None, transport, counters);
                    }
                }
                None => {}
            }
            self.order.pop_front();
        }
    }

    /// When the oldest pending ACK2 falls back to application times.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.order
            .iter()
            .find_map(|t| self.pending.get(t))
            .map(|p| p.deadline)
    }

    fn send_ack2<T: Transport>(
        &self,
        p: &PendingAck2,
        t4: Option<Stamp>,
        transport: &mut T,
        counters: &Counters,
    ) {
        let (delay, source) = responder_delay(p.t3, t4, p.t3_app, p.t4_app);
        let ack2 = p.probe.ack2(self.qpn, delay, source);
        let wire = self
            .sealer
            .encode(&ack2, &ack_flow(transport, p.to, p.src_port));
        match transport.send_unstamped(wire.as_bytes(), p.to, p.src_port) {
            Ok(_) => counters.acks_sent.fetch_add(1, Relaxed),
            Err(_) => counters.send_errors.fetch_add(1, Relaxed),
        };
    }
}

/// The flow an ACK to `to` from our port `src_port` travels on (what its tag binds).
fn ack_flow<T: Transport>(transport: &T, to: Endpoint, src_port: u16) -> Flow {
    Flow {
        src: transport.local_ip(),
        src_port,
        dst: to.ip,
        dst_port: to.port,
    }
}

/// The source port ACKs of `probe` go back from: the one it was seen to come from, else
/// (verbs over IPv4: no flow label in the GRH) the one the PROBE names.
pub(crate) fn ack_src_port(probe: &Packet, rx: &RxDatagram) -> u16 {
    rx.peer_port.unwrap_or(probe.src_port)
}

/// ④−③ from kernel/NIC stamps on one clock, else from application times (flagged `App`).
pub(crate) fn responder_delay(
    t3: Option<Stamp>,
    t4: Option<Stamp>,
    t3_app: Instant,
    t4_app: Instant,
) -> (u64, TimestampSource) {
    match (t3, t4) {
        (Some(t3), Some(t4)) if t3.source == t4.source && t4.ns >= t3.ns => {
            (t4.ns - t3.ns, t3.source)
        }
        _ => (
            t4_app.saturating_duration_since(t3_app).as_nanos() as u64,
            TimestampSource::App,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_leave_from_the_seen_port_else_the_named_one() {
        let probe = Packet::probe(rocemesh_proto::ProbeClass::Service, 1, 2, 3, 4, 5, 6)
            .with_src_port(0xC123);
        let ip = "10.0.0.1".parse().unwrap();
        let seen = RxDatagram::new(&probe.encode(), 64, ip, Some(50_000), None);
        assert_eq!(ack_src_port(&probe, &seen), 50_000);
        let unseen = RxDatagram::new(&probe.encode(), 64, ip, None, None);
        assert_eq!(ack_src_port(&probe, &unseen), 0xC123);
    }

    #[test]
    fn delay_uses_one_clock_only() {
        let a = Instant::now();
        let b = a + Duration::from_micros(30);
        let sw = |ns| {
            Some(Stamp {
                ns,
                source: TimestampSource::Software,
            })
        };
        let hw = |ns| {
            Some(Stamp {
                ns,
                source: TimestampSource::Hardware,
            })
        };
        assert_eq!(
            responder_delay(sw(100), sw(1_100), a, b),
            (1_000, TimestampSource::Software)
        );
        assert_eq!(
            responder_delay(hw(100), hw(600), a, b),
            (500, TimestampSource::Hardware)
        );
        assert_eq!(
            responder_delay(hw(100), sw(600), a, b),
            (30_000, TimestampSource::App)
        );
        assert_eq!(
            responder_delay(sw(700), sw(600), a, b),
            (30_000, TimestampSource::App)
        );
        assert_eq!(
            responder_delay(None, sw(600), a, b),
            (30_000, TimestampSource::App)
        );
        assert_eq!(
            responder_delay(sw(1), None, b, a),
            (0, TimestampSource::App)
        );
    }
}
