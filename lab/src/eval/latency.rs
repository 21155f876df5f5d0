//! `rocemesh-lab eval --suite latency`: the short-term (LOF) and long-term (log-normal) latency
//! detectors over a synthetic mixed suite of RNIC pairs (stable, periodic bursts, steps,
//! steps under bursts, slow creep) with labelled windows; precision and recall per kind.

use anyhow::Result;
use rocemesh_anomaly::{SuiteConfig, run_suite};
use serde_json::{Value, json};

/// Runs the suite and returns `{"cases": [...], "summary": {...}}`.
pub(super) fn run() -> Result<Value> {
    let report = run_suite(&SuiteConfig::default())?;
    let cases: Vec<Value> = report
        .per_kind
        .iter()
        .map(|(kind, s)| {
            json!({
                "kind": format!("{kind:?}"),
                "faults": s.events,
                "detected": s.detected,
                "true_alarms": s.true_alarms,
                "false_alarms": s.false_alarms,
                "precision": s.precision(),
                "recall": s.recall(),
            })
        })
        .collect();
    Ok(json!({
        "cases": cases,
        "summary": {
            "precision": report.overall.precision(),
            "recall": report.overall.recall(),
            "short_term_alarms": report.short_term_alarms,
            "long_term_alarms": report.long_term_alarms,
            "mean_detection_delay_windows": report.mean_detection_delay,
            "config": serde_json::to_value(report.config)?,
        }
    }))
}
