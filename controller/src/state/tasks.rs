//! Training tasks on the shared state: CRUD and readiness (committed to the database
//! first), throughput ingestion, and the runtime skeleton inference.

use super::ControllerState;
use super::StateError;
use crate::registry::Registry;
use crate::tasks::resolve::{Derived, RnicIndex, count_basic, place};
use crate::tasks::{self, TaskBook, TaskRecord, inference, task_info, validate};
use crate::throughput::Ingested;
use anyhow::Context;
use rocemesh_proto::api::{
    MAX_RNICS_PER_HOST, TaskEndpoint, TaskInfo, TaskSpec, ThroughputUpload, UploadAck,
};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Longest sampling interval of a throughput upload (SkeletonHunter samples at 1 s or faster).
pub(crate) const MAX_THROUGHPUT_INTERVAL_MS: u32 = 1000;
/// Most samples per series in one upload (20 minutes at 1 s): bounds the work per request.
pub(crate) const MAX_SAMPLES_PER_UPLOAD: usize = 1200;
/// Latest series start accepted (9999-12-31T23:59:59.999Z): the rings add intervals to it,
/// which overflowed `i64` for a start near `i64::MAX` (found with the `server_api` fuzz harness).
pub(crate) const MAX_THROUGHPUT_START_MS: i64 = 253_402_300_799_999;

