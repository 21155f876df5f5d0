//! The quick localization suite, as CI runs it (root only: it builds namespace fabrics).
//! Asserts the targets on real faults in a real fabric with real agents.

mod support;

#[test]
fn quick_suite_meets_the_localization_targets() {
    if !support::is_root() {
        eprintln!(
            "skipping quick_suite_meets_the_localization_targets: needs root (network namespaces)"
        );
        return;
    }
    // Timing targets are about the product: test the release binary when the test script
    // built one (ROCEMESH_EVAL_BIN), else this build's binary.
    let mut cmd = match std::env::var_os("ROCEMESH_EVAL_BIN") {
        Some(path) => std::process::Command::new(path),
        None => support::bin(),
    };
    let report = support::eval_report(
        "eval-quick",
        cmd.args([
            "eval",
            "--quick",
            "--json",
            "--prefix",
            "rmci",
            "--baseline-secs",
            "8",
            "--fault-secs",
            "12",
            "--recovery-secs",
            "10",
        ]),
    );
    let s = &report["summary"];
    let f = |k: &str| {
        s[k].as_f64()
            .unwrap_or_else(|| panic!("summary.{k} missing: {s}"))
    };
    assert!(report["scenarios"].as_array().unwrap().len() >= 7);
    assert!(f("precision") >= 0.99, "precision {s}");
    assert!(f("recall") >= 0.99, "recall {s}");
    assert!(f("top1_accuracy") >= 0.95, "top-1 {s}");
    assert!(
        f("hard_fault_median_time_to_localize_s") <= 5.0,
        "hard faults {s}"
    );
}
