//! Fault diagnosis and localization: *what broke and where*, within seconds.
//!
//! Ingest hands every accepted batch to [`Diagnosis::take`] (recent results,
//! traced paths, upload liveness). Every tick, [`Diagnosis::analyze`] runs the
//! R-Pingmesh pipeline over a sliding window ([`engine`]): host down, agent
//! restart, anomalous RNICs, host noise, then tomography of the rest
//! ([`tomography`]) over the traced paths ([`paths`]) named by the fabric map
//! ([`fabric`]). Findings become problems with a lifecycle ([`tracker`]),
//! stored in the `problems` table ([`store`]) when they change.

pub mod engine;
pub mod fabric;
pub mod intake;
pub mod paths;
pub mod store;
pub mod tomography;
pub mod tracker;

use crate::config::AnalyzerConfig;
use crate::registry::Registry;
use crate::{lock, read, write};
use engine::{BaselineVote, Engine, Inputs};
use fabric::FabricMap;
use intake::Intake;
use paths::PathStore;
use rocemesh_proto::api::{Problem, ProblemState};
use rocemesh_proto::batch::Batch;
use rocemesh_store::Db;
use std::sync::{Arc, Mutex, RwLock};
use tracker::Tracker;

/// Diagnosis state shared by ingest (intake) and the tick loop (analysis).
pub struct Diagnosis {
    window_ms: i64,
    map: FabricMap,
    started_ms: i64,
    intake: Mutex<Intake>,
    /// Paths and engine state belong to the tick alone (ingest only queues paths).
    analysis: Mutex<(PathStore, Engine)>,
    tracker: Mutex<Tracker>,
    baseline: RwLock<Arc<Vec<BaselineVote>>>,
    /// Serializes database writes of problems.
    writing: tokio::sync::Mutex<()>,
}

impl Diagnosis {
    /// Loads the fabric map and the problems left active by a previous run.
    pub async fn new(db: &Db, cfg: &AnalyzerConfig, now_ms: i64) -> anyhow::Result<Self> {
        let map = match &cfg.fabric_map {
            Some(path) => FabricMap::load(path)?,
            None => FabricMap::default(),
        };
        let d = &cfg.diagnosis;
        let mut tracker = Tracker::new(d.resolve_after_ms);
        tracker.restore(store::load_active(db).await?, now_ms);
        Ok(Self {
            window_ms: d.window_ms as i64,
            map,
            started_ms: now_ms,
            intake: Mutex::new(Intake::new(d.max_records, d.max_paths)),
            analysis: Mutex::new((PathStore::new(d.max_paths), Engine::new(d.clone()))),
            tracker: Mutex::new(tracker),
            baseline: RwLock::new(Arc::new(Vec::new())),
            writing: tokio::sync::Mutex::new(()),
        })
    }

    /// Takes an accepted batch received at `now_ms` (a retried duplicate only as a heartbeat).
    pub fn take(&self, batch: &Batch<'_>, duplicate: bool, now_ms: i64) {
        let mut intake = lock(&self.intake);
        intake.note_upload(batch.header.host_id, batch.header.epoch, now_ms);
        if duplicate {
            return;
        }
        intake.extend(batch.records(), now_ms);
        intake.add_paths(&batch.paths);
    }

    /// Runs one diagnosis at `now_ms` and updates the problems (in memory).
    pub fn analyze(&self, registry: &Registry, now_ms: i64) {
        // Results arrive up to an upload period after they were sent: keep a margin.
        let (records, hosts, new_paths) = {
            let mut intake = lock(&self.intake);
            let records = intake.snapshot(now_ms - 2 * self.window_ms, now_ms);
            (records, intake.hosts().clone(), intake.take_paths())
        };
        let mut analysis = lock(&self.analysis);
        let (paths, engine) = &mut *analysis;
        for p in &new_paths {
            paths.insert(p);
        }
        let outcome = engine.run(&Inputs {
            now_ms,
            started_ms: self.started_ms,
            records: &records,
            hosts: &hosts,
            registry,
            map: &self.map,
            paths,
        });
        drop(analysis);
        write(&self.baseline, Arc::new(outcome.baseline));
        lock(&self.tracker).update(now_ms, outcome.candidates);
    }

    /// Writes every new, changed or resolved problem; what fails is retried next time.
    pub async fn persist(&self, db: &Db, now_ms: i64) -> anyhow::Result<()> {
        let _writing = self.writing.lock().await;
        let unsaved = lock(&self.tracker).unsaved();
        for (serial, p) in unsaved {
            let id = if p.id == 0 {
                store::insert(db, &p).await?
            } else {
                store::update(db, &p).await?;
                p.id
            };
            lock(&self.tracker).mark_saved(serial, id, now_ms);
        }
        Ok(())
    }

    /// Problems in memory: every active one, or the recently resolved ones.
    pub fn problems(&self, state: ProblemState) -> Vec<Problem> {
        lock(&self.tracker).problems(state)
    }

    /// Algorithm 1 votes of the latest tick.
    pub fn baseline(&self) -> Arc<Vec<BaselineVote>> {
        read(&self.baseline)
    }
}
