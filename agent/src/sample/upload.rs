//! POSTs buffered throughput samples to the controller (`/api/v1/throughput`): accepted
//! runs are released, 4xx runs dropped and counted, anything else kept for the next try.

use super::series::{SeriesBuffer, UploadHeader};
use crate::control::Registration;
use crate::http_client::http_agent;
use crate::stats::Counters;
use crate::upload::{UploadOutcome, outcome_of};
use rocemesh_proto::api::API_PREFIX;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most intervals in one upload (10 minutes at the default interval).
pub(crate) const MAX_UPLOAD_ROWS: usize = 600;

/// Sends the sample buffer to the controller.
#[derive(Debug)]
pub(crate) struct SampleUploader {
    http: ureq::Agent,
    url: String,
    epoch: u32,
    interval_ms: u32,
    /// Configuration index of the RNIC of every column.
    columns: Vec<usize>,
    buffer: Arc<Mutex<SeriesBuffer>>,
    counters: Arc<Counters>,
}

impl SampleUploader {
    /// An uploader to `controller_url` of rows whose columns are the RNICs at configuration
    /// indexes `columns`.
    pub(crate) fn new(
        controller_url: &str,
        epoch: u32,
        interval: Duration,
        columns: Vec<usize>,
        buffer: Arc<Mutex<SeriesBuffer>>,
        counters: Arc<Counters>,
        timeout: Duration,
    ) -> Self {
        Self {
            http: http_agent(timeout),
            url: format!(
                "{}{API_PREFIX}/throughput",
                controller_url.trim_end_matches('/')
            ),
            epoch,
            interval_ms: u32::try_from(interval.as_millis()).unwrap_or(u32::MAX),
            columns,
            buffer,
            counters,
        }
    }

    /// Replaces the HTTP client (a short timeout for the last upload at shutdown).
    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.http = http_agent(timeout);
    }

    /// Sends every buffered run, oldest first, until the buffer is empty or a POST is
    /// not accepted. Returns the last outcome (`Accepted` when there was nothing to send).
    pub(crate) fn upload_all(&mut self, reg: &Registration) -> UploadOutcome {
        let header = UploadHeader {
            host_id: reg.host_id,
            epoch: self.epoch,
            interval_ms: self.interval_ms,
        };
        let ids: Vec<Option<u32>> = self
            .columns
            .iter()
            .map(|&c| reg.rnic_ids.get(c).copied().flatten())
            .collect();
        loop {
            let pending = {
                let buf = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
                buf.front(header, &ids, MAX_UPLOAD_ROWS)
            };
            // Nothing buffered, or no RNIC id yet: the rows wait (bounded) for the next try.
            let Some(p) = pending else {
                return UploadOutcome::Accepted;
            };
            let sent = self.http.post(&self.url).send_json(&p.upload);
            let outcome = outcome_of(sent, "throughput samples");
            match outcome {
                UploadOutcome::Accepted => {
                    self.counters.sample_uploads.fetch_add(1, Relaxed);
                }
                // Sample runs are far below any body limit: a 413 means a server that
                // takes none, like a malformed answer.
                UploadOutcome::Rejected | UploadOutcome::TooLarge => {
                    self.counters.sample_uploads_rejected.fetch_add(1, Relaxed);
                    self.counters.samples_dropped.fetch_add(p.samples, Relaxed);
                }
                UploadOutcome::Retry => {
                    self.counters.sample_upload_failures.fetch_add(1, Relaxed);
                    return outcome;
                }
            }
            self.buffer
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .release(p.last_index);
        }
    }
}
