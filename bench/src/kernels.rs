//! Section "kernels": rocemesh's analytics kernels against the Python stack on identical
//! inputs — LOF (anomaly crate) vs scikit-learn `LocalOutlierFactor`, the skeleton STFT vs
//! `scipy.signal.stft`, average linkage vs `scipy.cluster.hierarchy.linkage`. The inputs
//! come from a fixed seed and go to Python as `.npy`; each side times its kernels in
//! process (median of the same number of repeats); the agreement is computed here.

mod agreement;
mod inputs;
mod npy;
mod python;

use crate::Opts;
use crate::report::Row;
use crate::server_proc::Scratch;
use anyhow::{Context, Result, ensure};
use inputs::{Inputs, Scale};
use rocemesh_anomaly::lof::{LofScratch, lof};
use rocemesh_skeleton::features::{FeatureConfig, stft_magnitudes};
use rocemesh_skeleton::linkage::{DistanceMatrix, agglomerate, agglomerate_with_heights};
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

/// Section name in the table.
const SECTION: &str = "kernels";
/// Scores must agree to rounding: both sides run the same exact algorithms in f64.
const ROUNDING: f64 = 1e-9;

/// The timings `kernels.py` writes (seconds, median of the repeats).
#[derive(Debug, serde::Deserialize)]
struct PythonTimings {
    lof_s: f64,
    stft_s: f64,
    linkage_s: f64,
    versions: serde_json::Map<String, serde_json::Value>,
}

/// Runs the three kernels on both sides and returns their rows.
pub(crate) fn run(opts: &Opts) -> Result<Vec<Row>> {
    let python = python::venv_python()?;
    let scale = if opts.quick {
        Scale::QUICK
    } else {
        Scale::FULL
    };
    let inputs = Inputs::generate(&scale, 7);
    let scratch = Scratch::new("kernels")?;
    let dir = scratch.path();
    inputs.write(dir, &scale)?;
    let lof_run = run_lof(&inputs, &scale);
    let stft_run = run_stft(&inputs, &scale)?;
    let linkage_run = run_linkage(&inputs, &scale)?;
    python::run_reference(&python, dir)?;
    let py: PythonTimings =
        serde_json::from_slice(&std::fs::read(dir.join("python_timings.json"))?)
            .context("parsing python_timings.json")?;
    let versions: Vec<String> = py
        .versions
        .iter()
        .map(|(k, v)| format!("{k} {}", v.as_str().unwrap_or("?")))
        .collect();
    eprintln!("kernels: Python side: {}", versions.join(", "));

    let lof_agree = agreement::max_relative_difference(
        &lof_run.1,
        &read(dir, "py_lof_scores", &[scale.lof_pairs])?,
    )?;
    let frames = (scale.stft_len - scale.stft_window) / scale.stft_hop + 1;
    let bins = scale.stft_window / 2 + 1;
    let py_mags = read(
        dir,
        "py_stft_magnitudes",
        &[scale.stft_series, frames, bins],
    )?;
    let stft_agree = agreement::max_error_over_peak(&stft_run.1, &py_mags, frames * bins)?;
    let heights = agreement::merge_height_error(
        &linkage_run.heights,
        &read(dir, "py_linkage_heights", &[scale.linkage_points() - 1])?,
    )?;
    let py_labels: Vec<usize> = read(dir, "py_linkage_labels", &[scale.linkage_points()])?
        .iter()
        .map(|&l| l as usize)
        .collect();
    let ari = agreement::adjusted_rand_index(&linkage_run.labels, &py_labels)?;

    let lof_name = format!(
        "LOF, {} pairs x {}-window look-back x 7 features, k={}",
        scale.lof_pairs, scale.lof_lookback, scale.lof_k
    );
    let stft_name = format!(
        "STFT, {} series x {} samples (window {}, hop {})",
        scale.stft_series, scale.stft_len, scale.stft_window, scale.stft_hop
    );
    let linkage_name = format!(
        "average linkage, {} points x {} features",
        scale.linkage_points(),
        scale.linkage_dim
    );
    let mut rows = Vec::new();
    for (name, reference, ours, theirs) in [
        (
            &lof_name,
            "scikit-learn LocalOutlierFactor",
            lof_run.0,
            py.lof_s,
        ),
        (&stft_name, "scipy.signal.stft", stft_run.0, py.stft_s),
        (
            &linkage_name,
            "scipy pdist + linkage",
            linkage_run.seconds,
            py.linkage_s,
        ),
    ] {
        rows.push(
            Row::new(SECTION, format!("{name}: Rust time"), ours, "s").baseline(format!(
                "{reference}: {} s",
                crate::report::fmt_value(theirs)
            )),
        );
        rows.push(
            Row::new(
                SECTION,
                format!("{name}: Python time / Rust time"),
                theirs / ours,
                "x",
            )
            .at_least(1.0),
        );
    }
    rows.push(
        Row::new(
            SECTION,
            "LOF: max relative score difference vs scikit-learn",
            lof_agree,
            "",
        )
        .at_most(ROUNDING),
    );
    rows.push(
        Row::new(
            SECTION,
            "STFT: max magnitude error / series peak vs scipy",
            stft_agree,
            "",
        )
        .at_most(ROUNDING),
    );
    rows.push(
        Row::new(
            SECTION,
            "linkage: max merge-height error / top height vs scipy",
            heights,
            "",
        )
        .at_most(ROUNDING),
    );
    rows.push(
        Row::new(
            SECTION,
            format!(
                "linkage: adjusted Rand index, rocemesh cap {} vs scipy fcluster maxclust {}",
                scale.linkage_group, scale.linkage_groups
            ),
            ari,
            "",
        )
        .at_least(1.0),
    );
    Ok(rows)
}

