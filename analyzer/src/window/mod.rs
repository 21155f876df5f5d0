//! Analysis periods: which period a record belongs to, which periods are still
//! open, and when a period is due for finalization.
//!
//! Period `p` covers send times `[p * period_ms, (p + 1) * period_ms)` and stays
//! open until `grace_ms` after its end, for late uploads. Records for finalized
//! periods are late; records more than one period ahead of now are from a skewed
//! clock. Open periods live in a small ring of reusable [`Period`] slots.
//!
//! After a start the window catches up: until `hold_until_ms` no period is finalized,
//! and every period not yet finalized whose grace ended less than `backfill_ms` ago is
//! open, so results agents held during an outage land in their own periods. The same hold
//! covers an outage of the write-ahead log while running: a host whose upload was refused
//! keeps its results and sends them again, so nothing is finalized until every refused host
//! has caught up (a batch with a record sent after its latest refusal) or `refusal_hold_ms`
//! has passed since that refusal.

pub(crate) mod histogram;
pub(crate) mod period;

use std::collections::HashMap;

pub(crate) use period::{MetricSet, Period};

/// Where a record goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Into the slot with this index.
    Open(usize),
    /// Its period is already finalized (or past its grace time).
    Late,
    /// Its period starts more than one period after now.
    Future,
}

/// The ring of open periods.
#[derive(Debug)]
pub(crate) struct Window {
    period_ms: i64,
    grace_ms: i64,
    slots: Vec<Period>,
    /// Every period with an index at or below this one is finalized.
    finalized_through: i64,
    /// How far past its grace a period still opens while catching up.
    backfill_ms: i64,
    /// Nothing is finalized before this time (the catch-up after a start).
    hold_until_ms: i64,
    /// Hosts whose uploads were refused, with the time of the latest refusal.
    refused: HashMap<u32, i64>,
    /// How long a refusal holds finalization at most (its agent may never come back).
    refusal_hold_ms: i64,
}

impl Window {
    /// A window with no period finalized after `finalized_through_ms` (the start
    /// of the newest period already persisted, if any).
    #[cfg(test)]
    pub(crate) fn new(period_ms: u64, grace_ms: u64, finalized_through_ms: Option<i64>) -> Self {
        Self::catching_up(period_ms, grace_ms, finalized_through_ms, 0, i64::MIN)
    }

    /// A window that finalizes nothing before `hold_until_ms` and meanwhile opens every
    /// period not finalized whose grace ended less than `backfill_ms` before now.
    pub(crate) fn catching_up(
        period_ms: u64,
        grace_ms: u64,
        finalized_through_ms: Option<i64>,
        backfill_ms: u64,
        hold_until_ms: i64,
    ) -> Self {
        let period_ms = period_ms as i64;
        // Open: the grace-time and backfill periods, the current one, the next one, and
        // one spare so a tick running a little late never blocks a slot.
        let slots = (grace_ms + backfill_ms).div_ceil(period_ms as u64) as usize + 4;
        Self {
            backfill_ms: backfill_ms as i64,
            hold_until_ms,
            refused: HashMap::new(),
            refusal_hold_ms: 0,
            period_ms,
            grace_ms: grace_ms as i64,
            slots: (0..slots)
                .map(|_| Period {
                    index: i64::MIN,
                    ..Period::default()
                })
                .collect(),
            finalized_through: finalized_through_ms.map_or(i64::MIN, |ms| ms.div_euclid(period_ms)),
        }
    }

    /// Sets how long a refused upload holds finalization at most ([`Self::refused`]).
    pub(crate) fn with_refusal_hold(mut self, hold_ms: u64) -> Self {
        self.refusal_hold_ms = hold_ms as i64;
        self
    }

    /// An upload of `host` could not be taken at `now_ms` (its agent keeps the results and
    /// sends them again): no period is finalized until the host has caught up.
    pub(crate) fn refused(&mut self, host: u32, now_ms: i64) {
        self.refused.insert(host, now_ms);
    }

    /// `host` delivered a batch whose newest record was sent at `newest_send_ms`: past its
    /// latest refusal, its agent has sent everything it held.
    pub(crate) fn delivered(&mut self, host: u32, newest_send_ms: i64) {
        if self
            .refused
            .get(&host)
            .is_some_and(|&at| newest_send_ms >= at)
        {
            self.refused.remove(&host);
        }
    }

