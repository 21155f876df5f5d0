//! Analyzer: ingests result batches, aggregates per-period SLA figures and
//! diagnoses faults.
//!
//! Agents POST binary result batches; [`Analyzer::ingest`] validates,
//! de-duplicates and aggregates them in memory (no database on the hot path)
//! into per-period cluster / ToR-pair / RNIC aggregates. [`Analyzer::tick`]
//! finalizes periods once their grace time has passed, stores their SLA rows
//! and purges old ones. [`Analyzer::diagnose`] localizes faults over a sliding
//! window ([`diagnosis`]). [`run`] drives ticks, diagnoses and registry
//! refreshes; [`router`] serves the REST API.

mod advice;
mod api;
mod blame;
mod config;
mod crossing;
mod diagnosis;
mod heap;
mod host_keys;
mod ingest;
mod latency;
mod metrics;
mod registry;
mod shard;
mod sla;
#[cfg(feature = "testing")]
pub mod testing;
mod wal;
mod window;

pub use advice::{CatalogPath, PortAdvice};
pub use api::{PathDirection, PathsReply, openapi, router, routes};
pub use config::{AnalyzerConfig, DiagnosisConfig};
pub use crossing::Crossing;
pub use diagnosis::engine::BaselineVote;
pub use diagnosis::fabric::FabricMap;
pub use ingest::{IngestError, IngestStats};
pub use metrics::router as metrics_router;
pub use shard::NODE_VERDICTS_LEASE;
pub use sla::{SlaQuery, query as query_sla};

use diagnosis::Diagnosis;
use ingest::IngestState;
use registry::{Registry, RegistryLoader};
use rocemesh_proto::api::{Problem, ProblemState, SlaRow, UploadAck};
use rocemesh_proto::batch::decode_batch;
use rocemesh_store::Db;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use window::Window;

