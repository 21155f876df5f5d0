//! What the uploader tests share: numbered results and a destination.
#![allow(dead_code)]

use rocemesh_agent::Destination;
use rocemesh_proto::ProbeResult;
use rocemesh_proto::testing::probe_result;

/// An ok result of RNIC 1 -> 2 with sequence number `seq` (tests count them by it).
pub(crate) fn numbered(seq: u32) -> ProbeResult {
    ProbeResult {
        seq,
        ..probe_result(1, 2, 0, true, 1000)
    }
}

/// Host 7 at `url`, without an upload key.
pub(crate) fn to(url: &str) -> Destination<'_> {
    Destination {
        analyzer_url: url,
        host_id: 7,
        host_key: None,
    }
}
