//! Fault diagnosis and localization: *what broke and where*, within seconds.
//!
//! Ingest hands every accepted batch to [`Diagnosis::take`]: results are aggregated
//! into the sliding window at once ([`flows`]), traced paths and upload liveness go
//! to the [`intake`]. Every tick, [`Diagnosis::analyze`] runs the R-Pingmesh
//! pipeline over the window ([`engine`]): host down, agent restart, anomalous RNICs,
//! host noise, then tomography of the rest ([`tomography`]) over the traced paths
//! ([`paths`]) named by the fabric map ([`fabric`]). Findings become problems with a
//! lifecycle ([`tracker`]), stored through [`rocemesh_store::Problems`] when they
//! change. The attributions of the task matrices of the newest stored period join each
//! tick's findings ([`tasks`]).

pub(crate) mod engine;
pub(crate) mod fabric;
pub(crate) mod flows;
pub(crate) mod intake;
pub(crate) mod paths;
pub(crate) mod policy;
pub(crate) mod store;
pub(crate) mod tasks;
pub(crate) mod tomography;
pub(crate) mod tracker;

use crate::config::AnalyzerConfig;
use crate::latency::{LatencyStats, PairLatency};
use crate::registry::Registry;
use crate::{lock, read, write};
use engine::{BaselineVote, Candidate, Engine, Inputs};
use fabric::FabricMap;
use flows::WindowStats;
use intake::{Intake, Liveness};
use paths::{PathStore, Traces};
use rocemesh_proto::api::{Problem, ProblemKind, ProblemState};
use rocemesh_proto::batch::Batch;
use rocemesh_proto::path::TracedPath;
use rocemesh_store::Db;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use tomography::FlowObs;
use tracker::Tracker;

/// How far a host's latest upload moves on before it is saved again: a restarted analyzer
/// knows each host's last upload to within this (and the host-down timeout is longer).
const SAVE_LIVENESS_EVERY_MS: i64 = 5_000;

/// What a shard of a scale-out deployment adds to a diagnosis ([`Diagnosis::analyze_in`]).
pub struct Shared<'a> {
    /// Which findings this instance answers for.
    pub keep: &'a (dyn Fn(&Candidate) -> bool + Sync),
    /// Loss observations other shards published (empty unless this instance runs the
    /// cross-shard tomography).
    pub loss: Vec<FlowObs>,
    /// Upload liveness other shards published.
    pub hosts: Vec<(u32, Liveness)>,
}

/// A step run on each tick's findings before they become problems (the analyzer's flow
/// blame): the diagnosis, the registry, the tick's time and the findings.
pub(crate) type Enricher = Box<dyn Fn(&Diagnosis, &Registry, i64, &mut [Candidate]) + Send + Sync>;