/// Finalized periods kept in memory while the database is unreachable; beyond,
/// the oldest is dropped (with an error log) to bound memory.
const MAX_PENDING_PERIODS: usize = 16;
/// Shortest interval between two registry refreshes asked for by unknown RNICs.
const ON_DEMAND_REFRESH: Duration = Duration::from_secs(1);
/// Interval between two finalization ticks in [`run`].
const TICK_EVERY: Duration = Duration::from_secs(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read<T: Clone>(l: &RwLock<T>) -> T {
    l.read().unwrap_or_else(PoisonError::into_inner).clone()
}

fn write<T>(l: &RwLock<T>, v: T) {
    *l.write().unwrap_or_else(PoisonError::into_inner) = v;
}

/// The analyzer service: shared as `Arc<Analyzer>` by the API and the tick loop.
pub struct Analyzer {
    db: Db,
    cfg: AnalyzerConfig,
    state: Mutex<IngestState>,
    registry: RwLock<Arc<Registry>>,
    loader: tokio::sync::Mutex<RegistryLoader>,
    refresh_wanted: AtomicBool,
    refresh_notify: Notify,
    latest: RwLock<Arc<Vec<SlaRow>>>,
    /// Finalized periods not yet stored, oldest first; the lock also serializes storing.
    pending: tokio::sync::Mutex<VecDeque<Finalized>>,
    diagnosis: Diagnosis,
    tick_metrics: metrics::TickMetrics,
    /// Scale-out membership (`None`: this analyzer sees every agent).
    shards: Option<shard::Shards>,
    /// Random per-process id carried in every upload answer ([`UploadAck::instance`]).
    instance: u64,
    /// Upload key fingerprints: which host a caller may upload as.
    host_keys: host_keys::HostKeys,
    /// Bytes per second of an RNIC, for flow blame (set by the binary that runs the
    /// controller in the same process; unset, blame shares are by flow count).
    throughput: std::sync::OnceLock<Arc<blame::RateSource>>,
    /// Write-ahead log of accepted batches (`None` with several analyzer instances, whose
    /// replays would take each other's batches).
    wal: Option<wal::Wal>,
}

/// The rows of one finalized period, stored together.
struct Finalized {
    start_ms: i64,
    sla: Vec<SlaRow>,
    task_pairs: Vec<rocemesh_store::TaskPairRow>,
}

/// Why [`Analyzer::accept`] refused an upload.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// The body is not a valid batch (400).
    #[error(transparent)]
    Batch(#[from] IngestError),
    /// It could not be made durable (503: the agent keeps it and retries).
    #[error(transparent)]
    Wal(#[from] wal::WalError),
}

impl Analyzer {
    /// Validates `cfg`, loads the RNIC registry and the newest stored period
    /// (which is then never finalized again, and is what `/sla/latest` serves
    /// until the next period is finalized).
    pub async fn new(db: Db, cfg: AnalyzerConfig) -> anyhow::Result<Arc<Self>> {
        Self::new_at(db, cfg, rocemesh_proto::now_unix_ms()).await
    }

    /// [`Analyzer::new`] started at `now` (ms since the Unix epoch): a simulation in
    /// virtual time starts its analyzer at the virtual clock.
    pub async fn new_at(db: Db, cfg: AnalyzerConfig, now: i64) -> anyhow::Result<Arc<Self>> {
        cfg.validate()?;
        let mut loader = RegistryLoader::default();
        let registry = loader.load(&db).await?;
        let newest = db.sla().newest_period_start().await?;
        let latest = match newest {
            Some(start) => sla::period(&db, start).await?,
            None => Vec::new(),
        };
        let diagnosis = Diagnosis::new(&db, &cfg, now).await?;
        let shards = shard::Shards::new(&db, &cfg.scaleout)?;
        let wal = match shards {
            Some(_) => None,
            None => Some(wal::Wal::open(&db, cfg.wal_max_bytes).await?),
        };
        // After an outage (periods missed, or accepted batches waiting in the log) the
        // window catches up: agents' held results and the log fold into their periods.
        let period = cfg.period_ms as i64;
        let missed = newest.is_some_and(|start| start + 2 * period + cfg.grace_ms as i64 <= now);
        // Task-matrix problems restored above keep their evidence until the next period is
        // stored, when the newest one is recent (else they resolve as usual).
        if let Some(start) = newest.filter(|_| !missed) {
            diagnosis
                .read_task_matrices(&db, &registry, start, now + 2 * period)
                .await?;
        }
        let logged = wal.as_ref().is_some_and(|w| w.bytes() > 0);
        let hold_until = if missed || logged {
            now + cfg.catch_up.as_millis() as i64
        } else {
            i64::MIN
        };
        let window = Window::catching_up(
            cfg.period_ms,
            cfg.grace_ms,
            newest,
            cfg.backfill.as_millis() as u64,
            hold_until,
        )
        .with_refusal_hold(cfg.catch_up.as_millis() as u64);
        let analyzer = Arc::new(Self {
            shards,
            instance: rand::random::<u64>().max(1),
            host_keys: host_keys::HostKeys::default(),
            diagnosis,
            tick_metrics: metrics::TickMetrics::default(),
            state: Mutex::new(IngestState::new(
                window,
                cfg.max_tor_pair_series,
                cfg.max_task_pairs,
            )),
            registry: RwLock::new(Arc::new(registry)),
            loader: tokio::sync::Mutex::new(loader),
            refresh_wanted: AtomicBool::new(false),
            refresh_notify: Notify::new(),
            latest: RwLock::new(Arc::new(latest)),
            pending: tokio::sync::Mutex::new(VecDeque::new()),
            throughput: std::sync::OnceLock::new(),
            wal,
            db,
            cfg,
        });
        let weak = Arc::downgrade(&analyzer);
        analyzer
            .diagnosis
            .set_enricher(Box::new(move |d, registry, now_ms, candidates| {
                let Some(a) = weak.upgrade() else { return };
                let none: &blame::RateSource = &|_| None;
                let rate = a.throughput.get().map_or(none, |r| r.as_ref());
                let live = || lock(&a.state).service_flows.live(now_ms);
                blame::enrich(d, registry, live, rate, candidates);
            }));
        if analyzer.wal.is_some() {
            let replayed = wal::Wal::replay(&analyzer.db, newest, |body| {
                if let Err(e) = analyzer.ingest(body, now) {
                    tracing::warn!("unreadable batch in the write-ahead log skipped: {e}");
                }
            })
            .await?;
            if replayed > 0 {
                tracing::info!(batches = replayed, "write-ahead log replayed");
            }
        }
        Ok(analyzer)
    }

    /// Takes an upload durably: validates it, commits it to the write-ahead log, then
    /// aggregates it (off the async workers). Once this returns `Ok`, a crash loses none
    /// of its records.
    pub async fn accept(
        self: &Arc<Self>,
        body: axum::body::Bytes,
        now_unix_ms: i64,
    ) -> Result<UploadAck, AcceptError> {
        let (host, last_ms) = match decode_batch(&body) {
            Ok(b) => (
                b.header.host_id,
                b.records()
                    .map(|r| (r.send_unix_ns / 1_000_000) as i64)
                    .max(),
            ),
            Err(e) => {
                lock(&self.state).reject(&e);
                return Err(IngestError::from(e).into());
            }
        };
        // A heartbeat (no records) holds nothing worth logging.
        if let (Some(wal), Some(last_ms)) = (&self.wal, last_ms) {
            let period = self.cfg.period_ms as i64;
            let start = last_ms.div_euclid(period).saturating_mul(period);
            if let Err(e) = wal.append(&self.db, now_unix_ms, start, &body).await {
                // The agent keeps these results and sends them again: while the database
                // cannot take them, their periods wait (a full log drains only as periods
                // are stored, so that refusal holds nothing).
                if matches!(e, wal::WalError::Db(_)) {
                    lock(&self.state).window.refused(host, now_unix_ms);
                }
                return Err(e.into());
            }
        }
        let me = Arc::clone(self);
        let ingest = tokio::task::spawn_blocking(move || me.ingest(&body, now_unix_ms));
        let ack = match ingest.await {
            Ok(r) => r?,
            Err(e) => return Err(wal::WalError::Db(anyhow::anyhow!("ingest failed: {e}")).into()),
        };
        if let Some(last_ms) = last_ms {
            lock(&self.state).window.delivered(host, last_ms);
        }
        Ok(ack)
    }

    /// Takes one uploaded batch received at `now_unix_ms`: validated whole
    /// (a malformed batch changes nothing but the rejection counter), retries
    /// recognised, records aggregated in memory. Never touches the database.
    pub fn ingest(&self, body: &[u8], now_unix_ms: i64) -> Result<UploadAck, IngestError> {
        let batch = match decode_batch(body) {
            Ok(b) => b,
            Err(e) => {
                lock(&self.state).reject(&e);
                return Err(e.into());
            }
        };
        let registry = read(&self.registry);
        let applied = lock(&self.state).apply(&batch, &registry, now_unix_ms);
        self.diagnosis
            .take(batch, applied.ack.duplicate, &registry, now_unix_ms);
        if applied.unknown_rnic && !self.refresh_wanted.swap(true, Ordering::Relaxed) {
            self.refresh_notify.notify_one();
        }
        Ok(UploadAck {
            instance: self.instance,
            ..applied.ack
        })
    }

    /// Counts an upload the HTTP layer refused.
    fn count_refused_upload(&self, why: ingest::Refusal) {
        lock(&self.state).reject_upload(why);
    }

    /// Whether the caller that presented `key` may upload as host `host_id`.
    pub async fn prove_host(
        &self,
        host_id: u32,
        key: Option<&str>,
    ) -> anyhow::Result<host_keys::Proof> {
        self.host_keys.prove(&self.db, host_id, key).await
    }

    /// Finalizes every period whose grace time has passed at `now_unix_ms`,
    /// stores the rows (retrying earlier failures first), purges expired rows and reads
    /// the newest stored period's task matrices for diagnosis.
    pub async fn tick(&self, now_unix_ms: i64) -> anyhow::Result<()> {
        if let Some(newest) = self.finalize_and_store(Some(now_unix_ms)).await? {
            let rnic_before = now_unix_ms.saturating_sub(self.cfg.rnic_retention_ms as i64);
            let purged = self
                .db
                .sla()
                .purge(
                    now_unix_ms.saturating_sub(self.cfg.retention_ms as i64),
                    rnic_before,
                )
                .await?
                + self.db.task_pairs().purge(rnic_before).await?;
            tracing::debug!(purged, "expired SLA rows purged");
            // Its findings hold until the next period should have been stored.
            let period = self.cfg.period_ms as i64;
            let until = now_unix_ms + 2 * period;
            let registry = read(&self.registry);
            self.diagnosis
                .read_task_matrices(&self.db, &registry, newest, until)
                .await?;
        }
        Ok(())
    }

    /// Finalizes and stores every open period, complete or not (at shutdown).
    pub async fn flush(&self) -> anyhow::Result<()> {
        self.finalize_and_store(None).await.map(drop)
    }

    /// Returns the start of the newest period stored, when any was.
    async fn finalize_and_store(&self, now: Option<i64>) -> anyhow::Result<Option<i64>> {
        let mut pending = self.pending.lock().await;
        let registry = read(&self.registry);
        let period_ms = self.cfg.period_ms as i64;
        // Which side dropped what: read from the problems open now, once a period closes.
        let mut sides: Option<sla::DropSides> = None;
        lock(&self.state).window.finalize(now, |p| {
            let sides = sides.get_or_insert_with(|| {
                sla::DropSides::from_problems(&self.problems(ProblemState::Active), &registry)
            });
            pending.push_back(Finalized {
                start_ms: p.index * period_ms,
                sla: sla::period_rows(p, period_ms, &registry, sides),
                task_pairs: sla::task_pair_rows(p, period_ms, &registry),
            });
        });
        if let Some(newest) = pending.back() {
            write(&self.latest, Arc::new(newest.sla.clone()));
        }
        while pending.len() > MAX_PENDING_PERIODS {
            if let Some(lost) = pending.pop_front() {
                tracing::error!(
                    period_start_ms = lost.start_ms,
                    rows = lost.sla.len() + lost.task_pairs.len(),
                    "SLA period dropped: database unreachable too long"
                );
            }
        }
        let mut stored = None;
        while let Some(f) = pending.front() {
            self.db.sla().persist(&f.sla).await?;
            self.db.task_pairs().persist(&f.task_pairs).await?;
            stored = Some(f.start_ms);
            pending.pop_front();
        }
        // Every finalized period is stored now: the batches they hold are durable there.
        let through = lock(&self.state).window.finalized_through_ms();
        if let (Some(wal), Some(through)) = (&self.wal, through) {
            wal.release(&self.db, through).await?;
        }
        Ok(stored)
    }

    /// Diagnoses the sliding window ending at `now_unix_ms` (off the async
    /// workers), then stores the problems that are new, changed or resolved.
    pub async fn diagnose(self: &Arc<Self>, now_unix_ms: i64) -> anyhow::Result<()> {
        if let Some(shards) = &self.shards {
            return shards.diagnose(self, now_unix_ms).await;
        }
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let registry = read(&me.registry);
            me.diagnosis.analyze(&registry, now_unix_ms);
        })
        .await?;
        self.diagnosis.persist(&self.db, now_unix_ms).await
    }

    /// Gives flow blame the RNICs' throughput (once; later calls are ignored).
    pub fn set_throughput(&self, rate: Arc<blame::RateSource>) {
        let _ = self.throughput.set(rate);
    }

    /// The active problems of the whole deployment, for a writer outside the analyzer that
    /// exactly one instance may run (Kubernetes node verdicts, lease `lease`): this
    /// process's when it runs alone; in a scale-out deployment, every shard's (from the
    /// database) while this instance holds the lease, else `None`: another instance writes,
    /// and one that saw only its own shards would clear the others' verdicts.
    pub async fn deployment_problems(
        &self,
        lease: &str,
        now_ms: i64,
    ) -> anyhow::Result<Option<Vec<Problem>>> {
        let Some(shards) = &self.shards else {
            return Ok(Some(self.problems(ProblemState::Active)));
        };
        if !shards.lead(&self.db, lease, now_ms).await? {
            return Ok(None);
        }
        self.db.problems().load_active().await.map(Some)
    }

    /// Scale-out membership, when this is one of several analyzer instances.
    pub fn shards(&self) -> Option<&shard::Shards> {
        self.shards.as_ref()
    }

    /// The diagnosis state (traced paths and fabric map), read by the impact assessment.
    pub fn diagnosis(&self) -> &Diagnosis {
        &self.diagnosis
    }

    /// Problems as diagnosed in this process: every active one, or the recently
    /// resolved ones (the database keeps them all).
    pub fn problems(&self, state: ProblemState) -> Vec<Problem> {
        self.diagnosis.problems(state)
    }

    /// R-Pingmesh Algorithm 1 on the latest diagnosis' data: components with votes.
    pub fn baseline_votes(&self) -> Arc<Vec<BaselineVote>> {
        self.diagnosis.baseline()
    }

    /// Re-reads the RNIC registry from the database (the binary may also call it
    /// right after a registration it knows about).
    pub async fn refresh_registry(&self) -> anyhow::Result<()> {
        let registry = self.loader.lock().await.load(&self.db).await?;
        write(&self.registry, Arc::new(registry));
        Ok(())
    }

    /// Ingest counters and per-host upload state.
    pub fn stats(&self) -> IngestStats {
        lock(&self.state).stats()
    }

    /// Per-ToR-pair metrics and ingest counters, copied in one hold of the ingest lock.
    pub fn metrics_snapshot(&self) -> (metrics::TorPairMetrics, IngestStats) {
        let state = lock(&self.state);
        (state.tor_pairs().clone(), state.totals())
    }

    /// Durations of finalization ticks and diagnoses.
    pub fn tick_metrics(&self) -> &metrics::TickMetrics {
        &self.tick_metrics
    }

    /// The current RNIC registry snapshot.
    pub fn registry(&self) -> Arc<Registry> {
        read(&self.registry)
    }

    /// Rows of the most recently finalized period.
    pub fn latest(&self) -> Arc<Vec<SlaRow>> {
        read(&self.latest)
    }

    /// The database the analyzer stores into.
    pub fn db(&self) -> &Db {
        &self.db
    }
}

