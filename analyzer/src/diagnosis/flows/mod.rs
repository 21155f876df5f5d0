//! The diagnosis window, aggregated as results arrive: every result is read once, at
//! ingest ([`Window::take`]), so a tick costs what the flows and the results since the
//! last tick cost, not what the window's results do.
//!
//! - Successful probes count per flow and bucket ([`table`]): arrivals, slow ones and
//!   the least RTT, with running window totals; a tick clears the buckets that left
//!   the window ([`ring`]) and moves each flow's RTT baseline.
//! - "Slow" is judged on arrival: above the flow's baseline by the factor rule, or above
//!   the alarm threshold of a pair whose latency detectors fired. (Until issue 7 every
//!   tick re-judged the whole window against the current baseline and alarms; now a
//!   result keeps its verdict. The tick still counts every arrival of an alarmed pair's
//!   bucket as slow when the bucket's least RTT is above the alarm's threshold, so an
//!   alarm's first tick sees its pair's recent probes as slow, as before. A new flow's
//!   first results, before any baseline, are never slow by the factor rule.)
//! - Processing delays count per RNIC and bucket ([`delays`]).
//! - Timed-out probes are rare in a healthy fabric and their verdict depends on what
//!   is known at the tick (host liveness, restarts, stale QPNs, registrations): they
//!   are kept raw, at most `max_records` of them, and judged every tick.
//!
//! Memory follows flows (`max_flows` at most, ~160 bytes each with 12 buckets) and
//! timeouts, not the results of the window.

pub(crate) mod delays;
pub(crate) mod ring;
pub(crate) mod table;
#[cfg(test)]
mod tests;

use crate::config::DiagnosisConfig;
use crate::latency::Verdicts;
use crate::registry::Registry;
use delays::Delays;
use ring::Ring;
use rocemesh_proto::{ProbeResult, TimestampSource};
use std::collections::VecDeque;
use std::sync::Arc;
use table::{Flow, FlowKey, FlowTable};

/// How fast a flow's RTT baseline follows a higher (but not anomalous) window minimum.
const BASELINE_DRIFT: f64 = 0.002;

/// Results the window could not hold, by reason (since start).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WindowStats {
    /// Flows tracked now.
    pub flows: u64,
    /// Timed-out probes held now.
    pub timeouts: u64,
    /// Results sent before the window's start when they arrived.
    pub late_results: u64,
    /// Successful probes of new flows refused because `max_flows` flows are tracked.
    pub refused_results: u64,
    /// Timed-out probes dropped (oldest first) because `max_records` were held.
    pub dropped_timeouts: u64,
}

/// Thresholds of the slow and noise judgments.
#[derive(Debug, Clone, Copy)]
struct Judge {
    factor: f64,
    min_ns: f64,
    nic_min_ns: f64,
    noise_delay_ns: u64,
}

impl Judge {
    /// Far above the flow's own baseline: for RTTs taken in software, by the factor rule
    /// (gross delays: a busy host stack alone can multiply them); for RTTs taken by NIC
    /// timestamps (`nic`), by `latency_min_nic` (their jitter is the fabric's queueing).
    fn above_baseline(&self, baseline: Option<f64>, rtt_ns: u32, nic: bool) -> bool {
        let rtt = f64::from(rtt_ns);
        baseline.is_some_and(|b| {
            if nic {
                rtt - b > self.nic_min_ns
            } else {
                rtt > b * self.factor && rtt - b > self.min_ns
            }
        })
    }

    /// The baseline after a tick whose window minimum was `min_rtt`: down at once, up
    /// slowly, never towards an anomalous value.
    fn next_baseline(&self, baseline: Option<f64>, min_rtt: u32, nic: bool) -> f64 {
        let m = f64::from(min_rtt);
        match baseline {
            None => m,
            Some(b) if m <= b => m,
            Some(b) if self.above_baseline(Some(b), min_rtt, nic) => b,
            Some(b) => b + (m - b) * BASELINE_DRIFT,
        }
    }
}

/// The sliding window of results diagnosis reads.
#[derive(Debug)]
pub(crate) struct Window {
    judge: Judge,
    ring: Ring,
    flows: FlowTable,
    delays: Delays,
    timeouts: VecDeque<ProbeResult>,
    max_timeouts: usize,
    /// Latency alarms of the latest tick (slow judgment of arriving results).
    alarms: Arc<Verdicts>,
    stats: WindowStats,
}

impl Window {
    /// An empty window per `cfg`.
    pub(crate) fn new(cfg: &DiagnosisConfig) -> Self {
        let ring = Ring::new(cfg.window_ms, cfg.tick_ms);
        Self {
            judge: Judge {
                factor: f64::from(cfg.latency_factor),
                min_ns: cfg.latency_min_ns as f64,
                nic_min_ns: cfg.latency_min_nic_ns as f64,
                noise_delay_ns: cfg.noise_delay_ns,
            },
            flows: FlowTable::new(ring.slots(), cfg.max_flows),
            delays: Delays::new(ring.slots()),
            ring,
            timeouts: VecDeque::new(),
            max_timeouts: cfg.max_records,
            alarms: Arc::default(),
            stats: WindowStats::default(),
        }
    }

