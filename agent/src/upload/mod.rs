//! Upload of results and traced paths to the analyzer: bounded buffering ([`buffer`]) and
//! periodic batch POSTs with retry-in-place semantics (a failed batch is re-sent with the
//! same sequence number, records and paths, after a jittered backoff; a batch the server
//! finds too large is split). Only a body the server calls malformed is dropped.

pub(crate) mod buffer;

pub use buffer::{Marks, ResultBuffer};

use crate::http_client::http_agent;
use crate::stats::Counters;
use crate::trace::PathResender;
use rocemesh_proto::api::{API_PREFIX, ErrorBody, UploadAck};
use rocemesh_proto::batch::{BatchHeader, CONTENT_TYPE};
use rocemesh_proto::host_key::{self, HostKey};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Most records in one batch.
pub(crate) const MAX_CHUNK: usize = 50_000;

/// What one POST achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadOutcome {
    /// The analyzer took the batch.
    Accepted,
    /// Transport error, 5xx, or a refusal that passes (401/403 during a token rotation,
    /// 408, 429, a route not there yet): the body is kept and re-sent after a backoff.
    Retry,
    /// 413: the body is larger than the server takes; it is split and re-sent.
    TooLarge,
    /// The server refused the body itself as malformed (400, 415, 422): sending it again
    /// cannot help, so it is dropped (counted).
    Rejected,
}

/// Where batches go, and which host they are from with the key proving it.
#[derive(Debug, Clone, Copy)]
pub struct Destination<'a> {
    /// Analyzer base URL.
    pub analyzer_url: &'a str,
    /// Controller-assigned host id (batch header).
    pub host_id: u32,
    /// The host's upload key from its registration (sent in `x-rocemesh-host-key`).
    pub host_key: Option<&'a HostKey>,
}

/// A batch that failed and must be re-sent under the same sequence number.
#[derive(Debug, Clone, Copy)]
struct Retry {
    batch_seq: u64,
    end: Marks,
}

/// Longest wait between two attempts while uploads keep failing (before jitter).
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// The backoff grows to at most this many upload periods (before jitter).
const MAX_BACKOFF_PERIODS: u32 = 4;

/// The wait before the next attempt after `failures` failed ones in a row: `period`
/// doubled per failure up to 4 periods or [`MAX_BACKOFF`] (never below `period`), times a
/// random factor in [0.5, 1.5) so agents that failed together do not come back together.
pub fn backoff(period: Duration, failures: u32) -> Duration {
    if failures == 0 {
        return period;
    }
    let grown = period.saturating_mul(1 << failures.saturating_sub(1).min(16));
    let cap = period
        .saturating_mul(MAX_BACKOFF_PERIODS)
        .min(MAX_BACKOFF)
        .max(period);
    grown.min(cap).mul_f64(rand::random_range(0.5..1.5))
}

