//! The engines' side of the tracer: what they tell it (pinglist 5-tuples, ACK 5-tuples of
//! answered probes, probe timeouts), filtered so the hot path sends a request only when
//! it carries news, over a bounded queue that never blocks an engine.

use super::table::TraceKey;
use crate::stats::Counters;
use rocemesh_proto::api::ProbeList;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

/// Most 5-tuples one engine remembers having reported.
const RECENT_CAP: usize = 4096;
/// A timeout on a 5-tuple reported less than this long ago is not reported again.
const ANOMALY_GAP: Duration = Duration::from_secs(1);

/// A request from an engine to the tracer.
#[derive(Debug)]
pub(crate) enum TraceRequest {
    /// The probe 5-tuples now leaving from `src` (replaces the previous set).
    Pinglist {
        /// The engine's local address.
        src: IpAddr,
        /// Every probe 5-tuple of its pinglist.
        keys: Vec<TraceKey>,
    },
    /// An ACK 5-tuple in use (we answered a probe that our ACKs follow back).
    Learned(TraceKey),
    /// A probe on this 5-tuple timed out: trace it ahead of the queue.
    Anomaly(TraceKey),
    /// The analyzer is a fresh one (restart, shard move): upload every latest path again.
    Resend,
}

/// One engine's connection to the tracer.
#[derive(Debug)]
pub struct TraceFeed {
    tx: SyncSender<TraceRequest>,
    counters: Arc<Counters>,
    /// How often an ACK 5-tuple still in use is reported again (keeps it from aging out).
    relearn: Duration,
    recent: HashMap<TraceKey, Instant>,
}

impl TraceFeed {
    pub(crate) fn new(
        tx: SyncSender<TraceRequest>,
        counters: Arc<Counters>,
        refresh: Duration,
    ) -> Self {
        Self {
            tx,
            counters,
            relearn: refresh / 2,
            recent: HashMap::new(),
        }
    }

    fn send(&self, r: TraceRequest) {
        if self.tx.try_send(r).is_err() {
            self.counters.trace_drops.fetch_add(1, Relaxed);
        }
    }

    /// True (and remembered) when `key` was not reported within `gap` before `now`.
    fn is_news(&mut self, key: TraceKey, now: Instant, gap: Duration) -> bool {
        if self
            .recent
            .get(&key)
            .is_some_and(|t| now.saturating_duration_since(*t) < gap)
        {
            return false;
        }
        if self.recent.len() >= RECENT_CAP {
            self.recent.clear();
        }
        self.recent.insert(key, now);
        true
    }

    /// The engine at `src` now probes `lists`.
    pub fn pinglist(&self, src: IpAddr, lists: &[ProbeList]) {
        let keys = lists
            .iter()
            .flat_map(|l| &l.entries)
            // Port 0 means "any": such probes have no fixed 5-tuple to trace.
            .filter(|e| e.src_port != 0)
            .map(|e| TraceKey {
                src,
                dst: e.ip,
                src_port: e.src_port,
                dst_port: e.port,
                ack_direction: false,
            })
            .collect();
        self.send(TraceRequest::Pinglist { src, keys });
    }

    /// A probe on `key` timed out at `now`.
    pub fn timed_out(&mut self, key: TraceKey, now: Instant) {
        if self.is_news(key, now, ANOMALY_GAP) {
            self.send(TraceRequest::Anomaly(key));
        }
    }

    /// We answered a probe at `now`; our ACKs take `key`.
    pub fn answered(&mut self, key: TraceKey, now: Instant) {
        if self.is_news(key, now, self.relearn) {
            self.send(TraceRequest::Learned(key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    #[test]
    fn only_news_is_sent_and_a_full_queue_counts_drops() {
        let (tx, rx) = sync_channel(2);
        let counters = Arc::new(Counters::default());
        let mut f = TraceFeed::new(tx, counters.clone(), Duration::from_secs(60));
        let k = TraceKey {
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.1.1".parse().unwrap(),
            src_port: 1,
            dst_port: 2,
            ack_direction: true,
        };
        let t0 = Instant::now();
        f.answered(k, t0);
        f.answered(k, t0 + Duration::from_secs(29));
        assert!(matches!(rx.try_recv(), Ok(TraceRequest::Learned(x)) if x == k));
        assert!(rx.try_recv().is_err());
        f.answered(k, t0 + Duration::from_secs(30));
        let probe = TraceKey {
            ack_direction: false,
            ..k
        };
        f.timed_out(probe, t0);
        f.timed_out(probe, t0 + Duration::from_millis(10));
        f.timed_out(probe, t0 + Duration::from_secs(2));
        assert_eq!(counters.trace_drops.load(Relaxed), 1);
        assert!(matches!(rx.try_recv(), Ok(TraceRequest::Learned(_))));
        assert!(matches!(rx.try_recv(), Ok(TraceRequest::Anomaly(x)) if x == probe));
    }
}
