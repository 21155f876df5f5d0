//! Buffers that scoring a window needs only while it runs. One [`Scratch`] serves
//! every pair, so a pair's state is its look-back and nothing else: kept per pair,
//! these buffers would be ~2.6 KB beside a 280-byte look-back.

use crate::lof::{LofScratch, Point};

/// Reusable buffers of feature extraction and LOF scoring, shared by all pairs.
#[derive(Debug, Default, Clone)]
pub struct Scratch {
    /// Valid samples of the window being summarized, sorted.
    pub(crate) samples: Vec<f64>,
    /// The look-back being scored, widened to `f64`.
    pub(crate) lookback: Vec<Point>,
    /// The look-back, standardized.
    pub(crate) scaled: Vec<Point>,
    /// The look-back windows' medians.
    pub(crate) medians: Vec<f64>,
    /// LOF's distance matrix and neighbourhoods.
    pub(crate) lof: LofScratch,
}
