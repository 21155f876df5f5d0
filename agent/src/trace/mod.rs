//! Path tracing (R-Pingmesh §4.2.3): every probe 5-tuple and every ACK 5-tuple is traced
//! with TTL-limited TRACE packets on that very 5-tuple, so ECMP hashes them exactly like
//! the probes; the hops are uploaded with the results for the analyzer's tomography.
//!
//! [`table`] decides what to trace when, [`session`] runs one traceroute (and documents
//! when a destination counts as reached), [`icmp`] reads the answers from the socket
//! error queue, [`bucket`] rate-limits, [`feed`] is the engines' side and [`tracer`] the
//! thread that ties them together.

pub(crate) mod bucket;
pub(crate) mod feed;
pub(crate) mod icmp;
pub(crate) mod session;
pub(crate) mod table;
pub(crate) mod tracer;

pub(crate) use feed::TraceFeed;
pub(crate) use table::TraceKey;
pub(crate) use tracer::PathResender;
pub use tracer::{TracerHandle, TracerOptions};
