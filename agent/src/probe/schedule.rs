//! When to probe whom: each list spreads its `pps` evenly over its targets, in a freshly
//! shuffled order every round, on an absolute schedule that neither drifts nor bursts.

use rand::Rng;
use rand::seq::SliceRandom;
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{PingTarget, ProbeList};

/// How late a slot may be and still be sent: covers an event loop that wakes on a tick.
pub(crate) const CATCH_UP_NS: u64 = 20_000_000;

/// Highest rate a single list may ask for (a bad pinglist must not flood the fabric).
pub(crate) const MAX_LIST_PPS: f64 = 100_000.0;
/// Interval between two probes of one service flow (R-Pingmesh §4.2.2: 10 ms).
pub(crate) const SERVICE_PROBE_INTERVAL_MS: f64 = 10.0;

/// One list's round-robin over shuffled targets at a fixed interval.
#[derive(Debug)]
pub(crate) struct ListSchedule {
    class: ProbeClass,
    entries: Vec<PingTarget>,
    order: Vec<usize>,
    pos: usize,
    interval_ns: u64,
    next_ns: u64,
}

impl ListSchedule {
    /// Starts a list at a random phase within its first interval; `None` when it has no
    /// targets or no usable rate.
    pub(crate) fn new<R: Rng>(list: ProbeList, now_ns: u64, rng: &mut R) -> Option<Self> {
        if list.entries.is_empty() || !list.pps.is_finite() || list.pps <= 0.0 {
            return None;
        }
        let interval_ns = (1e9 / list.pps.min(MAX_LIST_PPS)).round().max(1.0) as u64;
        let mut order: Vec<usize> = (0..list.entries.len()).collect();
        order.shuffle(rng);
        Some(Self {
            class: list.class,
            entries: list.entries,
            order,
            pos: 0,
            interval_ns,
            next_ns: now_ns + rng.random_range(0..interval_ns),
        })
    }

    /// When the next probe of this list is due.
    pub(crate) fn next_due_ns(&self) -> u64 {
        self.next_ns
    }

    /// The target due at `now_ns`, if any; advances the schedule by one slot. After a stall
    /// longer than [`CATCH_UP_NS`] the missed slots are skipped (keeping the phase)
    /// instead of being sent in a burst.
    pub(crate) fn pop_due<R: Rng>(
        &mut self,
        now_ns: u64,
        rng: &mut R,
    ) -> Option<(ProbeClass, &PingTarget)> {
        if now_ns < self.next_ns {
            return None;
        }
        let idx = self.order[self.pos];
        self.pos += 1;
        if self.pos == self.order.len() {
            self.pos = 0;
            self.order.shuffle(rng);
        }
        self.next_ns += self.interval_ns;
        // Slots missed by less than the catch-up window (an event loop waking on its tick)
        // are still sent; a longer stall skips them.
        if self.next_ns.saturating_add(CATCH_UP_NS) <= now_ns {
            let behind = (now_ns - self.next_ns) / self.interval_ns + 1;
            self.next_ns += behind * self.interval_ns;
        }
        Some((self.class, &self.entries[idx]))
    }
}

/// All lists of one RNIC: the pinglist's, and the traced service flows'.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    lists: Vec<ListSchedule>,
    /// Kept apart so pinglist updates and service-flow changes replace only their own part.
    service: Option<ListSchedule>,
}

impl Schedule {
    /// Schedules every usable list.
    #[cfg(test)]
    pub(crate) fn new<R: Rng>(lists: Vec<ProbeList>, now_ns: u64, rng: &mut R) -> Self {
        let mut s = Self::default();
        s.set_lists(lists, now_ns, rng);
        s
    }

    /// Replaces the pinglist's lists (the service targets stay).
    pub(crate) fn set_lists<R: Rng>(&mut self, lists: Vec<ProbeList>, now_ns: u64, rng: &mut R) {
        self.lists = lists
            .into_iter()
            .filter_map(|l| ListSchedule::new(l, now_ns, rng))
            .collect();
    }

    /// Replaces the service targets: each is probed every [`SERVICE_PROBE_INTERVAL_MS`],
    /// in a shuffled order, as class `Service` (slower only beyond [`MAX_LIST_PPS`]).
    pub(crate) fn set_service<R: Rng>(
        &mut self,
        targets: Vec<PingTarget>,
        now_ns: u64,
        rng: &mut R,
    ) {
        let list = ProbeList {
            class: ProbeClass::Service,
            pps: targets.len() as f64 * 1_000.0 / SERVICE_PROBE_INTERVAL_MS,
            entries: targets,
        };
        self.service = ListSchedule::new(list, now_ns, rng);
    }

    fn all_mut(&mut self) -> impl Iterator<Item = &mut ListSchedule> {
        self.lists.iter_mut().chain(self.service.as_mut())
    }

    /// Earliest due time over all lists, `None` when there is nothing to probe.
    pub(crate) fn next_due_ns(&self) -> Option<u64> {
        self.lists
            .iter()
            .chain(self.service.as_ref())
            .map(ListSchedule::next_due_ns)
            .min()
    }

