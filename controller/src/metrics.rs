//! Prometheus metrics of the controller: registry size, pinglist polls by answer, and
//! training tasks by pinglist phase. Read live from the shared state at every scrape;
//! the server's `/metrics` route (`rocemesh_analyzer::metrics_router`) encodes them.

use crate::state::ControllerState;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use rocemesh_proto::api::TaskPhase;
use std::sync::atomic::{AtomicU64, Ordering};

/// Answers a pinglist poll can get: HTTP status and its `code` label.
const POLL_CODES: [(u16, &str); 4] = [(200, "200"), (304, "304"), (404, "404"), (409, "409")];

/// Pinglist polls counted by answer.
#[derive(Debug, Default)]
pub(crate) struct PollCounters {
    by_code: [AtomicU64; POLL_CODES.len()],
}

impl PollCounters {
    /// Counts one poll answered with `status` (other statuses, e.g. 400, are not polls).
    pub(crate) fn count(&self, status: u16) {
        if let Some(i) = POLL_CODES.iter().position(|(c, _)| *c == status) {
            self.by_code[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Registry size and tasks per phase at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inventory {
    /// Hosts registered.
    pub(crate) hosts: u64,
    /// RNICs registered.
    pub(crate) rnics: u64,
    /// Tasks in preload, skeleton and basic-fallback phase.
    pub(crate) tasks: [u64; 3],
}

/// Where a phase counts in [`Inventory::tasks`], and its label (the serde name).
pub(crate) fn phase_slot(phase: TaskPhase) -> (usize, &'static str) {
    match phase {
        TaskPhase::Preload => (0, "preload"),
        TaskPhase::Skeleton => (1, "skeleton"),
        TaskPhase::BasicFallback => (2, "basic_fallback"),
    }
}

/// The controller's metrics for the server's `/metrics` route.
pub fn collector(state: &ControllerState) -> Box<dyn Collector> {
    Box::new(Live(state.clone()))
}

struct Live(ControllerState);

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("controller metrics")
    }
}

impl Collector for Live {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let inv = self.0.inventory();
        for (name, help, v) in [
            (
                "rocemesh_registered_hosts",
                "Hosts registered with the controller.",
                inv.hosts,
            ),
            (
                "rocemesh_registered_rnics",
                "RNICs registered with the controller.",
                inv.rnics,
            ),
        ] {
            enc.encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&v)?;
        }
        let mut m = enc.encode_descriptor(
            "rocemesh_tasks",
            "Training tasks by pinglist phase (preload, skeleton, basic_fallback).",
            None,
            MetricType::Gauge,
        )?;
        for phase in [
            TaskPhase::Preload,
            TaskPhase::Skeleton,
            TaskPhase::BasicFallback,
        ] {
            let (i, label) = phase_slot(phase);
            m.encode_family(&[("phase", label)])?
                .encode_gauge(&inv.tasks[i])?;
        }
        let mut m = enc.encode_descriptor(
            "rocemesh_pinglist_polls",
            "Pinglist polls by answer: 200 new list, 304 unchanged, 404 unknown host, 409 stale epoch.",
            None,
            MetricType::Counter,
        )?;
        for ((_, code), n) in POLL_CODES.iter().zip(&self.0.poll_counters().by_code) {
            m.encode_family(&[("code", *code)])?
                .encode_counter::<NoLabelSet, _, u64>(&n.load(Ordering::Relaxed), None)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_count_under_their_code_only() {
        let c = PollCounters::default();
        for s in [200, 304, 304, 404, 409, 400, 500] {
            c.count(s);
        }
        let got: Vec<u64> = c
            .by_code
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        assert_eq!(got, [1, 2, 1, 1]);
    }
}
