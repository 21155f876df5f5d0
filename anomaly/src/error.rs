//! Errors: input or configuration the detectors refuse, always without panicking
//! and without changing any detector state.

/// Why a window, a summary or a configuration could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The window held no usable RTT sample (all were absent, NaN, infinite or <= 0).
    #[error("window has no valid RTT sample ({rejected} rejected as NaN, infinite or <= 0)")]
    EmptyWindow {
        /// Samples that were present but unusable.
        rejected: u64,
    },
    /// A feature vector handed in by the caller is not finite and positive.
    #[error("window feature {name} is {value}; features must be finite and >= 0 (p25..max > 0)")]
    InvalidFeature {
        /// Which of the seven features is bad.
        name: &'static str,
        /// The offending value.
        value: f64,
    },
    /// LOF needs `k + 1` look-back windows (each neighbour needs its own k neighbours).
    #[error("look-back holds {have} windows, LOF with this k needs at least {need}")]
    NotEnoughHistory {
        /// Windows currently in the look-back.
        have: usize,
        /// Windows required.
        need: usize,
    },
    /// A long window had too few valid samples for a log-normal fit or a z-test.
    #[error("long window has {have} valid samples, at least {need} are required")]
    TooFewSamples {
        /// Valid samples in the window.
        have: u64,
        /// Configured minimum.
        need: u64,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
}
