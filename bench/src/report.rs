//! The one table every section fills: a figure, its target and a same-run baseline.

use serde::Serialize;
use std::fmt::Write as _;

/// One measured figure of the benchmark table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// Section the figure belongs to (e.g. "controller", "analyzer", "agent").
    pub section: &'static str,
    /// What was measured, with its scale ("pinglist generation, 50k RNICs").
    pub metric: String,
    /// Measured value.
    pub value: f64,
    /// Unit of `value` ("s", "results/s", "MB", "%").
    pub unit: &'static str,
    /// The target, as text ("<= 2 s"); empty when there is none.
    pub target: String,
    /// Whether `value` meets `target` (None when there is no target).
    pub met: Option<bool>,
    /// Baseline measured in the same run, as text ("Alg. 1: 0.82"); empty when none.
    pub baseline: String,
}

impl Row {
    /// A figure without target or baseline.
    pub(crate) fn new(
        section: &'static str,
        metric: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) -> Self {
        Self {
            section,
            metric: metric.into(),
            value,
            unit,
            target: String::new(),
            met: None,
            baseline: String::new(),
        }
    }

    /// Sets the target: `value` must be at most `limit`.
    pub(crate) fn at_most(mut self, limit: f64) -> Self {
        self.target = format!("<= {} {}", fmt_value(limit), self.unit);
        self.met = Some(self.value <= limit);
        self
    }

    /// Sets the target: `value` must be at least `limit`.
    pub(crate) fn at_least(mut self, limit: f64) -> Self {
        self.target = format!(">= {} {}", fmt_value(limit), self.unit);
        self.met = Some(self.value >= limit);
        self
    }

    /// Names the same-run baseline this figure compares with.
    pub(crate) fn baseline(mut self, text: impl Into<String>) -> Self {
        self.baseline = text.into();
        self
    }
}

/// A value with a precision that fits its magnitude.
pub(crate) fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || (0.01..1e6).contains(&a) {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.3e}")
    }
}

/// The rows as a Markdown table (the format of docs/benchmarks.md).
pub(crate) fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| section | metric | value | target | met | baseline (same run) |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} {} | {} | {} | {} |",
            r.section,
            r.metric,
            fmt_value(r.value),
            r.unit,
            r.target,
            met,
            r.baseline
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_judged_and_rendered() {
        let fast = Row::new("controller", "pinglist, 50k RNICs", 0.8, "s").at_most(2.0);
        let slow = Row::new("analyzer", "ingest", 1.5e6, "results/s").at_least(2e6);
        assert_eq!(fast.met, Some(true));
        assert_eq!(slow.met, Some(false));
        let table = markdown(&[fast, slow.baseline("Alg. 1: 3e6")]);
        assert!(
            table.contains("| controller | pinglist, 50k RNICs | 0.8 s | <= 2 s | yes |"),
            "{table}"
        );
        assert!(
            table.contains("| 1.500e6 results/s | >= 2.000e6 results/s | **no** | Alg. 1: 3e6 |"),
            "{table}"
        );
    }
}
