//! The prober's table of outstanding probes: matches TX stamps and ACKs to probes,
//! completes them or times them out, and turns them into `ProbeResult`s.

use super::rtt::{self, Timings};
use crate::transport::{Stamp, TxToken};
use rocemesh_proto::api::PingTarget;
use rocemesh_proto::{Packet, PacketKind, ProbeClass, ProbeResult, ProbeStatus, TimestampSource};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Default bound of outstanding probes per RNIC.
pub(crate) const DEFAULT_MAX_OUTSTANDING: usize = 16_384;
/// Default probe timeout until a pinglist says otherwise.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);

/// One probe in flight.
#[derive(Debug)]
struct Outstanding {
    class: ProbeClass,
    target: PingTarget,
    t1: Instant,
    t1_wall_ns: u64,
    tx: TxToken,
    t2: Option<Stamp>,
    /// ⑤ (if stamped) and ⑥.
    ack1: Option<(Option<Stamp>, Instant)>,
    /// ④−③ and how it was measured.
    ack2: Option<(u64, TimestampSource)>,
}

/// What became of an ACK.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AckOutcome {
    /// It matches no outstanding probe (late, duplicate, or someone else's): ignored.
    Unmatched,
    /// Recorded; the probe still waits for its other ACK or its TX stamp.
    Recorded,
}

/// Outstanding probes of one RNIC, bounded.
#[derive(Debug)]
pub(crate) struct Prober {
    rnic_id: u32,
    qpn: u32,
    token: u64,
    next_seq: u32,
    timeout: Duration,
    max_outstanding: usize,
    table: HashMap<u32, Outstanding>,
    /// (deadline, seq) in send order; entries already completed are skipped lazily.
    expiry: VecDeque<(Instant, u32)>,
    by_tx: HashMap<TxToken, u32>,
    /// Probes with both ACKs but no ② yet: finished after the current event batch.
    awaiting_tx: Vec<u32>,
    /// Targets of probes that timed out since the last [`Prober::take_timeouts`] (bounded).
    timed_out: Vec<(ProbeClass, PingTarget)>,
}

/// Most timed-out targets remembered between two [`Prober::take_timeouts`].
const MAX_TIMED_OUT: usize = 1024;

impl Prober {
    /// A prober with QPN `qpn` and incarnation token `token`.
    pub(crate) fn new(qpn: u32, token: u64, max_outstanding: usize) -> Self {
        Self {
            rnic_id: 0,
            qpn,
            token,
            next_seq: 0,
            timeout: DEFAULT_TIMEOUT,
            max_outstanding,
            // Grown on demand up to the bound (then reused): no per-probe allocation in
            // steady state, and an idle agent does not pay for the worst case.
            table: HashMap::new(),
            expiry: VecDeque::new(),
            by_tx: HashMap::new(),
            awaiting_tx: Vec::with_capacity(64),
            timed_out: Vec::new(),
        }
    }

    /// Sets the controller-assigned id this RNIC probes as.
    pub(crate) fn set_rnic_id(&mut self, id: u32) {
        self.rnic_id = id;
    }

