//! Helpers for the `rocemesh-lab` binary's tests: real processes, JSON reports.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
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

/// Runs an `eval ... --json` command, asserts it succeeded and returns its report, kept
/// whole in `target/test-artifacts/<name>.json` (a failing test's log stays short enough
/// to show its assertion).
pub(crate) fn eval_report(name: &str, cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().expect("run rocemesh-lab eval");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "eval failed: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {stderr}"));
    let path = artifact(&format!("{name}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&report).expect("JSON"))
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    eprintln!("report: {}", path.display());
    report
}

/// `target/test-artifacts/<name>` (the directory created), where reports are kept for
/// people.
fn artifact(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).with_file_name("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir.join(name)
}
