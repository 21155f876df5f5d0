//! Prometheus metrics of the analyzer, and the `GET /metrics` route of the server.
//!
//! Delay histograms are kept per ToR pair (never per RNIC: the label sets stay bounded
//! by `analyzer.max_tor_pair_series`; results of further pairs only count in an overflow
//! counter, and the pairs in a gauge). They are observed on the ingest hot path under the
//! ingest lock, into plain integer arrays ([`TorPairMetrics::observe`]: a probe of a small
//! open-addressing table and three bucket look-ups of at most five comparisons), and copied
//! out only when scraped.
//! Ingest counters are the ones [`IngestStats`] already keeps; active problems are
//! counted in the database at scrape time (so the `priority` column the impact loop
//! fills is read as it is).

use crate::Analyzer;
use crate::diagnosis::flows::WindowStats;
use crate::ingest::IngestStats;
use crate::window::period::{pair_key, split_pair_key};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use rocemesh_proto::exposition::{self, Format, ProcessCollector};
use rocemesh_proto::{ProbeResult, ProbeStatus};
use rocemesh_store::Db;
use std::sync::Arc;
use std::time::Duration;

/// E12 preferred numbers (IEC 60063) times ten: consecutive ones differ by at most 25 %.
const E12: [u32; 12] = [10, 12, 15, 18, 22, 27, 33, 39, 47, 56, 68, 82];
/// Decades of [`BOUNDS_NS`]: 100 ns … 100 ms (RoCE RTTs are a few µs, host delays
/// sub-µs with hardware timestamps; host delays and congested paths reach milliseconds).
const DECADES: usize = 6;
/// Bounds per decade plus the closing 100 ms.
const BOUNDS: usize = DECADES * E12.len() + 1;

/// Upper bounds of the delay histogram buckets in ns: the E12 series from 100 ns to
/// 100 ms, so every bucket is at most 25 % wider than its lower bound (a 2 µs and a
/// 2.5 µs RTT are told apart).
const BOUNDS_NS: [u32; BOUNDS] = {
    let mut out = [0u32; BOUNDS];
    let (mut d, mut scale) = (0, 10u32);
    while d < DECADES {
        let mut i = 0;
        while i < E12.len() {
            out[d * E12.len() + i] = E12[i] * scale;
            i += 1;
        }
        d += 1;
        scale *= 10;
    }
    out[BOUNDS - 1] = 10 * scale;
    out
};
/// For each `k` in 0..32, the first bucket whose bound is at least `2^k` ns: a delay
/// `ns` with `ilog2(ns) = k` is above every earlier bound, and at most four E12 bounds lie
/// in one octave, so [`bucket`] looks at no more than five.
const OCTAVE_START: [u8; 32] = {
    let mut out = [0u8; 32];
    let mut k = 0;
    while k < 32 {
        let mut i = 0;
        while i < BOUNDS && (BOUNDS_NS[i] as u64) < (1u64 << k) {
            i += 1;
        }
        out[k] = i as u8;
        k += 1;
    }
    out
};

/// The bucket of a delay: the first whose upper bound is at least `ns` (`BOUNDS` = `+Inf`).
#[inline]
fn bucket(ns: u32) -> usize {
    let mut i = OCTAVE_START[ns.max(1).ilog2() as usize] as usize;
    while i < BOUNDS && BOUNDS_NS[i] < ns {
        i += 1;
    }
    i
}

/// [`BOUNDS_NS`] in seconds, each the double nearest its decimal value (so the `le`
/// labels read `0.0000082`, not `8.199999999999999e-6`).
static BOUNDS_SECONDS: std::sync::LazyLock<[f64; BOUNDS]> = std::sync::LazyLock::new(|| {
    BOUNDS_NS.map(|ns| format!("{ns}e-9").parse().unwrap_or(f64::from(ns) / 1e9))
});
/// Buckets including the `+Inf` one.
const BUCKETS: usize = BOUNDS_NS.len() + 1;

/// Default of `analyzer.max_tor_pair_series`: 32 ToRs fully meshed fit.
pub(crate) const DEFAULT_MAX_TOR_PAIRS: usize = 1024;
/// Largest `analyzer.max_tor_pair_series` (about 3.8 M series, 33 MiB of histograms).
pub(crate) const MAX_TOR_PAIRS: usize = 16_384;
/// Distinct pairs past the cap remembered, to count them (bounded memory; past it the
/// count is a lower bound).
const MAX_UNEXPORTED_TRACKED: usize = 65_536;

/// A fixed-bucket histogram of nanosecond delays, exported in seconds.
#[derive(Debug, Clone)]
pub(crate) struct DelayHistogram {
    /// Per bucket (not cumulative), the last one is `+Inf`.
    counts: [u64; BUCKETS],
    sum_ns: u64,
}

impl Default for DelayHistogram {
    fn default() -> Self {
        Self {
            counts: [0; BUCKETS],
            sum_ns: 0,
        }
    }
}

