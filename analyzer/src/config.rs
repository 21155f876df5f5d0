//! Analyzer settings (a section of the rocemesh config file).

use anyhow::ensure;
use rocemesh_anomaly::{LongTermConfig, MonitorConfig, ShortTermConfig};
use serde::Deserialize;
use std::path::PathBuf;

/// Largest `max_task_pairs`: open periods (up to backfill / period + 4 of them) each hold
/// that many pairs at most.
const MAX_TASK_PAIRS: usize = 1_000_000;

/// Tunables of the analyzer; every field has a production default.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AnalyzerConfig {
    /// Analysis period length (R-Pingmesh uses 20 s).
    #[serde(rename = "period", with = "rocemesh_proto::duration::millis")]
    pub period_ms: u64,
    /// How long after its end a period still accepts late uploads before it is finalized.
    #[serde(rename = "grace", with = "rocemesh_proto::duration::millis")]
    pub grace_ms: u64,
    /// How long cluster and ToR-pair SLA rows are kept.
    #[serde(rename = "retention", with = "rocemesh_proto::duration::millis")]
    pub retention_ms: u64,
    /// How long per-RNIC SLA rows are kept (there are many more of them).
    #[serde(rename = "rnic_retention", with = "rocemesh_proto::duration::millis")]
    pub rnic_retention_ms: u64,
    /// How often the RNIC registry is re-read from the database.
    #[serde(rename = "registry_refresh", with = "rocemesh_proto::duration::millis")]
    pub registry_refresh_ms: u64,
    /// How far back results held by agents during an outage of the analyzer are still
    /// folded into their periods after it starts again (the periods of the outage are
    /// open, not late, for this long).
    #[serde(with = "humantime_serde")]
    pub backfill: std::time::Duration,
    /// After a start, no period is finalized for this long: agents whose uploads failed
    /// during the outage are backing off (up to 4 upload periods, jittered) and deliver
    /// their buffered results within it. Likewise an upload refused while running (the
    /// write-ahead log could not take it) holds finalization until its host has caught up,
    /// at most this long.
    #[serde(with = "humantime_serde")]
    pub catch_up: std::time::Duration,
    /// Most bytes of accepted batches held in the write-ahead log (`ingest_wal`) while
    /// their periods are not stored; beyond, uploads are answered 503 (agents keep them).
    pub wal_max_bytes: u64,
    /// Fabric map (TOML: switches with their interface addresses, switch-to-switch
    /// links) naming the devices and links of traced paths; without it, hops are
    /// named by address.
    pub fabric_map: Option<PathBuf>,
    /// Fault diagnosis tunables.
    pub diagnosis: DiagnosisConfig,
    /// Per RNIC-pair latency anomaly detection (SkeletonHunter §5.2).
    pub latency: LatencyConfig,
    /// Several analyzer instances over one PostgreSQL (`[analyzer.scaleout]`).
    pub scaleout: crate::shard::ScaleoutConfig,
    /// Most ToR pairs with their own `/metrics` series (about 230 series and 2 KiB each);
    /// further pairs are counted in `rocemesh_tor_pairs_unexported`.
    pub max_tor_pair_series: usize,
    /// Most RNIC pairs of tasks one period keeps per-pair outcomes of (C4D's matrix, about
    /// 300 bytes each per open period); results of further pairs are counted in
    /// `rocemesh_task_pair_results_unstored`. 0 keeps none.
    pub max_task_pairs: usize,
}

