//! One traceroute of one 5-tuple: TTL 1, 2, ... sent one at a time, each waiting for its
//! ICMP answer or [`HOP_WAIT`], and the rule deciding whether the destination was reached.
//!
//! Reached rule. The destination never answers a TRACE (its agent counts and ignores it,
//! and the port is open so there is no port-unreachable), so arrival shows as silence:
//! - hops 1..=k all answered time-exceeded, then [`SILENT_STOP`] consecutive TTLs got no
//!   answer: one silent TTL could be a router that does not answer ICMP, but a router
//!   beyond it would answer the next TTL; and no probe on this 5-tuple timed out while the
//!   trace ran, nor did one trigger the trace (a black hole right after hop k looks the
//!   same as arrival, and timeouts are what tells them apart). The trailing silent TTLs
//!   are then not listed as hops. A destination with no router in between (same L2
//!   segment) therefore never counts as reached: zero answers prove nothing.
//! - or the destination itself answered port-unreachable (no agent listening there).
//!
//! Anything else (a gap before the end, max_hops exhausted, a router's unreachable, a
//! timeout during the trace) is an incomplete path (`reached = false`) listing every TTL
//! sent, `None` where nothing answered.

use super::icmp::{IcmpAnswer, IcmpKind};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long one TTL waits for its ICMP answer.
pub(crate) const HOP_WAIT: Duration = Duration::from_millis(200);
/// Consecutive silent TTLs that end a trace.
pub(crate) const SILENT_STOP: usize = 2;

/// The TRACE seq of TTL `ttl` of trace `nonce`: routers that quote the whole payload tell
/// us which TTL (and which trace) an answer belongs to.
pub(crate) fn trace_seq(nonce: u32, ttl: u8) -> u32 {
    (nonce << 8) | u32::from(ttl)
}

/// State of one trace in progress.
#[derive(Debug)]
pub(crate) struct Session {
    nonce: u32,
    max_hops: u8,
    hops: Vec<Option<IpAddr>>,
    /// TTL in flight and when its wait ends.
    in_flight: Option<(u8, Instant)>,
    /// `Some(reached)` once over.
    outcome: Option<bool>,
    /// A probe on this 5-tuple timed out while tracing.
    anomaly: bool,
}

impl Session {
    /// A trace numbered `nonce` (24 bits kept) going up to `max_hops`.
    pub(crate) fn new(nonce: u32, max_hops: u8) -> Self {
        Self {
            nonce: nonce & 0x00ff_ffff,
            max_hops: max_hops.max(1),
            hops: Vec::new(),
            in_flight: None,
            outcome: None,
            anomaly: false,
        }
    }

    /// The seq to put in the TRACE packet of `ttl`.
    pub(crate) fn seq(&self, ttl: u8) -> u32 {
        trace_seq(self.nonce, ttl)
    }

    /// The TTL to send now, if the trace waits for a send.
    pub(crate) fn next_ttl(&self) -> Option<u8> {
        (self.outcome.is_none() && self.in_flight.is_none()).then_some(self.hops.len() as u8 + 1)
    }

    /// Records that `ttl` left at `now`.
    pub(crate) fn sent(&mut self, ttl: u8, now: Instant) {
        self.in_flight = Some((ttl, now + HOP_WAIT));
    }

    /// The send failed (no route, ...): the trace ends incomplete.
    pub(crate) fn abort(&mut self) {
        self.in_flight = None;
        self.outcome = Some(false);
    }

