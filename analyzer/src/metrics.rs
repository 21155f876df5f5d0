//! Prometheus metrics of the analyzer, and the `GET /metrics` route of the server.
//!
//! Delay histograms are kept per ToR pair (never per RNIC: the label sets stay bounded
//! by [`MAX_TOR_PAIRS`]; results of further pairs only count in an overflow counter).
//! They are observed on the ingest hot path under the ingest lock, into plain integer
//! arrays ([`TorPairMetrics::observe`]: a probe of a small open-addressing table and
//! three 4-step binary searches for the bucket), and copied out only when scraped.
//! Ingest counters are the ones [`IngestStats`] already keeps; active problems are
//! counted in the database at scrape time (so the `priority` column the impact loop
//! fills is read as it is).

use crate::Analyzer;
use crate::diagnosis::flows::WindowStats;
use crate::ingest::IngestStats;
use crate::window::period::{pair_key, split_pair_key};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet, text,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use rocemesh_proto::{ProbeResult, ProbeStatus};
use rocemesh_store::Db;
use std::sync::Arc;
use std::time::Duration;

/// Content type of the exposition `/metrics` serves (the text format prometheus-client writes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the delay histogram buckets in ns: 1 µs … 100 ms, 1-2-5 per decade
/// (RoCE RTTs are a few µs; host delays and congested paths reach milliseconds).
const BOUNDS_NS: [u32; 16] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
];
/// Buckets including the `+Inf` one.
const BUCKETS: usize = BOUNDS_NS.len() + 1;

/// ToR pairs with their own series; results of further pairs count in
/// `rocemesh_tor_pair_overflow_results_total` (32 ToRs fully meshed fit).
pub const MAX_TOR_PAIRS: usize = 1024;

/// A fixed-bucket histogram of nanosecond delays, exported in seconds.
#[derive(Debug, Clone, Default)]
pub struct DelayHistogram {
    /// Per bucket (not cumulative), the last one is `+Inf`.
    counts: [u64; BUCKETS],
    sum_ns: u64,
}

impl DelayHistogram {
    /// Counts one delay.
    #[inline]
    pub fn observe(&mut self, ns: u32) {
        self.counts[BOUNDS_NS.partition_point(|&b| b < ns)] += 1;
        self.sum_ns += u64::from(ns);
    }

    /// Number of delays counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn encode(&self, mut enc: MetricEncoder) -> std::fmt::Result {
        let buckets: Vec<(f64, u64)> = BOUNDS_NS
            .iter()
            .map(|&b| f64::from(b) / 1e9)
            .chain([f64::INFINITY])
            .zip(self.counts)
            .collect();
        enc.encode_histogram::<NoLabelSet>(self.sum_ns as f64 / 1e9, self.count(), &buckets, None)
    }
}

/// What one ToR pair's probes showed since the analyzer started.
#[derive(Debug, Clone, Default)]
pub struct PairSeries {
    /// Probes counted.
    pub probes: u64,
    /// Of which not answered in time (any non-ok status).
    pub timeouts: u64,
    /// Network RTT of ok probes.
    pub network_rtt: DelayHistogram,
    /// Prober processing delay of ok probes.
    pub prober_delay: DelayHistogram,
    /// Responder processing delay of ok probes.
    pub responder_delay: DelayHistogram,
}

/// Slots of [`PairIndex`]: a power of two, twice the pairs it ever holds.
const INDEX_SLOTS: usize = 2 * MAX_TOR_PAIRS;
/// An empty [`PairIndex`] slot.
const EMPTY_SLOT: u64 = u64::MAX;

/// ToR pair key -> series index: open addressing with linear probing over a fixed
/// table that is never more than half full (a third of the instructions of a
/// `HashMap` lookup on the hot path). A slot holds `key << 32 | index`.
#[derive(Debug, Clone)]
struct PairIndex {
    slots: Box<[u64]>,
}

impl Default for PairIndex {
    fn default() -> Self {
        Self {
            slots: vec![EMPTY_SLOT; INDEX_SLOTS].into_boxed_slice(),
        }
    }
}

impl PairIndex {
    /// The series index of `key`, or the empty slot where it would go.
    #[inline]
    fn find(&self, key: u32) -> Result<usize, usize> {
        let mask = INDEX_SLOTS - 1;
        // Fibonacci hashing of the (prober ToR, target ToR) key.
        let mut at =
            (key.wrapping_mul(0x9E37_79B9) >> (32 - INDEX_SLOTS.trailing_zeros())) as usize;
        loop {
            match self.slots[at] {
                EMPTY_SLOT => return Err(at),
                slot if (slot >> 32) as u32 == key => return Ok(slot as u32 as usize),
                _ => at = (at + 1) & mask,
            }
        }
    }
}

