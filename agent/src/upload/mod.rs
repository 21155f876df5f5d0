//! Upload of results and traced paths to the analyzer: bounded buffering ([`buffer`]) and
//! periodic batch POSTs with retry-in-place semantics (a failed batch is re-sent with the
//! same sequence number, records and paths).

pub mod buffer;

use crate::http_client::http_agent;
use crate::stats::Counters;
use crate::trace::PathResender;
use buffer::{Marks, ResultBuffer};
use rocemesh_proto::api::{API_PREFIX, ErrorBody, UploadAck};
use rocemesh_proto::batch::{BatchHeader, CONTENT_TYPE};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Most records in one batch.
pub const MAX_CHUNK: usize = 50_000;

/// What one POST achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadOutcome {
    /// The analyzer took the batch.
    Accepted,
    /// Transport error or 5xx: the records stay and the same batch_seq is retried.
    Retry,
    /// 4xx: the batch was dropped.
    Rejected,
}

/// A batch that failed and must be re-sent under the same sequence number.
#[derive(Debug, Clone, Copy)]
struct Retry {
    batch_seq: u64,
    end: Marks,
}

/// Classifies the answer to a POST (`what` names the body in logs): 2xx accepted, 4xx
/// rejected (the body is dropped: sending it again cannot help), anything else retried.
pub fn outcome_of(
    sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    what: &str,
) -> UploadOutcome {
    match sent {
        Ok(resp) if resp.status().is_success() => UploadOutcome::Accepted,
        Ok(mut resp) if resp.status().is_client_error() => {
            let why = resp
                .body_mut()
                .with_config()
                .limit(64 * 1024)
                .read_json::<ErrorBody>()
                .map_or_else(|_| "(no error body)".to_string(), |b| b.error);
            tracing::warn!(status = resp.status().as_u16(), what, error = %why, "refused; dropped");
            UploadOutcome::Rejected
        }
        Ok(resp) => {
            tracing::debug!(
                status = resp.status().as_u16(),
                what,
                "server error; will retry"
            );
            UploadOutcome::Retry
        }
        Err(e) => {
            tracing::debug!(error = %e, what, "upload failed; will retry");
            UploadOutcome::Retry
        }
    }
}

/// Sends the buffer's records as `proto::batch` bodies.
#[derive(Debug)]
pub struct Uploader {
    http: ureq::Agent,
    buffer: Arc<ResultBuffer>,
    counters: Arc<Counters>,
    epoch: u32,
    next_seq: u64,
    retry: Option<Retry>,
    /// Instance id of the analyzer that took the last batch (0: none yet).
    analyzer_instance: u64,
    /// Told when that id changes, so the fresh analyzer gets every traced path again.
    resender: Option<PathResender>,
    /// The paths were just queued again for a fresh analyzer: upload them soon, not a
    /// whole period later (its tomography waits for them).
    resend_pending: bool,
}

/// Largest upload answer read (an [`UploadAck`] is tens of bytes).
const MAX_ACK_BYTES: u64 = 64 * 1024;

impl Uploader {
    /// An uploader for agent epoch `epoch`; batch numbers start at 1.
    pub fn new(
        buffer: Arc<ResultBuffer>,
        counters: Arc<Counters>,
        epoch: u32,
        timeout: Duration,
    ) -> Self {
        Self {
            http: http_agent(timeout),
            buffer,
            counters,
            epoch,
            next_seq: 1,
            retry: None,
            analyzer_instance: 0,
            resender: None,
            resend_pending: false,
        }
    }

    /// Has the tracer upload every latest path again whenever the analyzer answering is
    /// a fresh process ([`UploadAck::instance`] changed).
    pub fn with_resender(mut self, resender: Option<PathResender>) -> Self {
        self.resender = resender;
        self
    }

    fn note_analyzer(&mut self, instance: u64) {
        if instance == 0 || instance == self.analyzer_instance {
            return;
        }
        if self.analyzer_instance != 0 {
            tracing::info!("the analyzer is a fresh instance; uploading traced paths again");
        }
        self.analyzer_instance = instance;
        if let Some(r) = &self.resender {
            r.resend();
            self.resend_pending = true;
        }
    }

    /// True once after the traced paths were queued again for a fresh analyzer: the
    /// caller uploads again shortly instead of a period later.
    pub fn take_resend_pending(&mut self) -> bool {
        std::mem::take(&mut self.resend_pending)
    }

    /// Replaces the HTTP client (e.g. a short timeout for the last upload at shutdown).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.http = http_agent(timeout);
    }

    /// Uploads everything buffered now, in chunks; an empty buffer still sends a heartbeat.
    /// Stops at the first chunk that is not accepted.
    pub fn upload_all(&mut self, analyzer_url: &str, host_id: u32) -> UploadOutcome {
        let until = self.buffer.end();
        loop {
            let outcome = self.upload_chunk(analyzer_url, host_id, until);
            if outcome != UploadOutcome::Accepted || self.buffer.head().covers(&until) {
                return outcome;
            }
        }
    }

    fn header(&self, batch_seq: u64) -> BatchHeader {
        BatchHeader {
            host_id: 0,
            epoch: self.epoch,
            batch_seq,
            dropped: self.counters.records_dropped.load(Relaxed),
        }
    }

    /// Sends one batch (the pending retry first) and settles the buffer accordingly.
    pub fn upload_chunk(
        &mut self,
        analyzer_url: &str,
        host_id: u32,
        until: Marks,
    ) -> UploadOutcome {
        let (batch_seq, limit) = match self.retry {
            Some(r) => (r.batch_seq, r.end),
            None => (self.next_seq, until),
        };
        let header = BatchHeader {
            host_id,
            ..self.header(batch_seq)
        };
        let front = self.buffer.encode_front(header, limit, MAX_CHUNK);
        let (body, end) = (front.body, front.end);
        let url = format!("{}{API_PREFIX}/results", analyzer_url.trim_end_matches('/'));
        let sent = self
            .http
            .post(&url)
            .header("Content-Type", CONTENT_TYPE)
            .send(&body[..]);
        let (sent, instance) = match sent {
            Ok(mut resp) if resp.status().is_success() => {
                let ack = resp
                    .body_mut()
                    .with_config()
                    .limit(MAX_ACK_BYTES)
                    .read_json::<UploadAck>();
                (Ok(resp), ack.map_or(0, |a| a.instance))
            }
            other => (other, 0),
        };
        let outcome = outcome_of(sent, &format!("batch {batch_seq}"));
        self.note_analyzer(instance);
        match outcome {
            UploadOutcome::Accepted | UploadOutcome::Rejected => {
                self.buffer.release(end);
                self.retry = None;
                self.next_seq = batch_seq + 1;
                let c = if outcome == UploadOutcome::Accepted {
                    &self.counters.batches_uploaded
                } else {
                    &self.counters.batches_rejected
                };
                c.fetch_add(1, Relaxed);
                if outcome == UploadOutcome::Accepted {
                    self.counters
                        .paths_uploaded
                        .fetch_add(front.paths as u64, Relaxed);
                }
            }
            UploadOutcome::Retry => {
                self.retry = Some(Retry { batch_seq, end });
                self.counters.upload_failures.fetch_add(1, Relaxed);
            }
        }
        outcome
    }
}
