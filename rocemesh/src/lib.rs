//! The `rocemesh` binary's roles, wired from the component crates.
//!
//! - [`cli`]: command-line surface and dispatch;
//! - [`server`]: controller and/or analyzer behind one HTTP listener;
//! - [`agent_cmd`]: the per-host agent as a long-running process;
//! - [`demo`]: one-command demonstrations;
//! - [`lab`]: fabric + server + agents, shared by the root demo and the evaluation;
//! - [`eval`]: the localization suite;
//! - [`testbed_cmd`]: the `testbed` subcommands.

pub mod agent_cmd;
pub mod cli;
pub mod config;
pub mod ctl;
pub mod demo;
pub mod eval;
pub mod lab;
pub mod logging;
pub mod openapi;
pub mod server;
pub mod signals;
pub mod sim_cmd;
pub mod testbed_cmd;
