//! The `rocemesh` binary's roles, wired from the component crates.
//!
//! - [`cli`]: command-line surface and dispatch;
//! - [`server`]: controller and/or analyzer behind one HTTP listener;
//! - [`agent_cmd`]: the per-host agent as a long-running process;
//! - [`ctl`]: the operator's command-line client of the API.

pub mod agent_cmd;
pub mod cli;
pub mod config;
pub mod ctl;
pub mod logging;
pub mod openapi;
pub mod server;
pub mod signals;
