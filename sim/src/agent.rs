//! The state of one simulated agent: its identity with the controller (host id, epoch,
//! RNIC QPNs), its pinglist schedules (the agent's: each list spreads its `pps` evenly
//! over its targets, freshly shuffled every round, on an absolute schedule), its trace
//! table (every probe 5-tuple and every learned ACK 5-tuple traced every refresh period;
//! a timed-out 5-tuple jumps the queue unless traced less than 2 s ago; a token bucket of
//! TRACE packets per second) and what waits for the next upload.

use crate::rng::Rng;
use rocemesh_proto::ProbeClass;
use rocemesh_proto::ProbeResult;
use rocemesh_proto::api::{PingTarget, ProbeList};
use rocemesh_proto::path::TracedPath;
use std::collections::{BTreeSet, HashMap, VecDeque};

/// Most 5-tuples one agent traces (as the agent's trace table).
pub const MAX_TRACED: usize = 16_384;
/// A timed-out 5-tuple traced less than this long ago is not traced again at once.
pub const URGENT_MIN_GAP_MS: i64 = 2_000;
/// Most urgent traces queued.
const MAX_URGENT: usize = 1_024;

/// One list of one RNIC on its schedule.
#[derive(Debug)]
pub struct ListSchedule {
    /// Pinglist class.
    pub class: ProbeClass,
    entries: Vec<PingTarget>,
    order: Vec<u32>,
    pos: usize,
    interval_ns: u64,
    /// When the next probe is due, ns since the Unix epoch.
    pub next_ns: u64,
}

impl ListSchedule {
    /// Starts `list` at a random phase of its first interval after `now_ns`.
    pub fn new(list: &ProbeList, now_ns: u64, rng: &mut Rng) -> Option<Self> {
        if list.entries.is_empty() || !list.pps.is_finite() || list.pps <= 0.0 {
            return None;
        }
        let interval_ns = (1e9 / list.pps.min(100_000.0)).round().max(1.0) as u64;
        let mut order: Vec<u32> = (0..list.entries.len() as u32).collect();
        rng.shuffle(&mut order);
        Some(Self {
            class: list.class,
            entries: list.entries.clone(),
            order,
            pos: 0,
            interval_ns,
            next_ns: now_ns + rng.below(interval_ns),
        })
    }

    /// The target due next; advances the schedule by one slot.
    pub fn pop(&mut self, rng: &mut Rng) -> (u64, PingTarget) {
        let at = self.next_ns;
        let t = self.entries[self.order[self.pos] as usize].clone();
        self.pos += 1;
        if self.pos == self.order.len() {
            self.pos = 0;
            rng.shuffle(&mut self.order);
        }
        self.next_ns += self.interval_ns;
        (at, t)
    }

    /// The targets of the list.
    pub fn entries(&self) -> &[PingTarget] {
        &self.entries
    }
}

/// A traced 5-tuple: from RNIC `src` (of this host) to RNIC `dst` (fabric ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceKey {
    /// Local RNIC.
    pub src: u32,
    /// Remote RNIC.
    pub dst: u32,
    /// Source port of the 5-tuple.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// The ACK direction (traced by the responder).
    pub ack: bool,
}

impl TraceKey {
    /// The 5-tuple RNIC `src` probes RNIC `dst` on, as pinglist entry `t` says.
    pub fn probe(src: u32, dst: u32, t: &rocemesh_proto::api::PingTarget) -> Self {
        Self {
            src,
            dst,
            sport: t.src_port,
            dport: t.port,
            ack: false,
        }
    }
}

/// The agent's trace schedule.
#[derive(Debug, Default)]
pub struct TraceTable {
    next_due: HashMap<TraceKey, i64>,
    due: BTreeSet<(i64, TraceKey)>,
    urgent: VecDeque<(i64, TraceKey)>,
    last_traced: HashMap<TraceKey, i64>,
    tokens: f64,
    refilled_ms: i64,
}

impl TraceTable {
    /// Tracks `key`, due at `now_ms`, unless known or the table is full.
    pub fn learn(&mut self, key: TraceKey, now_ms: i64) {
        if self.next_due.len() < MAX_TRACED && !self.next_due.contains_key(&key) {
            self.next_due.insert(key, now_ms);
            self.due.insert((now_ms, key));
        }
    }

    /// Forgets the probe 5-tuples of local RNIC `src` not in `keep`.
    pub fn retain_probes(&mut self, src: u32, keep: &std::collections::HashSet<TraceKey>) {
        let gone: Vec<TraceKey> = self
            .next_due
            .keys()
            .filter(|k| !k.ack && k.src == src && !keep.contains(k))
            .copied()
            .collect();
        for k in gone {
            if let Some(due) = self.next_due.remove(&k) {
                self.due.remove(&(due, k));
            }
            self.last_traced.remove(&k);
        }
    }

