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
mod config;
mod control;
mod discovery;
mod http_client;
mod metrics;
mod probe;
mod sample;
mod service;
mod stats;
mod stop;
mod sys;
mod trace;
mod transport;
mod upload;

pub use agent::{AgentHandle, start};
pub use config::{AgentConfig, RnicConfig, ServiceTracing, TransportKind};
pub use http_client::{client_tls, set_bearer_token, set_tls, set_token_file};
pub use metrics::{MetricsServer, Sources, exposition};
pub use probe::{Auth, Command, EngineHandle, EngineIdentity, EventLoop, GuardSettings};
pub use stats::{AgentStats, Counters};
pub use trace::{TracerHandle, TracerOptions};
pub use transport::{UdpOptions, UdpTransport, list_rdma_devices};
pub use upload::{Destination, Marks, ResultBuffer, UploadOutcome, Uploader, backoff};