    /// Sets the timeout of probes sent from now on.
    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The PROBE to send next to `target`, or `None` when too many are outstanding.
    pub(crate) fn next_probe(&mut self, class: ProbeClass, target: &PingTarget) -> Option<Packet> {
        if self.expiry.len() >= self.max_outstanding {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        Some(Packet::probe(
            class,
            seq,
            self.rnic_id,
            self.qpn,
            target.rnic_id,
            target.qpn,
            self.token,
        ))
    }

    /// Records that `probe` left at ① = (`t1`, `t1_wall_ns`) with TX token `tx`.
    pub(crate) fn sent(
        &mut self,
        probe: &Packet,
        target: &PingTarget,
        t1: Instant,
        t1_wall_ns: u64,
        tx: TxToken,
    ) {
        let entry = Outstanding {
            class: probe.class,
            target: target.clone(),
            t1,
            t1_wall_ns,
            tx,
            t2: None,
            ack1: None,
            ack2: None,
        };
        self.table.insert(probe.seq, entry);
        self.expiry.push_back((t1 + self.timeout, probe.seq));
        self.by_tx.insert(tx, probe.seq);
    }

    /// Takes ② for a probe; returns false when the token is not one of ours.
    pub(crate) fn on_tx_stamp(
        &mut self,
        tx: TxToken,
        stamp: Stamp,
        out: &mut Vec<ProbeResult>,
    ) -> bool {
        let Some(&seq) = self.by_tx.get(&tx) else {
            return false;
        };
        if let Some(e) = self.table.get_mut(&seq) {
            // A NIC may report software then hardware for the same send: keep the best.
            if e.t2.is_none_or(|old| stamp.source > old.source) {
                e.t2 = Some(stamp);
            }
            if e.ack1.is_some() && e.ack2.is_some() {
                self.finish(seq, out);
            }
        }
        true
    }

    /// Takes an ACK1/ACK2 received with stamp ⑤ at application time ⑥ = `now`.
    pub(crate) fn on_ack(
        &mut self,
        ack: &Packet,
        rx: Option<Stamp>,
        now: Instant,
        out: &mut Vec<ProbeResult>,
    ) -> AckOutcome {
        let Some(e) = self.table.get_mut(&ack.seq) else {
            return AckOutcome::Unmatched;
        };
        let ours = ack.prober_token == self.token
            && ack.prober_qpn == self.qpn
            && ack.target_rnic == e.target.rnic_id
            && ack.target_qpn == e.target.qpn
            && ack.class == e.class;
        if !ours {
            return AckOutcome::Unmatched;
        }
        match ack.kind {
            PacketKind::Ack1 if e.ack1.is_none() => e.ack1 = Some((rx, now)),
            PacketKind::Ack2 if e.ack2.is_none() => {
                e.ack2 = Some((ack.responder_delay_ns, ack.responder_ts))
            }
            _ => return AckOutcome::Unmatched,
        }
        if e.ack1.is_some() && e.ack2.is_some() {
            if e.t2.is_some() {
                self.finish(ack.seq, out);
            } else if self.awaiting_tx.len() < self.awaiting_tx.capacity() {
                self.awaiting_tx.push(ack.seq);
            } else {
                self.finish(ack.seq, out);
            }
        }
        AckOutcome::Recorded
    }

    /// Finishes answered probes whose ② did not arrive in the same event batch.
    pub(crate) fn flush_awaiting(&mut self, out: &mut Vec<ProbeResult>) {
        while let Some(seq) = self.awaiting_tx.pop() {
            self.finish(seq, out);
        }
    }

    /// Times out every probe whose deadline passed.
    pub(crate) fn expire(&mut self, now: Instant, out: &mut Vec<ProbeResult>) {
        while let Some(&(deadline, seq)) = self.expiry.front() {
            if deadline > now {
                break;
            }
            self.expiry.pop_front();
            self.finish(seq, out);
        }
    }

    /// The next timeout deadline, if probes are outstanding.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.expiry.front().map(|(d, _)| *d)
    }

