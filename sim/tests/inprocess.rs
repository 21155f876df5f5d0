//! A 1,024-RNIC leaf-spine fabric driving the real controller and analyzer in process:
//! a fault-free run reports nothing, a link going down is localized to that link, and the
//! score follows the truth it is handed (never assumed).

use rocemesh_analyzer::AnalyzerConfig;
use rocemesh_controller::ControllerConfig;
use rocemesh_proto::api::{ComponentKind, ProblemKind};
use rocemesh_sim::inproc::InProcess;
use rocemesh_sim::scenario::{Scenario, run_in_process};
use rocemesh_sim::score::score;
use rocemesh_sim::score::{Component, Truth};
use rocemesh_sim::{FaultSpec, Shape, Sim, SimConfig};

fn shape() -> Shape {
    Shape::LeafSpine {
        tors: 16,
        spines: 4,
        hosts_per_tor: 8,
        rnics_per_host: 8,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_free_run_reports_nothing() {
    let s = Scenario {
        config: SimConfig::new(shape(), 11),
        faults: Vec::new(),
        warmup_s: 8,
        seconds: 20,
    };
    let r = run_in_process(&s, ControllerConfig::default(), AnalyzerConfig::default())
        .await
        .unwrap();
    assert_eq!(r.rnics, 1_024);
    assert!(r.stats.probes > 50_000, "{:?}", r.stats);
    assert!(r.stats.traces > 1_000, "{:?}", r.stats);
    assert!(
        r.score.found.is_empty(),
        "false alarms: {:?}",
        r.score.found
    );
    assert!(r.baseline.found.is_empty(), "{:?}", r.baseline.found);
    assert_eq!(
        r.timing.records, r.stats.probes,
        "every result reached the analyzer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_down_is_localized_to_that_link_and_scored_against_the_truth() {
    let sim = Sim::new(SimConfig::new(shape(), 7)).unwrap();
    let mut run = InProcess::start(sim, ControllerConfig::default(), AnalyzerConfig::default())
        .await
        .unwrap();
    run.register_all().await.unwrap();
    run.run_for(8_000).await.unwrap();
    let onset = run.now_ms();
    let truth = run
        .sim_mut()
        .inject(
            FaultSpec::LinkDown {
                link: "t3-s1".into(),
                at: None,
            },
            onset,
            None,
        )
        .unwrap();
    assert_eq!(
        (
            truth.kind,
            truth.component.kind,
            truth.component.name.as_str()
        ),
        (ProblemKind::LinkFault, ComponentKind::Link, "t3-s1")
    );
    run.run_for(12_000).await.unwrap();
    let s = run.score(onset);
    assert_eq!(s.precision, Some(1.0), "found {:?}", s.found);
    assert_eq!(s.recall, Some(1.0), "missed {:?}", s.missed);
    assert_eq!(s.top1, Some(true));
    let t = s.time_to_localize_s.unwrap();
    assert!(t > 0.0 && t <= 10.0, "localized after {t} s");
    // The same problems against a wrong truth (the neighbouring link) score below 1.
    let wrong = Truth {
        component: Component {
            kind: ComponentKind::Link,
            name: "t3-s2".into(),
        },
        ..truth
    };
    let w = score(&[wrong], &run.problems(), onset);
    assert!(w.recall < Some(1.0) && w.precision < Some(1.0), "{w:?}");
    // Algorithm 1 saw the same data.
    let b = run.baseline_score(onset);
    assert!(b.recall.is_some(), "{b:?}");
}