/// Diagnosis state shared by ingest (intake) and the tick loop (analysis).
pub struct Diagnosis {
    enrich: std::sync::OnceLock<Enricher>,
    map: FabricMap,
    started_ms: i64,
    /// Upload liveness and traced paths not yet filed.
    intake: Mutex<Intake>,
    /// Traced paths: written by the tick alone (ingest only queues them), read by
    /// the tick's engine and by API snapshots at the same time.
    paths: RwLock<PathStore>,
    /// The window (fed by ingest) and the tick's state: ingest waits while a tick runs.
    engine: Mutex<Engine>,
    tracker: Mutex<Tracker>,
    /// Per RNIC-pair latency detectors: fed by ingest, closed by the tick.
    latency: Mutex<PairLatency>,
    baseline: RwLock<Arc<Vec<BaselineVote>>>,
    /// Attributions of the task matrices of the newest stored period.
    tasks: RwLock<Arc<tasks::TaskFindings>>,
    /// Serializes database writes of problems and liveness.
    writing: tokio::sync::Mutex<()>,
    /// Latest upload time saved per host ([`store::save_liveness`]).
    liveness_saved: Mutex<HashMap<u32, i64>>,
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
        let (hosts_down, others): (Vec<Problem>, Vec<Problem>) = db
            .problems()
            .load_active()
            .await?
            .into_iter()
            .partition(|p| p.kind == ProblemKind::HostDown);
        for (kind, problems) in [
            (ProblemKind::HostDown, hosts_down),
            (ProblemKind::LinkFault, others),
        ] {
            tracker.restore(problems, now_ms, policy::restore_hold_ms(kind, d));
        }
        let mut engine = Engine::new(d.clone());
        engine.await_paths(now_ms, tracker.open_switches());
        let mut intake = Intake::new(d.max_paths);
        intake.restore(store::load_liveness(db).await?);
        Ok(Self {
            enrich: std::sync::OnceLock::new(),
            map,
            started_ms: now_ms,
            intake: Mutex::new(intake),
            liveness_saved: Mutex::new(HashMap::new()),
            paths: RwLock::new(PathStore::new(d.max_paths)),
            engine: Mutex::new(engine),
            tracker: Mutex::new(tracker),
            latency: Mutex::new(PairLatency::new(&cfg.latency, d.tick_ms, now_ms)?),
            baseline: RwLock::new(Arc::new(Vec::new())),
            tasks: RwLock::new(Arc::default()),
            writing: tokio::sync::Mutex::new(()),
        })
    }

    /// Takes an accepted batch received at `now_ms` (a retried duplicate only as a
    /// heartbeat); its results count for RNICs `registry` knows.
    pub fn take(&self, batch: Batch<'_>, duplicate: bool, registry: &Registry, now_ms: i64) {
        if !duplicate {
            lock(&self.engine).take(batch.records(), registry, now_ms);
            lock(&self.latency).take(batch.records(), now_ms);
        }
        let mut intake = lock(&self.intake);
        intake.note_upload(batch.header.host_id, batch.header.epoch, now_ms);
        if !duplicate {
            intake.add_paths(batch.paths);
        }
    }

    /// Runs one diagnosis at `now_ms` and updates the problems (in memory).
    pub fn analyze(&self, registry: &Registry, now_ms: i64) {
        self.analyze_in(registry, now_ms, None);
    }

    /// [`Self::analyze`] as one shard of a scale-out deployment when `shared` is given:
    /// other shards' host liveness and loss observations join this tick's, and only the
    /// findings `shared.keep` accepts become problems here. Returns this tick's own loss
    /// observations (empty without `shared`).
    pub fn analyze_in(
        &self,
        registry: &Registry,
        now_ms: i64,
        shared: Option<Shared<'_>>,
    ) -> Vec<FlowObs> {
        let (mut hosts, new_paths) = {
            let mut intake = lock(&self.intake);
            (intake.hosts().clone(), intake.take_paths())
        };
        let latency = lock(&self.latency).close(now_ms);
        // Links with an active problem, also one restored after a restart or taken over
        // from another shard: never held back for confirmation again.
        let open_links = lock(&self.tracker).open_links();
        let mut engine = lock(&self.engine);
        engine.keep_open(open_links, now_ms);
        let keep = shared.map(|s| {
            for (id, mut l) in s.hosts {
                match hosts.get_mut(&id) {
                    // An agent that moved here was heard of before: keep its first upload
                    // (no start-up grace again), take the newest incarnation.
                    Some(mine) if mine.last_upload_ms >= l.last_upload_ms => {
                        mine.first_upload_ms = mine.first_upload_ms.min(l.first_upload_ms);
                    }
                    Some(mine) => {
                        l.first_upload_ms = l.first_upload_ms.min(mine.first_upload_ms);
                        *mine = l;
                    }
                    None => {
                        hosts.insert(id, l);
                    }
                }
            }
            engine.share(s.loss);
            s.keep
        });
        let mut new_paths = new_paths.peekable();
        if new_paths.peek().is_some() {
            let mut paths = self.paths.write().unwrap_or_else(PoisonError::into_inner);
            for p in new_paths {
                paths.insert(p);
            }
        }
        let paths = self.paths.read().unwrap_or_else(PoisonError::into_inner);
        let mut outcome = engine.run(&Inputs {
            now_ms,
            started_ms: self.started_ms,
            hosts: &hosts,
            registry,
            map: &self.map,
            paths: &paths,
            latency: &latency,
        });
        drop(paths);
        let silent: HashSet<u32> = hosts
            .iter()
            .filter(|(_, l)| engine.silent(l, now_ms))
            .map(|(&id, _)| id)
            .collect();
        drop(engine);
        // Hosts whose trouble is not the network's: silent, or with such a verdict (this
        // tick's, or still open).
        let mut excused: HashSet<String> = lock(&self.tracker).non_network_hosts();
        excused.extend(
            outcome
                .candidates
                .iter()
                .filter(|c| !c.kind.is_network())
                .map(|c| c.component.clone()),
        );
        read(&self.tasks).add_to(&mut outcome.candidates, now_ms, |r| {
            registry.get(r).is_some_and(|e| silent.contains(&e.host_id))
                || registry.meta(r).is_some_and(|m| excused.contains(&m.host))
        });
        if let Some(keep) = keep {
            outcome.candidates.retain(|c| keep(c));
        }
        label_rnic_problems(registry, &mut outcome.candidates);
        if let Some(enrich) = self.enrich.get() {
            enrich(self, registry, now_ms, &mut outcome.candidates);
        }
        write(&self.baseline, Arc::new(outcome.baseline));
        lock(&self.tracker).update(now_ms, outcome.candidates);
        outcome.loss
    }

    /// Reads the task matrices of the period starting at `start_ms` (just stored): their
    /// attributions join every tick's findings until `until_ms`.
    pub(crate) async fn read_task_matrices(
        &self,
        db: &Db,
        registry: &Registry,
        start_ms: i64,
        until_ms: i64,
    ) -> anyhow::Result<()> {
        let found = tasks::TaskFindings::read(db, registry, start_ms, until_ms).await?;
        write(&self.tasks, Arc::new(found));
        Ok(())
    }

    /// Sets the [`Enricher`] (once; later calls are ignored).
    pub fn set_enricher(&self, f: Enricher) {
        let _ = self.enrich.set(f);
    }

    /// Agents new to this instance at `now_ms` re-send their traced paths: no tomography
    /// until they had time to ([`Engine::await_paths`]).
    pub fn await_paths(&self, now_ms: i64) {
        let down = lock(&self.tracker).open_switches();
        lock(&self.engine).await_paths(now_ms, down);
    }

    /// Upload liveness of the agents that upload here (other shards merge it).
    pub fn own_hosts(&self) -> Vec<(u32, Liveness)> {
        lock(&self.intake)
            .hosts()
            .iter()
            .map(|(id, l)| (*id, l.clone()))
            .collect()
    }

    /// Scale-out: keeps only the problems `keep` accepts and takes over the `stored`
    /// active ones it accepts (see [`Tracker::rescope`]).
    pub fn rescope(
        &self,
        keep: impl Fn(&Problem) -> bool,
        stored: Vec<Problem>,
        now_ms: i64,
        hold_ms: i64,
    ) {
        lock(&self.tracker).rescope(keep, stored, now_ms, hold_ms);
    }

    /// Writes every new, changed or resolved problem, and the hosts' upload liveness
    /// when it moved on by [`SAVE_LIVENESS_EVERY_MS`]; what fails is retried next time.
    pub async fn persist(&self, db: &Db, now_ms: i64) -> anyhow::Result<()> {
        let _writing = self.writing.lock().await;
        let unsaved = lock(&self.tracker).unsaved();
        for (serial, p) in unsaved {
            let id = if p.id == 0 {
                db.problems().insert(&p).await?
            } else {
                db.problems().update(&p).await?;
                p.id
            };
            lock(&self.tracker).mark_saved(serial, id, now_ms);
        }
        let rows = {
            let saved = lock(&self.liveness_saved);
            lock(&self.intake).unsaved(&saved, SAVE_LIVENESS_EVERY_MS)
        };
        if !rows.is_empty() {
            store::save_liveness(db, &rows).await?;
            let mut saved = lock(&self.liveness_saved);
            for (host, _, at) in rows {
                saved.insert(host, at);
            }
        }
        Ok(())
    }

    /// Problems in memory: every active one, or the recently resolved ones.
    pub fn problems(&self, state: ProblemState) -> Vec<Problem> {
        lock(&self.tracker).problems(state)
    }

    /// The latest traces whose newest trace satisfies `keep`, newest first, at most
    /// `limit` (a copy: readers never hold up the tick for longer than the scan).
    pub fn traces(&self, keep: impl Fn(&TracedPath) -> bool, limit: usize) -> Vec<Traces> {
        self.paths
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .newest(keep, limit)
    }

    /// The fabric map that names hop addresses.
    pub fn map(&self) -> &FabricMap {
        &self.map
    }

    /// Algorithm 1 votes of the latest tick.
    pub fn baseline(&self) -> Arc<Vec<BaselineVote>> {
        read(&self.baseline)
    }

    /// Counters of the per-pair latency detectors.
    pub fn latency_stats(&self) -> LatencyStats {
        lock(&self.latency).stats()
    }

    /// Counters of the diagnosis window.
    pub fn window_stats(&self) -> WindowStats {
        lock(&self.engine).window_stats()
    }
}

