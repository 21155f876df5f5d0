//! The analyzer's ingest of a result batch ([`rocemesh_analyzer::Analyzer::ingest`]):
//! decode, de-duplication by (host, epoch, seq) and aggregation into the SLA window, on
//! the fixture's registry (RNICs 1-4 under two ToRs). It must refuse or take any body
//! without panicking, and a refused body must leave the accepted-record count unchanged.

use crate::NOW_MS;
use crate::fixture::fixture;
use rocemesh_proto::batch::RECORD_LEN;

/// One batch body handed to the ingest, as `POST /api/v1/results` does.
pub fn analyzer_ingest(data: &[u8]) {
    let a = &fixture().analyzer;
    let before = a.stats();
    match a.ingest(data, NOW_MS) {
        Ok(ack) => assert!(ack.accepted + ack.dropped <= (data.len() / RECORD_LEN) as u64),
        Err(_) => assert_eq!(a.stats().records_accepted, before.records_accepted),
    }
}