impl ControllerState {
    pub(super) fn tasks_read(&self) -> std::sync::RwLockReadGuard<'_, TaskBook> {
        self.inner.tasks.read().unwrap_or_else(|p| p.into_inner())
    }

    fn tasks_write(&self) -> std::sync::RwLockWriteGuard<'_, TaskBook> {
        self.inner.tasks.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The tasks resolved against exactly this registry and book (cached per generations).
    pub(super) fn derived_for(&self, reg: &Registry, book: &TaskBook) -> Arc<Derived> {
        let mut cached = self.inner.derived.lock().unwrap_or_else(|p| p.into_inner());
        match &*cached {
            Some(d) if d.is_for(reg, book) => d.clone(),
            _ => {
                let d = Arc::new(Derived::build(reg, book, self.inner.cfg.task_max_pairs));
                *cached = Some(d.clone());
                d
            }
        }
    }

    /// Runs `f` on the registry, the book and their derived data, under the read locks.
    fn with_tasks<T>(&self, f: impl FnOnce(&Registry, &TaskBook, &Derived) -> T) -> T {
        let reg = self.read();
        let book = self.tasks_read();
        let derived = self.derived_for(&reg, &book);
        f(&reg, &book, &derived)
    }

    /// All tasks by id.
    pub(crate) fn tasks(&self) -> Vec<TaskInfo> {
        self.with_tasks(|_, book, d| book.tasks().map(|t| task_info(t, d)).collect())
    }

    /// One task.
    pub(crate) fn task(&self, id: u32) -> Option<TaskInfo> {
        self.with_tasks(|_, book, d| book.get(id).map(|t| task_info(t, d)))
    }

    /// Validates a spec against the rules, the other tasks' names (`except` = the task
    /// being replaced) and the pair bound.
    fn check_spec(&self, spec: &TaskSpec, except: Option<u32>) -> Result<(), StateError> {
        validate::spec(spec).map_err(StateError::Invalid)?;
        let reg = self.read();
        if let Some(other) = self.tasks_read().id_by_name(&spec.name)
            && Some(other) != except
        {
            return Err(StateError::Conflict(format!(
                "task name {:?} is taken by task {other}",
                spec.name
            )));
        }
        let (_, placed) = place(&spec.endpoints, &RnicIndex::new(&reg));
        let pairs = count_basic(&placed);
        let max = self.inner.cfg.task_max_pairs;
        if pairs > max {
            return Err(StateError::Invalid(format!(
                "the task has {pairs} same-rail pairs, more than task_max_pairs ({max})"
            )));
        }
        Ok(())
    }

    /// Creates a task in preload.
    pub(crate) async fn create_task(&self, spec: TaskSpec) -> Result<TaskInfo, StateError> {
        let _writer = self.inner.writer.lock().await;
        self.check_spec(&spec, None)?;
        let now = self.inner.clock.now_ms();
        let id = self
            .inner
            .db
            .inventory()
            .insert_task(&spec.name, &spec.endpoints, now)
            .await?;
        tracing::info!(task = %spec.name, id, endpoints = spec.endpoints.len(), "task created");
        let record = TaskRecord {
            id,
            name: spec.name,
            endpoints: spec.endpoints,
            spec_version: 0,
            runtime: tasks::Runtime::Preload,
        };
        self.tasks_write().insert(record);
        self.task(id)
            .ok_or_else(|| anyhow::anyhow!("task {id} vanished after creation").into())
    }

    /// Replaces a task's name and endpoints; it goes back to preload.
    pub(crate) async fn replace_task(
        &self,
        id: u32,
        spec: TaskSpec,
    ) -> Result<TaskInfo, StateError> {
        let _writer = self.inner.writer.lock().await;
        if self.tasks_read().get(id).is_none() {
            return Err(unknown_task(id));
        }
        self.check_spec(&spec, Some(id))?;
        let now = self.inner.clock.now_ms();
        self.inner
            .db
            .inventory()
            .replace_task(id, &spec.name, &spec.endpoints, now)
            .await?;
        tracing::info!(task = %spec.name, id, endpoints = spec.endpoints.len(), "task replaced");
        self.tasks_write().replace(id, spec.name, spec.endpoints);
        self.task(id).ok_or_else(|| unknown_task(id))
    }

    /// Deletes a task; `false` if it was unknown.
    pub(crate) async fn delete_task(&self, id: u32) -> Result<bool, StateError> {
        let _writer = self.inner.writer.lock().await;
        if self.tasks_read().get(id).is_none() {
            return Ok(false);
        }
        self.inner.db.inventory().delete_task(id).await?;
        self.tasks_write().remove(id);
        tracing::info!(id, "task deleted");
        Ok(true)
    }

    /// An endpoint registers itself ready: its pairs with other ready endpoints go live.
    pub(crate) async fn task_ready(
        &self,
        id: u32,
        host: &str,
        rnic: &str,
    ) -> Result<TaskInfo, StateError> {
        let _writer = self.inner.writer.lock().await;
        let (pos, ready) = {
            let book = self.tasks_read();
            let task = book.get(id).ok_or_else(|| unknown_task(id))?;
            let pos = task
                .endpoints
                .iter()
                .position(|e| e.host == host && e.rnic == rnic)
                .ok_or_else(|| {
                    StateError::NotFound(format!("task {id} has no endpoint {host}/{rnic}"))
                })?;
            (pos, task.endpoints[pos].ready)
        };
        if !ready {
            self.inner.db.inventory().set_ready(id, pos, true).await?;
            self.tasks_write().set_ready(id, pos, true);
            tracing::debug!(id, host, rnic, "task endpoint ready");
        }
        self.task(id).ok_or_else(|| unknown_task(id))
    }

    /// Makes the task named `spec.name` exactly `spec`, readiness included, with the
    /// smallest change: created when absent; only readiness written when the endpoints are
    /// the same ones (incremental activation and deactivation keep the skeleton); replaced
    /// (back to preload) when endpoints came or went. For callers that own a task's whole
    /// spec, such as Kubernetes task discovery.
    pub async fn sync_task(&self, spec: TaskSpec) -> Result<TaskInfo, StateError> {
        let existing = self.tasks_read().id_by_name(&spec.name);
        let Some(id) = existing else {
            return self.create_task(spec).await;
        };
        let _writer = self.inner.writer.lock().await;
        let flips: Option<Vec<(usize, bool)>> = {
            let book = self.tasks_read();
            let task = book.get(id).ok_or_else(|| unknown_task(id))?;
            let same = task.endpoints.len() == spec.endpoints.len()
                && task.endpoints.iter().zip(&spec.endpoints).all(|(a, b)| {
                    TaskEndpoint {
                        ready: b.ready,
                        ..a.clone()
                    } == *b
                });
            same.then(|| {
                task.endpoints
                    .iter()
                    .zip(&spec.endpoints)
                    .enumerate()
                    .filter(|(_, (a, b))| a.ready != b.ready)
                    .map(|(i, (_, b))| (i, b.ready))
                    .collect()
            })
        };
        match flips {
            Some(flips) => {
                for (pos, ready) in flips {
                    self.inner.db.inventory().set_ready(id, pos, ready).await?;
                    self.tasks_write().set_ready(id, pos, ready);
                }
                self.task(id).ok_or_else(|| unknown_task(id))
            }
            None => {
                drop(_writer);
                self.replace_task(id, spec).await
            }
        }
    }

    /// Deletes the task with this name; `false` if there is none.
    pub async fn delete_task_named(&self, name: &str) -> Result<bool, StateError> {
        let id = self.tasks_read().id_by_name(name);
        match id {
            Some(id) => self.delete_task(id).await,
            None => Ok(false),
        }
    }

    /// Names of all tasks.
    pub fn task_names(&self) -> Vec<String> {
        self.tasks_read().tasks().map(|t| t.name.clone()).collect()
    }

    /// The throughput held for `rnics` (registry ids) over their common intervals, one
    /// series per RNIC in `rnics` order (no data-parallel groups); why not when there is
    /// none.
    pub fn task_throughput(
        &self,
        rnics: &[u32],
    ) -> Result<rocemesh_taskhealth::Throughput, String> {
        self.inner
            .throughput
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .aligned_at(rnics, 1)
    }

    /// Task `id`'s data-parallel groups as RNIC ids, once its skeleton is inferred (empty
    /// otherwise).
    pub fn task_dp_groups(&self, id: u32) -> Vec<Vec<u32>> {
        self.task(id)
            .and_then(|t| t.skeleton)
            .map(|s| s.groups)
            .unwrap_or_default()
    }

    /// Stores an agent's throughput series for the RNICs that belong to tasks.
    pub(crate) fn ingest_throughput(
        &self,
        upload: &ThroughputUpload,
    ) -> Result<UploadAck, StateError> {
        let derived = {
            let reg = self.read();
            check_upload(&reg, upload)?;
            let book = self.tasks_read();
            self.derived_for(&reg, &book)
        };
        let Ingested { accepted, dropped } = self
            .inner
            .throughput
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ingest(upload.interval_ms, &upload.series, &derived.members);
        Ok(UploadAck {
            accepted,
            dropped,
            duplicate: false,
            instance: 0,
        })
    }

    /// Mean bytes per second (sent and received) of task RNIC `rnic` over the samples held
    /// now; `None` for an RNIC in no task or without samples (the analyzer's flow blame).
    pub fn throughput_rate(&self, rnic: u32) -> Option<f64> {
        self.inner
            .throughput
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .rate(rnic)
    }

    /// Infers task `id`'s skeleton from the throughput held now and applies the outcome:
    /// phase `Skeleton` when it passes the fidelity check, else `BasicFallback` with the
    /// reason. Errors (nothing changed) for an unknown task, unregistered endpoints or too
    /// few samples. The periodic loop calls this; tests and evaluations call it directly.
    pub async fn infer_task_now(&self, id: u32) -> anyhow::Result<TaskInfo> {
        let input = self.with_tasks(|_, book, derived| {
            let task = book.get(id).with_context(|| format!("unknown task {id}"))?;
            let d = derived
                .task(id)
                .with_context(|| format!("task {id} not resolved"))?;
            let store = self
                .inner
                .throughput
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            inference::prepare(task, d, &store, self.inner.cfg.skeleton_min_samples)
                .map_err(|why| anyhow::anyhow!("task {id} ({}): {why}", task.name))
        })?;
        let cfg = self.inner.cfg.skeleton.clone();
        let (input, runtime) = tokio::task::spawn_blocking(move || {
            let runtime = inference::run(&input, &cfg);
            (input, runtime)
        })
        .await
        .context("skeleton inference panicked")?;
        let applied = self
            .tasks_write()
            .set_runtime(input.task_id, input.spec_version, runtime);
        anyhow::ensure!(
            applied,
            "task {id} was replaced or deleted during inference; result discarded"
        );
        let info = self
            .task(id)
            .with_context(|| format!("task {id} was deleted"))?;
        let reason = info
            .skeleton
            .as_ref()
            .and_then(|s| s.fallback_reason.as_deref());
        tracing::info!(id, phase = ?info.phase, active_pairs = info.active_pairs, reason, "task skeleton inferred");
        Ok(info)
    }

    /// Every `skeleton_interval_ms` until `cancel`: drops throughput of RNICs in no task,
    /// then infers every task's skeleton (tasks without enough samples are skipped).
    pub async fn run_skeleton_loop(self, cancel: CancellationToken) {
        let mut tick =
            tokio::time::interval(Duration::from_millis(self.inner.cfg.skeleton_interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let (ids, members): (Vec<u32>, HashSet<u32>) = self
                .with_tasks(|_, book, d| (book.tasks().map(|t| t.id).collect(), d.members.clone()));
            self.inner
                .throughput
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(&members);
            for id in ids {
                if let Err(e) = self.infer_task_now(id).await {
                    tracing::debug!(error = format!("{e:#}"), "skeleton inference skipped");
                }
            }
        }
    }
}

