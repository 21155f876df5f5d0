//! The one bounded buffer every engine appends results to and the uploader drains.
//!
//! Records are addressed by an absolute index so the uploader can send a prefix, and
//! release it only once the analyzer took it: a failed upload leaves its records at the
//! front, and a full buffer drops the oldest records (counted) whoever holds them.

use crate::stats::Counters;
use rocemesh_proto::ProbeResult;
use rocemesh_proto::batch::{BatchEncoder, BatchHeader};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug)]
struct Inner {
    records: VecDeque<ProbeResult>,
    /// Absolute index of `records[0]`.
    head: u64,
}

/// Bounded FIFO of probe results with drop-oldest overflow.
#[derive(Debug)]
pub struct ResultBuffer {
    inner: Mutex<Inner>,
    capacity: usize,
    counters: Arc<Counters>,
}

impl ResultBuffer {
    /// An empty buffer holding at most `capacity` records.
    pub fn new(capacity: usize, counters: Arc<Counters>) -> Self {
        Self { inner: Mutex::new(Inner { records: VecDeque::new(), head: 0 }), capacity: capacity.max(1), counters }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking holder cannot leave the deque inconsistent: keep going.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves every result out of `batch` into the buffer, dropping the oldest beyond capacity.
    pub fn push_all(&self, batch: &mut Vec<ProbeResult>) {
        if batch.is_empty() {
            return;
        }
        let mut g = self.lock();
        let overflow = (g.records.len() + batch.len()).saturating_sub(self.capacity);
        let from_old = overflow.min(g.records.len());
        g.records.drain(..from_old);
        g.head += from_old as u64;
        // More new records than the whole capacity: the oldest of them go too.
        let from_new = overflow - from_old;
        g.head += from_new as u64;
        g.records.extend(batch.drain(..).skip(from_new));
        drop(g);
        if overflow > 0 {
            self.counters.records_dropped.fetch_add(overflow as u64, Relaxed);
        }
    }

    /// Records waiting.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Absolute index of the oldest record still held.
    pub fn head(&self) -> u64 {
        self.lock().head
    }

    /// Absolute index one past the newest record.
    pub fn end(&self) -> u64 {
        let g = self.lock();
        g.head + g.records.len() as u64
    }

    /// Encodes the records from the front up to absolute index `until` (at most `max`)
    /// into a batch body; returns it with the absolute index one past its last record.
    pub fn encode_front(&self, header: BatchHeader, until: u64, max: usize) -> (Vec<u8>, u64) {
        let g = self.lock();
        let n = (until.saturating_sub(g.head) as usize).min(max).min(g.records.len());
        let mut enc = BatchEncoder::new(header, n);
        g.records.range(..n).for_each(|r| enc.push(r));
        (enc.finish(), g.head + n as u64)
    }

    /// Forgets every record before absolute index `end` (they were delivered or refused).
    pub fn release(&self, end: u64) {
        let mut g = self.lock();
        let n = (end.saturating_sub(g.head) as usize).min(g.records.len());
        g.records.drain(..n);
        g.head += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::batch::decode_batch;
    use rocemesh_proto::{ProbeClass, ProbeStatus, TimestampSource};

    fn rec(seq: u32) -> ProbeResult {
        ProbeResult {
            prober_rnic: 1,
            target_rnic: 2,
            seq,
            target_qpn: 3,
            send_unix_ns: 4,
            network_rtt_ns: 0,
            prober_delay_ns: 0,
            responder_delay_ns: 0,
            app_rtt_ns: 0,
            src_port: 5,
            dst_port: 6,
            class: ProbeClass::TorMesh,
            status: ProbeStatus::Timeout,
            ts_source: TimestampSource::App,
        }
    }

    fn seqs(body: &[u8]) -> Vec<u32> {
        decode_batch(body).unwrap().records().map(|r| r.seq).collect()
    }

    const H: BatchHeader = BatchHeader { host_id: 1, epoch: 2, batch_seq: 3, dropped: 0 };

    #[test]
    fn drops_oldest_and_counts() {
        let counters = Arc::new(Counters::default());
        let b = ResultBuffer::new(5, counters.clone());
        b.push_all(&mut (0..4).map(rec).collect());
        b.push_all(&mut (4..7).map(rec).collect());
        assert_eq!(b.len(), 5);
        assert_eq!(counters.records_dropped.load(Relaxed), 2);
        let (body, end) = b.encode_front(H, u64::MAX, 100);
        assert_eq!(seqs(&body), vec![2, 3, 4, 5, 6]);
        assert_eq!(end, 7);
        // A single push larger than the capacity keeps its newest records.
        let mut big: Vec<_> = (10..22).map(rec).collect();
        b.push_all(&mut big);
        assert!(big.is_empty());
        assert_eq!(counters.records_dropped.load(Relaxed), 2 + 5 + 7);
        assert_eq!(seqs(&b.encode_front(H, u64::MAX, 100).0), vec![17, 18, 19, 20, 21]);
    }

    #[test]
    fn a_failed_upload_keeps_its_records_at_the_front() {
        let b = ResultBuffer::new(10, Arc::new(Counters::default()));
        b.push_all(&mut (0..6).map(rec).collect());
        let (body, end) = b.encode_front(H, u64::MAX, 4);
        assert_eq!(seqs(&body), vec![0, 1, 2, 3]);
        // Not released (upload failed); new records arrive and overflow drops two old ones.
        b.push_all(&mut (6..12).map(rec).collect());
        let (retry, retry_end) = b.encode_front(H, end, 50);
        assert_eq!(seqs(&retry), vec![2, 3]);
        assert_eq!(retry_end, end);
        b.release(retry_end);
        assert_eq!(seqs(&b.encode_front(H, u64::MAX, 50).0), (4..12).collect::<Vec<_>>());
        b.release(b.end());
        assert!(b.is_empty());
        assert!(decode_batch(&b.encode_front(H, u64::MAX, 50).0).unwrap().is_empty());
    }
}
