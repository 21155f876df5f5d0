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
        (
            "2048 (TP8 PP8 DP32)",
            SyntheticJob {
                samples: 600,
                ..SyntheticJob::new(8, 8, 32)
            },
        ),
        (
            "2048 (TP16 PP4 DP32)",
            SyntheticJob {
                samples: 600,
                ..SyntheticJob::new(16, 4, 32)
            },
        ),
    ];
    let config = InferenceConfig::default();
    println!(
        "{:<28} {:>8} {:>10} {:>9} {:>10} {:>10} {:>9} {:>9} {:>8} {:>8}",
        "job (RNICs)",
        "samples",
        "infer ms",
        "accuracy",
        "DP/TP/PP",
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
        let (accuracy, degrees, skeleton) = match &inference.outcome {
            Outcome::Skeleton { structure, pairs } => (
                grouping_accuracy(&trace.groups, &structure.groups),
                format!("{}/{}/{}", structure.dp, structure.tp, structure.pp),
                pairs.len(),
            ),
            Outcome::Fallback { reason } => {
                println!("{name}: fell back: {reason}");
                (0.0, "-".to_string(), inference.basic.len())
            }
        };
        let full = inference.full_mesh_len as f64;
        println!(
            "{:<28} {:>8} {:>10.1} {:>8.1}% {:>10} {:>10} {:>9} {:>9} {:>7.2}x {:>7.2}%",
            name,
            job.samples,
            best,
            accuracy * 100.0,
            degrees,
            inference.full_mesh_len,
            inference.basic.len(),
            skeleton,
            full / inference.basic.len() as f64,
            (1.0 - skeleton as f64 / full) * 100.0
        );
    }
    robustness(&config);
}

/// Fig. 8 job under growing noise and jitter, five seeds each: how often a
/// skeleton is accepted and how exact its groups are when it is.
fn robustness(config: &InferenceConfig) {
    println!();
    println!(
        "{:<44} {:>9} {:>16} {:>13}",
        "Fig. 8 job, 5 seeds", "accepted", "exact groups", "fallbacks"
    );
    for (noise, iteration_jitter_s, transfer_jitter_s) in [
        (0.05, 0.2, 0.1),
        (0.1, 0.3, 0.2),
        (0.2, 0.3, 0.2),
        (0.3, 0.5, 0.3),
    ] {
        let mut accepted = 0;
        let mut exact = Vec::new();
        let mut reasons = Vec::new();
        for seed in 1..=5 {
            let job = SyntheticJob {
                noise,
                iteration_jitter_s,
                transfer_jitter_s,
                seed,
                ..SyntheticJob::fig8()
            };
            let Ok(trace) = job.generate() else { continue };
            match infer(&trace.observations, config).map(|i| i.outcome) {
                Ok(Outcome::Skeleton { structure, .. }) => {
                    accepted += 1;
                    exact.push(grouping_accuracy(&trace.groups, &structure.groups));
                }
                Ok(Outcome::Fallback { reason }) => reasons.push(reason.to_string()),
                Err(e) => reasons.push(e.to_string()),
            }
        }
        let mean = if exact.is_empty() {
            f64::NAN
        } else {
            exact.iter().sum::<f64>() / exact.len() as f64
        };
        let first_reason = reasons
            .first()
            .map(|r| r.split(" (").next().unwrap_or(r))
            .unwrap_or("-");
        println!(
            "{:<44} {:>7}/5 {:>15.1}% {:>13}",
            format!("noise {noise}, jitter {iteration_jitter_s} s / {transfer_jitter_s} s"),
            accepted,
            mean * 100.0,
            format!("{} ({first_reason})", reasons.len())
        );
    }
}
