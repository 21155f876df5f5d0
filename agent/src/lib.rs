//! Per-host agent: discovers RNICs, registers, probes with the six-timestamp protocol,
//! uploads results.
//!
//! Data path: [`transport`] (UDP sockets with kernel timestamps) → [`probe`] (one
//! prober/responder engine per RNIC; every UDP RNIC on one event-loop thread, each verbs
//! RNIC on its own) → [`upload`] (one bounded buffer, batches
//! POSTed to the analyzer). [`control`] registers with the controller and hands the
//! engines their pinglists; [`trace`] traces the path of every probe and ACK 5-tuple;
//! [`service`] discovers service RC connections with eBPF and probes their 5-tuples;
//! [`sample`] samples every RNIC's throughput for the controller's skeleton inference;
//! [`agent`] wires it all together behind [`start`].
#![deny(unsafe_code)]

mod agent;
pub mod config;
pub mod control;
pub mod discovery;
pub mod http_client;
pub mod metrics;
pub mod probe;
pub mod sample;
pub mod service;
pub mod stats;
mod stop;
mod sys;
pub mod trace;
pub mod transport;
pub mod upload;

pub use agent::{AgentHandle, start};
pub use config::{AgentConfig, RnicConfig, ServiceTracing, TransportKind};
pub use stats::AgentStats;
