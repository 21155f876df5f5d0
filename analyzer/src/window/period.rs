//! Aggregates of one analysis period: cluster, ToR pairs and RNICs.

use super::histogram::Histogram;
use rocemesh_proto::{ProbeClass, ProbeResult, ProbeStatus};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Probe counts and delay distributions of one scope in one period.
#[derive(Debug, Default)]
pub(crate) struct MetricSet {
    /// Probes counted.
    pub probes: u64,
    /// Of which timed out (any non-ok status).
    pub timeouts: u64,
    /// Network RTT of ok probes.
    pub network_rtt: Histogram,
    /// Prober processing delay of ok probes.
    pub prober_delay: Histogram,
    /// Responder processing delay of ok probes.
    pub responder_delay: Histogram,
    /// Application RTT of ok probes.
    pub app_rtt: Histogram,
}

impl MetricSet {
    /// Counts a probe and all four of its delays (ToR-pair scope; the cluster adds them up).
    #[inline]
    pub(crate) fn add_probe(&mut self, r: &ProbeResult) {
        self.add_as_target(r);
        if r.status == ProbeStatus::Ok {
            self.prober_delay.insert(r.prober_delay_ns);
        }
    }

    /// Counts a probe against its target RNIC: everything but the prober delay.
    #[inline]
    pub(crate) fn add_as_target(&mut self, r: &ProbeResult) {
        self.probes += 1;
        if r.status == ProbeStatus::Ok {
            self.network_rtt.insert(r.network_rtt_ns);
            self.responder_delay.insert(r.responder_delay_ns);
            self.app_rtt.insert(r.app_rtt_ns);
        } else {
            self.timeouts += 1;
        }
    }

    /// Counts a probe against its prober RNIC: only the prober delay is its own.
    #[inline]
    pub(crate) fn add_as_prober(&mut self, r: &ProbeResult) {
        if r.status == ProbeStatus::Ok {
            self.prober_delay.insert(r.prober_delay_ns);
        }
    }

    /// True when nothing was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.probes == 0 && self.prober_delay.count() == 0
    }

    /// Adds everything `other` recorded.
    pub(crate) fn merge(&mut self, other: &MetricSet) {
        self.probes += other.probes;
        self.timeouts += other.timeouts;
        self.network_rtt.merge(&other.network_rtt);
        self.prober_delay.merge(&other.prober_delay);
        self.responder_delay.merge(&other.responder_delay);
        self.app_rtt.merge(&other.app_rtt);
    }

    /// Clears the counts, keeping allocations.
    pub(crate) fn reset(&mut self) {
        self.probes = 0;
        self.timeouts = 0;
        self.network_rtt.reset();
        self.prober_delay.reset();
        self.responder_delay.reset();
        self.app_rtt.reset();
    }
}

/// Multiplicative hasher for the small integer ToR-pair keys (the std SipHash
/// would cost more than the rest of a record's aggregation).
#[derive(Default)]
pub(crate) struct PairHasher(u64);