fn unknown_task(id: u32) -> StateError {
    StateError::NotFound(format!("unknown task {id}"))
}

/// Checks a throughput upload against the registry; nothing is stored when it fails.
fn check_upload(reg: &Registry, u: &ThroughputUpload) -> Result<(), StateError> {
    let host = reg
        .host(u.host_id)
        .ok_or_else(|| StateError::NotFound(format!("unknown host {}", u.host_id)))?;
    if u.epoch != host.epoch {
        return Err(StateError::Conflict(format!(
            "epoch {} is not the registered epoch {}: register again",
            u.epoch, host.epoch
        )));
    }
    if !(1..=MAX_THROUGHPUT_INTERVAL_MS).contains(&u.interval_ms) {
        return Err(StateError::Invalid(format!(
            "interval_ms must be in 1..={MAX_THROUGHPUT_INTERVAL_MS}, got {}",
            u.interval_ms
        )));
    }
    if u.series.len() > MAX_RNICS_PER_HOST {
        return Err(StateError::Invalid(format!(
            "at most {MAX_RNICS_PER_HOST} series per upload, got {}",
            u.series.len()
        )));
    }
    let mut seen = HashSet::new();
    for (i, s) in u.series.iter().enumerate() {
        let bad = |why: String| StateError::Invalid(format!("series[{i}]: {why}"));
        if reg.rnic(s.rnic_id).is_none_or(|r| r.host_id != u.host_id) {
            return Err(bad(format!(
                "RNIC {} is not an RNIC of host {}",
                s.rnic_id, u.host_id
            )));
        }
        if !seen.insert(s.rnic_id) {
            return Err(bad(format!("duplicate RNIC {}", s.rnic_id)));
        }
        if s.tx_bytes.len() != s.rx_bytes.len() {
            return Err(bad(format!(
                "{} tx samples but {} rx samples",
                s.tx_bytes.len(),
                s.rx_bytes.len()
            )));
        }
        if s.tx_bytes.len() > MAX_SAMPLES_PER_UPLOAD {
            return Err(bad(format!(
                "at most {MAX_SAMPLES_PER_UPLOAD} samples per series, got {}",
                s.tx_bytes.len()
            )));
        }
        if !(0..=MAX_THROUGHPUT_START_MS).contains(&s.start_ms) {
            return Err(bad(format!(
                "start_ms {} is not between 1970 and 9999",
                s.start_ms
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;
    use rocemesh_proto::api::{RegisterRequest, RnicSeries};

    #[test]
    fn throughput_start_must_be_a_plausible_time() {
        let mut reg = Registry::default();
        let req: RegisterRequest = serde_json::from_str(
            r#"{"host":"h","epoch":1,"rnics":[{"ifname":"eth0","ip":"10.0.0.1","qpn":1,"port":4791}]}"#,
        )
        .unwrap();
        let plan = reg
            .plan_registration(&req, &Topology::default(), usize::MAX, 0)
            .unwrap();
        reg.apply_registration(plan, 1, &[1]);
        let upload = |start_ms| ThroughputUpload {
            host_id: 1,
            epoch: 1,
            interval_ms: 1000,
            series: vec![RnicSeries {
                rnic_id: 1,
                start_ms,
                tx_bytes: vec![1],
                rx_bytes: vec![1],
            }],
        };
        assert!(check_upload(&reg, &upload(1_800_000_000_000)).is_ok());
        assert!(check_upload(&reg, &upload(MAX_THROUGHPUT_START_MS)).is_ok());
        for bad in [-1, MAX_THROUGHPUT_START_MS + 1, i64::MAX - 500] {
            assert!(check_upload(&reg, &upload(bad)).is_err(), "start_ms {bad}");
        }
    }
}
