//! Which 5-tuples to trace and when: every probe 5-tuple of the pinglist and every ACK
//! 5-tuple learned from answered probes is traced soon after it appears, then every
//! refresh period; a 5-tuple with a probe timeout jumps the queue. Each entry keeps its
//! latest path (and the last complete one while the latest broke off), so a fresh
//! analyzer can be handed them all at once. Bounded.

use rocemesh_proto::path::TracedPath;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Most 5-tuples tracked per agent.
pub(crate) const MAX_TUPLES: usize = 16_384;
/// An anomalous 5-tuple traced less than this long ago is not traced again at once.
pub(crate) const URGENT_MIN_GAP: Duration = Duration::from_secs(2);
/// Learned ACK 5-tuples not seen for this many refresh periods are forgotten.
const LEARNED_TTL_PERIODS: u32 = 3;

/// A traced UDP 5-tuple and its direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceKey {
    /// Local address the packets leave from.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// True for the path of our ACKs (traced by us as the responder).
    pub ack_direction: bool,
}

#[derive(Debug)]
struct Entry {
    /// When an ACK 5-tuple was last seen; `None` for pinglist 5-tuples.
    learned_seen: Option<Instant>,
    due: Instant,
    traced_at: Option<Instant>,
    urgent: bool,
    active: bool,
    /// The latest finished trace.
    last: Option<TracedPath>,
    /// The latest trace that reached the destination, while `last` did not: where a
    /// broken-off trace was going (an analyzer locates the break with it).
    complete: Option<TracedPath>,
}

/// What [`TraceTable::anomaly`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnomalyOutcome {
    /// Queued ahead of every periodic trace.
    Queued,
    /// Being traced right now: that trace must not claim arrival.
    Active,
    /// Unknown 5-tuple, already queued, or traced very recently.
    Ignored,
}

/// The trace schedule of one agent.
#[derive(Debug)]
pub(crate) struct TraceTable {
    entries: HashMap<TraceKey, Entry>,
    due: BTreeSet<(Instant, TraceKey)>,
    urgent: VecDeque<TraceKey>,
    refresh: Duration,
    capacity: usize,
    /// The last 5-tuple handed out was urgent: a due one goes next if there is one.
    served_urgent: bool,
}

