//! Shared wire formats of rocemesh.
//!
//! - [`packet`]: the 64-byte PROBE/ACK1/ACK2 payload both transports carry;
//! - [`probe_auth`]: the keyed MAC (cluster key) in those packets;
//! - [`batch`]: the binary result batches agents upload to the analyzer;
//! - [`path`]: traced paths, uploaded in a batch's optional path section;
//! - [`api`]: JSON types of the REST API;
//! - [`flow`]: the UDP 5-tuple ECMP routes by;
//! - [`fabric_map`]: the fabric map file (switch addresses, switch-to-switch links);
//! - `http_client` (feature `http-client`): the HTTP(S) client every component builds;
//! - `exposition` (feature `exposition`): the `/metrics` text every process serves;
//! - [`utc`]: timestamps as RFC 3339 text;
//! - [`duration`]: config durations as human strings (`"30s"`).

pub mod api;
pub mod batch;
pub mod duration;
#[cfg(feature = "exposition")]
pub mod exposition;
pub mod fabric_map;
pub mod flow;
pub mod host_key;
#[cfg(feature = "http-client")]
pub mod http_client;
pub mod packet;
pub mod path;
pub mod probe_auth;
#[cfg(feature = "testing")]
pub mod testing;
pub mod utc;

pub use batch::{ProbeResult, ProbeStatus};
pub use packet::{Packet, PacketError, PacketKind, ProbeClass, TimestampSource};

/// Milliseconds since the Unix epoch, from the wall clock.
pub fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Nanoseconds since the Unix epoch, from the wall clock.
pub fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
