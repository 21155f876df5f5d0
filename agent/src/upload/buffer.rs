//! The one bounded buffer every engine appends results to (and the tracer its traced
//! paths), drained by the uploader.
//!
//! Records and paths are addressed by absolute indexes ([`Marks`]) so the uploader can
//! send a prefix, and release it only once the analyzer took it: a failed upload leaves
//! its records and paths at the front, and a full buffer drops the oldest (counted)
//! whoever holds them.

use crate::stats::Counters;
use rocemesh_proto::ProbeResult;
use rocemesh_proto::batch::{BatchEncoder, BatchHeader};
use rocemesh_proto::path::TracedPath;
use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};

/// Most traced paths held (they are small and refreshed every period anyway).
pub(crate) const MAX_BUFFERED_PATHS: usize = 8192;
/// Most paths one batch carries (what the analyzer decodes).
pub(crate) const MAX_PATHS_PER_BATCH: usize = rocemesh_proto::path::MAX_PATHS as usize;

/// A bounded FIFO addressed by absolute index, dropping its oldest items on overflow.
#[derive(Debug)]
struct Backlog<T> {
    items: VecDeque<T>,
    /// Absolute index of `items[0]`.
    head: u64,
    capacity: usize,
}

impl<T> Backlog<T> {
    fn new(capacity: usize) -> Self {
        Self {
            items: VecDeque::new(),
            head: 0,
            capacity: capacity.max(1),
        }
    }

    fn end(&self) -> u64 {
        self.head + self.items.len() as u64
    }

    /// Appends `new`, dropping the oldest beyond capacity; returns how many were dropped.
    fn extend(&mut self, new: impl ExactSizeIterator<Item = T>) -> usize {
        let overflow = (self.items.len() + new.len()).saturating_sub(self.capacity);
        let from_old = overflow.min(self.items.len());
        self.items.drain(..from_old);
        // More new items than the whole capacity: the oldest of them go too.
        let from_new = overflow - from_old;
        self.head += overflow as u64;
        self.items.extend(new.skip(from_new));
        overflow
    }

    /// The items from the front up to absolute index `until`, at most `max` of them.
    fn front(&self, until: u64, max: usize) -> impl Iterator<Item = &T> {
        let n = (until.saturating_sub(self.head) as usize)
            .min(max)
            .min(self.items.len());
        self.items.range(..n)
    }

    fn release(&mut self, end: u64) {
        let n = (end.saturating_sub(self.head) as usize).min(self.items.len());
        self.items.drain(..n);
        self.head += n as u64;
    }
}

/// Absolute positions in the record and path backlogs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    /// Record index.
    pub records: u64,
    /// Path index.
    pub paths: u64,
}

impl Marks {
    /// Past everything that will ever be buffered.
    pub const ALL: Marks = Marks {
        records: u64::MAX,
        paths: u64::MAX,
    };

    /// True when both positions are at or past `other`'s.
    pub fn covers(&self, other: &Marks) -> bool {
        self.records >= other.records && self.paths >= other.paths
    }
}

/// One encoded batch from the front of the buffer.
#[derive(Debug)]
pub struct Front {
    /// The batch body.
    pub body: Vec<u8>,
    /// Positions one past its last record and path.
    pub end: Marks,
    /// Records it carries.
    pub records: usize,
    /// Paths it carries.
    pub paths: usize,
}

#[derive(Debug)]
struct Inner {
    records: Backlog<ProbeResult>,
    paths: Backlog<TracedPath>,
}

/// Bounded FIFO of probe results and traced paths with drop-oldest overflow.
#[derive(Debug)]
pub struct ResultBuffer {
    inner: Mutex<Inner>,
    counters: Arc<Counters>,
}

