//! Lock-free counters shared by every thread of the agent, and their snapshot.

use crate::probe::guard::REJECT_REASONS;
use rocemesh_proto::{PacketError, ProbeStatus, TimestampSource};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Reasons a received datagram is dropped, in counter order (`PacketError::reason`).
const DROP_REASONS: [&str; 5] = ["truncated", "oversized", "foreign", "version", "malformed"];

/// Live counters; every field is incremented with relaxed atomics from the hot path.
#[derive(Debug, Default)]
pub struct Counters {
    /// PROBE packets sent.
    pub probes_sent: AtomicU64,
    /// Probes not sent because the outstanding table was full.
    pub outstanding_overflow: AtomicU64,
    /// Sends the kernel refused (e.g. no route).
    pub send_errors: AtomicU64,
    results_by_status: [AtomicU64; 3],
    results_by_source: [AtomicU64; 3],
    /// ACK1 + ACK2 packets sent by responders.
    pub acks_sent: AtomicU64,
    /// ACK1 + ACK2 packets received that matched an outstanding probe.
    pub acks_received: AtomicU64,
    drops: [AtomicU64; 5],
    rejected: [AtomicU64; REJECT_REASONS.len()],
    /// PROBEs for a QPN or RNIC id that is not ours (dropped silently).
    pub stale_qpn: AtomicU64,
    /// ACKs that match no outstanding probe.
    pub unmatched_ack: AtomicU64,
    /// Probes/ACKs sent from the main socket because a source-port socket could not be bound.
    pub send_socket_fallbacks: AtomicU64,
    /// Results dropped because the upload buffer was full (oldest first).
    pub records_dropped: AtomicU64,
    /// Batches the analyzer accepted.
    pub batches_uploaded: AtomicU64,
    /// Upload attempts that failed with a transport error or 5xx (retried).
    pub upload_failures: AtomicU64,
    /// Batches the analyzer refused as malformed (400, 415, 422: dropped).
    pub batches_rejected: AtomicU64,
    /// Results in those refused batches (dropped).
    pub records_rejected: AtomicU64,
    /// Pinglist changes applied.
    pub pinglist_updates: AtomicU64,
    /// Successful registrations with the controller.
    pub registrations: AtomicU64,
    /// Version (ETag) of the pinglist in force.
    pub pinglist_version: Mutex<Option<String>>,
    /// Traceroutes begun.
    pub traces_started: AtomicU64,
    /// TRACE packets sent (one per TTL).
    pub trace_packets_sent: AtomicU64,
    /// ICMP errors read for TRACE packets.
    pub icmp_answers: AtomicU64,
    /// Traced paths the analyzer accepted.
    pub paths_uploaded: AtomicU64,
    /// Trace requests lost because the tracer's queue or 5-tuple table was full (the rate
    /// limit cannot keep up).
    pub trace_drops: AtomicU64,
    /// TRACE packets that reached one of our RNICs (counted and ignored).
    pub trace_received: AtomicU64,
    /// Live traced service flows of this agent's RNICs (a gauge).
    pub service_flows: AtomicU64,
    /// Service-tracing events received (RTR, destroy, process exit; every process).
    pub service_events: AtomicU64,
    /// PROBEs of class `Service` sent.
    pub service_probes: AtomicU64,
    /// Route the service tracer runs on (`kernel`, `user`, `none`, `off`, `failed`).
    pub service_route: Mutex<&'static str>,
    /// Transport in use per RNIC name (`udp` or `verbs`).
    pub transports: Mutex<BTreeMap<String, &'static str>>,
    /// Throughput samples taken (one per RNIC per interval).
    pub samples_taken: AtomicU64,
    /// Throughput uploads the controller accepted.
    pub sample_uploads: AtomicU64,
    /// Throughput uploads that failed with a transport error or 5xx (kept and retried).
    pub sample_upload_failures: AtomicU64,
    /// Throughput uploads refused with 4xx (their samples dropped).
    pub sample_uploads_rejected: AtomicU64,
    /// Throughput samples lost: oldest dropped from the full buffer, or refused with 4xx.
    pub samples_dropped: AtomicU64,
    /// RNIC byte counters that could not be read (the interval counts 0 bytes).
    pub sample_read_errors: AtomicU64,
}

