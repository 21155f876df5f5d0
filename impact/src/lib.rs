//! Impact of problems on training tasks (R-Pingmesh §2.4, §4.3.4, §7.2).
//!
//! Tasks report a performance metric (`POST /api/v1/tasks/{id}/metrics`) and say what it
//! is judged against (`PUT .../objective`: direction, baseline or a learned one, tolerated
//! degradation). The background loop ([`run`]) gives every problem a priority: P0 when it
//! lies in a task's service network (an endpoint RNIC or host, a switch or link on a path
//! traced between two endpoints — or, with no trace known, on a shortest path between the
//! task's ToRs in the fabric map) and that task degraded beyond its threshold during the
//! problem; P1 in a service network otherwise; P2 outside every service network.
//! `GET .../verdict` then answers whether the network is to blame for a task's performance
//! in an interval: "if no P0 or P1 problem is detected when service performance degrades,
//! the network is innocent" — provided monitoring covered the task's endpoints — and, from
//! the ranks' throughput ([`health`]), whether the task hung or slowed, in communication
//! or computation, and which rank held it back.

pub mod api;
pub mod assess;
pub mod config;
pub mod health;
pub mod judge;
pub mod model;
mod paths;
pub mod samples;
pub mod service;
pub mod verdict;

pub use api::{openapi, router, routes};
pub use assess::{AssessStats, Impact};
pub use config::ImpactConfig;
pub use model::{MetricSample, Objective, ObjectiveSpec, Verdict, VerdictKind};
pub use paths::PathSource;

use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Assesses problems every `impact.tick_ms` until `cancel` fires; errors are logged and
/// retried on the next tick.
pub async fn run(impact: Arc<Impact>, cancel: CancellationToken) {
    let mut every = tokio::time::interval(Duration::from_millis(impact.config().tick_ms));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = every.tick() => {}
        }
        if let Err(e) = impact.assess(rocemesh_proto::now_unix_ms()).await {
            tracing::warn!("impact assessment failed: {e:#}");
        }
    }
}