    /// Nothing is finalized before the returned time (the start-up catch-up, or hosts
    /// whose refused uploads are still owed); refusals older than their hold are forgotten.
    fn hold_until(&mut self, now_ms: i64) -> i64 {
        let bound = self.refusal_hold_ms;
        self.refused
            .retain(|_, at| at.saturating_add(bound) > now_ms);
        self.refused
            .values()
            .map(|at| at.saturating_add(bound))
            .fold(self.hold_until_ms, i64::max)
    }

    /// Index of the period holding a send time given in ms.
    #[inline]
    pub(crate) fn period_of(&self, send_ms: i64) -> i64 {
        send_ms.div_euclid(self.period_ms)
    }

    /// Decides where records of period `p` go at time `now_ms`, readying its slot.
    pub(crate) fn place(&mut self, p: i64, now_ms: i64) -> Placement {
        let hold = self.hold_until(now_ms);
        let closed = if now_ms < hold {
            self.grace_end(p).saturating_add(self.backfill_ms) <= now_ms
        } else {
            self.grace_end(p) <= now_ms
        };
        if p <= self.finalized_through || closed {
            return Placement::Late;
        }
        if p > self.period_of(now_ms) + 1 {
            return Placement::Future;
        }
        let i = p.rem_euclid(self.slots.len() as i64) as usize;
        let slot = &mut self.slots[i];
        if slot.index != p {
            if !slot.is_empty() {
                // An older period still waits for `tick`: nowhere to put this.
                return Placement::Late;
            }
            slot.reset(p);
        }
        Placement::Open(i)
    }

    /// The slot a [`Placement::Open`] named.
    #[inline]
    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut Period {
        &mut self.slots[i]
    }

    fn grace_end(&self, p: i64) -> i64 {
        (p + 1)
            .saturating_mul(self.period_ms)
            .saturating_add(self.grace_ms)
    }

    /// Start (ms) of the newest finalized period, if any.
    pub(crate) fn finalized_through_ms(&self) -> Option<i64> {
        (self.finalized_through != i64::MIN)
            .then(|| self.finalized_through.saturating_mul(self.period_ms))
    }