/// Per RNIC-pair latency anomaly detection (SkeletonHunter §5.2): short windows scored
/// by LOF against a look-back, long windows z-tested against a log-normal baseline.
/// Windows are aligned to the Unix epoch and shrink freely for tests.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyConfig {
    /// Runs the detectors (off: the factor rule alone judges latency).
    pub enabled: bool,
    /// Short window: 7 RTT statistics per pair, scored by LOF (SkeletonHunter: 30 s).
    #[serde(rename = "short_window", with = "rocemesh_proto::duration::millis")]
    pub short_window_ms: u64,
    /// LOF look-back (5 min: covers burst cycles); a multiple of the short window.
    #[serde(rename = "lookback", with = "rocemesh_proto::duration::millis")]
    pub lookback_ms: u64,
    /// Long window: log-normal fit, then z-tests (30 min); a multiple of the short window.
    #[serde(rename = "long_window", with = "rocemesh_proto::duration::millis")]
    pub long_window_ms: u64,
    /// A short window is closed this long after its end (uploads arrive late).
    #[serde(rename = "close_after", with = "rocemesh_proto::duration::millis")]
    pub close_after_ms: u64,
    /// Most RNIC pairs tracked (~2 KiB each); samples of further new pairs are counted
    /// and dropped.
    pub max_pairs: usize,
    /// A pair without samples for this long is forgotten (with its baseline).
    #[serde(rename = "idle_evict", with = "rocemesh_proto::duration::millis")]
    pub idle_evict_ms: u64,
    /// RTT samples kept per pair and short window; beyond, counted and dropped.
    pub max_samples_per_window: usize,
    /// A short window with fewer samples is not judged (its statistics are noise).
    pub min_samples_per_window: usize,
    /// LOF above which a short window is an outlier.
    pub lof_threshold: f64,
    /// Least relative rise (0.25 = +25 %) of a window's median and lower quantiles
    /// for a short-term anomaly.
    pub min_shift: f64,
    /// Significance level of the long-term z-test.
    pub alpha: f64,
    /// Least rise of the mean ln RTT for a long-term anomaly (0.1 = +10.5 %).
    pub min_ln_shift: f64,
    /// Least absolute rise of a window's median over the pair's reference for
    /// either anomaly: the detection floor above the hosts' own jitter (a loaded host
    /// stack moves a 20 µs RTT by +60 % without any network cause).
    #[serde(rename = "min_rise", with = "rocemesh_proto::duration::micros")]
    pub min_rise_us: u64,
}

impl Default for LatencyConfig {
    fn default() -> Self {
        let short = ShortTermConfig::default();
        let long = LongTermConfig::default();
        Self {
            enabled: true,
            short_window_ms: 30_000,
            lookback_ms: 300_000,
            long_window_ms: 1_800_000,
            close_after_ms: 7_000,
            max_pairs: 100_000,
            idle_evict_ms: 3_600_000,
            max_samples_per_window: 1_024,
            min_samples_per_window: 5,
            lof_threshold: short.lof_threshold,
            min_shift: short.min_shift,
            alpha: long.alpha,
            min_ln_shift: long.min_ln_shift,
            min_rise_us: 50,
        }
    }
}

impl LatencyConfig {
    /// Short windows per look-back.
    pub fn lookback_windows(&self) -> usize {
        (self.lookback_ms / self.short_window_ms.max(1)) as usize
    }

    /// The detector settings of every pair.
    pub fn monitor(&self) -> MonitorConfig {
        let lookback = self.lookback_windows();
        MonitorConfig {
            short_term: ShortTermConfig {
                lookback,
                min_history: lookback,
                lof_threshold: self.lof_threshold,
                min_shift: self.min_shift,
                ..ShortTermConfig::default()
            },
            long_term: LongTermConfig {
                alpha: self.alpha,
                min_ln_shift: self.min_ln_shift,
                ..LongTermConfig::default()
            },
        }
    }

