//! The kernels' inputs, generated from a fixed seed at production-like sizes and written
//! as `.npy` (plus `manifest.json` with the parameters) for the Python side.

use super::npy;
use anyhow::Result;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rocemesh_anomaly::lof::Point;
use std::path::Path;

/// Sizes and parameters of one run.
#[derive(Debug, Clone)]
pub(super) struct Scale {
    /// Timed runs per kernel and side (the median is reported).
    pub repeats: usize,
    /// RNIC pairs scored by LOF, each against its own look-back.
    pub lof_pairs: usize,
    /// Windows in a pair's look-back (the short-term detector's default 10).
    pub lof_lookback: usize,
    /// LOF neighbourhood size (the short-term detector's default 5).
    pub lof_k: usize,
    /// Throughput series transformed by the STFT.
    pub stft_series: usize,
    /// Samples per series.
    pub stft_len: usize,
    /// STFT window (the skeleton features' default 64).
    pub stft_window: usize,
    /// STFT hop (the skeleton features' default 16).
    pub stft_hop: usize,
    /// Flat clusters (DP groups) in the linkage input.
    pub linkage_groups: usize,
    /// Points per cluster, also the size cap rocemesh agglomerates with.
    pub linkage_group: usize,
    /// Features per point.
    pub linkage_dim: usize,
}

impl Scale {
    /// Production-like sizes: 10k LOF look-back points, 512 series x 4096 samples,
    /// 512 RNICs in DP groups of 8.
    pub(super) const FULL: Scale = Scale {
        repeats: 5,
        lof_pairs: 1000,
        lof_lookback: 10,
        lof_k: 5,
        stft_series: 512,
        stft_len: 4096,
        stft_window: 64,
        stft_hop: 16,
        linkage_groups: 64,
        linkage_group: 8,
        linkage_dim: 16,
    };

    /// A smoke test of the section (`--quick`).
    pub(super) const QUICK: Scale = Scale {
        repeats: 3,
        lof_pairs: 200,
        stft_series: 64,
        linkage_groups: 32,
        ..Scale::FULL
    };

    /// Points clustered by the linkage kernel.
    pub(super) fn linkage_points(&self) -> usize {
        self.linkage_groups * self.linkage_group
    }
}

/// One run's inputs, identical for both sides.
#[derive(Debug, Clone)]
pub(super) struct Inputs {
    /// Per pair: its look-back windows' features.
    pub lof_reference: Vec<Vec<Point>>,
    /// Per pair: the new window scored against the look-back.
    pub lof_query: Vec<Point>,
    /// Throughput-like series: bursts every iteration over a noisy floor.
    pub stft_series: Vec<Vec<f64>>,
    /// Feature vectors in tight, well separated groups.
    pub linkage_points: Vec<Vec<f64>>,
}

impl Inputs {
    /// Inputs of `scale` from `seed`.
    pub(super) fn generate(scale: &Scale, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut lof_reference = Vec::with_capacity(scale.lof_pairs);
        let mut lof_query = Vec::with_capacity(scale.lof_pairs);
        for _ in 0..scale.lof_pairs {
            let centre: Point = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            let near = |rng: &mut StdRng, spread: f64| -> Point {
                std::array::from_fn(|d| centre[d] + rng.random_range(-spread..spread))
            };
            lof_reference.push(
                (0..scale.lof_lookback)
                    .map(|_| near(&mut rng, 0.5))
                    .collect(),
            );
            // Most windows look like the look-back; some moved away (a latency shift).
            let spread = if rng.random_bool(0.7) {
                0.5
            } else {
                rng.random_range(1.0..5.0)
            };
            lof_query.push(near(&mut rng, spread));
        }
        let stft_series = (0..scale.stft_series)
            .map(|_| {
                let period = rng.random_range(20..200);
                let burst = rng.random_range(3..10);
                let offset = rng.random_range(0..period);
                (0..scale.stft_len)
                    .map(|t| {
                        let floor = rng.random_range(0.0..1e7);
                        if (t + offset) % period < burst {
                            1e9 + floor
                        } else {
                            floor
                        }
                    })
                    .collect()
            })
            .collect();
        let mut linkage_points = Vec::with_capacity(scale.linkage_points());
        for _ in 0..scale.linkage_groups {
            let centre: Vec<f64> = (0..scale.linkage_dim)
                .map(|_| rng.random_range(0.0..1.0))
                .collect();
            for _ in 0..scale.linkage_group {
                linkage_points.push(
                    centre
                        .iter()
                        .map(|c| c + rng.random_range(-0.02..0.02))
                        .collect(),
                );
            }
        }
        Self {
            lof_reference,
            lof_query,
            stft_series,
            linkage_points,
        }
    }

    /// Writes the inputs and `manifest.json` into `dir`.
    pub(super) fn write(&self, dir: &Path, scale: &Scale) -> Result<()> {
        let flat = |rows: &mut dyn Iterator<Item = &f64>| rows.copied().collect::<Vec<f64>>();
        let dim = rocemesh_anomaly::FEATURE_DIM;
        npy::write(
            &dir.join("lof_reference.npy"),
            &[scale.lof_pairs, scale.lof_lookback, dim],
            &flat(&mut self.lof_reference.iter().flatten().flatten()),
        )?;
        npy::write(
            &dir.join("lof_query.npy"),
            &[scale.lof_pairs, dim],
            &flat(&mut self.lof_query.iter().flatten()),
        )?;
        npy::write(
            &dir.join("stft_series.npy"),
            &[scale.stft_series, scale.stft_len],
            &flat(&mut self.stft_series.iter().flatten()),
        )?;
        npy::write(
            &dir.join("linkage_points.npy"),
            &[scale.linkage_points(), scale.linkage_dim],
            &flat(&mut self.linkage_points.iter().flatten()),
        )?;
        let manifest = serde_json::json!({
            "repeats": scale.repeats,
            "lof_k": scale.lof_k,
            "stft_window": scale.stft_window,
            "stft_hop": scale.stft_hop,
            "linkage_groups": scale.linkage_groups,
        });
        std::fs::write(dir.join("manifest.json"), serde_json::to_vec(&manifest)?)?;
        Ok(())
    }
}