impl ResultBuffer {
    /// An empty buffer holding at most `capacity` records (and [`MAX_BUFFERED_PATHS`] paths).
    pub fn new(capacity: usize, counters: Arc<Counters>) -> Self {
        let inner = Inner {
            records: Backlog::new(capacity),
            paths: Backlog::new(MAX_BUFFERED_PATHS),
        };
        Self {
            inner: Mutex::new(inner),
            counters,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking holder cannot leave the deques inconsistent: keep going.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(counter: &AtomicU64, n: usize) {
        if n > 0 {
            counter.fetch_add(n as u64, Relaxed);
        }
    }

    /// Moves every result out of `batch` into the buffer, dropping the oldest beyond capacity.
    pub fn push_all(&self, batch: &mut Vec<ProbeResult>) {
        if batch.is_empty() {
            return;
        }
        let dropped = self.lock().records.extend(batch.drain(..));
        Self::count(&self.counters.records_dropped, dropped);
    }

    /// Adds one traced path (the oldest is dropped, counted as a trace drop, when full).
    pub fn push_path(&self, path: TracedPath) {
        let dropped = self.lock().paths.extend(std::iter::once(path));
        Self::count(&self.counters.trace_drops, dropped);
    }

    /// Records waiting.
    pub fn len(&self) -> usize {
        self.lock().records.items.len()
    }

    /// True when no record waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Paths waiting.
    pub fn paths_len(&self) -> usize {
        self.lock().paths.items.len()
    }

    /// Positions of the oldest record and path still held.
    pub fn head(&self) -> Marks {
        let g = self.lock();
        Marks {
            records: g.records.head,
            paths: g.paths.head,
        }
    }

    /// Positions one past the newest record and path.
    pub fn end(&self) -> Marks {
        let g = self.lock();
        Marks {
            records: g.records.end(),
            paths: g.paths.end(),
        }
    }

    /// Encodes the records (at most `max`) and paths (at most [`MAX_PATHS_PER_BATCH`])
    /// from the front up to `until` into one batch body.
    pub fn encode_front(&self, header: BatchHeader, until: Marks, max: usize) -> Front {
        self.encode_front_within(header, until, max, MAX_PATHS_PER_BATCH)
    }

    /// [`Self::encode_front`] with at most `max_paths` paths (a server refused larger).
    pub fn encode_front_within(
        &self,
        header: BatchHeader,
        until: Marks,
        max: usize,
        max_paths: usize,
    ) -> Front {
        let g = self.lock();
        let paths: Vec<TracedPath> = g
            .paths
            .front(until.paths, max_paths.min(MAX_PATHS_PER_BATCH))
            .cloned()
            .collect();
        let mut enc = BatchEncoder::new(header, max.min(g.records.items.len()));
        g.records
            .front(until.records, max)
            .for_each(|r| enc.push(r));
        let end = Marks {
            records: g.records.head + enc.len() as u64,
            paths: g.paths.head + paths.len() as u64,
        };
        drop(g);
        Front {
            records: enc.len(),
            body: enc.finish_with_paths(&paths),
            end,
            paths: paths.len(),
        }
    }

    /// Forgets every record and path before `end` (they were delivered or refused).
    pub fn release(&self, end: Marks) {
        let mut g = self.lock();
        g.records.release(end.records);
        g.paths.release(end.paths);
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

    fn path(src_port: u16) -> TracedPath {
        TracedPath {
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.1.1".parse().unwrap(),
            src_port,
            dst_port: 4792,
            traced_at_unix_ns: 1,
            reached: true,
            ack_direction: false,
            hops: vec![Some("198.18.0.0".parse().unwrap()), None],
        }
    }

    fn seqs(body: &[u8]) -> Vec<u32> {
        decode_batch(body)
            .unwrap()
            .records()
            .map(|r| r.seq)
            .collect()
    }

    const H: BatchHeader = BatchHeader {
        host_id: 1,
        epoch: 2,
        batch_seq: 3,
        dropped: 0,
    };

    #[test]
    fn drops_oldest_and_counts() {
        let counters = Arc::new(Counters::default());
        let b = ResultBuffer::new(5, counters.clone());
        b.push_all(&mut (0..4).map(rec).collect());
        b.push_all(&mut (4..7).map(rec).collect());
        assert_eq!(b.len(), 5);
        assert_eq!(counters.records_dropped.load(Relaxed), 2);
        let f = b.encode_front(H, Marks::ALL, 100);
        assert_eq!(seqs(&f.body), vec![2, 3, 4, 5, 6]);
        assert_eq!(
            f.end,
            Marks {
                records: 7,
                paths: 0
            }
        );
        // A single push larger than the capacity keeps its newest records.
        let mut big: Vec<_> = (10..22).map(rec).collect();
        b.push_all(&mut big);
        assert!(big.is_empty());
        assert_eq!(counters.records_dropped.load(Relaxed), 2 + 5 + 7);
        assert_eq!(
            seqs(&b.encode_front(H, Marks::ALL, 100).body),
            vec![17, 18, 19, 20, 21]
        );
    }

    #[test]
    fn a_failed_upload_keeps_its_records_at_the_front() {
        let b = ResultBuffer::new(10, Arc::new(Counters::default()));
        b.push_all(&mut (0..6).map(rec).collect());
        b.push_path(path(1));
        let first = b.encode_front(H, Marks::ALL, 4);
        assert_eq!(seqs(&first.body), vec![0, 1, 2, 3]);
        assert_eq!(first.paths, 1);
        // Not released (upload failed); new records and paths arrive, overflow drops two old records.
        b.push_all(&mut (6..12).map(rec).collect());
        b.push_path(path(2));
        let retry = b.encode_front(H, first.end, 50);
        assert_eq!(seqs(&retry.body), vec![2, 3]);
        assert_eq!(decode_batch(&retry.body).unwrap().paths, vec![path(1)]);
        assert_eq!(retry.end, first.end);
        b.release(retry.end);
        let next = b.encode_front(H, Marks::ALL, 50);
        assert_eq!(seqs(&next.body), (4..12).collect::<Vec<_>>());
        assert_eq!(decode_batch(&next.body).unwrap().paths, vec![path(2)]);
        b.release(b.end());
        assert!(b.is_empty() && b.paths_len() == 0);
        let empty = b.encode_front(H, Marks::ALL, 50);
        assert!(decode_batch(&empty.body).unwrap().is_empty());
        assert_eq!(b.head(), b.end());
    }

    #[test]
    fn paths_are_bounded_and_batched() {
        let counters = Arc::new(Counters::default());
        let b = ResultBuffer::new(10, counters.clone());
        for i in 0..MAX_BUFFERED_PATHS as u16 + 3 {
            b.push_path(path(i));
        }
        assert_eq!(
            (b.paths_len(), counters.trace_drops.load(Relaxed)),
            (MAX_BUFFERED_PATHS, 3)
        );
        let f = b.encode_front(H, Marks::ALL, 10);
        let paths = decode_batch(&f.body).unwrap().paths;
        assert_eq!((paths.len(), paths[0].src_port), (MAX_PATHS_PER_BATCH, 3));
        assert_eq!(
            f.end,
            Marks {
                records: 0,
                paths: 3 + MAX_PATHS_PER_BATCH as u64
            }
        );
    }
}