/// Cumulative per-ToR-pair probe counts and delay histograms, fed by ingest.
#[derive(Debug, Clone, Default)]
pub struct TorPairMetrics {
    index: PairIndex,
    /// (pair key, series), in order of first appearance.
    series: Vec<(u32, PairSeries)>,
    overflow: u64,
}

impl TorPairMetrics {
    /// Counts one aggregated result of the given (prober, target) ToR pair.
    #[inline]
    pub fn observe(&mut self, r: &ProbeResult, prober_tor: u16, target_tor: u16) {
        let key = pair_key(prober_tor, target_tor);
        let i = match self.index.find(key) {
            Ok(i) => i,
            Err(at) if self.series.len() < MAX_TOR_PAIRS => {
                let i = self.series.len();
                self.series.push((key, PairSeries::default()));
                self.index.slots[at] = u64::from(key) << 32 | i as u64;
                i
            }
            Err(_) => {
                self.overflow += 1;
                return;
            }
        };
        let s = &mut self.series[i].1;
        s.probes += 1;
        if r.status == ProbeStatus::Ok {
            s.network_rtt.observe(r.network_rtt_ns);
            s.prober_delay.observe(r.prober_delay_ns);
            s.responder_delay.observe(r.responder_delay_ns);
        } else {
            s.timeouts += 1;
        }
    }
}

/// Durations of the analyzer's periodic work, observed by [`crate::run`].
#[derive(Debug, Clone)]
pub struct TickMetrics {
    finalize: Histogram,
    diagnose: Histogram,
}

impl Default for TickMetrics {
    fn default() -> Self {
        // 1 ms … ~16 s.
        let buckets = || Histogram::new(exponential_buckets(0.001, 2.0, 15));
        Self {
            finalize: buckets(),
            diagnose: buckets(),
        }
    }
}

impl TickMetrics {
    /// Records how long a finalization tick (periods finalized and stored) took.
    pub fn finalized(&self, took: Duration) {
        self.finalize.observe(took.as_secs_f64());
    }

    /// Records how long a diagnosis (analysis and problem persistence) took.
    pub fn diagnosed(&self, took: Duration) {
        self.diagnose.observe(took.as_secs_f64());
    }
}

/// Writes a metric family's descriptor and one sample per label set.
fn family<L: EncodeLabelSet, V>(
    enc: &mut DescriptorEncoder,
    (name, help, unit, kind): (&str, &str, Option<&Unit>, MetricType),
    samples: impl IntoIterator<Item = (L, V)>,
    mut sample: impl FnMut(MetricEncoder, V) -> std::fmt::Result,
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, unit, kind)?;
    for (labels, v) in samples {
        sample(m.encode_family(&labels)?, v)?;
    }
    Ok(())
}

/// Writes an unlabelled counter.
fn single_counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    counter(
        enc.encode_descriptor(name, help, None, MetricType::Counter)?,
        v,
    )
}

fn counter(mut m: MetricEncoder, v: u64) -> std::fmt::Result {
    m.encode_counter::<NoLabelSet, _, u64>(&v, None)
}

fn gauge(mut m: MetricEncoder, v: u64) -> std::fmt::Result {
    m.encode_gauge(&v)
}