    /// Refuses windows that do not nest, unbounded memory, and detector settings the
    /// detectors refuse.
    pub fn validate(&self) -> anyhow::Result<()> {
        let short = self.short_window_ms;
        ensure!(
            (100..=600_000).contains(&short),
            "analyzer.latency.short_window must be between 100 ms and 10 min, got {short} ms"
        );
        ensure!(
            self.lookback_ms.is_multiple_of(short) && self.long_window_ms.is_multiple_of(short),
            "analyzer.latency.lookback ({} ms) and long_window ({} ms) must be multiples of short_window ({short} ms)",
            self.lookback_ms,
            self.long_window_ms
        );
        ensure!(
            self.long_window_ms >= 2 * short && self.long_window_ms <= 86_400_000,
            "analyzer.latency.long_window must be between 2 short windows and 1 day, got {} ms",
            self.long_window_ms
        );
        ensure!(
            self.close_after_ms <= 8 * short.max(10_000),
            "analyzer.latency.close_after ({} ms) must be at most 8 short windows (or 80 s)",
            self.close_after_ms
        );
        ensure!(
            (1..=10_000_000).contains(&self.max_pairs)
                && (1..=1_000_000).contains(&self.max_samples_per_window)
                && (1..=self.max_samples_per_window).contains(&self.min_samples_per_window),
            "analyzer.latency: max_pairs must be 1..=10,000,000, max_samples_per_window \
             1..=1,000,000 and min_samples_per_window 1..=max_samples_per_window"
        );
        ensure!(
            self.min_rise_us <= 1_000_000,
            "analyzer.latency.min_rise must be at most 1 s, got {} us",
            self.min_rise_us
        );
        ensure!(
            self.idle_evict_ms >= short,
            "analyzer.latency.idle_evict ({} ms) must cover a short window",
            self.idle_evict_ms
        );
        let m = self.monitor();
        m.short_term
            .validate()
            .and_then(|()| m.long_term.validate())
            .map_err(|e| {
                anyhow::anyhow!(
                    "analyzer.latency: {e} (lookback / short_window = {} windows)",
                    self.lookback_windows()
                )
            })
    }
}