/// Classifies the answer to a POST (`what` names the body in logs): 2xx accepted; 400, 415
/// and 422 (a malformed body) rejected; 413 too large; anything else retried. A 401 has
/// the token file read again ([`crate::http_client::reload_token`]).
pub(crate) fn outcome_of(
    sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    what: &str,
) -> UploadOutcome {
    let mut resp = match sent {
        Ok(resp) if resp.status().is_success() => return UploadOutcome::Accepted,
        Ok(resp) => resp,
        Err(e) => {
            tracing::debug!(error = %e, what, "upload failed; will retry");
            return UploadOutcome::Retry;
        }
    };
    let status = resp.status().as_u16();
    let why = resp
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_json::<ErrorBody>()
        .map_or_else(|_| "(no error body)".to_string(), |b| b.error);
    match status {
        400 | 415 | 422 => {
            tracing::warn!(status, what, error = %why, "refused as malformed; dropped");
            UploadOutcome::Rejected
        }
        413 => {
            tracing::info!(status, what, error = %why, "too large for the server; splitting");
            UploadOutcome::TooLarge
        }
        _ => {
            if status == 401 {
                crate::http_client::reload_token();
            }
            tracing::warn!(status, what, error = %why, "refused for now; kept, will retry");
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
    /// Failed attempts in a row (the backoff grows with them).
    failures: u32,
    /// Most records and paths per batch: halved when the server answers 413, grown back
    /// after each accepted batch.
    max_records: usize,
    max_paths: usize,
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
            failures: 0,
            max_records: MAX_CHUNK,
            max_paths: buffer::MAX_PATHS_PER_BATCH,
        }
    }

    /// How long to wait before the next upload: `period`, or a jittered backoff while
    /// uploads fail.
    pub fn next_delay(&self, period: Duration) -> Duration {
        backoff(period, self.failures)
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

    /// The batch `batch_seq` ending at `end` is done with (taken or dropped).
    fn settle(&mut self, batch_seq: u64, end: Marks) {
        self.buffer.release(end);
        self.retry = None;
        self.next_seq = batch_seq + 1;
    }

    /// Halves the limit a refused batch of `records` results and `paths` paths ran into;
    /// false when it holds one of each at most (nothing left to split).
    fn shrink(&mut self, records: usize, paths: usize) -> bool {
        if records > 1 {
            self.max_records = records / 2;
        } else if paths > 1 {
            self.max_paths = paths / 2;
        } else {
            return false;
        }
        true
    }

    /// Uploads everything buffered now, in chunks; an empty buffer still sends a heartbeat.
    /// Stops at the first chunk that is neither accepted nor split.
    pub fn upload_all(&mut self, to: &Destination<'_>) -> UploadOutcome {
        let until = self.buffer.end();
        loop {
            let outcome = self.upload_chunk(to, until);
            let go_on = matches!(outcome, UploadOutcome::Accepted | UploadOutcome::TooLarge);
            if !go_on || self.buffer.head().covers(&until) {
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
    pub fn upload_chunk(&mut self, to: &Destination<'_>, until: Marks) -> UploadOutcome {
        let (batch_seq, limit) = match self.retry {
            Some(r) => (r.batch_seq, r.end),
            None => (self.next_seq, until),
        };
        let header = BatchHeader {
            host_id: to.host_id,
            ..self.header(batch_seq)
        };
        let front =
            self.buffer
                .encode_front_within(header, limit, self.max_records, self.max_paths);
        let (body, end) = (front.body, front.end);
        let url = format!(
            "{}{API_PREFIX}/results",
            to.analyzer_url.trim_end_matches('/')
        );
        let mut post = self.http.post(&url).header("Content-Type", CONTENT_TYPE);
        if let Some(key) = to.host_key {
            post = post.header(host_key::HEADER, &key.0);
        }
        let sent = post.send(&body[..]);
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
        let mut outcome = outcome_of(sent, &format!("batch {batch_seq}"));
        self.note_analyzer(instance);
        if outcome == UploadOutcome::TooLarge && !self.shrink(front.records, front.paths) {
            tracing::warn!(
                batch_seq,
                "a single result or path is too large for the server; dropped"
            );
            outcome = UploadOutcome::Rejected;
        }
        match outcome {
            UploadOutcome::Accepted => {
                self.settle(batch_seq, end);
                self.failures = 0;
                self.max_records = (self.max_records * 2).min(MAX_CHUNK);
                self.max_paths = (self.max_paths * 2).min(buffer::MAX_PATHS_PER_BATCH);
                self.counters.batches_uploaded.fetch_add(1, Relaxed);
                self.counters
                    .paths_uploaded
                    .fetch_add(front.paths as u64, Relaxed);
            }
            UploadOutcome::Rejected => {
                self.settle(batch_seq, end);
                self.counters.batches_rejected.fetch_add(1, Relaxed);
                self.counters
                    .records_rejected
                    .fetch_add(front.records as u64, Relaxed);
            }
            UploadOutcome::TooLarge => {
                // The same number again with the smaller limits: nothing of it was taken.
                self.retry = Some(Retry { batch_seq, end });
            }
            UploadOutcome::Retry => {
                self.retry = Some(Retry { batch_seq, end });
                self.failures = self.failures.saturating_add(1);
                self.counters.upload_failures.fetch_add(1, Relaxed);
            }
        }
        outcome
    }
}
