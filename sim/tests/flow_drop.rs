//! A dropped 5-tuple in the simulator: resolved against the agents' real pinglists when
//! injected, it times out exactly that 5-tuple's probes (or ACKs), and its truth is
//! flow-level: only a flow problem listing the dropping switch counts.

use rocemesh_analyzer::AnalyzerConfig;
use rocemesh_controller::ControllerConfig;
use rocemesh_proto::api::{ComponentKind, ProblemKind};
use rocemesh_sim::inproc::InProcess;
use rocemesh_sim::{FaultSpec, Shape, Sim, SimConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_five_tuple_times_out_only_its_probes_and_is_a_flow_level_truth() {
    let shape = Shape::LeafSpine {
        tors: 3,
        spines: 2,
        hosts_per_tor: 2,
        rnics_per_host: 1,
    };
    for (seed, ack, hop) in [(3, false, 1), (4, true, 0), (5, true, 2)] {
        let sim = Sim::new(SimConfig::new(shape.clone(), seed)).unwrap();
        let mut run = InProcess::start(sim, ControllerConfig::default(), AnalyzerConfig::default())
            .await
            .unwrap();
        run.register_all().await.unwrap();
        run.run_for(5_000).await.unwrap();
        let before = run.sim().stats();
        assert_eq!(before.timeouts, 0, "a healthy fabric loses nothing");
        let onset = run.now_ms();
        let truth = run
            .sim_mut()
            .inject(
                FaultSpec::FlowDrop {
                    prober: "h1/r0".into(),
                    pick: 7,
                    ack,
                    hop,
                },
                onset,
                None,
            )
            .unwrap();
        assert!(truth.flow_level, "{truth:?}");
        assert_eq!(truth.kind, ProblemKind::FlowFault);
        assert_eq!(truth.component.kind, ComponentKind::Switch);
        assert!(
            !truth.equivalent.is_empty(),
            "the switch's links on the path"
        );
        assert!(
            truth
                .equivalent
                .iter()
                .all(|l| l.kind == ComponentKind::Link && l.name.contains(&truth.component.name)),
            "{truth:?}"
        );
        run.run_for(5_000).await.unwrap();
        let after = run.sim().stats();
        let lost = after.timeouts - before.timeouts;
        let probes = after.probes - before.probes;
        // One 5-tuple of one RNIC's inter-ToR list: some probes, a small share of all.
        assert!(lost > 0, "seed {seed}: nothing dropped");
        assert!(lost * 5 < probes, "seed {seed}: {lost} of {probes} lost");
    }
}