/// Drives the analyzer until `cancel`: a finalization tick every second, a
/// diagnosis every `diagnosis.tick_ms`, a registry refresh every
/// `registry_refresh_ms` (and within a second of an unknown RNIC showing up),
/// then a final flush.
pub async fn run(analyzer: Arc<Analyzer>, cancel: CancellationToken) {
    let refresh_every = Duration::from_millis(analyzer.cfg.registry_refresh_ms);
    let diagnose_every = Duration::from_millis(analyzer.cfg.diagnosis.tick_ms);
    let poll = diagnose_every.min(Duration::from_millis(250));
    let (mut last_refresh, mut last_tick) = (Instant::now(), Instant::now());
    let mut last_diagnosis = Instant::now();
    let mut last_balance: Option<Instant> = None;
    loop {
        if let Some(s) = &analyzer.shards
            && last_balance.is_none_or(|t| t.elapsed() >= s.renew_every())
        {
            last_balance = Some(Instant::now());
            if let Err(e) = s.balance(&analyzer, rocemesh_proto::now_unix_ms()).await {
                tracing::warn!("analyzer shard balancing failed: {e:#}");
            }
        }
        tokio::select! {
            () = cancel.cancelled() => break,
            () = analyzer.refresh_notify.notified() => {}
            () = tokio::time::sleep(poll) => {}
        }
        let since = last_refresh.elapsed();
        let wanted = analyzer.refresh_wanted.load(Ordering::Relaxed);
        if since >= refresh_every || (wanted && since >= ON_DEMAND_REFRESH) {
            analyzer.refresh_wanted.store(false, Ordering::Relaxed);
            last_refresh = Instant::now();
            if let Err(e) = analyzer.refresh_registry().await {
                tracing::warn!("analyzer registry refresh failed: {e:#}");
            }
        }
        let mut ticked = false;
        if last_tick.elapsed() >= TICK_EVERY {
            last_tick = Instant::now();
            if let Err(e) = analyzer.tick(rocemesh_proto::now_unix_ms()).await {
                tracing::warn!("analyzer tick failed: {e:#}");
            }
            analyzer.tick_metrics.finalized(last_tick.elapsed());
            ticked = true;
        }
        if last_diagnosis.elapsed() >= diagnose_every {
            last_diagnosis = Instant::now();
            if let Err(e) = analyzer.diagnose(rocemesh_proto::now_unix_ms()).await {
                tracing::warn!("analyzer diagnosis failed: {e:#}");
            }
            analyzer.tick_metrics.diagnosed(last_diagnosis.elapsed());
            ticked = true;
        }
        // Once per pass, after whichever ran (both do, most passes), outside their timings.
        if ticked {
            heap::release_free().await;
        }
    }
    if let Err(e) = analyzer.flush().await {
        tracing::error!("analyzer flush at shutdown failed: {e:#}");
    }
    if let Some(s) = &analyzer.shards
        && let Err(e) = s.leave(&analyzer.db).await
    {
        tracing::warn!("leaving the analyzer shards failed: {e:#}");
    }
}