/// Tunables of fault diagnosis (R-Pingmesh §4.3 pipeline plus tomography).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DiagnosisConfig {
    /// How often diagnosis runs.
    #[serde(rename = "tick", with = "rocemesh_proto::duration::millis")]
    pub tick_ms: u64,
    /// Sliding window of recent results each diagnosis looks at.
    #[serde(rename = "window", with = "rocemesh_proto::duration::millis")]
    pub window_ms: u64,
    /// Most timed-out probes kept raw for diagnosis (judged again every tick; memory
    /// bound, oldest go first). Successful probes are counted per flow instead.
    pub max_records: usize,
    /// Most flows (prober, target, UDP ports) diagnosis tracks, ~160 bytes each; the
    /// successful probes of further new flows are counted and dropped.
    pub max_flows: usize,
    /// Most traced paths kept (latest per 5-tuple). The store keeps two generations of
    /// half as many each; the default, 2 × 458,752, is what two hash tables of 2^19
    /// buckets hold (at 500,000 each would double to 2^20 buckets, half of them empty).
    pub max_paths: usize,
    /// A host whose agent has not uploaded for this long is down.
    #[serde(rename = "host_down_after", with = "rocemesh_proto::duration::millis")]
    pub host_down_after_ms: u64,
    /// Timeouts towards a host silent this long are set aside (likely down or
    /// restarting); keep it above two upload periods. (Timeouts are judged only after
    /// the target uploaded again anyway, see `liveness_margin`.)
    #[serde(rename = "host_silent", with = "rocemesh_proto::duration::millis")]
    pub host_silent_ms: u64,
    /// A timeout is judged only once its target host uploaded this long after the probe
    /// was sent (proof the host was alive for the probe's whole life); until then it
    /// waits. Keep it above the controller's `probe_timeout` plus an upload's transit: a
    /// host that died after that upload was alive until the probe had timed out.
    #[serde(rename = "liveness_margin", with = "rocemesh_proto::duration::millis")]
    pub liveness_margin_ms: u64,
    /// After an agent restart (new epoch), timeouts towards its host are blamed on the
    /// restart for this long (pinglists still name the old QPN).
    #[serde(rename = "restart_grace", with = "rocemesh_proto::duration::millis")]
    pub restart_grace_ms: u64,
    /// An RNIC with more than this share (percent) of timed-out ToR-mesh probes is faulty.
    pub rnic_timeout_percent: u32,
    /// Fewest ToR-mesh probes before an RNIC is judged.
    pub rnic_min_probes: u32,
    /// An RNIC found faulty stays so (its timeouts explained) for this long.
    #[serde(rename = "rnic_sticky", with = "rocemesh_proto::duration::millis")]
    pub rnic_sticky_ms: u64,
    /// A processing delay above this is host noise (CPU), not the network.
    #[serde(rename = "noise_delay", with = "rocemesh_proto::duration::nanos")]
    pub noise_delay_ns: u64,
    /// Share (percent) of a host's delays above `noise_delay` that makes it noisy.
    pub noise_percent: u32,
    /// An RNIC verdict on a strained host (some processing delays above `noise_delay`,
    /// not yet enough for host noise) is held this long: a starved agent's probes time out
    /// before enough slow delays arrive to call it host noise; if the host turns noisy
    /// meanwhile, the verdict is dropped. An RNIC that is simply dead shows no slow delays
    /// and is reported at once. An RNIC verdict whose failures one link explains as well
    /// (a link fault's first tick) is held as long.
    #[serde(
        rename = "strained_rnic_hold",
        with = "rocemesh_proto::duration::millis"
    )]
    pub strained_rnic_hold_ms: u64,
    /// Tomography: least evidence (Chernoff bound exponent, ~ -ln p) to blame a component.
    pub min_score: u32,
    /// Tomography: least weighted failures to blame a component.
    pub min_failures: u32,
    /// Tomography: assumed background loss (parts per million) at least.
    pub background_loss_ppm: u32,
    /// A probe timed in software (or by the application) is slow when its RTT exceeds
    /// the flow's baseline by this factor...
    pub latency_factor: u32,
    /// ...and by at least this much (host stacks add jitter of this order).
    #[serde(rename = "latency_min", with = "rocemesh_proto::duration::nanos")]
    pub latency_min_ns: u64,
    /// A probe timed by NIC timestamps at both ends is slow when its RTT exceeds the
    /// flow's baseline by this much: host software is out of such RTTs, so fabric
    /// queueing is their only jitter and a delay of tens of microseconds stands out.
    #[serde(rename = "latency_min_nic", with = "rocemesh_proto::duration::nanos")]
    pub latency_min_nic_ns: u64,
    /// Least share (percent) of slow probes through a component to blame it for latency.
    pub latency_percent: u32,
    /// A problem without evidence for this long is resolved.
    #[serde(rename = "resolve_after", with = "rocemesh_proto::duration::millis")]
    pub resolve_after_ms: u64,
    /// A link finding located by fresh partial traces, one of whose switches answered no
    /// fresh trace of a failed probe (the whole switch may be going down, its links
    /// failing one by one), is reported once it has persisted this long, so the switch
    /// verdict can take it over; so is a link sharing a switch with a link whose problem
    /// is open (a fault's failures spill over to its siblings where paths are partly
    /// known); 0 = at once.
    #[serde(rename = "link_confirm", with = "rocemesh_proto::duration::millis")]
    pub link_confirm_ms: u64,
    /// After the analyzer starts or takes shards over, the agents new to it upload their
    /// traced paths again with their next upload; the tomography waits this long for them
    /// (keep it above one upload period).
    #[serde(rename = "paths_settle", with = "rocemesh_proto::duration::millis")]
    pub paths_settle_ms: u64,
}

impl Default for DiagnosisConfig {
    fn default() -> Self {
        Self {
            tick_ms: 1_000,
            window_ms: 10_000,
            max_records: 1_000_000,
            max_flows: 6_000_000,
            max_paths: 917_504,
            host_down_after_ms: 15_000,
            host_silent_ms: 10_000,
            liveness_margin_ms: 700,
            restart_grace_ms: 10_000,
            rnic_timeout_percent: 10,
            rnic_min_probes: 20,
            rnic_sticky_ms: 60_000,
            noise_delay_ns: 5_000_000,
            noise_percent: 10,
            min_score: 10,
            min_failures: 3,
            background_loss_ppm: 1_000,
            latency_factor: 5,
            latency_min_ns: 1_000_000,
            latency_min_nic_ns: 15_000,
            latency_percent: 50,
            resolve_after_ms: 10_000,
            link_confirm_ms: 5_000,
            paths_settle_ms: 7_000,
            strained_rnic_hold_ms: 10_000,
        }
    }
}