    /// Hands every period due at `now_ms` (all open ones when `None`: shutdown)
    /// to `emit`, oldest first, then clears its slot.
    pub(crate) fn finalize(&mut self, now_ms: Option<i64>, mut emit: impl FnMut(&Period)) {
        let held = now_ms.is_some_and(|now| now < self.hold_until(now));
        let mut order: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                let s = &self.slots[i];
                !s.is_empty() && !held && now_ms.is_none_or(|now| self.grace_end(s.index) <= now)
            })
            .collect();
        order.sort_unstable_by_key(|&i| self.slots[i].index);
        for i in order {
            let slot = &mut self.slots[i];
            emit(slot);
            self.finalized_through = self.finalized_through.max(slot.index);
            // The slot holds another period only a whole ring later (35 periods with the
            // default backfill): its aggregates are freed rather than kept for reuse, so
            // memory follows the open periods, not every slot of the ring.
            *slot = Period {
                index: slot.index,
                ..Period::default()
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::ProbeResult;
    use rocemesh_proto::testing::probe_result;

    fn rec() -> ProbeResult {
        probe_result(0, 1, 0, true, 5)
    }

    fn put(w: &mut Window, send_ms: i64, now: i64) -> Placement {
        let placement = w.place(w.period_of(send_ms), now);
        if let Placement::Open(i) = placement {
            let slot = w.slot_mut(i);
            slot.ensure_rnics(2);
            slot.add(&rec(), 0, 0);
        }
        placement
    }

    #[test]
    fn late_future_and_due_periods() {
        let mut w = Window::new(20_000, 7_000, None);
        let now = 1_000_000; // period 50 = [1_000_000, 1_020_000)
        assert!(matches!(put(&mut w, now, now), Placement::Open(_)));
        assert!(matches!(put(&mut w, now - 1, now), Placement::Open(_))); // period 49, in grace
        assert_eq!(put(&mut w, now - 20_001, now), Placement::Late); // period 48 ended 27 s ago
        assert!(matches!(put(&mut w, now + 39_999, now), Placement::Open(_))); // period 51
        assert_eq!(put(&mut w, now + 40_000, now), Placement::Future); // period 52
        let mut seen = Vec::new();
        w.finalize(Some(now + 6_999), |p| seen.push(p.index));
        assert!(seen.is_empty());
        w.finalize(Some(now + 7_000), |p| seen.push(p.index));
        assert_eq!(seen, [49]);
        // Finalized: a straggler for 49 is late even though time alone would not say so.
        let mut w2 = Window::new(20_000, 7_000, Some(980_000));
        assert_eq!(put(&mut w2, now - 1, now), Placement::Late);
        w.finalize(None, |p| seen.push(p.index));
        assert_eq!(seen, [49, 50, 51]);
        assert_eq!(put(&mut w, now + 39_999, now), Placement::Late);
    }

    #[test]
    fn a_stalled_tick_blocks_reuse_of_a_slot() {
        let mut w = Window::new(1_000, 0, None); // 4 slots
        assert!(matches!(put(&mut w, 10_000, 10_000), Placement::Open(_)));
        // Period 14 maps onto the slot of period 10, which nobody finalized.
        assert_eq!(put(&mut w, 14_000, 13_500), Placement::Late);
        let mut n = 0;
        w.finalize(Some(13_500), |_| n += 1);
        assert_eq!(n, 1);
        assert!(matches!(put(&mut w, 14_000, 13_500), Placement::Open(_)));
    }

    #[test]
    fn catching_up_opens_the_outage_periods_and_holds_finalization() {
        let now = 1_000_000; // period 50
        // Stored through period 40; the analyzer was down since; hold 90 s, backfill 300 s.
        let mut w = Window::catching_up(20_000, 7_000, Some(800_000), 300_000, now + 90_000);
        assert_eq!(put(&mut w, 800_500, now), Placement::Late, "stored already");
        // Period 41 ended 160 s ago, period 44 100 s ago: folded, not late.
        assert!(matches!(put(&mut w, 820_000, now), Placement::Open(_)));
        assert!(matches!(put(&mut w, 880_000, now), Placement::Open(_)));
        let mut old = Window::catching_up(20_000, 7_000, None, 300_000, now + 90_000);
        assert_eq!(
            put(&mut old, now - 400_000, now),
            Placement::Late,
            "beyond the backfill bound"
        );
        let mut seen = Vec::new();
        w.finalize(Some(now + 89_999), |p| seen.push(p.index));
        assert!(seen.is_empty(), "held while catching up");
        w.finalize(Some(now + 90_000), |p| seen.push(p.index));
        assert_eq!(seen, [41, 44]);
        assert_eq!(w.finalized_through_ms(), Some(880_000));
        assert_eq!(
            put(&mut w, 900_000, now + 90_000),
            Placement::Late,
            "due after the hold"
        );
    }

    #[test]
    fn a_refused_upload_holds_its_periods_open_until_the_host_caught_up() {
        // 2 s periods, 1 s grace, 60 s backfill; a refusal holds at most 30 s.
        let mut w =
            Window::catching_up(2_000, 1_000, None, 60_000, i64::MIN).with_refusal_hold(30_000);
        let t0 = 100_000;
        assert!(matches!(put(&mut w, t0, t0), Placement::Open(_)));
        // Host 7's upload of a later period is refused: the log is down for 8 s.
        w.refused(7, t0 + 2_500);
        w.refused(7, t0 + 8_000);
        let mut seen = Vec::new();
        w.finalize(Some(t0 + 9_000), |p| seen.push(p.index));
        assert!(seen.is_empty(), "held while host 7 owes results");
        // Its held results arrive late, still land in their periods.
        assert!(matches!(
            put(&mut w, t0 + 2_100, t0 + 9_500),
            Placement::Open(_)
        ));
        // A batch of older records only: still owed. One past the refusal: caught up.
        w.delivered(7, t0 + 7_000);
        w.finalize(Some(t0 + 10_000), |p| seen.push(p.index));
        assert!(seen.is_empty(), "host 7 has not caught up yet");
        w.delivered(7, t0 + 8_100);
        w.finalize(Some(t0 + 10_000), |p| seen.push(p.index));
        assert_eq!(seen, [50, 51], "both periods after the catch-up");
        // A host that never comes back holds for the bound only.
        w.refused(9, t0 + 20_000);
        assert!(matches!(
            put(&mut w, t0 + 20_000, t0 + 20_000),
            Placement::Open(_)
        ));
        w.finalize(Some(t0 + 49_999), |p| seen.push(p.index));
        assert_eq!(seen, [50, 51]);
        w.finalize(Some(t0 + 50_000), |p| seen.push(p.index));
        assert_eq!(seen, [50, 51, 60]);
    }
}
