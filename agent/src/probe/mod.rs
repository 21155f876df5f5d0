//! The six-timestamp probing protocol: what to probe when ([`schedule`]), the prober's
//! outstanding probes ([`prober`]) and their arithmetic ([`rtt`]), the responder
//! ([`responder`]), the per-RNIC engine tying them to a transport ([`engine`]) and the
//! thread(s) driving the engines ([`event_loop`]), and the gate that authenticates and
//! rate-limits what they receive ([`guard`]).

pub mod engine;
pub mod event_loop;
pub mod guard;
pub mod prober;
pub mod responder;
pub mod rtt;
pub mod schedule;

/// Largest 24-bit QPN (UD QP numbers are 24 bits).
pub const MAX_QPN: u32 = 0x00ff_ffff;

/// A random non-zero 24-bit QPN, new at every start (like a UD QP after a restart).
pub fn random_qpn() -> u32 {
    rand::random_range(1..=MAX_QPN)
}