/// Median wall time of `repeats` runs of `kernel`, and the last run's result.
fn median_time<T>(repeats: usize, mut kernel: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::with_capacity(repeats);
    let mut result = None;
    for _ in 0..repeats.max(1) {
        let start = Instant::now();
        let out = black_box(kernel());
        times.push(start.elapsed().as_secs_f64());
        result = Some(out);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    (
        median,
        result.unwrap_or_else(|| unreachable!("at least one repeat")),
    )
}

/// Novelty LOF of every pair's query against its look-back, as the short-term detector
/// scores a window (one reused scratch).
fn run_lof(inputs: &Inputs, scale: &Scale) -> (f64, Vec<f64>) {
    median_time(scale.repeats, || {
        let mut scratch = LofScratch::default();
        inputs
            .lof_reference
            .iter()
            .zip(&inputs.lof_query)
            .map(|(r, q)| lof(r, q, scale.lof_k, &mut scratch))
            .collect()
    })
}

/// STFT magnitudes of every series, flattened series-major, frame-major.
fn run_stft(inputs: &Inputs, scale: &Scale) -> Result<(f64, Vec<f64>)> {
    let config = FeatureConfig {
        window: scale.stft_window,
        hop: scale.stft_hop,
        ..FeatureConfig::default()
    };
    let (seconds, mags) = median_time(scale.repeats, || {
        inputs
            .stft_series
            .iter()
            .map(|s| stft_magnitudes(s, &config))
            .collect::<Result<Vec<_>, _>>()
    });
    let flat = mags?.into_iter().flatten().flatten().collect();
    Ok((seconds, flat))
}

/// The linkage kernel's outputs.
struct LinkageRun {
    /// Distance matrix + full dendrogram, median seconds.
    seconds: f64,
    /// Merge heights of the full dendrogram.
    heights: Vec<f64>,
    /// Flat clusters at the group-size cap rocemesh's grouping uses.
    labels: Vec<usize>,
}

/// Full dendrogram (timed, like scipy's) and the capped clustering rocemesh cuts with.
fn run_linkage(inputs: &Inputs, scale: &Scale) -> Result<LinkageRun> {
    let points = &inputs.linkage_points;
    let matrix = || DistanceMatrix::new(points.len(), |i, j| euclidean(&points[i], &points[j]));
    let (seconds, (_, heights)) = median_time(scale.repeats, || {
        agglomerate_with_heights(&matrix(), points.len())
    });
    let labels = agreement::labels(&agglomerate(&matrix(), scale.linkage_group), points.len())?;
    Ok(LinkageRun {
        seconds,
        heights,
        labels,
    })
}

fn euclidean(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt()
}

/// Reads a Python result and checks its shape.
fn read(dir: &Path, name: &str, shape: &[usize]) -> Result<Vec<f64>> {
    let array = npy::read(&dir.join(format!("{name}.npy")))?;
    ensure!(
        array.shape == shape,
        "{name}: shape {:?}, expected {shape:?}",
        array.shape
    );
    Ok(array.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_groups_are_what_the_capped_linkage_finds() {
        let scale = Scale {
            repeats: 1,
            linkage_groups: 8,
            ..Scale::QUICK
        };
        let inputs = Inputs::generate(&scale, 7);
        let run = run_linkage(&inputs, &scale).expect("a partition");
        let truth: Vec<usize> = (0..scale.linkage_points())
            .map(|i| i / scale.linkage_group)
            .collect();
        let ari = agreement::adjusted_rand_index(&run.labels, &truth).expect("same length");
        assert_eq!(ari, 1.0);
        assert_eq!(run.heights.len(), scale.linkage_points() - 1);
        assert!(run.heights.iter().all(|h| h.is_finite() && *h > 0.0));
    }
}
