//! Fabric simulator: scale beyond what network namespaces can hold.
//!
//! A [`Sim`] builds a leaf-spine, k-ary fat-tree or rail-optimized fabric
//! ([`topology`]) of up to a million RNICs, routes every 5-tuple by a per-switch L4
//! ECMP hash ([`ecmp`]), delays packets hop by hop ([`latency`]) and applies faults
//! with exported ground truth ([`faults`]). One simulated agent per host ([`agent`])
//! registers with the real controller, probes its real pinglists at their rates,
//! traces 5-tuples like the agent's tracer and encodes real result batches, all in
//! virtual time. Drivers move those batches: [`inproc`] into the real controller and
//! analyzer code in this process (virtual time, as fast as the CPU allows), [`http`]
//! to a running `rocemesh server` (wall-clock time). [`score`] is the one scorer of
//! every localization evaluation (this simulator's and the namespace testbed's): the
//! problems found against the truth, and R-Pingmesh's Algorithm 1 on the same data;
//! [`twins`] names the components no probe can tell apart.
//! [`random`] draws seeded random scenarios (shapes, faults, positions) to score on.
//! [`job`] models training-job traffic with faults; [`jobsuite`] scores task-health
//! verdicts on it.

pub mod agent;
pub mod control;
pub mod ecmp;
pub mod faults;
pub mod http;
pub mod inproc;
pub mod job;
pub mod jobsuite;
pub mod latency;
pub mod random;
pub mod rng;
pub mod scenario;
pub mod score;
pub mod sim;
pub mod topology;
pub mod twins;

pub use faults::FaultSpec;
pub use score::Truth;
pub use sim::{Sim, SimConfig, SimStats};
pub use topology::Shape;
