//! Latency anomaly statistics for one RNIC pair (SkeletonHunter §5.2).
//!
//! Pure computation, no I/O. Per pair the analyzer keeps a [`LatencyMonitor`]:
//! every short window (30 s) it calls [`LatencyMonitor::observe_window`] with
//! the pair's network RTTs (ns), which extracts the 7 window features
//! ([`WindowFeatures`]) and scores them with LOF against the 5-minute
//! look-back ([`ShortTermDetector`]); every long window (30 min) it calls
//! [`LatencyMonitor::close_long_window`], which fits or z-tests a log-normal
//! from bounded sufficient statistics ([`LongTermDetector`]).
//! [`eval`] and [`synth`] score both on synthetic pairs with known faults.

pub mod error;
pub mod eval;
pub mod features;
pub mod lof;
pub mod log_summary;
pub mod long_term;
pub mod monitor;
mod scratch;
pub mod short_term;
pub mod synth;

pub use error::Error;
pub use eval::{
    PairRun, Score, SuiteConfig, SuiteReport, WindowVerdict, run_pair, run_suite, score,
};
pub use features::{FEATURE_DIM, FEATURE_NAMES, SampleTally, WindowFeatures};
pub use log_summary::LogSummary;
pub use long_term::{LogNormalFit, LongTermConfig, LongTermDetector, LongTermVerdict, ZTest};
pub use monitor::{LatencyMonitor, MonitorConfig, WindowReport};
pub use scratch::Scratch;
pub use short_term::{ShortTermConfig, ShortTermDetector, ShortTermVerdict};
pub use synth::{Burst, Fault, PairKind, PairSpec};
