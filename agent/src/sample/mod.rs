//! RNIC throughput sampling (SkeletonHunter §5.1: the controller infers a training task's
//! traffic skeleton from the burst cycles of its RNICs' throughput).
//!
//! Every `sample_interval` a `sampler` thread reads each RNIC's cumulative byte
//! counters ([`counters`]: RDMA port counters for verbs RNICs, the interface statistics
//! of `/proc/thread-self/net/dev` for UDP RNICs) and turns them into per-interval deltas
//! ([`sampler`]) kept in a bounded buffer ([`series`]); a `sample-upload` thread POSTs
//! them to the controller every `sample_upload` ([`upload`]), so a slow controller
//! never delays a reading.

pub(crate) mod counters;
pub(crate) mod sampler;
pub(crate) mod series;
pub(crate) mod upload;

use crate::control::SharedRegistration;
use crate::stats::Counters;
use crate::stop::StopSignal;
use counters::CounterSource;
use sampler::Sampler;
use series::SeriesBuffer;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use upload::SampleUploader;

/// Samples buffered at most (rows × RNICs): 4 MiB of deltas.
const MAX_BUFFERED_SAMPLES: usize = 262_144;
/// Time span the buffer covers when the controller is unreachable (if the bound allows).
const BUFFER_SPAN: Duration = Duration::from_secs(3_600);
/// Timeout of a regular upload.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Budget of the last upload at shutdown.
const FINAL_UPLOAD_TIMEOUT: Duration = Duration::from_secs(2);

/// What the sampler needs to know besides its RNICs.
#[derive(Debug, Clone)]
pub(crate) struct SamplerOptions {
    /// Sampling interval (at most 1 s).
    pub interval: Duration,
    /// Upload period.
    pub upload_period: Duration,
    /// Controller base URL.
    pub controller_url: String,
    /// Agent epoch.
    pub epoch: u32,
}

/// One sampled RNIC: its position in the configuration (to find its controller id) and
/// where its counters are.
#[derive(Debug, Clone)]
pub(crate) struct SampledRnic {
    /// Index of the RNIC in `AgentConfig::rnics`.
    pub config_index: usize,
    /// Its counters.
    pub source: CounterSource,
}

/// The running sampler and uploader threads.
#[derive(Debug)]
pub(crate) struct SamplerHandle {
    stop_sampling: Arc<StopSignal>,
    stop_upload: Arc<StopSignal>,
    sampler: JoinHandle<()>,
    uploader: JoinHandle<()>,
}

/// Rows the buffer holds for `width` RNICs sampled every `interval`.
fn buffer_rows(width: usize, interval: Duration) -> usize {
    let span = (BUFFER_SPAN.as_millis() / interval.as_millis().max(1)) as usize;
    span.min(MAX_BUFFERED_SAMPLES / width.max(1)).max(1)
}

impl SamplerHandle {
    /// Starts sampling `rnics` now; uploads begin once `registration` is set.
    pub(crate) fn spawn(
        opts: SamplerOptions,
        rnics: Vec<SampledRnic>,
        registration: SharedRegistration,
        counters: Arc<Counters>,
    ) -> std::io::Result<Self> {
        let columns = rnics.iter().map(|r| r.config_index).collect();
        let mut sampler =
            Sampler::new(rnics.into_iter().map(|r| r.source).collect(), opts.interval);
        let buffer = Arc::new(Mutex::new(SeriesBuffer::new(buffer_rows(
            sampler.width(),
            opts.interval,
        ))));
        let mut uploader = SampleUploader::new(
            &opts.controller_url,
            opts.epoch,
            opts.interval,
            columns,
            buffer.clone(),
            counters.clone(),
            UPLOAD_TIMEOUT,
        );
        let stop_sampling = Arc::new(StopSignal::default());
        let stop_upload = Arc::new(StopSignal::default());
        let stop = stop_sampling.clone();
        let c = counters;
        let sampler = std::thread::Builder::new()
            .name("sampler".into())
            .spawn(move || {
                while !stop.sleep(sampler.next_due().saturating_duration_since(Instant::now())) {
                    if let Some(row) = sampler.read(Instant::now(), &c) {
                        c.samples_taken.fetch_add(row.bytes.len() as u64, Relaxed);
                        let dropped = buffer.lock().unwrap_or_else(|p| p.into_inner()).push(row);
                        c.samples_dropped.fetch_add(dropped, Relaxed);
                    }
                }
            })?;
        let stop = stop_upload.clone();
        let current = move || {
            registration
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        };
        let uploader = std::thread::Builder::new()
            .name("sample-upload".into())
            .spawn(move || {
                while !stop.sleep(opts.upload_period) {
                    if let Some(reg) = current() {
                        uploader.upload_all(&reg);
                    }
                }
                if let Some(reg) = current() {
                    uploader.set_timeout(FINAL_UPLOAD_TIMEOUT);
                    uploader.upload_all(&reg);
                }
            })?;
        Ok(Self {
            stop_sampling,
            stop_upload,
            sampler,
            uploader,
        })
    }

    /// Stops sampling, uploads what is buffered (≤ 2 s) and joins both threads.
    pub(crate) fn stop(self) -> anyhow::Result<()> {
        self.stop_sampling.stop();
        let sampled = self
            .sampler
            .join()
            .map_err(|_| anyhow::anyhow!("sampler thread panicked"));
        self.stop_upload.stop();
        let uploaded = self
            .uploader
            .join()
            .map_err(|_| anyhow::anyhow!("sample upload thread panicked"));
        sampled.and(uploaded)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn buffer_covers_an_hour_within_the_memory_bound() {
        let s = Duration::from_secs(1);
        assert_eq!(buffer_rows(8, s), 3_600);
        assert_eq!(buffer_rows(64, Duration::from_millis(10)), 4_096);
        assert_eq!(buffer_rows(0, s), 3_600);
    }
}
