//! Both detectors of one RNIC pair behind one call per short window and one
//! per long window: what the analyzer keeps in its per-pair map.

use serde::{Deserialize, Serialize};

use crate::{
    Error,
    features::{SampleTally, WindowFeatures},
    log_summary::LogSummary,
    long_term::{LongTermConfig, LongTermDetector, LongTermVerdict},
    scratch::Scratch,
    short_term::{ShortTermConfig, ShortTermDetector, ShortTermVerdict},
};

/// Configuration of both detectors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct MonitorConfig {
    /// Short-term (LOF) settings.
    pub short_term: ShortTermConfig,
    /// Long-term (log-normal) settings.
    pub long_term: LongTermConfig,
}

/// What one short window produced.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowReport {
    /// The window's features.
    pub features: WindowFeatures,
    /// Valid and skipped samples.
    pub tally: SampleTally,
    /// LOF verdict; `None` while the look-back is warming up.
    pub short_term: Option<ShortTermVerdict>,
}

/// Latency anomaly state of one RNIC pair (~460 bytes with the default look-back).
#[derive(Debug, Clone)]
pub struct LatencyMonitor {
    short_term: ShortTermDetector,
    long_term: LongTermDetector,
    long_window: LogSummary,
}

impl LatencyMonitor {
    /// A monitor with empty history and no baseline.
    pub fn new(config: &MonitorConfig) -> Result<Self, Error> {
        Ok(Self {
            short_term: ShortTermDetector::new(config.short_term)?,
            long_term: LongTermDetector::new(config.long_term)?,
            long_window: LogSummary::default(),
        })
    }

    /// Feeds one short window of RTT samples (ns): adds them to the open long
    /// window and scores the window's features with LOF. One `scratch` serves
    /// every pair. An empty (or all-invalid) window is
    /// [`Error::EmptyWindow`]; its invalid samples are still counted in the
    /// long window's `rejected`.
    pub fn observe_window(
        &mut self,
        rtt_ns: &[f64],
        scratch: &mut Scratch,
    ) -> Result<WindowReport, Error> {
        self.long_window.extend(rtt_ns);
        let (features, tally) = WindowFeatures::from_samples(rtt_ns, &mut scratch.samples)?;
        let short_term = self.short_term.observe(&features, scratch)?;
        Ok(WindowReport {
            features,
            tally,
            short_term,
        })
    }

    /// Closes the open long window: fits or tests it, and starts a new one.
    /// A window with too few samples is discarded with [`Error::TooFewSamples`].
    pub fn close_long_window(&mut self) -> Result<LongTermVerdict, Error> {
        let window = std::mem::take(&mut self.long_window);
        self.long_term.observe(&window)
    }

    /// Drops the open long window without fitting or testing it: a pair first seen
    /// mid-window has only a partial (start-up) window, which must not become the
    /// baseline.
    pub fn discard_long_window(&mut self) {
        self.long_window = LogSummary::default();
    }

    /// Samples accumulated in the open long window.
    pub fn open_long_window(&self) -> &LogSummary {
        &self.long_window
    }

    /// The long-term detector (baseline inspection, reset).
    pub fn long_term_mut(&mut self) -> &mut LongTermDetector {
        &mut self.long_term
    }
}