    /// The targets (and classes) whose probes timed out (no ACK at all) since the last call.
    pub(crate) fn take_timeouts(&mut self) -> std::vec::Drain<'_, (ProbeClass, PingTarget)> {
        self.timed_out.drain(..)
    }

    #[cfg(test)]
    /// Number of probes in flight.
    pub(crate) fn outstanding(&self) -> usize {
        self.table.len()
    }

    /// Removes a probe and emits its result (OK when both ACKs arrived, else a timeout).
    fn finish(&mut self, seq: u32, out: &mut Vec<ProbeResult>) {
        let Some(e) = self.table.remove(&seq) else {
            return;
        };
        self.by_tx.remove(&e.tx);
        let mut r = ProbeResult {
            prober_rnic: self.rnic_id,
            target_rnic: e.target.rnic_id,
            seq,
            target_qpn: e.target.qpn,
            send_unix_ns: e.t1_wall_ns,
            network_rtt_ns: 0,
            prober_delay_ns: 0,
            responder_delay_ns: 0,
            app_rtt_ns: 0,
            src_port: e.target.src_port,
            dst_port: e.target.port,
            class: e.class,
            status: ProbeStatus::Timeout,
            ts_source: e.t2.map_or(TimestampSource::App, |s| s.source),
        };
        match (e.ack1, e.ack2) {
            (Some((t5, t6)), Some((responder_delay_ns, responder_ts))) => {
                let d = rtt::delays(&Timings {
                    t1_wall_ns: e.t1_wall_ns,
                    app_rtt_ns: t6.saturating_duration_since(e.t1).as_nanos() as u64,
                    t2: e.t2,
                    t5,
                    responder_delay_ns,
                    responder_ts,
                });
                r.status = ProbeStatus::Ok;
                r.network_rtt_ns = d.network_rtt_ns;
                r.prober_delay_ns = d.prober_delay_ns;
                r.responder_delay_ns = d.responder_delay_ns;
                r.app_rtt_ns = d.app_rtt_ns;
                r.ts_source = d.ts_source;
            }
            (Some((_, t6)), None) => {
                r.status = ProbeStatus::Ack2Lost;
                r.app_rtt_ns = u32::try_from(t6.saturating_duration_since(e.t1).as_nanos())
                    .unwrap_or(u32::MAX);
            }
            _ => {
                if self.timed_out.len() < MAX_TIMED_OUT {
                    self.timed_out.push((e.class, e.target));
                }
            }
        }
        out.push(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WALL: u64 = 1_700_000_000_000_000_000;

    fn target(id: u32) -> PingTarget {
        PingTarget {
            rnic_id: id,
            ip: "127.0.0.2".parse().unwrap(),
            port: 4792,
            qpn: 77,
            src_port: 50_001,
        }
    }

    fn sw(ns: u64) -> Stamp {
        Stamp {
            ns: WALL + ns,
            source: TimestampSource::Software,
        }
    }

    /// Sends one probe at `t0`; returns it.
    fn send(p: &mut Prober, t0: Instant, tx: u64) -> Packet {
        let probe = p.next_probe(ProbeClass::TorMesh, &target(2)).unwrap();
        p.sent(&probe, &target(2), t0, WALL, TxToken(tx));
        probe
    }

    #[test]
    fn ok_needs_both_acks_and_uses_kernel_stamps() {
        let mut p = Prober::new(5, 99, 16);
        p.set_rnic_id(1);
        let t0 = Instant::now();
        let probe = send(&mut p, t0, 10);
        let mut out = Vec::new();
        assert!(p.on_tx_stamp(TxToken(10), sw(20_000), &mut out));
        assert!(!p.on_tx_stamp(TxToken(11), sw(20_000), &mut out));
        let t6 = t0 + Duration::from_micros(109);
        assert_eq!(
            p.on_ack(&probe.ack1(77), Some(sw(73_000)), t6, &mut out),
            AckOutcome::Recorded
        );
        assert!(out.is_empty());
        p.on_ack(
            &probe.ack2(77, 20_000, TimestampSource::Software),
            None,
            t6,
            &mut out,
        );
        assert_eq!(out.len(), 1);
        let r = out[0];
        assert_eq!(
            (r.status, r.ts_source, r.network_rtt_ns, r.app_rtt_ns),
            (ProbeStatus::Ok, TimestampSource::Software, 33_000, 109_000)
        );
        assert_eq!(
            (
                r.prober_rnic,
                r.target_rnic,
                r.seq,
                r.target_qpn,
                r.src_port
            ),
            (1, 2, probe.seq, 77, 50_001)
        );
        assert_eq!(p.outstanding(), 0);
        // A late duplicate is unmatched.
        assert_eq!(
            p.on_ack(&probe.ack1(77), None, t6, &mut out),
            AckOutcome::Unmatched
        );
    }

    #[test]
    fn timeouts_tell_no_ack_from_lost_ack2() {
        let mut p = Prober::new(5, 99, 16);
        p.set_timeout(Duration::from_millis(500));
        let t0 = Instant::now();
        let silent = send(&mut p, t0, 1);
        let half = send(&mut p, t0 + Duration::from_millis(1), 2);
        let mut out = Vec::new();
        p.on_ack(
            &half.ack1(77),
            None,
            t0 + Duration::from_millis(2),
            &mut out,
        );
        p.expire(t0 + Duration::from_millis(499), &mut out);
        assert!(out.is_empty());
        assert_eq!(p.next_deadline(), Some(t0 + Duration::from_millis(500)));
        p.expire(t0 + Duration::from_millis(501), &mut out);
        assert_eq!(
            out.iter().map(|r| (r.seq, r.status)).collect::<Vec<_>>(),
            vec![
                (silent.seq, ProbeStatus::Timeout),
                (half.seq, ProbeStatus::Ack2Lost)
            ]
        );
        assert!(out.iter().all(|r| r.network_rtt_ns == 0));
        assert_eq!(out[1].app_rtt_ns, 1_000_000);
        assert_eq!(p.outstanding(), 0);
        assert_eq!(p.next_deadline(), None);
    }

    #[test]
    fn foreign_acks_are_unmatched_and_table_is_bounded() {
        let mut p = Prober::new(5, 99, 2);
        let t0 = Instant::now();
        let probe = send(&mut p, t0, 1);
        let mut out = Vec::new();
        let wrong_token = Packet {
            prober_token: 1,
            ..probe.ack1(77)
        };
        let wrong_target = Packet {
            target_qpn: 78,
            ..probe.ack1(77)
        };
        let wrong_seq = Packet {
            seq: 1234,
            ..probe.ack1(77)
        };
        for ack in [wrong_token, wrong_target, wrong_seq] {
            assert_eq!(p.on_ack(&ack, None, t0, &mut out), AckOutcome::Unmatched);
        }
        send(&mut p, t0, 2);
        assert!(p.next_probe(ProbeClass::TorMesh, &target(2)).is_none());
        // Both ACKs without ② yet: finished with app stamps after the batch.
        p.on_ack(
            &probe.ack1(77),
            None,
            t0 + Duration::from_micros(50),
            &mut out,
        );
        p.on_ack(
            &probe.ack2(77, 10_000, TimestampSource::Software),
            None,
            t0 + Duration::from_micros(50),
            &mut out,
        );
        assert!(out.is_empty());
        p.flush_awaiting(&mut out);
        assert_eq!(
            (out[0].status, out[0].ts_source, out[0].network_rtt_ns),
            (ProbeStatus::Ok, TimestampSource::App, 40_000)
        );
    }
}