/// Problems on an RNIC carry the Kubernetes labels of the task endpoints on it.
fn label_rnic_problems(registry: &Registry, candidates: &mut [Candidate]) {
    for c in candidates
        .iter_mut()
        .filter(|c| c.component_kind == rocemesh_proto::api::ComponentKind::Rnic)
    {
        c.evidence.labels = registry.labels_by_name(&c.component).to_vec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{RnicEntry, RnicMeta};
    use rocemesh_proto::api::ProblemKind;
    use rocemesh_proto::batch::{BatchHeader, decode_batch, encode_batch};

    const T0: i64 = 1_700_000_000_000;

    /// Hosts 1..=3 with one RNIC each, under one ToR.
    fn registry() -> Registry {
        let mut reg = Registry::new(
            (1..=3).map(|r| (r, RnicEntry { host_id: r, tor: 0 })),
            vec!["t0".to_string()].into(),
        );
        for r in 1..=3u32 {
            reg.set_meta(
                r,
                RnicMeta {
                    name: format!("h{r}/r0"),
                    host: format!("h{r}"),
                    ip: format!("198.18.0.{r}").parse().unwrap(),
                    qpn: 100 + r,
                    epoch: 1,
                    registered_at_ms: T0 - 60_000,
                },
            );
        }
        reg
    }

    fn heartbeat(d: &Diagnosis, reg: &Registry, host: u32, seq: u64, now_ms: i64) {
        let header = BatchHeader {
            host_id: host,
            epoch: 1,
            batch_seq: seq,
            dropped: 0,
        };
        let body = encode_batch(header, &[]);
        d.take(decode_batch(&body).unwrap(), false, reg, now_ms);
    }

    fn down(d: &Diagnosis, state: ProblemState) -> Vec<String> {
        let mut v: Vec<String> = d
            .problems(state)
            .into_iter()
            .filter(|p| p.kind == ProblemKind::HostDown)
            .map(|p| p.component)
            .collect();
        v.sort();
        v
    }

    /// h2 went silent long before an analyzer restart (reported down), h3 shortly before
    /// it (not yet): after the restart h2 stays down without ever being resolved, and h3
    /// is reported once its silence is long enough, while h1 keeps uploading.
    #[tokio::test]
    async fn hosts_silent_before_a_restart_are_reported_after_it() {
        for (name, db) in rocemesh_store::test_databases().await {
            let cfg = AnalyzerConfig::default();
            let d = &cfg.diagnosis;
            let reg = registry();
            let a = Diagnosis::new(&db, &cfg, T0).await.unwrap();
            let restart = T0 + 30_000;
            let mut seq = 0;
            for t in (T0..restart).step_by(1_000) {
                for (host, until) in [(1, restart), (2, T0 + 5_000), (3, restart - 4_000)] {
                    if t < until {
                        seq += 1;
                        heartbeat(&a, &reg, host, seq, t);
                    }
                }
                a.analyze(&reg, t);
                a.persist(&db, t).await.unwrap();
            }
            assert_eq!(down(&a, ProblemState::Active), ["h2"], "{name}");
            let b = Diagnosis::new(&db, &cfg, restart).await.unwrap();
            let h3_due = restart - 4_000 + d.host_down_after_ms as i64;
            let judged_from = restart + d.host_silent_ms as i64;
            let mut h3_seen = None;
            for t in (restart..restart + 40_000).step_by(1_000) {
                seq += 1;
                heartbeat(&b, &reg, 1, seq, t);
                b.analyze(&reg, t);
                b.persist(&db, t).await.unwrap();
                let active = down(&b, ProblemState::Active);
                assert!(
                    active.contains(&"h2".to_string()),
                    "{name} at +{}: {active:?}",
                    t - restart
                );
                assert!(!active.contains(&"h1".to_string()), "{name}: {active:?}");
                if active.contains(&"h3".to_string()) {
                    h3_seen.get_or_insert(t);
                }
            }
            assert!(down(&b, ProblemState::Resolved).is_empty(), "{name}");
            let h3 = h3_seen.unwrap_or_else(|| panic!("{name}: h3 never reported down"));
            assert!(
                h3 >= h3_due && h3 <= h3_due.max(judged_from) + 1_000,
                "{name}: h3 down at +{} ms",
                h3 - restart
            );
        }
    }
}
