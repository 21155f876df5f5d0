//! Controller: RNIC registry, topology and pinglist generation behind a REST API
//! (R-Pingmesh §4.1), plus training-task pinglists driven by the traffic skeleton
//! (SkeletonHunter §5.1).
//!
//! The binary builds a [`ControllerState`] from a [`rocemesh_store::Db`] and a
//! [`ControllerConfig`], serves [`router`], and runs
//! [`ControllerState::run_skeleton_loop`] next to it.

pub mod api;
mod clock;
pub mod config;
mod hash;
pub mod leader;
pub mod metrics;
pub mod pinglist;
pub mod prefix;
mod probe_keys;
mod registry;
mod state;
mod tasks;
mod throughput;
pub mod topology;

pub use api::{router, routes};
pub use clock::Clock;
pub use config::ControllerConfig;
pub use state::{ControllerState, StateError};