    /// Aggregates results received at `now_ms` whose RNICs `registry` knows (timeouts
    /// are kept raw whatever they name: the tick judges them).
    pub(crate) fn take(
        &mut self,
        records: impl Iterator<Item = ProbeResult>,
        registry: &Registry,
        now_ms: i64,
    ) {
        for r in records {
            let send_ms = (r.send_unix_ns / 1_000_000) as i64;
            if r.status.is_timeout() {
                if send_ms < self.ring.covers().start {
                    self.stats.late_results += 1;
                    continue;
                }
                if self.timeouts.len() == self.max_timeouts {
                    self.timeouts.pop_front();
                    self.stats.dropped_timeouts += 1;
                }
                self.timeouts.push_back(r);
                continue;
            }
            if registry.get(r.prober_rnic).is_none() || registry.get(r.target_rnic).is_none() {
                continue;
            }
            let Some(slot) = self.ring.place(send_ms, now_ms) else {
                self.stats.late_results += 1;
                continue;
            };
            let noise = self.judge.noise_delay_ns;
            self.delays
                .add(r.prober_rnic, slot, u64::from(r.prober_delay_ns) > noise);
            self.delays
                .add(r.target_rnic, slot, u64::from(r.responder_delay_ns) > noise);
            let key = FlowKey {
                prober: r.prober_rnic,
                target: r.target_rnic,
                sport: r.src_port,
                dport: r.dst_port,
            };
            let Some(i) = self.flows.intern(key, r.class) else {
                self.stats.refused_results += 1;
                continue;
            };
            let f = self.flows.get_mut(i);
            f.class = r.class;
            f.nic = r.ts_source == TimestampSource::Hardware;
            let slow = self
                .judge
                .above_baseline(f.baseline, r.network_rtt_ns, f.nic)
                || self
                    .alarms
                    .is_slow(r.prober_rnic, r.target_rnic, r.network_rtt_ns);
            self.flows.arrive(i, slot, r.network_rtt_ns, slow);
        }
    }

    /// Judges arriving results against these latency alarms from now on.
    pub(crate) fn judge_with(&mut self, alarms: Arc<Verdicts>) {
        self.alarms = alarms;
    }

    /// Moves the window on to `now_ms`: delays and timeouts that left it are dropped;
    /// returns the flow slots to clear ([`Self::sweep`]).
    pub(crate) fn advance(&mut self, now_ms: i64) -> Vec<usize> {
        let expired = self.ring.advance(now_ms);
        self.delays.expire(&expired);
        let start = self.ring.covers().start;
        self.timeouts
            .retain(|r| (r.send_unix_ns / 1_000_000) as i64 >= start);
        expired
    }

    /// Clears the `expired` slots of every flow and offers each flow to `keep`
    /// (forgotten when refused); the baselines of the flows kept with arrivals follow
    /// their window minimum.
    pub(crate) fn sweep(&mut self, expired: &[usize], mut keep: impl FnMut(u32, &Flow) -> bool) {
        let judge = self.judge;
        self.flows.sweep(expired, |i, f| {
            if !keep(i, &*f) {
                return false;
            }
            if f.ok > 0 {
                f.baseline = Some(judge.next_baseline(f.baseline, f.min_rtt, f.nic));
            }
            true
        });
    }

    /// The flows.
    pub(crate) fn flows(&self) -> &FlowTable {
        &self.flows
    }

    /// Arrivals of flow `i` sent within `span`: each bucket's pro rata of its overlap
    /// with `span` (a flow's probes are sent at a steady rate).
    pub(crate) fn ok_within(&self, i: u32, span: &std::ops::Range<i64>) -> f64 {
        let counts = self.flows.ring(i);
        self.ring
            .spans()
            .map(|(slot, b)| {
                let overlap = (b.end.min(span.end) - b.start.max(span.start)).max(0);
                f64::from(counts[slot].ok) * overlap as f64 / (b.end - b.start) as f64
            })
            .sum()
    }

    /// The flow table, to add the flows of judged timeouts.
    pub(crate) fn flows_mut(&mut self) -> &mut FlowTable {
        &mut self.flows
    }

    /// Per-RNIC processing delays.
    pub(crate) fn delays(&self) -> &Delays {
        &self.delays
    }

    /// Timed-out probes held (some may have been sent after the tick's time).
    pub(crate) fn timeouts(&self) -> impl Iterator<Item = &ProbeResult> + '_ {
        self.timeouts.iter()
    }

    /// Forgets every result (flows keep their baselines until the next sweep).
    #[cfg(test)]
    pub(crate) fn forget_results(&mut self) {
        self.flows.forget_results();
        self.delays = Delays::new(self.ring.slots());
        self.timeouts.clear();
    }

    /// Counters since start.
    pub(crate) fn stats(&self) -> WindowStats {
        WindowStats {
            flows: self.flows.count() as u64,
            timeouts: self.timeouts.len() as u64,
            ..self.stats.clone()
        }
    }
}