    /// When the TTL in flight stops waiting.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.in_flight.map(|(_, d)| d)
    }

    /// A probe on this 5-tuple timed out meanwhile: the trace cannot claim arrival by silence.
    pub(crate) fn mark_anomaly(&mut self) {
        self.anomaly = true;
    }

    /// True once the trace is over.
    pub(crate) fn is_done(&self) -> bool {
        self.outcome.is_some()
    }

    /// Takes an ICMP answer read from this trace's socket.
    pub(crate) fn on_answer(&mut self, a: &IcmpAnswer) {
        let ttl = match a.quoted_seq {
            Some(seq) if seq >> 8 != self.nonce => return, // an earlier trace of this 5-tuple
            Some(seq) => (seq & 0xff) as u8,
            None => match self.in_flight {
                Some((t, _)) => t,
                None => return,
            },
        };
        match self.in_flight {
            Some((t, _)) if t == ttl && self.outcome.is_none() => {}
            _ => {
                // A late answer for a TTL already given up as silent: fill the gap in.
                if let Some(slot @ None) = self.hops.get_mut(usize::from(ttl).wrapping_sub(1))
                    && a.kind == IcmpKind::TimeExceeded
                {
                    *slot = Some(a.from);
                }
                return;
            }
        }
        self.in_flight = None;
        match a.kind {
            IcmpKind::TimeExceeded => {
                self.hops.push(Some(a.from));
                if ttl >= self.max_hops {
                    self.outcome = Some(false);
                }
            }
            IcmpKind::PortUnreachable => self.outcome = Some(true),
            IcmpKind::Unreachable => {
                self.hops.push(Some(a.from));
                self.outcome = Some(false);
            }
        }
    }

    /// Gives up on a TTL whose wait ended by `now`.
    pub(crate) fn on_time(&mut self, now: Instant) {
        let Some((ttl, deadline)) = self.in_flight else {
            return;
        };
        if deadline > now {
            return;
        }
        self.in_flight = None;
        self.hops.push(None);
        let silent = self.hops.iter().rev().take_while(|h| h.is_none()).count();
        if silent >= SILENT_STOP {
            let answered = &self.hops[..self.hops.len() - silent];
            self.outcome =
                Some(!answered.is_empty() && answered.iter().all(Option::is_some) && !self.anomaly);
        } else if ttl >= self.max_hops {
            self.outcome = Some(false);
        }
    }

    /// The hops and whether the destination was reached (see the module doc).
    pub(crate) fn result(mut self) -> (Vec<Option<IpAddr>>, bool) {
        let reached = self.outcome == Some(true);
        if reached {
            while self.hops.last() == Some(&None) {
                self.hops.pop();
            }
        }
        (self.hops, reached)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([198, 18, 0, last])
    }

    fn te(from: u8, seq: Option<u32>) -> IcmpAnswer {
        IcmpAnswer {
            from: ip(from),
            kind: IcmpKind::TimeExceeded,
            quoted_seq: seq,
        }
    }

    /// Drives a session: `answers[ttl-1]` is the router answering that TTL (None = silent).
    fn run(
        answers: &[Option<u8>],
        max_hops: u8,
        anomaly_at: Option<usize>,
    ) -> (Vec<Option<IpAddr>>, bool, usize) {
        let mut s = Session::new(5, max_hops);
        let mut now = Instant::now();
        let mut sent = 0;
        while let Some(ttl) = s.next_ttl() {
            s.sent(ttl, now);
            sent += 1;
            if anomaly_at == Some(sent) {
                s.mark_anomaly();
            }
            match answers.get(usize::from(ttl) - 1).copied().flatten() {
                Some(r) => s.on_answer(&te(r, Some(s.seq(ttl)))),
                None => {
                    now += HOP_WAIT / 2;
                    s.on_time(now);
                    assert!(!s.is_done() || s.next_ttl().is_none());
                    now += HOP_WAIT;
                    s.on_time(now);
                }
            }
        }
        let (hops, reached) = s.result();
        (hops, reached, sent)
    }

    #[test]
    fn silence_after_contiguous_hops_is_arrival() {
        let (hops, reached, sent) = run(&[Some(1), Some(2), Some(3)], 8, None);
        assert_eq!(
            (hops, reached, sent),
            (vec![Some(ip(1)), Some(ip(2)), Some(ip(3))], true, 5)
        );
    }

    #[test]
    fn one_silent_router_is_not_the_end_but_a_gap_is_not_complete() {
        let (hops, reached, sent) = run(&[Some(1), None, Some(3)], 8, None);
        assert_eq!(
            (hops, reached, sent),
            (vec![Some(ip(1)), None, Some(ip(3)), None, None], false, 5)
        );
    }

    #[test]
    fn timeouts_during_the_trace_forbid_arrival_by_silence() {
        let (hops, reached, _) = run(&[Some(1), Some(2)], 8, Some(3));
        assert_eq!(
            (hops, reached),
            (vec![Some(ip(1)), Some(ip(2)), None, None], false)
        );
    }

    #[test]
    fn nothing_answering_and_max_hops_are_incomplete() {
        assert_eq!(run(&[], 8, None), (vec![None, None], false, 2));
        let all: Vec<Option<u8>> = (1..=10).map(Some).collect();
        let (hops, reached, sent) = run(&all, 4, None);
        assert_eq!((hops.len(), reached, sent), (4, false, 4));
        let (hops, reached, _) = run(&[Some(1), None], 2, None);
        assert_eq!((hops, reached), (vec![Some(ip(1)), None], false));
    }

    #[test]
    fn unreachables_end_the_trace() {
        let mut s = Session::new(1, 8);
        let now = Instant::now();
        s.sent(1, now);
        s.on_answer(&te(1, None));
        s.sent(2, now);
        s.on_answer(&IcmpAnswer {
            from: ip(9),
            kind: IcmpKind::PortUnreachable,
            quoted_seq: None,
        });
        assert_eq!(s.result(), (vec![Some(ip(1))], true));
        let mut s = Session::new(1, 8);
        s.sent(1, now);
        s.on_answer(&IcmpAnswer {
            from: ip(1),
            kind: IcmpKind::Unreachable,
            quoted_seq: None,
        });
        assert!(s.is_done() && s.next_ttl().is_none());
        assert_eq!(s.result(), (vec![Some(ip(1))], false));
        let mut s = Session::new(1, 8);
        s.sent(1, now);
        s.abort();
        assert_eq!(s.result(), (vec![], false));
    }

    #[test]
    fn answers_are_matched_by_quoted_seq_and_late_ones_fill_gaps() {
        let mut s = Session::new(0x1234, 8);
        let now = Instant::now();
        s.sent(1, now);
        // An answer for another trace of the same 5-tuple is ignored.
        s.on_answer(&te(7, Some(trace_seq(0x999, 1))));
        assert!(s.next_ttl().is_none());
        s.on_time(now + HOP_WAIT);
        s.sent(2, now + HOP_WAIT);
        // TTL 1's answer arrives late, while TTL 2 is in flight: it fills hop 1 only.
        s.on_answer(&te(1, Some(s.seq(1))));
        assert_eq!(s.next_ttl(), None);
        s.on_answer(&te(2, Some(s.seq(2))));
        assert_eq!(s.next_ttl(), Some(3));
        s.sent(3, now);
        s.on_time(now + HOP_WAIT * 2);
        s.sent(4, now + HOP_WAIT * 2);
        s.on_time(now + HOP_WAIT * 4);
        assert_eq!(s.result(), (vec![Some(ip(1)), Some(ip(2))], true));
    }
}