impl DiagnosisConfig {
    /// Refuses settings that make no sense or break memory bounds.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            (10..=60_000).contains(&self.tick_ms),
            "analyzer.diagnosis.tick must be between 10 ms and 1 min, got {} ms",
            self.tick_ms
        );
        ensure!(
            (self.tick_ms..=600_000).contains(&self.window_ms),
            "analyzer.diagnosis.window must be between tick and 10 min, got {} ms",
            self.window_ms
        );
        ensure!(
            [self.max_records, self.max_flows, self.max_paths]
                .iter()
                .all(|n| (1_000..=50_000_000).contains(n)),
            "analyzer.diagnosis.max_records / max_flows / max_paths must be between 1,000 and 50,000,000"
        );
        ensure!(
            self.rnic_timeout_percent <= 100
                && self.noise_percent <= 100
                && self.latency_percent <= 100
                && self.background_loss_ppm < 1_000_000,
            "analyzer.diagnosis percentages must be at most 100 and background_loss_ppm below 1,000,000"
        );
        ensure!(
            self.background_loss_ppm > 0
                && self.min_score > 0
                && self.latency_factor > 0
                && self.latency_min_nic_ns > 0,
            "analyzer.diagnosis.background_loss_ppm, min_score, latency_factor and latency_min_nic must be positive"
        );
        ensure!(
            self.host_silent_ms <= self.host_down_after_ms,
            "analyzer.diagnosis.host_silent ({} ms) must not exceed host_down_after ({} ms)",
            self.host_silent_ms,
            self.host_down_after_ms
        );
        ensure!(
            self.paths_settle_ms <= 600_000,
            "analyzer.diagnosis.paths_settle must be at most 10 min, got {} ms",
            self.paths_settle_ms
        );
        Ok(())
    }
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        Self {
            period_ms: 20_000,
            grace_ms: 7_000,
            retention_ms: 86_400_000,
            rnic_retention_ms: 3_600_000,
            registry_refresh_ms: 2_000,
            backfill: std::time::Duration::from_secs(600),
            catch_up: std::time::Duration::from_secs(90),
            wal_max_bytes: 512 << 20,
            fabric_map: None,
            diagnosis: DiagnosisConfig::default(),
            latency: LatencyConfig::default(),
            scaleout: crate::shard::ScaleoutConfig::default(),
            max_tor_pair_series: crate::metrics::DEFAULT_MAX_TOR_PAIRS,
            max_task_pairs: 20_000,
        }
    }
}

