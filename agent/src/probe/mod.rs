//! The six-timestamp probing protocol: what to probe when ([`schedule`]), the prober's
//! outstanding probes ([`prober`]) and their arithmetic ([`rtt`]), the responder
//! ([`responder`]), the per-RNIC engine tying them to a transport ([`engine`]) and the
//! thread(s) driving the engines ([`event_loop`]), and the gate that authenticates and
//! rate-limits what they receive ([`guard`]).

pub(crate) mod engine;
pub(crate) mod event_loop;
pub(crate) mod guard;
pub(crate) mod prober;
pub(crate) mod responder;
pub(crate) mod rtt;
pub(crate) mod schedule;

pub use engine::{Command, EngineHandle, EngineIdentity};
pub use event_loop::EventLoop;
pub use guard::{Auth, GuardSettings};

/// Largest 24-bit QPN (UD QP numbers are 24 bits).
pub(crate) const MAX_QPN: u32 = 0x00ff_ffff;

/// A random non-zero 24-bit QPN, new at every start (like a UD QP after a restart).
pub(crate) fn random_qpn() -> u32 {
    rand::random_range(1..=MAX_QPN)
}
