//! `rocemesh-lab eval --suite tasks` as the binary runs it (no root: simulated jobs): the seed
//! given is the seed reported, every job and class is in the JSON report, the text report
//! is the table, and a suite of no jobs is refused.

mod support;

use support::bin;

#[test]
fn the_task_suite_reports_every_class_for_the_seed_given() {
    let seed = rocemesh_proto::now_unix_ns() as u64;
    eprintln!("seed {seed}");
    let report = support::eval_report(bin().args([
        "eval",
        "--suite",
        "tasks",
        "--random",
        "30",
        "--seed",
        &seed.to_string(),
        "--json",
    ]));
    assert_eq!(report["seed"].as_u64(), Some(seed));
    assert_eq!(report["jobs"].as_array().map(Vec::len), Some(30));
    for class in [
        "healthy",
        "communication_slow",
        "non_communication_slow",
        "communication_hang",
        "non_communication_hang",
    ] {
        let c = &report["classes"][class];
        assert!(c["windows"].as_u64() > Some(0), "{class}: {c}");
        assert!(c["accuracy"].as_f64().is_some(), "{class}: {c}");
    }
    let text = bin()
        .args(["eval", "--suite", "tasks", "--random", "6", "--seed", "1"])
        .output()
        .unwrap();
    assert!(text.status.success());
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(
        out.starts_with("class ") && out.contains("\nattribution "),
        "{out}"
    );
    let none = bin()
        .args(["eval", "--suite", "tasks", "--random", "0"])
        .output()
        .unwrap();
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("--random must be at least 1"));
}
