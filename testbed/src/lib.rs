//! Network-namespace leaf-spine fabric and real-mechanism fault injection for testing rocemesh.
//!
//! [`Fabric::up`] builds a Clos fabric of network namespaces (`{prefix}-h{n}` hosts,
//! `{prefix}-t{n}` ToRs, `{prefix}-s{n}` spines) joined by veth pairs, addressed from
//! 198.18.0.0/15, with L4-hashed ECMP across spines. [`Fabric::apply`] injects faults
//! ([`Fault`]) with real kernel mechanisms and returns the ground truth for scoring;
//! [`Fabric::clear`] removes one; [`Fabric::start_job`] sends synthetic training-job traffic
//! ([`job`]); [`Fabric::down`] removes everything of a prefix.
//!
//! Needs root and the Debian packages `iproute2`, `nftables`, `iptables`, `procps`.

pub mod fabric;
pub mod faults;
pub mod helper;
pub mod job;
pub mod management;
pub mod netns;
pub mod process;
mod route_errors;
pub mod spec;
pub mod state;
pub mod topology;

pub use fabric::{Fabric, HelperCommand};
pub use faults::{Background, Direction, Fault, FaultHandle};
pub use job::{Collective, JobHandle, JobSpec, JobTruth, RingIteration, RnicRole};
/// The flow of [`Fault::FlowDrop`] and [`Fabric::spine_for`].
pub use rocemesh_proto::flow::FiveTuple;
pub use spec::FabricSpec;
pub use state::ActiveFault;
pub use topology::{Endpoint, Host, Link, NodeKind, Rnic, Router, Topology};