impl DelayHistogram {
    /// Counts one delay.
    #[inline]
    pub(crate) fn observe(&mut self, ns: u32) {
        self.counts[bucket(ns)] += 1;
        self.sum_ns += u64::from(ns);
    }

    /// Number of delays counted.
    pub(crate) fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn encode(&self, mut enc: MetricEncoder) -> std::fmt::Result {
        let buckets: Vec<(f64, u64)> = BOUNDS_SECONDS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.counts)
            .collect();
        enc.encode_histogram::<NoLabelSet>(self.sum_ns as f64 / 1e9, self.count(), &buckets, None)
    }
}

/// What one ToR pair's probes showed since the analyzer started.
#[derive(Debug, Clone, Default)]
pub(crate) struct PairSeries {
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

/// An empty [`PairIndex`] slot.
const EMPTY_SLOT: u64 = u64::MAX;

/// ToR pair key -> series index: open addressing with linear probing over a fixed
/// table that is never more than half full (a third of the instructions of a
/// `HashMap` lookup on the hot path). A slot holds `key << 32 | index`.
#[derive(Debug, Clone)]
struct PairIndex {
    /// A power of two, at least twice the pairs it ever holds.
    slots: Box<[u64]>,
}

impl PairIndex {
    /// An index for up to `pairs` pairs.
    fn new(pairs: usize) -> Self {
        let n = (2 * pairs.max(1)).next_power_of_two().max(2);
        Self {
            slots: vec![EMPTY_SLOT; n].into_boxed_slice(),
        }
    }

    /// The series index of `key`, or the empty slot where it would go.
    #[inline]
    fn find(&self, key: u32) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        // Fibonacci hashing of the (prober ToR, target ToR) key.
        let mut at =
            (key.wrapping_mul(0x9E37_79B9) >> (32 - self.slots.len().trailing_zeros())) as usize;
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
#[derive(Debug, Clone)]
pub struct TorPairMetrics {
    index: PairIndex,
    /// Most pairs with a series.
    cap: usize,
    /// (pair key, series), in order of first appearance.
    series: Vec<(u32, PairSeries)>,
    /// Results of pairs past the cap.
    overflow: u64,
    /// Distinct pairs past the cap (at most [`MAX_UNEXPORTED_TRACKED`]), allocated at the
    /// first one; `index` of each slot unused.
    unexported: Option<PairIndex>,
    /// Entries of `unexported`.
    unexported_pairs: usize,
}

impl TorPairMetrics {
    /// Series for the first `cap` pairs seen.
    pub fn new(cap: usize) -> Self {
        Self {
            index: PairIndex::new(cap),
            cap,
            series: Vec::new(),
            overflow: 0,
            unexported: None,
            unexported_pairs: 0,
        }
    }

