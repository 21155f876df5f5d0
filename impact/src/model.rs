//! JSON bodies of the impact routes (request validation included), shared with the CLI.

use rocemesh_proto::api::Problem;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Longest metric name.
pub const MAX_METRIC_NAME: usize = 64;
/// How far in the future a sample's `at_ms` may lie (clock skew), ms.
pub const MAX_FUTURE_MS: i64 = 5 * 60_000;

/// `POST /api/v1/tasks/{id}/metrics`: one performance sample of a task.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricSample {
    /// Metric name, e.g. `throughput` (letters, digits, `_ . : -`).
    pub name: String,
    /// Value (finite).
    pub value: f64,
    /// When it was measured, ms since the Unix epoch (default: when received).
    #[serde(default)]
    pub at_ms: Option<i64>,
}

impl MetricSample {
    /// The sample's time (received at `now_ms` when it names none), or why it is refused.
    pub fn validate(&self, now_ms: i64) -> Result<i64, String> {
        check_metric_name(&self.name)?;
        if !self.value.is_finite() {
            return Err(format!("value must be a finite number, got {}", self.value));
        }
        let at = self.at_ms.unwrap_or(now_ms);
        if at < 0 {
            return Err(format!("at_ms must not be negative, got {at}"));
        }
        if at > now_ms.saturating_add(MAX_FUTURE_MS) {
            return Err(format!(
                "at_ms {at} is more than {MAX_FUTURE_MS} ms in the future"
            ));
        }
        Ok(at)
    }
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
    if name.is_empty() || name.len() > MAX_METRIC_NAME || !name.chars().all(ok_char) {
        return Err(format!(
            "metric name must be 1 to {MAX_METRIC_NAME} of [A-Za-z0-9_.:-], got {name:?}"
        ));
    }
    Ok(())
}

fn default_true() -> bool {
    true
}

fn default_tolerable() -> f64 {
    0.1
}

/// `PUT /api/v1/tasks/{id}/objective`: what the task's performance is judged against.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectiveSpec {
    /// The metric that matters (e.g. `throughput`).
    pub metric: String,
    /// True when a larger value is better (throughput); false for e.g. step time.
    #[serde(default = "default_true")]
    pub higher_is_better: bool,
    /// Healthy value; absent = learned (median of the first samples).
    #[serde(default)]
    pub baseline: Option<f64>,
    /// Relative degradation tolerated before a problem becomes P0 (0.1 = 10 %).
    #[serde(default = "default_tolerable")]
    pub tolerable_degradation: f64,
}

impl ObjectiveSpec {
    /// Why the objective is refused, if it is.
    pub fn validate(&self) -> Result<(), String> {
        check_metric_name(&self.metric)?;
        if let Some(b) = self.baseline
            && !(b.is_finite() && b > 0.0)
        {
            return Err(format!("baseline must be a finite number > 0, got {b}"));
        }
        let t = self.tolerable_degradation;
        if !(0.0..=1.0).contains(&t) {
            return Err(format!("tolerable_degradation must be in [0, 1], got {t}"));
        }
        Ok(())
    }
}

/// A stored objective, as `GET`/`PUT .../objective` answer it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Objective {
    /// Task id.
    pub task_id: u32,
    /// The objective as set.
    #[serde(flatten)]
    pub spec: ObjectiveSpec,
    /// Baseline learned from the first samples (when `baseline` is absent).
    pub learned_baseline: Option<f64>,
    /// Last change, ms since the Unix epoch.
    pub updated_at_ms: i64,
}

impl Objective {
    /// The baseline in force: configured, else learned, else none yet.
    pub fn baseline(&self) -> Option<f64> {
        self.spec.baseline.or(self.learned_baseline)
    }
}

/// The answer to "is it the network?" for one task and interval.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// A P0/P1 network problem in the task's service network overlapped the interval.
    NetworkAtFault,
    /// Monitoring covered the task's endpoints and found no P0/P1 network problem.
    NetworkInnocent,
    /// Not enough monitoring to say.
    Unknown,
}

/// How the task's metric behaved in the interval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct MetricSummary {
    /// Metric judged (the objective's), if an objective is set.
    pub name: Option<String>,
    /// Samples in the interval.
    pub samples: u64,
    /// Median of the samples.
    pub median: Option<f64>,
    /// Worst median of `window_samples` consecutive samples.
    pub worst: Option<f64>,
    /// Baseline in force and where it comes from (`configured` | `learned`).
    pub baseline: Option<f64>,
    /// `configured`, `learned`, or absent while it is being learned.
    pub baseline_source: Option<String>,
    /// Relative degradation of `worst` from the baseline (0.25 = 25 % worse).
    pub degradation: Option<f64>,
    /// The tolerated degradation.
    pub tolerable_degradation: Option<f64>,
}

/// How well monitoring covered the task's endpoints in the interval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Coverage {
    /// Endpoints of the task.
    pub endpoints: u64,
    /// Endpoints whose RNIC had probe results (as prober or target) in the interval.
    pub covered: u64,
    /// Probes those RNICs took part in.
    pub probes: u64,
    /// A few endpoints without results (`host/rnic`).
    pub uncovered: Vec<String>,
}

/// `GET /api/v1/tasks/{id}/verdict` answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Verdict {
    /// Task id.
    pub task_id: u32,
    /// Interval judged, ms since the Unix epoch.
    pub from: i64,
    /// End of the interval.
    pub to: i64,
    /// The answer.
    pub verdict: VerdictKind,
    /// Why, in one or two sentences.
    pub reason: String,
    /// Metric degraded beyond the tolerated threshold; null when it cannot be judged.
    pub degraded: Option<bool>,
    /// The metric behind `degraded`.
    pub metric: MetricSummary,
    /// Monitoring coverage behind `network_innocent`.
    pub coverage: Coverage,
    /// P0/P1 problems affecting the task that overlapped the interval.
    pub problems: Vec<Problem>,
    /// Hang/slow windows from the ranks' throughput; null with `health_note` saying why.
    pub health: Option<crate::health::TaskHealth>,
    /// Why `health` is absent.
    pub health_note: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_validated() {
        let s = |v: f64, at: Option<i64>| MetricSample {
            name: "throughput".into(),
            value: v,
            at_ms: at,
        };
        assert_eq!(s(1.0, None).validate(1_000), Ok(1_000));
        assert!(
            s(f64::NAN, None)
                .validate(0)
                .unwrap_err()
                .contains("finite")
        );
        assert!(
            s(1.0, Some(-1))
                .validate(0)
                .unwrap_err()
                .contains("negative")
        );
        assert!(s(1.0, Some(MAX_FUTURE_MS + 1)).validate(0).is_err());
        let bad = MetricSample {
            name: "a b".into(),
            value: 1.0,
            at_ms: None,
        };
        assert!(bad.validate(0).unwrap_err().contains("metric name"));
    }

    #[test]
    fn objectives_are_validated_with_defaults() {
        let o: ObjectiveSpec = serde_json::from_str(r#"{"metric":"throughput"}"#).unwrap();
        assert!(o.higher_is_better && o.tolerable_degradation == 0.1 && o.baseline.is_none());
        o.validate().unwrap();
        let bad = ObjectiveSpec {
            baseline: Some(0.0),
            ..o.clone()
        };
        assert!(bad.validate().unwrap_err().contains("baseline"));
        let bad = ObjectiveSpec {
            tolerable_degradation: 1.5,
            ..o
        };
        assert!(bad.validate().unwrap_err().contains("tolerable"));
    }
}
