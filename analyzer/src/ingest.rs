//! The hot path: a validated batch -> de-duplicated, attributed, bucketed records.
//!
//! Touches no database and allocates nothing per record: RNICs resolve through
//! the dense [`Registry`] snapshot and records land in reusable period slots.

use crate::blame::ServiceFlows;
use crate::metrics::TorPairMetrics;
use crate::registry::Registry;
use crate::window::{Placement, Window};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::UploadAck;
use rocemesh_proto::batch::{Batch, BatchError};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use thiserror::Error;

/// Recent (epoch, batch_seq) pairs remembered per host to recognise retries.
const DEDUP_WINDOW: usize = 64;
/// Hosts tracked at most; beyond, the longest-silent host is forgotten.
const MAX_HOSTS: usize = 100_000;

/// Why an upload was refused as a whole.
#[derive(Debug, Error)]
pub enum IngestError {
    /// The body is not a valid result batch.
    #[error(transparent)]
    Batch(#[from] BatchError),
}

/// Batches refused whole, by reason (stable JSON field names).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RejectedBatches {
    /// Shorter than a header.
    pub truncated: u64,
    /// Not a batch at all.
    pub bad_magic: u64,
    /// Unsupported version or record length.
    pub bad_version: u64,
    /// Count disagrees with the body length.
    pub bad_length: u64,
    /// Unknown header flags.
    pub bad_flags: u64,
    /// A record field out of range.
    pub bad_record: u64,
    /// Malformed path section.
    pub bad_paths: u64,
    /// Body above `MAX_BATCH_BYTES` (HTTP 413).
    pub too_large: u64,
    /// Wrong Content-Type (HTTP 415).
    pub bad_content_type: u64,
    /// Naming a host the caller did not prove to be (HTTP 403).
    #[serde(default)]
    pub wrong_host: u64,
}

/// Why the HTTP layer refused an upload before ingest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Body above the limit.
    TooLarge,
    /// Wrong Content-Type.
    ContentType,
    /// The batch's host was not proven by the caller's upload key.
    WrongHost,
}

impl RejectedBatches {
    fn count(&mut self, e: &BatchError) {
        let n = match e {
            BatchError::Truncated(_) => &mut self.truncated,
            BatchError::Magic => &mut self.bad_magic,
            BatchError::Version { .. } => &mut self.bad_version,
            BatchError::Length { .. } => &mut self.bad_length,
            BatchError::Flags(_) => &mut self.bad_flags,
            BatchError::Record { .. } => &mut self.bad_record,
            BatchError::Paths(_) => &mut self.bad_paths,
        };
        *n += 1;
    }
}

/// Records dropped from accepted batches, by reason.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DroppedRecords {
    /// Prober or target RNIC not in the registry.
    pub unknown_rnic: u64,
    /// For a period already finalized.
    pub late: u64,
    /// More than one period ahead of the analyzer's clock.
    pub future: u64,
}

/// Upload state of one agent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostStats {
    /// Host id from the batch header.
    pub host_id: u32,
    /// Epoch of its latest batch.
    pub epoch: u32,
    /// When its latest batch arrived, ms since the Unix epoch.
    pub last_upload_ms: i64,
    /// Records the agent reports having dropped (cumulative in its epoch).
    pub agent_dropped: u64,
}

/// `GET /api/v1/ingest/stats`: what came in and what was thrown away, and why.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IngestStats {
    /// Batches taken (not rejected, not duplicates).
    pub batches: u64,
    /// Records aggregated.
    pub records_accepted: u64,
    /// Batches refused whole.
    pub rejected_batches: RejectedBatches,
    /// Retried batches recognised and ignored.
    pub duplicate_batches: u64,
    /// Records dropped from taken batches.
    pub dropped_records: DroppedRecords,
    /// Task-pair outcomes not kept: results of a task's RNIC pair new to a period that
    /// already held `analyzer.max_task_pairs` pairs (they still count in every other scope).
    #[serde(default)]
    pub task_pairs_unstored: u64,
    /// Per uploading host, by host id.
    pub hosts: Vec<HostStats>,
}

#[derive(Debug)]
struct HostState {
    stats: HostStats,
    recent: VecDeque<(u32, u64)>,
}

/// Everything ingest mutates, behind one lock so a batch is applied atomically.
#[derive(Debug)]
pub(crate) struct IngestState {
    /// Open periods.
    pub window: Window,
    hosts: HashMap<u32, HostState>,
    batches: u64,
    records_accepted: u64,
    rejected: RejectedBatches,
    duplicates: u64,
    dropped: DroppedRecords,
    tor_pairs: TorPairMetrics,
    /// Most task pairs one period keeps apart.
    max_task_pairs: usize,
    task_pairs_unstored: u64,
    /// Service 5-tuples seen lately (flow blame).
    pub service_flows: ServiceFlows,
}

/// Result of [`IngestState::apply`].
#[derive(Debug)]
pub(crate) struct Applied {
    /// The reply to the agent.
    pub ack: UploadAck,
    /// Some record named an RNIC the registry does not know (worth a refresh).
    pub unknown_rnic: bool,
}

impl IngestState {
    /// Fresh counters around a window, with per-ToR-pair series for at most
    /// `max_tor_pairs` pairs.
    pub(crate) fn new(window: Window, max_tor_pairs: usize, max_task_pairs: usize) -> Self {
        Self {
            max_task_pairs,
            task_pairs_unstored: 0,
            window,
            hosts: HashMap::new(),
            batches: 0,
            records_accepted: 0,
            rejected: RejectedBatches::default(),
            duplicates: 0,
            dropped: DroppedRecords::default(),
            tor_pairs: TorPairMetrics::new(max_tor_pairs),
            service_flows: ServiceFlows::default(),
        }
    }