    /// One target due at `now_ns`, from the most overdue list.
    pub(crate) fn pop_due<R: Rng>(
        &mut self,
        now_ns: u64,
        rng: &mut R,
    ) -> Option<(ProbeClass, &PingTarget)> {
        let list = self
            .all_mut()
            .filter(|l| l.next_ns <= now_ns)
            .min_by_key(|l| l.next_ns)?;
        list.pop_due(now_ns, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use std::collections::HashMap;

    fn list(n: u16, pps: f64) -> ProbeList {
        ProbeList {
            class: ProbeClass::TorMesh,
            pps,
            entries: (0..n)
                .map(|i| PingTarget {
                    rnic_id: i as u32 + 1,
                    ip: "10.0.0.1".parse().unwrap(),
                    port: 4792,
                    qpn: 5,
                    src_port: 50_000 + i,
                })
                .collect(),
        }
    }

    /// Drives a schedule on a simulated clock that wakes exactly when asked.
    fn run(s: &mut Schedule, rng: &mut StdRng, until_ns: u64) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        while let Some(t) = s.next_due_ns().filter(|t| *t < until_ns) {
            let (_, target) = s.pop_due(t, rng).unwrap();
            out.push((t, target.rnic_id));
        }
        out
    }

    #[test]
    fn rate_is_exact_and_every_entry_is_hit_once_per_round() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut s = Schedule::new(vec![list(7, 150.0)], 0, &mut rng);
        let sent = run(&mut s, &mut rng, 20_000_000_000);
        let rate = sent.len() as f64 / 20.0;
        assert!((rate - 150.0).abs() <= 1.5, "rate {rate}");
        let rounds: Vec<Vec<u32>> = sent
            .chunks_exact(7)
            .map(|c| c.iter().map(|(_, id)| *id).collect())
            .collect();
        for r in &rounds {
            let mut sorted = r.clone();
            sorted.sort();
            assert_eq!(sorted, (1..=7).collect::<Vec<_>>());
        }
        // Reshuffled: not every round in the same order.
        assert!(rounds.windows(2).any(|w| w[0] != w[1]));
        let mut per_target: HashMap<u32, usize> = HashMap::new();
        sent.iter()
            .for_each(|(_, id)| *per_target.entry(*id).or_default() += 1);
        assert!(
            per_target
                .values()
                .all(|&c| (c as f64 - 150.0 * 20.0 / 7.0).abs() <= 2.0)
        );
    }

    #[test]
    fn no_drift_and_no_burst_after_a_stall() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut s = ListSchedule::new(list(3, 100.0), 0, &mut rng).unwrap();
        let phase = s.next_due_ns();
        // Late wake-ups do not shift the grid: slot k stays at phase + k * 10 ms.
        for k in 0..50u64 {
            let due = s.next_due_ns();
            assert_eq!(due, phase + k * 10_000_000);
            assert!(s.pop_due(due + 3_000_000, &mut rng).is_some());
        }
        // A 1 s stall yields ONE probe, then the schedule resumes on its grid in the future.
        let stalled = s.next_due_ns() + 1_000_000_000;
        assert!(s.pop_due(stalled, &mut rng).is_some());
        assert!(s.pop_due(stalled, &mut rng).is_none());
        assert!(s.next_due_ns() > stalled && (s.next_due_ns() - phase).is_multiple_of(10_000_000));
        // Late by less than the catch-up window: the missed slots still go, then on grid.
        let late = s.next_due_ns() + 15_000_000;
        assert!(s.pop_due(late, &mut rng).is_some());
        assert!(s.pop_due(late, &mut rng).is_some());
        assert!(s.pop_due(late, &mut rng).is_none());
        assert!(s.next_due_ns() > late && (s.next_due_ns() - phase).is_multiple_of(10_000_000));
    }

    #[test]
    fn service_targets_every_10ms_beside_the_pinglist() {
        let mut rng = StdRng::seed_from_u64(4);
        let mut s = Schedule::new(vec![list(2, 10.0)], 0, &mut rng);
        let mut svc = list(3, 1.0).entries;
        svc.iter_mut().for_each(|t| t.rnic_id += 100);
        s.set_service(svc, 0, &mut rng);
        let sent = run(&mut s, &mut rng, 1_000_000_000);
        let count = |lo: u32, hi: u32| sent.iter().filter(|(_, id)| (lo..hi).contains(id)).count();
        // 3 flows at 100/s each, and the pinglist's 10/s untouched.
        assert!(
            (count(101, 104) as i64 - 300).abs() <= 1,
            "{}",
            count(101, 104)
        );
        assert!((count(1, 3) as i64 - 10).abs() <= 1);
        for id in 101..104 {
            let times: Vec<u64> = sent
                .iter()
                .filter(|(_, i)| *i == id)
                .map(|(t, _)| *t)
                .collect();
            assert!(times.windows(2).all(|w| w[1] - w[0] < 20_000_000), "{id}");
        }
        // A pinglist update keeps the service list; an empty service list removes it.
        s.set_lists(Vec::new(), 1_000_000_000, &mut rng);
        assert!(s.next_due_ns().is_some());
        s.set_service(Vec::new(), 1_000_000_000, &mut rng);
        assert_eq!(s.next_due_ns(), None);
    }

    #[test]
    fn unusable_lists_are_ignored() {
        let mut rng = StdRng::seed_from_u64(3);
        let s = Schedule::new(
            vec![
                list(0, 10.0),
                list(2, 0.0),
                list(2, f64::NAN),
                list(2, -1.0),
            ],
            0,
            &mut rng,
        );
        assert_eq!(s.next_due_ns(), None);
        let capped = ListSchedule::new(list(1, 1e12), 0, &mut rng).unwrap();
        assert_eq!(capped.interval_ns, 10_000);
    }
}
