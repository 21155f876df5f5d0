//! What ingest hands to diagnosis: recent results (bounded, in sealed chunks a
//! tick can share without copying), traced paths not yet filed, and per-host
//! upload liveness with agent restarts (epoch changes).

use rocemesh_proto::ProbeResult;
use rocemesh_proto::path::TracedPath;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Results per sealed chunk.
const CHUNK: usize = 16_384;
/// Epoch changes remembered per host.
const MAX_RESTARTS: usize = 4;
/// Hosts tracked at most (as ingest).
const MAX_HOSTS: usize = 100_000;

/// Upload liveness of one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Liveness {
    /// Epoch of its latest upload.
    pub epoch: u32,
    /// When its latest upload arrived, ms since the Unix epoch.
    pub last_upload_ms: i64,
    /// When its first upload (as this analyzer saw it) arrived.
    pub first_upload_ms: i64,
    /// Agent restarts seen: (last upload of the old epoch, first of the new one).
    pub restarts: VecDeque<(i64, i64)>,
}

/// Recent results and host liveness, appended by ingest.
#[derive(Debug)]
pub struct Intake {
    sealed: VecDeque<(i64, Arc<Vec<ProbeResult>>)>,
    open: Vec<ProbeResult>,
    total: usize,
    max_records: usize,
    paths: VecDeque<TracedPath>,
    max_paths: usize,
    hosts: HashMap<u32, Liveness>,
}

impl Intake {
    /// Holds at most `max_records` results and `max_paths` unfiled paths.
    pub fn new(max_records: usize, max_paths: usize) -> Self {
        Self {
            sealed: VecDeque::new(),
            open: Vec::new(),
            total: 0,
            max_records,
            paths: VecDeque::new(),
            max_paths,
            hosts: HashMap::new(),
        }
    }

    /// Queues uploaded paths for the next tick (the oldest go beyond the bound).
    pub fn add_paths(&mut self, paths: &[TracedPath]) {
        self.paths.extend(paths.iter().cloned());
        while self.paths.len() > self.max_paths {
            self.paths.pop_front();
        }
    }

    /// The paths queued since the last call, oldest first.
    pub fn take_paths(&mut self) -> VecDeque<TracedPath> {
        std::mem::take(&mut self.paths)
    }

    /// Notes an upload from `host_id` at `now_ms` (also a heartbeat without records).
    pub fn note_upload(&mut self, host_id: u32, epoch: u32, now_ms: i64) {
        if !self.hosts.contains_key(&host_id) && self.hosts.len() >= MAX_HOSTS {
            return;
        }
        let h = self.hosts.entry(host_id).or_insert(Liveness {
            epoch,
            last_upload_ms: now_ms,
            first_upload_ms: now_ms,
            restarts: VecDeque::new(),
        });
        if h.epoch != epoch {
            if h.restarts.len() == MAX_RESTARTS {
                h.restarts.pop_front();
            }
            h.restarts.push_back((h.last_upload_ms, now_ms));
            h.epoch = epoch;
        }
        h.last_upload_ms = h.last_upload_ms.max(now_ms);
    }

    /// Appends results received at `now_ms`.
    pub fn extend(&mut self, records: impl Iterator<Item = ProbeResult>, now_ms: i64) {
        for r in records {
            self.open.push(r);
            self.total += 1;
            if self.open.len() == CHUNK {
                self.seal(now_ms);
            }
        }
        while self.total > self.max_records {
            match self.sealed.pop_front() {
                Some((_, c)) => self.total -= c.len(),
                None => {
                    let excess = self.total - self.max_records;
                    self.open.drain(..excess);
                    self.total -= excess;
                }
            }
        }
    }

    fn seal(&mut self, now_ms: i64) {
        if !self.open.is_empty() {
            let chunk = std::mem::replace(&mut self.open, Vec::with_capacity(CHUNK));
            self.sealed.push_back((now_ms, Arc::new(chunk)));
        }
    }

    /// Every result received after `since_ms` (and a few before), in chunks; older
    /// chunks are dropped.
    pub fn snapshot(&mut self, since_ms: i64, now_ms: i64) -> Vec<Arc<Vec<ProbeResult>>> {
        self.seal(now_ms);
        while self.sealed.front().is_some_and(|(at, _)| *at < since_ms) {
            if let Some((_, c)) = self.sealed.pop_front() {
                self.total -= c.len();
            }
        }
        self.sealed.iter().map(|(_, c)| Arc::clone(c)).collect()
    }

    /// Liveness of every host that uploaded.
    pub fn hosts(&self) -> &HashMap<u32, Liveness> {
        &self.hosts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::{ProbeClass, ProbeStatus, TimestampSource};

    fn rec(seq: u32) -> ProbeResult {
        ProbeResult {
            prober_rnic: 1,
            target_rnic: 2,
            seq,
            target_qpn: 7,
            send_unix_ns: 0,
            network_rtt_ns: 1,
            prober_delay_ns: 1,
            responder_delay_ns: 1,
            app_rtt_ns: 1,
            src_port: 1,
            dst_port: 2,
            class: ProbeClass::TorMesh,
            status: ProbeStatus::Ok,
            ts_source: TimestampSource::Software,
        }
    }

    #[test]
    fn bounded_and_aged_out() {
        let mut i = Intake::new(CHUNK * 2, 10);
        i.extend((0..CHUNK as u32 * 3).map(rec), 1_000);
        let n: usize = i.snapshot(0, 1_000).iter().map(|c| c.len()).sum();
        assert_eq!(n, CHUNK * 2, "the oldest chunk went");
        i.extend((0..10).map(rec), 5_000);
        let chunks = i.snapshot(2_000, 5_000);
        assert_eq!(chunks.iter().map(|c| c.len()).sum::<usize>(), 10);
        assert_eq!(chunks[0][0].seq, 0);
    }

    #[test]
    fn epoch_changes_are_restarts() {
        let mut i = Intake::new(1_000, 10);
        i.note_upload(3, 1, 1_000);
        i.note_upload(3, 1, 2_000);
        i.note_upload(3, 2, 9_000);
        let h = &i.hosts()[&3];
        assert_eq!(
            (h.epoch, h.first_upload_ms, h.last_upload_ms),
            (2, 1_000, 9_000)
        );
        assert_eq!(h.restarts, [(2_000, 9_000)]);
    }

    #[test]
    fn unfiled_paths_are_bounded_and_taken_once() {
        let mut i = Intake::new(1_000, 3);
        let p = |port: u16| TracedPath {
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.1.1".parse().unwrap(),
            src_port: port,
            dst_port: 4791,
            traced_at_unix_ns: 1,
            reached: true,
            ack_direction: false,
            hops: Vec::new(),
        };
        i.add_paths(&[p(1), p(2)]);
        i.add_paths(&[p(3), p(4)]);
        let taken: Vec<u16> = i.take_paths().iter().map(|t| t.src_port).collect();
        assert_eq!(taken, [2, 3, 4]);
        assert!(i.take_paths().is_empty());
    }
}
