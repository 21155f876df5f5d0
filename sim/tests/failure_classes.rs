//! The failure classes localization once got wrong, each on a fabric and at a position
//! drawn from a fresh seed every run (printed; `ROCEMESH_EVAL_SEED=<seed>` replays
//! them), never the components any fixed scenario names.

use rocemesh_analyzer::AnalyzerConfig;
use rocemesh_controller::ControllerConfig;
use rocemesh_proto::api::LinkDirection;
use rocemesh_sim::faults::FaultSpec;
use rocemesh_sim::rng::{Rng, hash};
use rocemesh_sim::scenario::{Scenario, run_in_process};
use rocemesh_sim::score::Score;
use rocemesh_sim::sim::SimConfig;
use rocemesh_sim::topology::{Fabric, Shape, Tier};

fn between(rng: &mut Rng, lo: u32, hi: u32) -> u32 {
    lo + rng.below(u64::from(hi - lo + 1)) as u32
}

fn leaf_spine(rng: &mut Rng, tors: (u32, u32), spines: (u32, u32)) -> Shape {
    Shape::LeafSpine {
        tors: between(rng, tors.0, tors.1),
        spines: between(rng, spines.0, spines.1),
        hosts_per_tor: between(rng, 2, 3),
        rnics_per_host: between(rng, 1, 2),
    }
}

/// Runs the faults `faults` draws on the fabric `shape` draws, 30 s after a 20 s
/// warm-up, from the run's seed salted with `class`; returns the score and what ran.
async fn run(
    class: &str,
    shape: impl FnOnce(&mut Rng) -> Shape,
    faults: impl FnOnce(&mut Rng, &Fabric) -> Vec<FaultSpec>,
) -> (Score, String) {
    let seed = rocemesh_sim::rng::suite_seed();
    eprintln!("{class}: seed {seed} (replay: ROCEMESH_EVAL_SEED={seed})");
    let salt = class
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31) ^ u64::from(b));
    let mut rng = Rng::new(hash(&[seed, salt]));
    let shape = shape(&mut rng);
    let fabric = Fabric::new(shape.clone()).unwrap();
    let faults = faults(&mut rng, &fabric);
    let what = format!("seed {seed}: {shape:?} {faults:?}");
    eprintln!("{what}");
    let s = Scenario {
        config: SimConfig::new(shape, seed),
        faults,
        warmup_s: 20,
        seconds: 50,
    };
    let r = run_in_process(&s, ControllerConfig::default(), AnalyzerConfig::default())
        .await
        .unwrap();
    eprintln!("{}: found {:?}", r.score.summary(), r.score.found);
    (r.score, what)
}