/// Label set of a ToR pair's series.
type PairLabels = [(&'static str, String); 2];
/// Label set of an active-problem count: kind, component_kind, priority.
type ProblemLabels = [(&'static str, String); 3];

/// What one scrape exports, copied out of the analyzer (the ingest lock is held only
/// for the copy) and counted in the database.
#[derive(Debug)]
struct Snapshot {
    pairs: Vec<(PairLabels, PairSeries)>,
    overflow: u64,
    ingest: IngestStats,
    window: WindowStats,
    ticks: TickMetrics,
    problems: Vec<(ProblemLabels, u64)>,
}

impl Snapshot {
    async fn take(a: &Analyzer) -> Self {
        let (pairs, ingest) = a.metrics_snapshot();
        let registry = a.registry();
        let name = |tor: u16| registry.tor_name(tor).to_string();
        let overflow = pairs.overflow;
        let pairs = pairs
            .series
            .into_iter()
            .map(|(key, s)| {
                let (src, dst) = split_pair_key(key);
                ([("src_tor", name(src)), ("dst_tor", name(dst))], s)
            })
            .collect();
        let problems = active_problems(a.db()).await.unwrap_or_else(|e| {
            tracing::warn!("metrics: counting active problems failed: {e:#}");
            Vec::new()
        });
        Self {
            pairs,
            overflow,
            ingest,
            window: a.diagnosis().window_stats(),
            ticks: a.tick_metrics().clone(),
            problems,
        }
    }
}

/// Picks one of a pair's histograms.
type HistogramOf = fn(&PairSeries) -> &DelayHistogram;
/// Picks one of a pair's counters.
type CountOf = fn(&PairSeries) -> u64;

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let histograms: [(&str, &str, HistogramOf); 3] = [
            (
                "rocemesh_network_rtt",
                "Network RTT of answered probes by ToR pair (prober ToR, target ToR).",
                |s| &s.network_rtt,
            ),
            (
                "rocemesh_prober_delay",
                "Prober host processing delay of answered probes by ToR pair.",
                |s| &s.prober_delay,
            ),
            (
                "rocemesh_responder_delay",
                "Responder host processing delay of answered probes by ToR pair.",
                |s| &s.responder_delay,
            ),
        ];
        for (name, help, pick) in histograms {
            family(
                &mut enc,
                (name, help, Some(&Unit::Seconds), MetricType::Histogram),
                self.pairs.iter().map(|(l, s)| (l.as_slice(), pick(s))),
                |m, h| h.encode(m),
            )?;
        }
        let counts: [(&str, &str, CountOf); 2] = [
            (
                "rocemesh_probes",
                "Probe results aggregated, by ToR pair.",
                |s| s.probes,
            ),
            (
                "rocemesh_probe_timeouts",
                "Probes not answered in time (timeout or lost ACK2), by ToR pair.",
                |s| s.timeouts,
            ),
        ];
        for (name, help, pick) in counts {
            family(
                &mut enc,
                (name, help, None, MetricType::Counter),
                self.pairs.iter().map(|(l, s)| (l.as_slice(), pick(s))),
                counter,
            )?;
        }
        single_counter(
            &mut enc,
            "rocemesh_tor_pair_overflow_results",
            &format!(
                "Results aggregated but in no per-ToR-pair series: their pair came after the first {MAX_TOR_PAIRS}."
            ),
            self.overflow,
        )?;
        let i = &self.ingest;
        single_counter(
            &mut enc,
            "rocemesh_ingest_batches",
            "Result batches taken (not refused, not duplicates).",
            i.batches,
        )?;
        single_counter(
            &mut enc,
            "rocemesh_ingest_results",
            "Probe results aggregated.",
            i.records_accepted,
        )?;
        single_counter(
            &mut enc,
            "rocemesh_ingest_duplicate_batches",
            "Retried batches recognised and ignored.",
            i.duplicate_batches,
        )?;
        let r = &i.rejected_batches;
        let rejected = [
            ("truncated", r.truncated),
            ("bad_magic", r.bad_magic),
            ("bad_version", r.bad_version),
            ("bad_length", r.bad_length),
            ("bad_flags", r.bad_flags),
            ("bad_record", r.bad_record),
            ("bad_paths", r.bad_paths),
            ("too_large", r.too_large),
            ("bad_content_type", r.bad_content_type),
            ("wrong_host", r.wrong_host),
        ];
        family(
            &mut enc,
            (
                "rocemesh_ingest_rejected_batches",
                "Uploads refused whole, by reason.",
                None,
                MetricType::Counter,
            ),
            rejected.map(|(reason, n)| ([("reason", reason)], n)),
            counter,
        )?;
        let d = &i.dropped_records;
        let dropped = [
            ("unknown_rnic", d.unknown_rnic),
            ("late", d.late),
            ("future", d.future),
        ];
        family(
            &mut enc,
            (
                "rocemesh_ingest_dropped_results",
                "Results dropped from taken batches, by reason.",
                None,
                MetricType::Counter,
            ),
            dropped.map(|(reason, n)| ([("reason", reason)], n)),
            counter,
        )?;
        let w = &self.window;
        let held = [
            (
                "rocemesh_diagnosis_flows",
                "Flows (prober, target, UDP ports) in the diagnosis window.",
                w.flows,
            ),
            (
                "rocemesh_diagnosis_timeouts",
                "Timed-out probes held for diagnosis (judged again every tick).",
                w.timeouts,
            ),
        ];
        for (name, help, n) in held {
            gauge(
                enc.encode_descriptor(name, help, None, MetricType::Gauge)?,
                n,
            )?;
        }
        let dropped = [
            ("late", w.late_results),
            ("flows_full", w.refused_results),
            ("timeouts_full", w.dropped_timeouts),
        ];
        family(
            &mut enc,
            (
                "rocemesh_diagnosis_dropped_results",
                "Results diagnosis did not count, by reason: sent before its window, of a new flow beyond max_flows, timeouts beyond max_records.",
                None,
                MetricType::Counter,
            ),
            dropped.map(|(reason, n)| ([("reason", reason)], n)),
            counter,
        )?;
        family(
            &mut enc,
            (
                "rocemesh_problems_active",
                "Active problems by kind, blamed component kind and impact priority (unknown = not assessed yet).",
                None,
                MetricType::Gauge,
            ),
            self.problems.iter().map(|(l, n)| (l.as_slice(), *n)),
            gauge,
        )?;
        let ticks = [
            ([("stage", "finalize")], &self.ticks.finalize),
            ([("stage", "diagnose")], &self.ticks.diagnose),
        ];
        family(
            &mut enc,
            (
                "rocemesh_analysis_tick_duration",
                "Duration of the analyzer's periodic work: period finalization and storage, diagnosis.",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            ),
            ticks,
            |m, h| h.encode(m),
        )
    }
}

/// Active problems counted by (kind, component_kind, priority) in the database; a
/// problem the impact loop has not assessed yet counts as priority `unknown`.
async fn active_problems(db: &Db) -> anyhow::Result<Vec<(ProblemLabels, u64)>> {
    let rows: Vec<(String, String, Option<String>, i64)> = sqlx::query_as(
        "SELECT kind, component_kind, priority, COUNT(*) FROM problems \
         WHERE state = 'active' GROUP BY kind, component_kind, priority",
    )
    .fetch_all(db.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(kind, component_kind, priority, n)| {
            let priority = priority.unwrap_or_else(|| "unknown".to_string());
            (
                [
                    ("kind", kind),
                    ("component_kind", component_kind),
                    ("priority", priority),
                ],
                n.max(0) as u64,
            )
        })
        .collect())
}

/// Shared state of the `/metrics` route.
struct Scrape {
    /// Collectors of the other components in this process (live, synchronous).
    others: Registry,
    analyzer: Option<Arc<Analyzer>>,
}

/// `GET /metrics` (OpenMetrics text) for the components of this process: the analyzer's
/// own metrics when `analyzer` is given, plus every collector in `others` (the
/// controller's). Open, like `/healthz`.
pub fn router(analyzer: Option<Arc<Analyzer>>, others: Vec<Box<dyn Collector>>) -> Router {
    let mut registry = Registry::default();
    for c in others {
        registry.register_collector(c);
    }
    let state = Arc::new(Scrape {
        others: registry,
        analyzer,
    });
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(state)
}

async fn scrape(State(s): State<Arc<Scrape>>) -> Response {
    let mut own = Registry::default();
    if let Some(a) = &s.analyzer {
        own.register_collector(Box::new(Snapshot::take(a).await));
    }
    let mut body = String::new();
    let encoded = text::encode_registry(&mut body, &s.others)
        .and_then(|()| text::encode_registry(&mut body, &own))
        .and_then(|()| text::encode_eof(&mut body));
    match encoded {
        Ok(()) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {e}"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::testing::probe_result;

    fn rec(status: ProbeStatus, rtt: u32) -> ProbeResult {
        ProbeResult {
            status,
            prober_delay_ns: 1_000,
            responder_delay_ns: 1_001,
            app_rtt_ns: rtt,
            ..probe_result(0, 1, 0, true, rtt)
        }
    }

    #[test]
    fn buckets_are_upper_inclusive() {
        let mut h = DelayHistogram::default();
        for ns in [0, 1_000, 1_001, 100_000_000, 100_000_001, u32::MAX] {
            h.observe(ns);
        }
        assert_eq!(h.counts[0], 2, "0 and 1 µs are <= 1 µs");
        assert_eq!(h.counts[1], 1, "1.001 µs is in (1, 2] µs");
        assert_eq!(h.counts[BUCKETS - 2], 1, "100 ms is <= 100 ms");
        assert_eq!(h.counts[BUCKETS - 1], 2, "above 100 ms is +Inf");
        assert_eq!(h.count(), 6);
    }

    #[test]
    fn pairs_are_capped_and_overflow_is_counted() {
        let mut m = TorPairMetrics::default();
        for tor in 0..(MAX_TOR_PAIRS as u16 + 10) {
            m.observe(&rec(ProbeStatus::Ok, 5_000), tor, 0);
        }
        m.observe(&rec(ProbeStatus::Timeout, 0), 0, 0);
        m.observe(&rec(ProbeStatus::Ack2Lost, 0), 0, 0);
        assert_eq!((m.series.len(), m.overflow), (MAX_TOR_PAIRS, 10));
        let first = &m.series[0].1;
        assert_eq!((first.probes, first.timeouts), (3, 2));
        assert_eq!(first.network_rtt.count(), 1);
        assert_eq!(first.prober_delay.sum_ns, 1_000);
        assert_eq!(first.responder_delay.counts[1], 1);
    }
}