impl Counters {
    /// Counts one finished probe.
    pub fn count_result(&self, status: ProbeStatus, source: TimestampSource) {
        self.results_by_status[status as usize].fetch_add(1, Ordering::Relaxed);
        self.results_by_source[source as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one dropped datagram under its reason.
    pub fn count_drop(&self, err: &PacketError) {
        let i = DROP_REASONS
            .iter()
            .position(|r| *r == err.reason())
            .unwrap_or(DROP_REASONS.len() - 1);
        self.drops[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one well-formed packet the probe guard refused (`Reject::reason`).
    pub fn count_reject(&self, reason: &str) {
        let i = REJECT_REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(REJECT_REASONS.len() - 1);
        self.rejected[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Takes a consistent-enough snapshot for reporting (`buffer_len` filled by the caller).
    pub fn snapshot(&self, buffer_len: usize) -> AgentStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let statuses = [ProbeStatus::Ok, ProbeStatus::Timeout, ProbeStatus::Ack2Lost];
        let sources = [
            TimestampSource::App,
            TimestampSource::Software,
            TimestampSource::Hardware,
        ];
        AgentStats {
            probes_sent: get(&self.probes_sent),
            outstanding_overflow: get(&self.outstanding_overflow),
            send_errors: get(&self.send_errors),
            results_by_status: statuses
                .iter()
                .map(|s| (status_name(*s), get(&self.results_by_status[*s as usize])))
                .collect(),
            results_by_ts_source: sources
                .iter()
                .map(|s| (s.as_str(), get(&self.results_by_source[*s as usize])))
                .collect(),
            acks_sent: get(&self.acks_sent),
            acks_received: get(&self.acks_received),
            drops_by_reason: DROP_REASONS
                .iter()
                .zip(&self.drops)
                .map(|(r, c)| (*r, get(c)))
                .collect(),
            rejected_by_reason: REJECT_REASONS
                .iter()
                .zip(&self.rejected)
                .map(|(r, c)| (*r, get(c)))
                .collect(),
            stale_qpn: get(&self.stale_qpn),
            unmatched_ack: get(&self.unmatched_ack),
            send_socket_fallbacks: get(&self.send_socket_fallbacks),
            buffer_len,
            records_dropped: get(&self.records_dropped),
            batches_uploaded: get(&self.batches_uploaded),
            upload_failures: get(&self.upload_failures),
            batches_rejected: get(&self.batches_rejected),
            records_rejected: get(&self.records_rejected),
            pinglist_version: self
                .pinglist_version
                .lock()
                .map(|v| v.clone())
                .unwrap_or(None),
            pinglist_updates: get(&self.pinglist_updates),
            registrations: get(&self.registrations),
            traces_started: get(&self.traces_started),
            trace_packets_sent: get(&self.trace_packets_sent),
            icmp_answers: get(&self.icmp_answers),
            paths_uploaded: get(&self.paths_uploaded),
            trace_drops: get(&self.trace_drops),
            trace_received: get(&self.trace_received),
            service_flows: get(&self.service_flows),
            service_events: get(&self.service_events),
            service_probes: get(&self.service_probes),
            service_route: *self.service_route.lock().unwrap_or_else(|p| p.into_inner()),
            transports: self
                .transports
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            samples_taken: get(&self.samples_taken),
            sample_uploads: get(&self.sample_uploads),
            sample_upload_failures: get(&self.sample_upload_failures),
            sample_uploads_rejected: get(&self.sample_uploads_rejected),
            samples_dropped: get(&self.samples_dropped),
            sample_read_errors: get(&self.sample_read_errors),
        }
    }
}

fn status_name(s: ProbeStatus) -> &'static str {
    match s {
        ProbeStatus::Ok => "ok",
        ProbeStatus::Timeout => "timeout",
        ProbeStatus::Ack2Lost => "ack2_lost",
    }
}

/// Point-in-time copy of every agent counter, for logs, `/metrics` and tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentStats {
    /// PROBE packets sent.
    pub probes_sent: u64,
    /// Probes skipped because too many were outstanding.
    pub outstanding_overflow: u64,
    /// Sends refused by the kernel.
    pub send_errors: u64,
    /// Finished probes per status (`ok`, `timeout`, `ack2_lost`).
    pub results_by_status: BTreeMap<&'static str, u64>,
    /// Finished probes per timestamp source of the RTT (`app`, `software`, `hardware`).
    pub results_by_ts_source: BTreeMap<&'static str, u64>,
    /// ACK1 + ACK2 sent.
    pub acks_sent: u64,
    /// Matched ACK1 + ACK2 received.
    pub acks_received: u64,
    /// Dropped datagrams per `PacketError::reason`.
    pub drops_by_reason: BTreeMap<&'static str, u64>,
    /// Packets refused by the probe guard per reason (`no_key`, `untagged`,
    /// `unknown_key`, `bad_tag`, `stale`, `rate_limited`): never answered nor trusted.
    pub rejected_by_reason: BTreeMap<&'static str, u64>,
    /// PROBEs for a QPN/RNIC that is not ours.
    pub stale_qpn: u64,
    /// ACKs matching no outstanding probe.
    pub unmatched_ack: u64,
    /// Sends that fell back to the main socket.
    pub send_socket_fallbacks: u64,
    /// Results waiting for upload.
    pub buffer_len: usize,
    /// Results dropped by the full buffer.
    pub records_dropped: u64,
    /// Batches accepted by the analyzer.
    pub batches_uploaded: u64,
    /// Failed upload attempts (retried).
    pub upload_failures: u64,
    /// Batches refused as malformed (dropped).
    pub batches_rejected: u64,
    /// Results in those batches.
    pub records_rejected: u64,
    /// Pinglist version in force.
    pub pinglist_version: Option<String>,
    /// Pinglist changes applied.
    pub pinglist_updates: u64,
    /// Registrations done.
    pub registrations: u64,
    /// Traceroutes begun.
    pub traces_started: u64,
    /// TRACE packets sent.
    pub trace_packets_sent: u64,
    /// ICMP answers to TRACE packets.
    pub icmp_answers: u64,
    /// Paths accepted by the analyzer.
    pub paths_uploaded: u64,
    /// Trace requests lost to full queues/tables.
    pub trace_drops: u64,
    /// TRACE packets that reached us.
    pub trace_received: u64,
    /// Live traced service flows of our RNICs.
    pub service_flows: u64,
    /// Service-tracing events received.
    pub service_events: u64,
    /// Service PROBEs sent.
    pub service_probes: u64,
    /// Route of the service tracer (`kernel`, `user`, `none`, `off`, `failed`; empty
    /// until it started).
    pub service_route: &'static str,
    /// Transport per RNIC name (`udp` or `verbs`).
    pub transports: BTreeMap<String, &'static str>,
    /// Throughput samples taken (one per RNIC per interval).
    pub samples_taken: u64,
    /// Throughput uploads accepted by the controller.
    pub sample_uploads: u64,
    /// Failed throughput uploads (retried).
    pub sample_upload_failures: u64,
    /// Throughput uploads refused with 4xx.
    pub sample_uploads_rejected: u64,
    /// Throughput samples lost to the full buffer or to 4xx.
    pub samples_dropped: u64,
    /// Unreadable RNIC byte counters.
    pub sample_read_errors: u64,
}