    /// Counts a batch decode failure.
    pub(crate) fn reject(&mut self, e: &BatchError) {
        self.rejected.count(e);
    }

    /// Counts an upload refused by the HTTP layer.
    pub(crate) fn reject_upload(&mut self, why: Refusal) {
        *match why {
            Refusal::TooLarge => &mut self.rejected.too_large,
            Refusal::ContentType => &mut self.rejected.bad_content_type,
            Refusal::WrongHost => &mut self.rejected.wrong_host,
        } += 1;
    }

    /// Applies a validated batch received at `now_ms`.
    pub(crate) fn apply(&mut self, batch: &Batch<'_>, registry: &Registry, now_ms: i64) -> Applied {
        let h = batch.header;
        if self.note_upload(h.host_id, h.epoch, h.batch_seq, h.dropped, now_ms) {
            self.duplicates += 1;
            return Applied {
                ack: UploadAck {
                    accepted: 0,
                    dropped: 0,
                    duplicate: true,
                    instance: 0,
                },
                unknown_rnic: false,
            };
        }
        self.batches += 1;
        let mut dropped = DroppedRecords::default();
        let mut accepted = 0u64;
        let mut cached: Option<(i64, Placement)> = None;
        for r in batch.records() {
            let (Some(prober), Some(target)) =
                (registry.get(r.prober_rnic), registry.get(r.target_rnic))
            else {
                dropped.unknown_rnic += 1;
                continue;
            };
            let p = self.window.period_of((r.send_unix_ns / 1_000_000) as i64);
            let placement = match cached {
                Some((cp, placement)) if cp == p => placement,
                _ => {
                    let placement = self.window.place(p, now_ms);
                    if let Placement::Open(i) = placement {
                        self.window.slot_mut(i).ensure_rnics(registry.id_bound());
                    }
                    cached = Some((p, placement));
                    placement
                }
            };
            match placement {
                Placement::Open(i) => {
                    let slot = self.window.slot_mut(i);
                    slot.add(&r, prober.tor, target.tor);
                    self.task_pairs_unstored += slot.add_service(
                        &r,
                        registry.tasks_of(r.prober_rnic),
                        registry.tasks_of(r.target_rnic),
                        self.max_task_pairs,
                    );
                    if r.class == ProbeClass::Service {
                        self.service_flows.note(&r, now_ms);
                    }
                    self.tor_pairs.observe(&r, prober.tor, target.tor);
                    accepted += 1;
                }
                Placement::Late => dropped.late += 1,
                Placement::Future => dropped.future += 1,
            }
        }
        self.records_accepted += accepted;
        self.dropped.unknown_rnic += dropped.unknown_rnic;
        self.dropped.late += dropped.late;
        self.dropped.future += dropped.future;
        Applied {
            ack: UploadAck {
                accepted,
                dropped: dropped.unknown_rnic + dropped.late + dropped.future,
                duplicate: false,
                instance: 0,
            },
            unknown_rnic: dropped.unknown_rnic > 0,
        }
    }

    /// Records an upload from a host; true when this (epoch, seq) was seen already.
    fn note_upload(
        &mut self,
        host_id: u32,
        epoch: u32,
        seq: u64,
        agent_dropped: u64,
        now_ms: i64,
    ) -> bool {
        if !self.hosts.contains_key(&host_id) && self.hosts.len() >= MAX_HOSTS {
            let silent = self
                .hosts
                .values()
                .min_by_key(|s| s.stats.last_upload_ms)
                .map(|s| s.stats.host_id);
            if let Some(silent) = silent {
                self.hosts.remove(&silent);
            }
        }
        let host = self.hosts.entry(host_id).or_insert_with(|| HostState {
            stats: HostStats {
                host_id,
                epoch,
                last_upload_ms: now_ms,
                agent_dropped,
            },
            recent: VecDeque::with_capacity(DEDUP_WINDOW),
        });
        host.stats.last_upload_ms = now_ms;
        if host.recent.contains(&(epoch, seq)) {
            return true;
        }
        if host.recent.len() == DEDUP_WINDOW {
            host.recent.pop_front();
        }
        host.recent.push_back((epoch, seq));
        host.stats.epoch = epoch;
        host.stats.agent_dropped = agent_dropped;
        false
    }

    /// Snapshot of the counters.
    pub(crate) fn stats(&self) -> IngestStats {
        let mut hosts: Vec<HostStats> = self.hosts.values().map(|h| h.stats.clone()).collect();
        hosts.sort_unstable_by_key(|h| h.host_id);
        IngestStats {
            hosts,
            ..self.totals()
        }
    }

    /// The counters without the per-host list (cheap enough for every scrape).
    pub(crate) fn totals(&self) -> IngestStats {
        IngestStats {
            batches: self.batches,
            records_accepted: self.records_accepted,
            rejected_batches: self.rejected.clone(),
            duplicate_batches: self.duplicates,
            dropped_records: self.dropped.clone(),
            task_pairs_unstored: self.task_pairs_unstored,
            hosts: Vec::new(),
        }
    }

    /// Cumulative per-ToR-pair counts and delay histograms (`/metrics`).
    pub(crate) fn tor_pairs(&self) -> &TorPairMetrics {
        &self.tor_pairs
    }
}
