//! Controller: RNIC registry, topology and pinglist generation behind a REST API
//! (R-Pingmesh §4.1).
//!
//! The binary builds a [`ControllerState`] from a [`rocemesh_store::Db`] and a
//! [`ControllerConfig`], and serves [`router`].
#![warn(missing_docs)]

pub mod api;
pub mod config;
mod hash;
pub mod pinglist;
mod registry;
mod state;
pub mod topology;

pub use api::router;
pub use config::ControllerConfig;
pub use state::ControllerState;
