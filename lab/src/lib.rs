//! The evaluation harness of rocemesh, apart from the product so that the `rocemesh`
//! binary and its image link neither the namespace testbed nor the simulator.
//!
//! - [`cli`]: command-line surface of `rocemesh-lab` and dispatch;
//! - [`lab`]: fabric + server + agents, shared by the root demo and the evaluation;
//! - [`demo`]: one-command demonstrations;
//! - [`eval`]: the localization, skeleton, latency and task suites;
//! - [`sim`]: the `sim` command over the fabric simulator;
//! - [`testbed`]: the `testbed` subcommands.

pub mod cli;
pub mod demo;
pub mod eval;
pub mod lab;
pub mod sim;
pub mod testbed;
