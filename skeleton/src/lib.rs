//! Training-task traffic skeleton inference (SkeletonHunter §5.1).
//!
//! A training task's RNICs only talk along its DP x TP x PP structure. This
//! crate turns per-RNIC throughput series into that structure and into the
//! pinglist that covers it:
//! 1. [`basic_pairs`]: the preload pinglist (same rail, different hosts);
//! 2. [`features`]: STFT magnitude spectrum and burst phase per RNIC;
//! 3. [`grouping`]: constrained hierarchical clustering into DP groups (Eq. 1-3);
//! 4. [`stages`]: pipeline order and TP x PP split from burst time shifts;
//! 5. [`skeleton_pairs`]: the pairs that really talk;
//! 6. [`fidelity`]: fall back to the basic list when the structure does not
//!    explain the traffic.
//!
//! [`infer`] runs all of it; [`synth`] makes deterministic test traffic.

pub mod accuracy;
pub mod endpoint;
pub mod error;
pub mod features;
pub mod fidelity;
pub mod grouping;
pub mod infer;
pub mod linkage;
pub mod pairs;
pub mod skeleton;
pub mod stages;
pub mod synth;

pub use accuracy::grouping_accuracy;
pub use endpoint::{Endpoint, Observation};
pub use error::Error;
pub use fidelity::FallbackReason;
pub use infer::{Inference, InferenceConfig, Outcome, infer};
pub use pairs::{Pair, basic_pairs, full_mesh_len};
pub use skeleton::{Structure, skeleton_pairs};
pub use synth::{SyntheticJob, SyntheticTrace};