impl Hasher for PairHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = u64::from(v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// ToR pair key: prober ToR in the high half, target ToR in the low half.
pub(crate) fn pair_key(prober_tor: u16, target_tor: u16) -> u32 {
    (u32::from(prober_tor) << 16) | u32::from(target_tor)
}

/// Splits a [`pair_key`] back into (prober ToR, target ToR).
pub(crate) fn split_pair_key(key: u32) -> (u16, u16) {
    ((key >> 16) as u16, key as u16)
}

/// Most RNIC pairs whose timeouts one period keeps apart; the timeouts of further pairs
/// are counted under [`UNATTRIBUTED`] (switch-side, as no RNIC is known to be behind them).
pub(crate) const MAX_TIMEOUT_PAIRS: usize = 1 << 20;
/// The pair key of timeouts beyond [`MAX_TIMEOUT_PAIRS`].
pub(crate) const UNATTRIBUTED: (u32, u32) = (u32::MAX, u32::MAX);

/// Probe outcomes of one (prober, target) RNIC pair of one task in a period.
#[derive(Debug, Default)]
pub(crate) struct PairOutcome {
    /// Probes counted.
    pub probes: u64,
    /// Of which timed out.
    pub lost: u64,
    /// Network RTT of the answered ones.
    pub rtt: Histogram,
}

/// Key of [`Period::task_pairs`]: (interned task, prober RNIC, target RNIC).
pub(crate) type TaskPairKey = (u32, u32, u32);

/// Everything aggregated for one period. A slot's aggregates are allocated as its period
/// fills and freed when it is finalized ([`super::Window::finalize`]).
#[derive(Debug, Default)]
pub(crate) struct Period {
    /// Period index (`start_ms / period_ms`) this slot currently holds.
    pub index: i64,
    /// Results recorded.
    pub results: u64,
    /// Per ToR pair, keyed by [`pair_key`]; empty entries stay for reuse. Every
    /// result is in exactly one: the cluster aggregate is their sum.
    pub tor_pairs: HashMap<u32, MetricSet, BuildHasherDefault<PairHasher>>,
    /// Per RNIC id (dense).
    pub rnics: Vec<MetricSet>,
    /// Per interned task: probes between two RNICs of that task.
    pub tasks: HashMap<u32, MetricSet, BuildHasherDefault<PairHasher>>,
    /// Probes of class `Service` (task pairs and traced service connections).
    pub service: MetricSet,
    /// Timeouts per (prober, target) RNIC pair, [all, of which service-class]: which
    /// side dropped them is decided at finalization, against the RNICs' problems then.
    pub pair_timeouts: HashMap<(u32, u32), [u64; 2]>,
    /// Per pair of two endpoints of one task (C4D's matrix), at most the `max_task_pairs`
    /// given to [`Self::add_service`]; entries of the slot's previous period stay for reuse.
    pub task_pairs: HashMap<TaskPairKey, PairOutcome>,
}

impl Period {
    /// Aggregates one record whose RNICs are known.
    #[inline]
    pub(crate) fn add(&mut self, r: &ProbeResult, prober_tor: u16, target_tor: u16) {
        self.results += 1;
        self.tor_pairs
            .entry(pair_key(prober_tor, target_tor))
            .or_default()
            .add_probe(r);
        let (target, prober) = (r.target_rnic as usize, r.prober_rnic as usize);
        self.rnics[target].add_as_target(r);
        self.rnics[prober].add_as_prober(r);
    }

    /// Aggregates one record into the service-network scopes: the service class, and
    /// every task both RNICs serve (`prober_tasks`, `target_tasks`: interned task ids),
    /// as a whole and per RNIC pair while the period holds fewer than `max_task_pairs`
    /// pairs. Returns how many task pairs it could not count.
    #[inline]
    pub(crate) fn add_service(
        &mut self,
        r: &ProbeResult,
        prober_tasks: &[u32],
        target_tasks: &[u32],
        max_task_pairs: usize,
    ) -> u64 {
        let service = r.class == ProbeClass::Service;
        if service {
            self.service.add_probe(r);
        }
        let mut unstored = 0;
        for t in prober_tasks.iter().filter(|t| target_tasks.contains(t)) {
            self.tasks.entry(*t).or_default().add_probe(r);
            let key = (*t, r.prober_rnic, r.target_rnic);
            if self.task_pairs.len() >= max_task_pairs && !self.task_pairs.contains_key(&key) {
                unstored += 1;
                continue;
            }
            let pair = self.task_pairs.entry(key).or_default();
            pair.probes += 1;
            if r.status == ProbeStatus::Ok {
                pair.rtt.insert(r.network_rtt_ns);
            } else {
                pair.lost += 1;
            }
        }
        if r.status != ProbeStatus::Ok {
            let mut key = (r.prober_rnic, r.target_rnic);
            if self.pair_timeouts.len() >= MAX_TIMEOUT_PAIRS
                && !self.pair_timeouts.contains_key(&key)
            {
                key = UNATTRIBUTED;
            }
            let n = self.pair_timeouts.entry(key).or_default();
            n[0] += 1;
            n[1] += u64::from(service);
        }
        unstored
    }

    /// Makes room for RNIC ids below `len` (only grows when the registry grew).
    pub(crate) fn ensure_rnics(&mut self, len: usize) {
        if self.rnics.len() < len {
            self.rnics.resize_with(len, MetricSet::default);
        }
    }

    /// Whole-cluster aggregate: the ToR pairs' added up (at finalization, rather than a
    /// fifth set of histograms filled per result).
    pub(crate) fn cluster(&self) -> MetricSet {
        let mut all = MetricSet::default();
        self.tor_pairs.values().for_each(|m| all.merge(m));
        all
    }

    /// True when nothing was recorded in this slot.
    pub(crate) fn is_empty(&self) -> bool {
        self.results == 0
    }

    /// Clears the slot for period `index`, keeping allocations.
    pub(crate) fn reset(&mut self, index: i64) {
        self.index = index;
        if self.is_empty() {
            return;
        }
        self.results = 0;
        self.tor_pairs.values_mut().for_each(MetricSet::reset);
        self.rnics.iter_mut().for_each(MetricSet::reset);
        self.tasks.values_mut().for_each(MetricSet::reset);
        self.service.reset();
        self.pair_timeouts.clear();
        // Pairs the finished period did not see go (tasks end); the others are reused.
        self.task_pairs.retain(|_, p| p.probes > 0);
        for p in self.task_pairs.values_mut() {
            p.probes = 0;
            p.lost = 0;
            p.rtt.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::testing::probe_result;

    fn rec(prober: u32, target: u32, status: ProbeStatus, rtt: u32) -> ProbeResult {
        ProbeResult {
            status,
            prober_delay_ns: 7_000,
            responder_delay_ns: 3_000,
            app_rtt_ns: rtt + 10_000,
            ..probe_result(prober, target, 0, true, rtt)
        }
    }

    #[test]
    fn attributes_metrics_to_target_and_prober() {
        let mut p = Period::default();
        p.ensure_rnics(4);
        p.add(&rec(1, 2, ProbeStatus::Ok, 10_000), 0, 1);
        p.add(&rec(1, 2, ProbeStatus::Timeout, 0), 0, 1);
        p.add(&rec(3, 1, ProbeStatus::Ok, 20_000), 1, 0);
        let cluster = p.cluster();
        assert_eq!((cluster.probes, cluster.timeouts), (3, 1));
        assert_eq!(cluster.prober_delay.count(), 2);
        assert_eq!(cluster.network_rtt.count(), 2);
        let ab = &p.tor_pairs[&pair_key(0, 1)];
        assert_eq!((ab.probes, ab.timeouts, ab.network_rtt.count()), (2, 1, 1));
        // RNIC 1 probed (prober delay once, ok probe only) and was probed once.
        let r1 = &p.rnics[1];
        assert_eq!(
            (
                r1.probes,
                r1.timeouts,
                r1.prober_delay.count(),
                r1.network_rtt.count()
            ),
            (1, 0, 1, 1)
        );
        let r2 = &p.rnics[2];
        assert_eq!((r2.probes, r2.timeouts, r2.prober_delay.count()), (2, 1, 0));
        assert!(p.rnics[0].is_empty());
        p.reset(9);
        assert!(p.is_empty() && p.rnics.iter().all(MetricSet::is_empty) && p.index == 9);
        assert_eq!(split_pair_key(pair_key(7, 300)), (7, 300));
    }

    /// Pairs of two endpoints of one task are kept per task up to the cap; past it they
    /// are counted as unstored. A reused slot keeps the pairs its last period saw, emptied.
    #[test]
    fn task_pairs_are_kept_per_task_up_to_the_cap() {
        let mut p = Period::default();
        p.ensure_rnics(5);
        // RNICs 1 and 2 serve tasks 0 and 1, RNIC 3 task 0, RNIC 4 none.
        let tasks = |id: u32| -> &[u32] {
            match id {
                1 | 2 => &[0, 1],
                3 => &[0],
                _ => &[],
            }
        };
        let mut unstored = 0;
        for (a, b, status) in [
            (1, 2, ProbeStatus::Ok),
            (1, 2, ProbeStatus::Timeout),
            (2, 1, ProbeStatus::Ok),
            (1, 3, ProbeStatus::Ok),
            (3, 4, ProbeStatus::Ok),
            (1, 2, ProbeStatus::Ok),
        ] {
            let r = rec(a, b, status, 10_000);
            p.add(&r, 0, 0);
            unstored += p.add_service(&r, tasks(a), tasks(b), 4);
        }
        // (0, 1, 2), (1, 1, 2), (0, 2, 1), (1, 2, 1) fill the cap; task 0's 1 -> 3 is past
        // it; 3 -> 4 is in no task.
        assert_eq!((unstored, p.task_pairs.len()), (1, 4));
        let c = &p.task_pairs[&(0, 1, 2)];
        assert_eq!((c.probes, c.lost, c.rtt.count()), (3, 1, 2));
        assert_eq!(
            c.rtt.quantiles().p50,
            p.task_pairs[&(1, 1, 2)].rtt.quantiles().p50
        );
        p.reset(1);
        assert_eq!(p.task_pairs.len(), 4, "kept for reuse");
        assert!(
            p.task_pairs
                .values()
                .all(|c| c.probes == 0 && c.rtt.count() == 0)
        );
        let r = rec(1, 2, ProbeStatus::Ok, 10_000);
        p.add(&r, 0, 0);
        p.add_service(&r, tasks(1), tasks(2), 4);
        p.reset(2);
        let mut kept: Vec<_> = p.task_pairs.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!(
            kept,
            [(0, 1, 2), (1, 1, 2)],
            "pairs of the last period only"
        );
    }
}