impl TraceTable {
    /// A table refreshing every `refresh`, holding at most `capacity` 5-tuples.
    pub(crate) fn new(refresh: Duration, capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            due: BTreeSet::new(),
            urgent: VecDeque::new(),
            refresh,
            capacity,
            served_urgent: false,
        }
    }

    #[cfg(test)]
    /// Number of 5-tuples tracked.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    fn insert(&mut self, key: TraceKey, learned_seen: Option<Instant>, now: Instant) -> bool {
        if self.entries.len() >= self.capacity {
            return false;
        }
        self.entries.insert(
            key,
            Entry {
                learned_seen,
                due: now,
                traced_at: None,
                urgent: false,
                active: false,
                last: None,
                complete: None,
            },
        );
        self.due.insert((now, key));
        true
    }

    fn remove(&mut self, key: &TraceKey) {
        if let Some(e) = self.entries.remove(key) {
            self.due.remove(&(e.due, *key));
        }
    }

    /// Replaces the probe 5-tuples leaving from `src` by `keys`: new ones are due now,
    /// gone ones forgotten. Returns how many could not be taken (table full).
    pub(crate) fn set_pinglist(&mut self, src: IpAddr, keys: &[TraceKey], now: Instant) -> usize {
        let wanted: std::collections::HashSet<&TraceKey> = keys.iter().collect();
        let gone: Vec<TraceKey> = self
            .entries
            .iter()
            .filter(|(k, e)| e.learned_seen.is_none() && k.src == src && !wanted.contains(k))
            .map(|(k, _)| *k)
            .collect();
        gone.iter().for_each(|k| self.remove(k));
        let mut refused = 0;
        for k in keys {
            if !self.entries.contains_key(k) && !self.insert(*k, None, now) {
                refused += 1;
            }
        }
        refused
    }

    /// An ACK 5-tuple seen in use at `now`; false when the table is full.
    pub(crate) fn learned(&mut self, key: TraceKey, now: Instant) -> bool {
        match self.entries.get_mut(&key) {
            Some(e) => {
                if e.learned_seen.is_some() {
                    e.learned_seen = Some(now);
                }
                true
            }
            None => self.insert(key, Some(now), now),
        }
    }

    /// A probe on `key` timed out at `now`.
    pub(crate) fn anomaly(&mut self, key: TraceKey, now: Instant) -> AnomalyOutcome {
        let Some(e) = self.entries.get_mut(&key) else {
            return AnomalyOutcome::Ignored;
        };
        if e.active {
            return AnomalyOutcome::Active;
        }
        if e.urgent
            || e.traced_at
                .is_some_and(|t| now.saturating_duration_since(t) < URGENT_MIN_GAP)
        {
            return AnomalyOutcome::Ignored;
        }
        e.urgent = true;
        self.urgent.push_back(key);
        AnomalyOutcome::Queued
    }

    /// The next 5-tuple to trace at `now` and whether it is urgent; it is marked active
    /// until [`TraceTable::finished`]. Urgent ones go first, but never twice in a row
    /// while a periodic one is due: the timeouts of a lossy link re-queue their 5-tuples
    /// every second and would otherwise keep a tuple that was never traced untraced.
    pub(crate) fn next(&mut self, now: Instant) -> Option<(TraceKey, bool)> {
        let urgent = |t: &mut Self| t.next_urgent().map(|k| (k, true));
        let periodic = |t: &mut Self| t.next_periodic(now).map(|k| (k, false));
        let picked = if self.served_urgent {
            periodic(self).or_else(|| urgent(self))
        } else {
            urgent(self).or_else(|| periodic(self))
        }?;
        self.served_urgent = picked.1;
        Some(picked)
    }

    fn next_urgent(&mut self) -> Option<TraceKey> {
        while let Some(key) = self.urgent.pop_front() {
            if let Some(e) = self.entries.get_mut(&key).filter(|e| e.urgent && !e.active) {
                e.urgent = false;
                e.active = true;
                self.due.remove(&(e.due, key));
                return Some(key);
            }
        }
        None
    }

    fn next_periodic(&mut self, now: Instant) -> Option<TraceKey> {
        let &(due, key) = self.due.first().filter(|(due, _)| *due <= now)?;
        self.due.remove(&(due, key));
        if let Some(e) = self.entries.get_mut(&key) {
            // Traced now anyway: a pending urgent request for it is served by this trace.
            e.active = true;
            e.urgent = false;
        }
        Some(key)
    }

    /// When the next periodic trace is due (urgent ones are due at once).
    pub(crate) fn next_due(&self, now: Instant) -> Option<Instant> {
        if !self.urgent.is_empty() {
            return Some(now);
        }
        self.due.first().map(|(d, _)| *d)
    }

    /// A trace of `key` ended at `now` with `path` (`None`: it could not run): the next
    /// one is due a refresh period later.
    pub(crate) fn finished(&mut self, key: TraceKey, now: Instant, path: Option<TracedPath>) {
        let refresh = self.refresh;
        if let Some(e) = self.entries.get_mut(&key) {
            e.active = false;
            e.traced_at = Some(now);
            e.due = now + refresh;
            if let Some(p) = path {
                let before = e.last.replace(p);
                if e.last.as_ref().is_some_and(|l| l.reached) {
                    e.complete = None;
                } else if before.as_ref().is_some_and(|b| b.reached) {
                    e.complete = before;
                }
            }
            self.due.insert((e.due, key));
        }
    }

    /// What a fresh analyzer needs of every 5-tuple still tracked, oldest first: the last
    /// complete path of one whose latest trace broke off, then the latest path.
    pub(crate) fn paths_to_resend(&self) -> impl Iterator<Item = &TracedPath> {
        self.entries
            .values()
            .flat_map(|e| e.complete.iter().chain(e.last.iter()))
    }

    /// Forgets ACK 5-tuples not seen for a few refresh periods (their prober went away).
    pub(crate) fn expire(&mut self, now: Instant) {
        let ttl = self.refresh * LEARNED_TTL_PERIODS;
        let old: Vec<TraceKey> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                !e.active
                    && e.learned_seen
                        .is_some_and(|s| now.saturating_duration_since(s) > ttl)
            })
            .map(|(k, _)| *k)
            .collect();
        old.iter().for_each(|k| self.remove(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u16, ack: bool) -> TraceKey {
        TraceKey {
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.1.1".parse().unwrap(),
            src_port: 50_000 + i,
            dst_port: 4792,
            ack_direction: ack,
        }
    }

    const REFRESH: Duration = Duration::from_secs(60);

    fn path(k: TraceKey, at: u64) -> TracedPath {
        TracedPath {
            src: k.src,
            dst: k.dst,
            src_port: k.src_port,
            dst_port: k.dst_port,
            traced_at_unix_ns: at,
            reached: at % 2 == 1,
            ack_direction: k.ack_direction,
            hops: vec![Some("198.18.0.254".parse().unwrap())],
        }
    }

    #[test]
    fn the_latest_path_of_each_tracked_tuple_is_kept() {
        let t0 = Instant::now();
        let mut t = TraceTable::new(REFRESH, 100);
        let src = key(0, false).src;
        t.set_pinglist(src, &[key(1, false), key(2, false)], t0);
        while t.next(t0).is_some() {}
        t.finished(key(1, false), t0, Some(path(key(1, false), 1)));
        t.finished(key(2, false), t0, Some(path(key(2, false), 1)));
        // (Odd times reach the destination, even ones break off.) A newer trace replaces
        // the old one; a trace that could not run keeps it; a broken-off one keeps the
        // last complete one beside it, until a complete one comes again.
        t.finished(key(1, false), t0, Some(path(key(1, false), 2)));
        t.finished(key(2, false), t0, None);
        let resent = |t: &TraceTable| {
            let mut got: Vec<(u16, u64)> = t
                .paths_to_resend()
                .map(|p| (p.src_port, p.traced_at_unix_ns))
                .collect();
            got.sort();
            got
        };
        assert_eq!(resent(&t), [(50_001, 1), (50_001, 2), (50_002, 1)]);
        t.finished(key(1, false), t0, Some(path(key(1, false), 4)));
        assert_eq!(resent(&t), [(50_001, 1), (50_001, 4), (50_002, 1)]);
        t.finished(key(1, false), t0, Some(path(key(1, false), 5)));
        assert_eq!(resent(&t), [(50_001, 5), (50_002, 1)]);
        // Resent oldest first per 5-tuple: the analyzer drops a path older than its latest.
        t.finished(key(1, false), t0, Some(path(key(1, false), 6)));
        let order: Vec<u64> = t
            .paths_to_resend()
            .filter(|p| p.src_port == 50_001)
            .map(|p| p.traced_at_unix_ns)
            .collect();
        assert_eq!(order, [5, 6]);
        // A tuple gone from the pinglist takes its paths with it.
        t.set_pinglist(src, &[key(1, false)], t0);
        assert_eq!(t.paths_to_resend().count(), 2);
    }

    #[test]
    fn new_tuples_are_due_at_once_then_every_refresh() {
        let t0 = Instant::now();
        let mut t = TraceTable::new(REFRESH, 100);
        assert_eq!(
            t.set_pinglist(key(0, false).src, &[key(1, false), key(2, false)], t0),
            0
        );
        assert!(t.learned(key(3, true), t0));
        let mut got = Vec::new();
        while let Some((k, urgent)) = t.next(t0) {
            assert!(!urgent);
            got.push(k);
        }
        got.sort();
        assert_eq!(got, vec![key(1, false), key(2, false), key(3, true)]);
        for k in &got {
            t.finished(*k, t0 + Duration::from_secs(1), None);
        }
        assert_eq!(t.next(t0 + Duration::from_secs(60)), None);
        assert_eq!(t.next_due(t0), Some(t0 + Duration::from_secs(61)));
        assert!(t.next(t0 + Duration::from_secs(61)).is_some());
    }

    #[test]
    fn anomalies_jump_the_queue_once() {
        let t0 = Instant::now();
        let mut t = TraceTable::new(REFRESH, 100);
        let keys: Vec<TraceKey> = (0..5).map(|i| key(i, false)).collect();
        t.set_pinglist(keys[0].src, &keys, t0);
        let (first, _) = t.next(t0).unwrap();
        // Active while being traced: the running trace is told instead.
        assert_eq!(t.anomaly(first, t0), AnomalyOutcome::Active);
        t.finished(first, t0, None);
        // Traced a moment ago: not again at once.
        assert_eq!(
            t.anomaly(first, t0 + Duration::from_millis(500)),
            AnomalyOutcome::Ignored
        );
        let later = t0 + URGENT_MIN_GAP;
        assert_eq!(t.anomaly(first, later), AnomalyOutcome::Queued);
        assert_eq!(t.anomaly(first, later), AnomalyOutcome::Ignored);
        assert_eq!(t.anomaly(key(99, false), later), AnomalyOutcome::Ignored);
        // Ahead of the four still-due periodic traces.
        assert_eq!(t.next(later), Some((first, true)));
        assert_eq!(t.next(later).map(|(_, u)| u), Some(false));
        // A never-traced due tuple that turns anomalous leaves the due queue for the urgent one.
        let (k, _) = t.next(later).unwrap();
        t.finished(k, later, None);
        let pending = keys
            .iter()
            .copied()
            .find(|k| k != &first && t.entries[k].traced_at.is_none() && !t.entries[k].active)
            .unwrap();
        assert_eq!(t.anomaly(pending, later), AnomalyOutcome::Queued);
        assert_eq!(t.next(later), Some((pending, true)));
        t.finished(pending, later, None);
        assert_eq!(
            t.due.len(),
            t.entries.values().filter(|e| !e.active).count()
        );
    }

    #[test]
    fn anomalies_that_keep_coming_do_not_starve_a_never_traced_tuple() {
        let t0 = Instant::now();
        let mut t = TraceTable::new(REFRESH, 100);
        let lossy: Vec<TraceKey> = (0..20).map(|i| key(i, false)).collect();
        t.set_pinglist(lossy[0].src, &lossy, t0);
        let mut now = t0;
        while let Some((k, _)) = t.next(now) {
            t.finished(k, now, None);
        }
        // A new tuple joins while every lossy one times out again each time it may.
        let fresh = key(100, false);
        let all: Vec<TraceKey> = lossy.iter().copied().chain([fresh]).collect();
        t.set_pinglist(fresh.src, &all, now);
        let mut picks = 0;
        loop {
            now += URGENT_MIN_GAP;
            lossy.iter().for_each(|k| {
                t.anomaly(*k, now);
            });
            let (k, urgent) = t.next(now).expect("something to trace");
            picks += 1;
            t.finished(k, now, None);
            if k == fresh {
                assert!(!urgent);
                break;
            }
            assert!(
                picks <= 2,
                "the new tuple waited {picks} picks behind anomalies"
            );
        }
    }

    #[test]
    fn pinglist_changes_and_bounds() {
        let t0 = Instant::now();
        let mut t = TraceTable::new(REFRESH, 4);
        let src = key(0, false).src;
        t.set_pinglist(src, &[key(1, false), key(2, false)], t0);
        t.learned(key(1, true), t0);
        t.set_pinglist(src, &[key(2, false), key(3, false)], t0);
        assert!(!t.entries.contains_key(&key(1, false)) && t.entries.contains_key(&key(1, true)));
        assert_eq!(t.len(), 3);
        // Full: one more fits, the next is refused.
        assert_eq!(
            t.set_pinglist(
                src,
                &[key(2, false), key(3, false), key(4, false), key(5, false)],
                t0
            ),
            1
        );
        assert!(!t.learned(key(9, true), t0));
        assert_eq!(t.len(), 4);
        // Learned tuples age out unless seen again; pinglist ones stay.
        t.learned(key(1, true), t0 + REFRESH);
        t.expire(t0 + REFRESH * 3 + Duration::from_secs(1));
        assert!(t.entries.contains_key(&key(1, true)));
        t.expire(t0 + REFRESH * 4 + Duration::from_secs(1));
        assert!(!t.entries.contains_key(&key(1, true)));
        assert_eq!(t.len(), 3);
        assert_eq!(t.due.len(), 3);
    }
}