fn pick_switch(rng: &mut Rng, f: &Fabric, tier: Tier) -> String {
    let of_tier: Vec<_> = f.switches.iter().filter(|s| s.tier == tier).collect();
    of_tier[rng.below(of_tier.len() as u64) as usize]
        .name
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_down_at_its_lower_end_is_found_first() {
    let (score, what) = run(
        "lower end",
        |rng| leaf_spine(rng, (3, 6), (2, 4)),
        |rng, f| {
            let l = &f.links[rng.below(f.links.len() as u64) as usize];
            vec![FaultSpec::LinkDown {
                link: l.name.clone(),
                at: Some(f.switches[l.lower as usize].name.clone()),
            }]
        },
    )
    .await;
    // The link is found and is the most confident verdict (a sibling link beside it,
    // in about one run in four, is a known weakness: docs/localization.md).
    assert_eq!(score.recall, Some(1.0), "{what}: {score:?}");
    assert_eq!(score.top1, Some(true), "{what}: {score:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_tuple_dropped_on_its_ack_path_is_a_flow_problem() {
    let (score, what) = run(
        "flow drop",
        |rng| leaf_spine(rng, (3, 5), (2, 4)),
        |rng, f| {
            vec![FaultSpec::FlowDrop {
                prober: f.rnic_name(rng.below(f.rnics.len() as u64) as u32),
                pick: rng.next_u64() as u32,
                ack: true,
                hop: rng.below(5) as u32,
            }]
        },
    )
    .await;
    // Counted right only as a flow problem listing the true switch among its candidates.
    assert_eq!(score.recall, Some(1.0), "{what}: {score:?}");
    assert!(
        score.found.iter().all(|f| f.starts_with("flow:")),
        "{what}: no guessed component: {score:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_dropping_one_percent_of_everything_is_named_first() {
    let (score, what) = run(
        "switch loss",
        |rng| leaf_spine(rng, (4, 6), (3, 4)),
        |rng, f| {
            vec![FaultSpec::SwitchLoss {
                switch: pick_switch(rng, f, Tier::Spine),
                percent: 1.0,
            }]
        },
    )
    .await;
    // The switch is named and is the most confident verdict (one of its links reported
    // beside it, before the switch's evidence sufficed, is a known weakness).
    assert_eq!(score.recall, Some(1.0), "{what}: {score:?}");
    assert_eq!(score.top1, Some(true), "{what}: {score:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_percent_loss_on_one_link_of_a_three_spine_fabric_is_found_promptly() {
    let (score, what) = run(
        "two percent",
        |rng| leaf_spine(rng, (3, 5), (3, 3)),
        |rng, f| {
            vec![FaultSpec::LinkLoss {
                link: f.links[rng.below(f.links.len() as u64) as usize]
                    .name
                    .clone(),
                percent: 2.0,
                toward: None,
            }]
        },
    )
    .await;
    assert!(score.correct, "{what}: {score:?}");
    assert!(
        score.time_to_localize_s.is_some_and(|s| s <= 20.0),
        "{what}: {score:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_adding_tens_of_microseconds_is_found_as_high_latency() {
    let (score, what) = run("switch delay", lab_shape, |rng, f| {
        let tier = if rng.chance(0.5) {
            Tier::Tor
        } else {
            Tier::Spine
        };
        vec![FaultSpec::SwitchDelay {
            switch: pick_switch(rng, f, tier),
            delay_us: f64::from(between(rng, 2, 10) * 10),
        }]
    })
    .await;
    // The simulator times probes with NIC timestamps, whose jitter is the fabric's
    // queueing (congestion episodes and training bursts included): a delay of 20 µs
    // is named, and nothing else is.
    assert_eq!(score.recall, Some(1.0), "{what}: {score:?}");
    assert_eq!(score.precision, Some(1.0), "{what}: {score:?}");
}

/// Runs `draws` draws of `class` (each its own fabric and fault, salted by its index)
/// and returns what ran of those `wrong` says are wrong.
async fn wrong_draws(
    class: &str,
    draws: u32,
    shape: impl Fn(&mut Rng) -> Shape,
    faults: impl Fn(&mut Rng, &Fabric) -> Vec<FaultSpec>,
    wrong: impl Fn(&Score) -> bool,
) -> Vec<String> {
    let mut bad = Vec::new();
    for i in 0..draws {
        let (score, what) = run(&format!("{class} {i}"), &shape, &faults).await;
        if wrong(&score) {
            bad.push(format!("{what}: {score:?}"));
        }
    }
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lossy_tor_above_two_rnics_is_the_switch_not_one_of_them() {
    // The two RNICs of the one host under the ToR: their ToR-mesh probes are each
    // other's and single out neither. Measured over 120 draws: 7 wrong (an RNIC named
    // beside the switch by tomography), 42 before the ToR-mesh rule stopped judging an
    // RNIC with one peer under its ToR; at most 3 wrong of 12 fails about one run in 250.
    let bad = wrong_draws(
        "tor above two",
        12,
        |rng| Shape::LeafSpine {
            tors: between(rng, 3, 5),
            spines: between(rng, 2, 4),
            hosts_per_tor: 1,
            rnics_per_host: 2,
        },
        |rng, f| {
            vec![FaultSpec::SwitchLoss {
                switch: pick_switch(rng, f, Tier::Tor),
                percent: f64::from(between(rng, 15, 30)) / 10.0,
            }]
        },
        |score| score.recall != Some(1.0) || score.found.iter().any(|f| f.starts_with("rnic:")),
    )
    .await;
    assert!(bad.len() <= 3, "{bad:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_tuple_dropped_beside_a_lossy_link_is_its_own_flow_problem() {
    // Both found: the dropped 5-tuple is not absorbed into the link's fault. Measured: 1
    // draw of 46 wrong; at most 2 of 12 fails about one run in 400.
    let bad = wrong_draws(
        "drop beside loss",
        12,
        |rng| leaf_spine(rng, (3, 5), (2, 4)),
        |rng, f| {
            vec![
                FaultSpec::LinkLoss {
                    link: f.links[rng.below(f.links.len() as u64) as usize]
                        .name
                        .clone(),
                    percent: f64::from(between(rng, 10, 30)) / 10.0,
                    toward: None,
                },
                FaultSpec::FlowDrop {
                    prober: f.rnic_name(rng.below(f.rnics.len() as u64) as u32),
                    pick: rng.next_u64() as u32,
                    ack: rng.chance(0.5),
                    hop: rng.below(5) as u32,
                },
            ]
        },
        |score| score.recall != Some(1.0) || !score.found.iter().any(|f| f.starts_with("flow:")),
    )
    .await;
    assert!(bad.len() <= 2, "{bad:#?}");
}

/// A lab-sized leaf-spine or rail-optimized fabric.
fn lab_shape(rng: &mut Rng) -> Shape {
    if rng.below(3) == 0 {
        Shape::Rail {
            groups: between(rng, 2, 3),
            hosts_per_group: between(rng, 2, 3),
            rails: 2,
            spines: between(rng, 2, 4),
        }
    } else {
        leaf_spine(rng, (3, 6), (2, 4))
    }
}

/// Draw `i` of a link loss of 1-5 %, one way (towards a drawn end) or both: the
/// scenario's score and the direction that must be named.
async fn lossy_link(i: u32, one_way: bool) -> (Score, Option<LinkDirection>, String) {
    let class = format!("{} {i}", if one_way { "one way" } else { "both ways" });
    let mut want = None;
    let (score, what) = run(&class, lab_shape, |rng, f| {
        let l = &f.links[rng.below(f.links.len() as u64) as usize];
        let ends = [
            &f.switches[l.lower as usize].name,
            &f.switches[l.upper as usize].name,
        ];
        let up = rng.below(2) as usize;
        let toward = one_way.then(|| ends[up].clone());
        want = one_way.then(|| LinkDirection {
            from: ends[1 - up].clone(),
            to: ends[up].clone(),
        });
        vec![FaultSpec::LinkLoss {
            link: l.name.clone(),
            percent: f64::from(between(rng, 10, 50)) / 10.0,
            toward,
        }]
    })
    .await;
    (score, want, what)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_link_loss_names_its_direction_and_symmetric_loss_none() {
    // One way: the link is found every time and never given the wrong direction; the
    // direction is named on at least a third of the draws. Measured: 6-12 of 12 over 25
    // runs, 9.1 on average (p ~ 0.76 per draw), so "at least half" fails about one run in
    // 90 and "at least 4" about one in 3,500. On a thinly probed link, or at 1-1.5 % loss,
    // the probes crossing it the other way only may not give the direction its prior over
    // both within the run (docs/localization.md, "Link direction").
    let draws = 12;
    let mut unnamed = Vec::new();
    for i in 0..draws {
        let (score, want, what) = lossy_link(i, true).await;
        assert_eq!(score.recall, Some(1.0), "{what}: {score:?}");
        let got = &score.outcomes[0].direction;
        assert!(
            got.is_none() || *got == want,
            "{what}: named {got:?}, the loss is {want:?}"
        );
        if got.is_none() {
            unnamed.push(what);
        }
    }
    eprintln!(
        "direction named on {} of {draws} one-way draws",
        draws as usize - unnamed.len()
    );
    assert!(
        3 * unnamed.len() <= 2 * draws as usize,
        "no direction named: {unnamed:#?}"
    );
    // Both ways: found, and no direction named.
    for i in 0..4 {
        let (score, _, what) = lossy_link(i, false).await;
        assert_eq!(score.recall, Some(1.0), "{what}: {score:?}");
        let got = &score.outcomes[0].direction;
        assert_eq!(*got, None, "{what}: named {got:?} for a loss both ways");
    }
}