    /// A probe on `key` timed out at `at_ms`: trace it ahead of the periodic ones.
    pub fn anomaly(&mut self, key: TraceKey, at_ms: i64) {
        let recent = self
            .last_traced
            .get(&key)
            .is_some_and(|&t| at_ms - t < URGENT_MIN_GAP_MS);
        if !recent && self.urgent.len() < MAX_URGENT && self.next_due.contains_key(&key) {
            self.last_traced.insert(key, at_ms);
            self.urgent.push_back((at_ms, key));
        }
    }

    /// The traces to run up to `now_ms` (urgent first, then the periodic ones due),
    /// with the time each runs at; `cost` says how many TRACE packets a trace of a key
    /// takes, `pps` / `burst` are the token bucket.
    pub fn due_traces(
        &mut self,
        now_ms: i64,
        pps: f64,
        refresh_ms: i64,
        mut cost: impl FnMut(&TraceKey) -> f64,
    ) -> Vec<(i64, TraceKey, bool)> {
        let dt = (now_ms - self.refilled_ms).max(0) as f64 / 1e3;
        self.tokens = (self.tokens + dt * pps).min(pps * (dt + 1.0));
        self.refilled_ms = now_ms;
        let mut out = Vec::new();
        while let Some(&(at, key)) = self.urgent.front() {
            let c = cost(&key);
            if self.tokens < c {
                break;
            }
            self.tokens -= c;
            self.urgent.pop_front();
            out.push((at, key, true));
        }
        while let Some(&(due, key)) = self.due.first() {
            if due > now_ms {
                break;
            }
            let c = cost(&key);
            if self.tokens < c {
                break;
            }
            self.tokens -= c;
            self.due.pop_first();
            // After a long silence a 5-tuple is traced once, not once per missed period.
            let next = (due + refresh_ms).max(now_ms + 1);
            self.next_due.insert(key, next);
            self.due.insert((next, key));
            self.last_traced.insert(key, due);
            out.push((due, key, false));
        }
        // The bucket only saves up what it could spend.
        self.tokens = self.tokens.min(pps);
        out
    }

    /// 5-tuples tracked.
    pub fn len(&self) -> usize {
        self.next_due.len()
    }

    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.next_due.is_empty()
    }
}

/// One simulated agent (one host).
#[derive(Debug)]
pub struct Agent {
    /// Controller-assigned host id, once registered.
    pub host_id: Option<u32>,
    /// Current epoch.
    pub epoch: u32,
    /// The current incarnation must (re-)register.
    pub needs_register: bool,
    /// The agent is running (false while its host is down or it restarts).
    pub running: bool,
    /// Latest time it was found running: a silence since then, however short, was a
    /// restart.
    pub running_at_ms: i64,
    /// Probes are simulated up to here, ns.
    pub probed_until_ns: u64,
    /// Schedules per local RNIC index.
    pub lists: Vec<Vec<ListSchedule>>,
    /// Pinglist version applied (ETag).
    pub pinglist_version: Option<String>,
    /// Trace schedule.
    pub traces: TraceTable,
    /// Results waiting for the next upload.
    pub results: Vec<ProbeResult>,
    /// Traced paths waiting for the next upload.
    pub paths: Vec<TracedPath>,
    /// Per-epoch batch sequence.
    pub batch_seq: u64,
    /// Per-agent probe sequence.
    pub seq: u32,
    /// Its random stream.
    pub rng: Rng,
}

impl Agent {
    /// A fresh agent that has not registered yet.
    pub fn new(rnics: u32, epoch: u32, seed: u64) -> Self {
        Self {
            host_id: None,
            epoch,
            needs_register: true,
            running: true,
            running_at_ms: 0,
            probed_until_ns: 0,
            lists: (0..rnics).map(|_| Vec::new()).collect(),
            pinglist_version: None,
            traces: TraceTable::default(),
            results: Vec::new(),
            paths: Vec::new(),
            batch_seq: 0,
            seq: 0,
            rng: Rng::new(seed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(sport: u16) -> TraceKey {
        TraceKey {
            src: 1,
            dst: 2,
            sport,
            dport: 4791,
            ack: false,
        }
    }

    #[test]
    fn traces_are_rate_limited_refreshed_and_anomalies_jump_the_queue() {
        let mut t = TraceTable::default();
        for p in 0..100 {
            t.learn(key(p), 0);
        }
        // 10 packets/s, 5 packets per trace: 2 traces per second.
        let first = t.due_traces(1_000, 10.0, 60_000, |_| 5.0);
        assert!((1..=4).contains(&first.len()), "{}", first.len());
        t.anomaly(key(99), 1_500);
        t.anomaly(key(99), 1_600); // queued once
        let next = t.due_traces(2_000, 10.0, 60_000, |_| 5.0);
        assert_eq!(next[0], (1_500, key(99), true));
        assert_eq!(next.iter().filter(|x| x.2).count(), 1);
        // A traced tuple is due again one refresh later; an anomaly right after a trace waits.
        let traced = first[0].1;
        t.anomaly(traced, first[0].0 + 500);
        assert!(t.urgent.is_empty());
        let all = t.due_traces(200_000, 1e6, 60_000, |_| 5.0);
        assert_eq!(all.iter().filter(|x| x.1 == traced).count(), 1);
    }
}
