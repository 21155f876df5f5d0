//! What ingest hands to diagnosis besides the results (which go into the window at
//! once, [`super::flows`]): traced paths not yet filed, and per-host upload liveness
//! with agent restarts (epoch changes).

use rocemesh_proto::path::TracedPath;
use std::collections::{HashMap, VecDeque};
/// Epoch changes remembered per host.
const MAX_RESTARTS: usize = 4;
/// Hosts tracked at most (as ingest).
const MAX_HOSTS: usize = 100_000;

/// Upload liveness of one agent (shared between the shards of a scale-out deployment).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Liveness {
    /// Epoch of its latest upload.
    pub epoch: u32,
    /// When its latest upload arrived, ms since the Unix epoch.
    pub last_upload_ms: i64,
    /// When its first upload (as this analyzer saw it) arrived.
    pub first_upload_ms: i64,
    /// Agent restarts seen: (last upload of the old epoch, first of the new one).
    pub restarts: VecDeque<(i64, i64)>,
    /// Known only from what a previous run saved: no upload since this analyzer started.
    #[serde(default)]
    pub restored: bool,
}

/// Unfiled paths and host liveness, appended by ingest.
#[derive(Debug)]
pub(crate) struct Intake {
    /// Uploaded paths not yet filed, upload by upload (moved in, never copied).
    paths: VecDeque<Vec<TracedPath>>,
    /// Paths in `paths`.
    queued: usize,
    max_paths: usize,
    hosts: HashMap<u32, Liveness>,
}

impl Intake {
    /// Holds at most `max_paths` unfiled paths.
    pub(crate) fn new(max_paths: usize) -> Self {
        Self {
            paths: VecDeque::new(),
            queued: 0,
            max_paths,
            hosts: HashMap::new(),
        }
    }

    /// Queues uploaded paths for the next tick (the oldest go beyond the bound).
    pub(crate) fn add_paths(&mut self, paths: Vec<TracedPath>) {
        if paths.is_empty() {
            return;
        }
        self.queued += paths.len();
        self.paths.push_back(paths);
        while let Some(oldest) = self.paths.front_mut()
            && self.queued > self.max_paths
        {
            let excess = self.queued - self.max_paths;
            if oldest.len() <= excess {
                self.queued -= oldest.len();
                self.paths.pop_front();
            } else {
                oldest.drain(..excess);
                self.queued -= excess;
            }
        }
    }

    /// The paths queued since the last call, oldest first.
    pub(crate) fn take_paths(&mut self) -> impl Iterator<Item = TracedPath> + use<> {
        self.queued = 0;
        std::mem::take(&mut self.paths).into_iter().flatten()
    }

    /// Notes an upload from `host_id` at `now_ms` (also a heartbeat without records).
    pub(crate) fn note_upload(&mut self, host_id: u32, epoch: u32, now_ms: i64) {
        if !self.hosts.contains_key(&host_id) && self.hosts.len() >= MAX_HOSTS {
            return;
        }
        let h = self.hosts.entry(host_id).or_insert(Liveness {
            epoch,
            last_upload_ms: now_ms,
            first_upload_ms: now_ms,
            restarts: VecDeque::new(),
            restored: false,
        });
        h.restored = false;
        if h.epoch != epoch {
            if h.restarts.len() == MAX_RESTARTS {
                h.restarts.pop_front();
            }
            h.restarts.push_back((h.last_upload_ms, now_ms));
            h.epoch = epoch;
        }
        h.last_upload_ms = h.last_upload_ms.max(now_ms);
    }

    /// Takes the (host id, epoch, last upload ms) a previous run saved, for hosts not
    /// heard from yet: a host that went silent before a restart is still known.
    pub(crate) fn restore(&mut self, saved: Vec<(u32, u32, i64)>) {
        for (host, epoch, at) in saved {
            if self.hosts.len() >= MAX_HOSTS {
                return;
            }
            self.hosts.entry(host).or_insert(Liveness {
                epoch,
                last_upload_ms: at,
                first_upload_ms: at,
                restarts: VecDeque::new(),
                restored: true,
            });
        }
    }

    /// Hosts whose latest upload is newer than in `saved` by `every_ms` or more (or not
    /// in it), as (host id, epoch, last upload ms).
    pub(crate) fn unsaved(&self, saved: &HashMap<u32, i64>, every_ms: i64) -> Vec<(u32, u32, i64)> {
        self.hosts
            .iter()
            .filter(|(id, l)| {
                !l.restored
                    && saved
                        .get(id)
                        .is_none_or(|&at| l.last_upload_ms - at >= every_ms)
            })
            .map(|(&id, l)| (id, l.epoch, l.last_upload_ms))
            .collect()
    }

    /// Liveness of every host that uploaded.
    pub(crate) fn hosts(&self) -> &HashMap<u32, Liveness> {
        &self.hosts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn epoch_changes_are_restarts() {
        let mut i = Intake::new(10);
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
        let mut i = Intake::new(3);
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
        i.add_paths(vec![p(1), p(2)]);
        i.add_paths(vec![p(3), p(4)]);
        let taken: Vec<u16> = i.take_paths().map(|t| t.src_port).collect();
        assert_eq!(taken, [2, 3, 4]);
        assert_eq!(i.take_paths().count(), 0);
    }
}
