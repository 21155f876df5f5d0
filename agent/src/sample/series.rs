//! The bounded buffer of throughput samples waiting for upload, and how its leading
//! run of consecutive intervals becomes one [`ThroughputUpload`].

use rocemesh_proto::api::{RnicSeries, ThroughputUpload};
use std::collections::VecDeque;

/// The bytes every sampled RNIC moved in one interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    /// Interval number since the sampler started (consecutive rows differ by 1; a
    /// larger step is a gap, e.g. a stalled sampler).
    pub index: u64,
    /// Start of the interval, ms since the Unix epoch.
    pub start_ms: i64,
    /// (tx, rx) bytes per sampled RNIC, in sampler order.
    pub bytes: Vec<(u64, u64)>,
}

/// Rows oldest first, at most `capacity`; the oldest are dropped beyond it.
#[derive(Debug)]
pub(crate) struct SeriesBuffer {
    capacity: usize,
    rows: VecDeque<Row>,
}

/// One upload built from the buffer, and what to release once it is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    /// The body to POST.
    pub upload: ThroughputUpload,
    /// Index of the last row it covers.
    pub last_index: u64,
    /// Samples (rows × RNICs) it covers.
    pub samples: u64,
}

/// Identity fields of an upload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UploadHeader {
    /// Host id from registration.
    pub host_id: u32,
    /// Agent epoch.
    pub epoch: u32,
    /// Sampling interval.
    pub interval_ms: u32,
}

impl SeriesBuffer {
    /// An empty buffer of at most `capacity` rows (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            rows: VecDeque::new(),
        }
    }

    #[cfg(test)]
    /// Rows held.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    #[cfg(test)]
    /// True when no row is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Appends a row; returns how many samples (rows × RNICs) were dropped to make room.
    pub(crate) fn push(&mut self, row: Row) -> u64 {
        let mut dropped = 0;
        while self.rows.len() >= self.capacity {
            if let Some(old) = self.rows.pop_front() {
                dropped += old.bytes.len() as u64;
            }
        }
        self.rows.push_back(row);
        dropped
    }

    /// The leading run of consecutive rows (at most `max_rows`) as one upload; RNICs
    /// whose controller id is unknown (`rnic_ids[i] == None`) are left out. `None` when
    /// empty or when no RNIC has an id yet.
    pub(crate) fn front(
        &self,
        header: UploadHeader,
        rnic_ids: &[Option<u32>],
        max_rows: usize,
    ) -> Option<Pending> {
        let first = self.rows.front()?;
        let run = self
            .rows
            .iter()
            .take(max_rows.max(1))
            .enumerate()
            .take_while(|(i, r)| r.index == first.index + *i as u64)
            .map(|(_, r)| r)
            .collect::<Vec<_>>();
        let series: Vec<RnicSeries> = rnic_ids
            .iter()
            .enumerate()
            .filter_map(|(col, id)| Some((col, (*id)?)))
            .map(|(col, rnic_id)| RnicSeries {
                rnic_id,
                start_ms: first.start_ms,
                tx_bytes: run
                    .iter()
                    .map(|r| r.bytes.get(col).map_or(0, |b| b.0))
                    .collect(),
                rx_bytes: run
                    .iter()
                    .map(|r| r.bytes.get(col).map_or(0, |b| b.1))
                    .collect(),
            })
            .collect();
        if series.is_empty() {
            return None;
        }
        let last_index = run.last().map_or(first.index, |r| r.index);
        Some(Pending {
            upload: ThroughputUpload {
                host_id: header.host_id,
                epoch: header.epoch,
                interval_ms: header.interval_ms,
                series,
            },
            last_index,
            samples: run.iter().map(|r| r.bytes.len() as u64).sum(),
        })
    }

    /// Removes every row up to `last_index` (rows dropped meanwhile are simply gone).
    pub(crate) fn release(&mut self, last_index: u64) {
        while self.rows.front().is_some_and(|r| r.index <= last_index) {
            self.rows.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(index: u64, v: u64) -> Row {
        Row {
            index,
            start_ms: 1_000 * index as i64,
            bytes: vec![(v, v + 1), (10 * v, 10 * v + 1)],
        }
    }

    const HEADER: UploadHeader = UploadHeader {
        host_id: 3,
        epoch: 9,
        interval_ms: 1_000,
    };

    #[test]
    fn front_is_the_leading_consecutive_run() {
        let mut b = SeriesBuffer::new(10);
        assert!(b.front(HEADER, &[Some(1), Some(2)], 100).is_none());
        for (i, v) in [(4, 1), (5, 2), (6, 3), (8, 4)] {
            assert_eq!(b.push(row(i, v)), 0);
        }
        let p = b.front(HEADER, &[Some(21), Some(22)], 100).unwrap();
        assert_eq!(p.last_index, 6);
        assert_eq!(p.samples, 6);
        assert_eq!(
            (p.upload.host_id, p.upload.epoch, p.upload.interval_ms),
            (3, 9, 1_000)
        );
        assert_eq!(
            p.upload.series,
            vec![
                RnicSeries {
                    rnic_id: 21,
                    start_ms: 4_000,
                    tx_bytes: vec![1, 2, 3],
                    rx_bytes: vec![2, 3, 4],
                },
                RnicSeries {
                    rnic_id: 22,
                    start_ms: 4_000,
                    tx_bytes: vec![10, 20, 30],
                    rx_bytes: vec![11, 21, 31],
                },
            ]
        );
        // Capped run, RNICs without an id left out, none at all = nothing to send.
        let p = b.front(HEADER, &[None, Some(22)], 2).unwrap();
        assert_eq!((p.last_index, p.upload.series.len()), (5, 1));
        assert_eq!(p.upload.series[0].tx_bytes, vec![10, 20]);
        assert!(b.front(HEADER, &[None, None], 100).is_none());
        // After the run is settled the gap's other side comes next.
        b.release(6);
        let p = b.front(HEADER, &[Some(21), Some(22)], 100).unwrap();
        assert_eq!((p.last_index, p.upload.series[0].start_ms), (8, 8_000));
        b.release(8);
        assert!(b.is_empty());
    }

    #[test]
    fn full_buffer_drops_the_oldest_and_counts_samples() {
        let mut b = SeriesBuffer::new(3);
        for i in 0..3 {
            assert_eq!(b.push(row(i, i)), 0);
        }
        assert_eq!(b.push(row(3, 3)), 2);
        assert_eq!(b.push(row(4, 4)), 2);
        assert_eq!(b.len(), 3);
        let p = b.front(HEADER, &[Some(1), Some(2)], 100).unwrap();
        assert_eq!(p.upload.series[0].tx_bytes, vec![2, 3, 4]);
        // Releasing rows that were dropped meanwhile only removes what is still there.
        b.release(1);
        assert_eq!(b.len(), 3);
        b.release(3);
        assert_eq!(b.len(), 1);
    }
}