impl AnalyzerConfig {
    /// Refuses settings that would break the period arithmetic or memory bounds.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            (100..=3_600_000).contains(&self.period_ms),
            "analyzer.period must be between 100 ms and 1 h, got {} ms",
            self.period_ms
        );
        ensure!(
            self.grace_ms <= 4 * self.period_ms,
            "analyzer.grace ({} ms) must be at most 4 periods ({} ms): open periods are held in memory",
            self.grace_ms,
            4 * self.period_ms
        );
        ensure!(
            self.retention_ms >= self.period_ms && self.rnic_retention_ms >= self.period_ms,
            "analyzer retention ({} ms, rnic {} ms) must cover at least one period ({} ms)",
            self.retention_ms,
            self.rnic_retention_ms,
            self.period_ms
        );
        ensure!(
            self.retention_ms <= i64::MAX as u64 && self.rnic_retention_ms <= i64::MAX as u64,
            "analyzer retention too large"
        );
        ensure!(
            (100..=3_600_000).contains(&self.registry_refresh_ms),
            "analyzer.registry_refresh must be between 100 ms and 1 h, got {} ms",
            self.registry_refresh_ms
        );
        self.diagnosis.validate()?;
        self.latency.validate()?;
        self.scaleout.validate()?;
        ensure!(
            (1..=crate::metrics::MAX_TOR_PAIRS).contains(&self.max_tor_pair_series),
            "analyzer.max_tor_pair_series must be between 1 and {}, got {}",
            crate::metrics::MAX_TOR_PAIRS,
            self.max_tor_pair_series
        );
        ensure!(
            self.max_task_pairs <= MAX_TASK_PAIRS,
            "analyzer.max_task_pairs must be at most {MAX_TASK_PAIRS}, got {}",
            self.max_task_pairs
        );
        ensure!(
            self.latency.short_window_ms >= self.diagnosis.tick_ms,
            "analyzer.latency.short_window ({} ms) must be at least diagnosis.tick ({} ms)",
            self.latency.short_window_ms,
            self.diagnosis.tick_ms
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        AnalyzerConfig::default().validate().unwrap();
        let c: AnalyzerConfig = serde_json::from_str(r#"{"period": "5s"}"#).unwrap();
        assert_eq!((c.period_ms, c.grace_ms), (5_000, 7_000));
        c.validate().unwrap();
        let bad = AnalyzerConfig {
            period_ms: 0,
            ..AnalyzerConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("period"));
        let bad = AnalyzerConfig {
            grace_ms: 100_000,
            ..AnalyzerConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("grace"));
        assert!(serde_json::from_str::<AnalyzerConfig>(r#"{"perod_ms": 1}"#).is_err());
        let c: AnalyzerConfig =
            serde_json::from_str(r#"{"diagnosis": {"window": "2s", "tick": "100ms"}}"#).unwrap();
        assert_eq!((c.diagnosis.window_ms, c.diagnosis.min_score), (2_000, 10));
        c.validate().unwrap();
        let mut bad = AnalyzerConfig::default();
        bad.diagnosis.host_silent_ms = 20_000;
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("host_silent")
        );
        let t: AnalyzerConfig = toml::from_str(
            "fabric_map = \"/etc/rocemesh/fabric.toml\"\n[diagnosis]\nresolve_after = \"5s\"\n",
        )
        .unwrap();
        assert_eq!(
            t.fabric_map.as_deref(),
            Some(std::path::Path::new("/etc/rocemesh/fabric.toml"))
        );
        assert_eq!(
            (t.diagnosis.resolve_after_ms, t.diagnosis.tick_ms),
            (5_000, 1_000)
        );
        assert!(toml::from_str::<AnalyzerConfig>("[diagnosis]\nwindow = 1\n").is_err());
        bad.diagnosis = DiagnosisConfig {
            window_ms: 1,
            ..DiagnosisConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("window"));
    }

    #[test]
    fn latency_windows_must_nest_and_detectors_must_accept_them() {
        let t: AnalyzerConfig = toml::from_str(
            "[latency]\nshort_window = \"1s\"\nlookback = \"10s\"\nlong_window = \"20s\"\n",
        )
        .unwrap();
        t.validate().unwrap();
        assert_eq!(t.latency.monitor().short_term.lookback, 10);
        assert_eq!(t.latency.max_pairs, 100_000);
        let bad = |f: fn(&mut LatencyConfig), needle: &str| {
            let mut c = AnalyzerConfig::default();
            f(&mut c.latency);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        };
        bad(|l| l.lookback_ms = 301_000, "multiples");
        bad(|l| l.lookback_ms = 60_000, "min_history");
        bad(|l| l.lof_threshold = f64::NAN, "lof_threshold");
        bad(|l| l.max_pairs = 0, "max_pairs");
        bad(|l| l.short_window_ms = 10, "short_window");
        bad(|l| l.alpha = 2.0, "alpha");
        assert!(toml::from_str::<AnalyzerConfig>("[latency]\nshort = 1\n").is_err());
    }
}
