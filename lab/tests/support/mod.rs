//! Helpers for the `rocemesh-lab` binary's tests: real processes, JSON reports.
#![allow(dead_code)]

use std::process::Command;

/// The lab binary under test; the agents its labs start run from the `rocemesh` binary
/// beside it.
pub(crate) fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rocemesh-lab"));
    c.env("RUST_LOG", "warn");
    c
}

/// The seed of a randomized suite: `ROCEMESH_EVAL_SEED` when set (a replay), else a fresh
/// one; printed with how to replay it.
pub(crate) fn eval_seed(suite: &str) -> u64 {
    let seed = match std::env::var("ROCEMESH_EVAL_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("ROCEMESH_EVAL_SEED={s:?} is not a number")),
        Err(_) => rocemesh_proto::now_unix_ns() as u64,
    };
    eprintln!("{suite} seed {seed} (replay: ROCEMESH_EVAL_SEED={seed})");
    seed
}

/// The lab binary the namespace suites run: `ROCEMESH_EVAL_BIN` (the test command points
/// it at a release build for seconds-scale timing), else the one under test.
pub(crate) fn eval_bin() -> Command {
    match std::env::var_os("ROCEMESH_EVAL_BIN") {
        Some(path) => Command::new(path),
        None => bin(),
    }
}

/// Whether the test runs as root (namespace fabrics need it).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs an `eval ... --json` command, asserts it succeeded and returns its report
/// (printed, for the test log).
pub(crate) fn eval_report(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().expect("run rocemesh-lab eval");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "eval failed: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {stderr}"));
    eprintln!("{}", serde_json::to_string_pretty(&report).expect("JSON"));
    report
}
