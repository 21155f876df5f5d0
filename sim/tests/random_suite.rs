//! A random suite of lab-sized simulated scenarios on a fresh seed every run (printed;
//! `ROCEMESH_EVAL_SEED=<seed>` replays it, `rocemesh-lab sim --random 30 --scale lab --seed
//! <seed> --only <i>` replays one scenario), scored by the shared scorer against floors
//! the current engine reaches on every seed measured (docs/localization.md).

use rocemesh_sim::random::{self, Scale, Totals};

const SCENARIOS: u32 = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_random_suite_meets_the_floors() {
    let seed = rocemesh_sim::rng::suite_seed();
    eprintln!("random suite seed {seed} (replay: ROCEMESH_EVAL_SEED={seed})");
    let mut outcomes = Vec::new();
    for i in 0..SCENARIOS {
        let o = random::run(seed, i, Scale::Lab).await.unwrap();
        if !o.score.correct {
            eprintln!(
                "#{i} wrong: truth {:?} found {:?} missed {:?}",
                o.truth
                    .iter()
                    .map(|t| t.component.label())
                    .collect::<Vec<_>>(),
                o.score.found,
                o.score.missed
            );
        }
        outcomes.push(o);
    }
    let t = Totals::of(&outcomes);
    eprintln!("analyzer {}", t.analyzer.line());
    eprintln!("alg1     {}", t.baseline.line());
    let a = &t.analyzer;
    assert_eq!(a.scenarios, SCENARIOS as usize);
    assert!(a.precision >= PRECISION_FLOOR, "seed {seed}: {}", a.line());
    assert!(
        a.recall.unwrap_or(1.0) >= RECALL_FLOOR,
        "seed {seed}: {}",
        a.line()
    );
    assert!(
        a.top1_accuracy.unwrap_or(1.0) >= TOP1_FLOOR,
        "seed {seed}: {}",
        a.line()
    );
}

/// Floors below what the engine reaches on every seed measured: over the 30-scenario
/// suites of seeds 3001–3020 its lowest were precision 0.64, recall 0.64, top-1 0.73
/// (docs/localization.md); a margin of ~0.15 keeps a fresh seed from flaking.
const PRECISION_FLOOR: f64 = 0.50;
const RECALL_FLOOR: f64 = 0.50;
const TOP1_FLOOR: f64 = 0.55;

/// A seed replays its runs exactly: virtual time starts at the same instant every run
/// (period and bucket boundaries, the controller's pinglist rotation), so a failure
/// printed with its seed and index is the failure `--only` shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_replays_exactly() {
    let seed = rocemesh_sim::rng::suite_seed();
    eprintln!("replay seed {seed} (replay: ROCEMESH_EVAL_SEED={seed})");
    for i in 0..4 {
        let twice = [
            random::run(seed, i, Scale::Lab).await.unwrap(),
            random::run(seed, i, Scale::Lab).await.unwrap(),
        ]
        .map(|o| serde_json::to_string(&(o.truth, o.score, o.baseline)).unwrap());
        assert_eq!(twice[0], twice[1], "seed {seed} scenario {i}");
    }
}
