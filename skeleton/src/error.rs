//! Errors for input that cannot be analysed at all.
//!
//! Input that is well-formed but does not show a training structure is not an
//! error: inference then falls back to the basic pinglist with a
//! [`crate::FallbackReason`].

/// Why a task's endpoints or throughput series were rejected before inference.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// No endpoints were given.
    #[error("the task has no endpoints")]
    NoEndpoints,
    /// A pinglist needs at least two endpoints.
    #[error("the task has only one endpoint (RNIC {0}); there is nothing to probe")]
    SingleEndpoint(u32),
    /// Two endpoints carry the same RNIC id.
    #[error("RNIC id {0} appears more than once")]
    DuplicateRnic(u32),
    /// A throughput series is empty.
    #[error("RNIC {0} has an empty throughput series")]
    EmptySeries(u32),
    /// A throughput series holds NaN, infinity or a negative byte count.
    #[error("RNIC {rnic} has an invalid sample {value} at index {index} (must be finite and >= 0)")]
    InvalidSample {
        /// RNIC whose series is bad.
        rnic: u32,
        /// Position of the first bad sample.
        index: usize,
        /// The bad value.
        value: f64,
    },
    /// Series of one task must cover the same intervals.
    #[error("RNIC {rnic} has {len} samples but RNIC {first} has {expected}")]
    LengthMismatch {
        /// RNIC whose series differs.
        rnic: u32,
        /// Its length.
        len: usize,
        /// RNIC that set the expected length.
        first: u32,
        /// The expected length.
        expected: usize,
    },
    /// The series are shorter than one STFT window.
    #[error("series have {len} samples, fewer than the STFT window of {window}")]
    SeriesTooShort {
        /// Samples per series.
        len: usize,
        /// Configured STFT window.
        window: usize,
    },
    /// A configuration or generator parameter is out of range.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// A rail has more RNICs than the clustering's memory bound allows.
    #[error("rail {rail} has {rnics} RNICs, more than the limit of {limit}")]
    TooLarge {
        /// The rail.
        rail: u16,
        /// Its RNIC count.
        rnics: usize,
        /// [`crate::grouping::MAX_RAIL_RNICS`].
        limit: usize,
    },
    /// A pair or structure names an RNIC that is not among the endpoints.
    #[error("RNIC {0} is not an endpoint of this task")]
    UnknownRnic(u32),
}
