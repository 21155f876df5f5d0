//! Inference time, grouping accuracy and pinglist reduction for synthetic
//! jobs of 128, 512 and 2,048 RNICs (single thread). `cargo bench -p
//! rocemesh-skeleton`.

use std::time::Instant;

use rocemesh_skeleton::{InferenceConfig, Outcome, SyntheticJob, grouping_accuracy, infer};

fn main() {
    let jobs = [
        ("128 (TP8 PP4 DP4)", SyntheticJob::new(8, 4, 4)),
        ("512 (TP8 PP8 DP8, Fig. 8)", SyntheticJob::fig8()),
        ("2048 (TP8 PP8 DP32)", SyntheticJob::new(8, 8, 32)),
    ];
    let config = InferenceConfig::default();
    println!(
        "{:<28} {:>8} {:>10} {:>9} {:>10} {:>9} {:>9} {:>8} {:>8}",
        "job (RNICs)",
        "samples",
        "infer ms",
        "accuracy",
        "full mesh",
        "basic",
        "skeleton",
        "basic x",
        "skel -%"
    );
    for (name, job) in jobs {
        let trace = match job.generate() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{name}: {e}");
                continue;
            }
        };
        // Best of three runs: the figure is the algorithm, not the scheduler.
        let mut best = f64::MAX;
        let mut result = None;
        for _ in 0..3 {
            let start = Instant::now();
            let r = infer(&trace.observations, &config);
            best = best.min(start.elapsed().as_secs_f64() * 1e3);
            result = Some(r);
        }
        let Some(Ok(inference)) = result else {
            eprintln!("{name}: inference failed: {result:?}");
            continue;
        };
        let (accuracy, skeleton) = match &inference.outcome {
            Outcome::Skeleton { structure, pairs } => (
                grouping_accuracy(&trace.groups, &structure.groups),
                pairs.len(),
            ),
            Outcome::Fallback(reason) => {
                println!("{name}: fell back: {reason}");
                (0.0, inference.basic.len())
            }
        };
        let full = inference.full_mesh_len as f64;
        println!(
            "{:<28} {:>8} {:>10.1} {:>8.1}% {:>10} {:>9} {:>9} {:>7.2}x {:>7.2}%",
            name,
            job.samples,
            best,
            accuracy * 100.0,
            inference.full_mesh_len,
            inference.basic.len(),
            skeleton,
            full / inference.basic.len() as f64,
            (1.0 - skeleton as f64 / full) * 100.0
        );
    }
}
