//! Path tracing (R-Pingmesh §4.2.3): every probe 5-tuple and every ACK 5-tuple is traced
//! with TTL-limited TRACE packets on that very 5-tuple, so ECMP hashes them exactly like
//! the probes; the hops are uploaded with the results for the analyzer's tomography.
//!
//! [`table`] decides what to trace when, [`session`] runs one traceroute (and documents
//! when a destination counts as reached), [`icmp`] reads the answers from the socket
//! error queue, [`bucket`] rate-limits, [`feed`] is the engines' side and [`tracer`] the
//! thread that ties them together.

pub mod bucket;
pub mod feed;
pub mod icmp;
pub mod session;
pub mod table;
pub mod tracer;

pub use feed::{TraceFeed, TraceRequest};
pub use table::TraceKey;
pub use tracer::{PathResender, TracerHandle, TracerOptions};