    /// Counts one aggregated result of the given (prober, target) ToR pair.
    #[inline]
    pub fn observe(&mut self, r: &ProbeResult, prober_tor: u16, target_tor: u16) {
        let key = pair_key(prober_tor, target_tor);
        let i = match self.index.find(key) {
            Ok(i) => i,
            Err(at) if self.series.len() < self.cap => {
                let i = self.series.len();
                self.series.push((key, PairSeries::default()));
                self.index.slots[at] = u64::from(key) << 32 | i as u64;
                i
            }
            Err(_) => {
                self.overflow += 1;
                let seen = self
                    .unexported
                    .get_or_insert_with(|| PairIndex::new(MAX_UNEXPORTED_TRACKED));
                if let Err(at) = seen.find(key)
                    && self.unexported_pairs < MAX_UNEXPORTED_TRACKED
                {
                    seen.slots[at] = u64::from(key) << 32;
                    self.unexported_pairs += 1;
                }
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
    cap: usize,
    overflow: u64,
    unexported: usize,
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
        let (cap, overflow, unexported) = (pairs.cap, pairs.overflow, pairs.unexported_pairs);
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
            cap,
            overflow,
            unexported,
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
            "Results aggregated but in no per-ToR-pair series: their pair came after the first analyzer.max_tor_pair_series pairs.",
            self.overflow,
        )?;
        let pairs = [
            (
                "rocemesh_tor_pairs_exported",
                "ToR pairs with their own series.",
                self.pairs.len() as u64,
            ),
            (
                "rocemesh_tor_pairs_unexported",
                "ToR pairs probed but without series, past analyzer.max_tor_pair_series (a lower bound past 65536).",
                self.unexported as u64,
            ),
            (
                "rocemesh_tor_pair_series_limit",
                "analyzer.max_tor_pair_series: most ToR pairs with their own series.",
                self.cap as u64,
            ),
        ];
        for (name, help, n) in pairs {
            gauge(
                enc.encode_descriptor(name, help, None, MetricType::Gauge)?,
                n,
            )?;
        }
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
        single_counter(
            &mut enc,
            "rocemesh_task_pair_results_unstored",
            "Results of a task's RNIC pair not kept per pair: its period already held analyzer.max_task_pairs pairs.",
            i.task_pairs_unstored,
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
    Ok(db
        .problems()
        .count_active()
        .await?
        .into_iter()
        .map(|c| {
            let priority = c.priority.unwrap_or_else(|| "unknown".to_string());
            (
                [
                    ("kind", c.kind),
                    ("component_kind", c.component_kind),
                    ("priority", priority),
                ],
                c.count.max(0) as u64,
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

/// `GET /metrics` for the components of this process: the analyzer's own metrics when
/// `analyzer` is given, every collector in `others` (the controller's, the alerts'), and
/// the build and process families; OpenMetrics, or the classic text format when the
/// scraper's `Accept` asks for it. Open, like `/healthz`.
pub fn router(analyzer: Option<Arc<Analyzer>>, others: Vec<Box<dyn Collector>>) -> Router {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ProcessCollector));
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

async fn scrape(State(s): State<Arc<Scrape>>, headers: HeaderMap) -> Response {
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let mut own = Registry::default();
    if let Some(a) = &s.analyzer {
        own.register_collector(Box::new(Snapshot::take(a).await));
    }
    match exposition::encode(&[&s.others, &own], format) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
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
        for ns in [0, 100, 101, 100_000_000, 100_000_001, u32::MAX] {
            h.observe(ns);
        }
        assert_eq!(h.counts[0], 2, "0 and 100 ns are <= 100 ns");
        assert_eq!(h.counts[1], 1, "101 ns is in (100, 120] ns");
        assert_eq!(h.counts[BUCKETS - 2], 1, "100 ms is <= 100 ms");
        assert_eq!(h.counts[BUCKETS - 1], 2, "above 100 ms is +Inf");
        assert_eq!(h.count(), 6);
    }

    #[test]
    fn bucket_look_up_agrees_with_a_search_of_every_bound() {
        let seed: u64 = rand::random();
        println!("seed {seed}");
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
        let edges = BOUNDS_NS.iter().flat_map(|&b| [b - 1, b, b + 1]).chain([
            0,
            1,
            2,
            u32::MAX - 1,
            u32::MAX,
        ]);
        let random = (0..100_000).map(|_| {
            // Log-uniform over 1 ns .. 4 s, where the buckets are.
            let bits = rand::Rng::random_range(&mut rng, 0..32u32);
            rand::Rng::random_range(&mut rng, 0..=(u32::MAX >> (31 - bits)))
        });
        for ns in edges.chain(random) {
            assert_eq!(
                bucket(ns),
                BOUNDS_NS.partition_point(|&b| b < ns),
                "{ns} ns (seed {seed})"
            );
        }
        for k in 0..32 {
            let lo = 1u64 << k;
            let within = BOUNDS_NS
                .iter()
                .filter(|&&b| (lo..2 * lo).contains(&u64::from(b)))
                .count();
            assert!(within <= 4, "{within} bounds in [2^{k}, 2^{}) ns", k + 1);
        }
    }

    #[test]
    fn buckets_span_sub_microsecond_to_100_ms_at_most_25_percent_wide() {
        assert_eq!((BOUNDS_NS[0], BOUNDS_NS[BOUNDS - 1]), (100, 100_000_000));
        for w in BOUNDS_NS.windows(2) {
            assert!(
                w[1] > w[0] && u64::from(w[1]) * 4 <= u64::from(w[0]) * 5,
                "bucket ({}, {}] ns is more than 25 % wide",
                w[0],
                w[1]
            );
        }
        assert!(BOUNDS_NS.contains(&1_000) && BOUNDS_NS.contains(&10_000));
    }

    #[test]
    fn pairs_are_capped_and_overflow_is_counted() {
        let cap = 100;
        let mut m = TorPairMetrics::new(cap);
        for tor in 0..(cap as u16 + 10) {
            m.observe(&rec(ProbeStatus::Ok, 5_000), tor, 0);
            m.observe(&rec(ProbeStatus::Ok, 5_000), tor, 0);
        }
        m.observe(&rec(ProbeStatus::Timeout, 0), 0, 0);
        m.observe(&rec(ProbeStatus::Ack2Lost, 0), 0, 0);
        assert_eq!((m.series.len(), m.overflow), (cap, 20));
        assert_eq!(m.unexported_pairs, 10, "ten distinct pairs past the cap");
        let first = &m.series[0].1;
        assert_eq!((first.probes, first.timeouts), (4, 2));
        assert_eq!(first.network_rtt.count(), 2);
        assert_eq!(first.prober_delay.sum_ns, 2_000);
        // 1.001 µs is in (1, 1.2] µs.
        let i = BOUNDS_NS.iter().position(|&b| b == 1_200).unwrap();
        assert_eq!(first.responder_delay.counts[i], 2);
    }
}
