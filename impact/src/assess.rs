//! Priority of every problem (R-Pingmesh §4.3.4): in a task's service network and that
//! task's metric degraded beyond its tolerated threshold during the problem → P0; in a
//! service network otherwise → P1; in none → P2. Written to `problems.priority`,
//! `problems.affected_tasks` and `problem_tasks`, only when it changes.

use crate::config::ImpactConfig;
use crate::judge::judge;
use crate::model::Objective;
use crate::paths::PathSource;
use crate::samples;
use crate::service::{self, ServiceNetwork, TaskEndpoints};
use anyhow::Context;
use rocemesh_proto::api::{ComponentKind, Priority};
use rocemesh_proto::path::TracedPath;
use rocemesh_store::{Assessment, Db};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Most problems one assessment looks at (the newest).
const MAX_ASSESSED: i64 = 10_000;
/// Most traced 5-tuples one assessment reads.
const MAX_TRACES: usize = 50_000;
/// Interval between two retention passes over the samples, ms.
const PURGE_EVERY_MS: i64 = 60_000;

/// What one assessment did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AssessStats {
    /// Problems assessed.
    pub problems: usize,
    /// Of which got a new priority or affected-task list.
    pub changed: usize,
}

/// State kept between assessments.
#[derive(Default)]
struct Cache {
    fingerprint: Option<[i64; 5]>,
    tasks: Arc<TaskEndpoints>,
    purged_at_ms: i64,
}

/// The impact service: shared by the background loop and the API.
pub struct Impact {
    db: Db,
    cfg: ImpactConfig,
    paths: Arc<dyn PathSource>,
    /// Also serializes assessments (the loop and verdict requests).
    cache: tokio::sync::Mutex<Cache>,
    /// Per-RNIC throughput of task ranks, once the process holds it (the controller).
    throughput: std::sync::OnceLock<Arc<dyn crate::health::ThroughputSource>>,
}

/// A stored problem, as much of it as placement needs.
struct Stored {
    id: i64,
    component_kind: ComponentKind,
    component: String,
    first_seen_ms: i64,
    end_ms: i64,
    priority: Option<String>,
    affected: Option<String>,
    /// Tasks flow blame names in the evidence: their traced flows cross the component.
    blamed: Vec<u32>,
}

/// A changed assessment: the problem, its priority, affected tasks as JSON and as ids.
type Change<'a> = (&'a Stored, Priority, Option<String>, Vec<u32>);

impl Impact {
    /// Checks `cfg`; `paths` (the analyzer) supplies traced paths and the fabric map.
    pub fn new(db: Db, cfg: ImpactConfig, paths: Arc<dyn PathSource>) -> anyhow::Result<Arc<Self>> {
        cfg.validate()?;
        Ok(Arc::new(Self {
            db,
            cfg,
            paths,
            cache: tokio::sync::Mutex::new(Cache::default()),
            throughput: std::sync::OnceLock::new(),
        }))
    }

    /// Gives verdicts the ranks' throughput (hang/slow windows); set once, later calls
    /// are ignored.
    pub fn set_throughput(&self, source: Arc<dyn crate::health::ThroughputSource>) {
        let _ = self.throughput.set(source);
    }

    /// The throughput source, when one is set.
    pub fn throughput(&self) -> Option<&Arc<dyn crate::health::ThroughputSource>> {
        self.throughput.get()
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The configuration.
    pub fn config(&self) -> &ImpactConfig {
        &self.cfg
    }

    /// Endpoints of every task (re-read when the task or registry tables changed).
    pub async fn tasks(&self) -> anyhow::Result<Arc<TaskEndpoints>> {
        let mut cache = self.cache.lock().await;
        self.refresh_tasks(&mut cache).await
    }

    async fn refresh_tasks(&self, cache: &mut Cache) -> anyhow::Result<Arc<TaskEndpoints>> {
        // A cheap summary of the task and registry tables: endpoints are re-read only
        // when it changes.
        let fp = self.db.inventory().fingerprint().await?;
        if cache.fingerprint != Some(fp) {
            cache.tasks = Arc::new(service::load_endpoints(&self.db).await?);
            cache.fingerprint = Some(fp);
        }
        Ok(cache.tasks.clone())
    }

    /// Assesses every active problem and those resolved within `reassess_resolved_ms`;
    /// also learns baselines and applies sample retention.
    pub async fn assess(&self, now_ms: i64) -> anyhow::Result<AssessStats> {
        let mut cache = self.cache.lock().await;
        if now_ms - cache.purged_at_ms >= PURGE_EVERY_MS {
            let gone = samples::purge(
                &self.db,
                now_ms - self.cfg.retention_ms,
                self.cfg.max_samples_per_task,
            )
            .await?;
            if gone > 0 {
                tracing::debug!(samples = gone, "metric samples past retention deleted");
            }
            cache.purged_at_ms = now_ms;
        }
        let mut objectives = samples::objectives(&self.db).await?;
        samples::learn_baselines(&self.db, &mut objectives, self.cfg.baseline_samples).await?;
        let problems = self.stored_problems(now_ms).await?;
        if problems.is_empty() {
            return Ok(AssessStats::default());
        }
        let tasks = self.refresh_tasks(&mut cache).await?;
        let nets = self.service_networks(tasks).await?;
        let objectives: HashMap<u32, Objective> =
            objectives.into_iter().map(|o| (o.task_id, o)).collect();
        let affected: Vec<Vec<u32>> = problems
            .iter()
            .map(|p| {
                nets.iter()
                    .filter(|(id, n)| {
                        n.contains(p.component_kind, &p.component) || p.blamed.contains(id)
                    })
                    .map(|(id, _)| *id)
                    .collect()
            })
            .collect();
        // One read per judged task, reaching back to its oldest affecting problem.
        let mut since: HashMap<u32, i64> = HashMap::new();
        for (p, tasks) in problems.iter().zip(&affected) {
            for id in tasks.iter().filter(|id| objectives.contains_key(id)) {
                let e = since.entry(*id).or_insert(p.first_seen_ms);
                *e = (*e).min(p.first_seen_ms);
            }
        }
        let mut series = HashMap::new();
        for (id, from) in since {
            let o = &objectives[&id];
            let s = samples::series(
                &self.db,
                id,
                &o.spec.metric,
                from,
                now_ms,
                self.cfg.max_judged_samples,
            )
            .await?;
            series.insert(id, s);
        }
        let mut changes = Vec::new();
        for (p, tasks) in problems.iter().zip(affected) {
            let degraded = tasks.iter().any(|id| {
                let (Some(o), Some(s)) = (objectives.get(id), series.get(id)) else {
                    return false;
                };
                self.judge(o, &samples::between(s, p.first_seen_ms, p.end_ms))
                    .is_some_and(|(_, degraded)| degraded)
            });
            let priority = match (tasks.is_empty(), degraded) {
                (true, _) => Priority::P2,
                (false, true) => Priority::P0,
                (false, false) => Priority::P1,
            };
            let json = (!tasks.is_empty())
                .then(|| serde_json::to_string(&tasks))
                .transpose()?;
            if p.priority.as_deref() != Some(priority.as_str()) || p.affected != json {
                changes.push((p, priority, json, tasks));
            }
        }
        self.store(&changes).await?;
        for (p, priority, _, tasks) in &changes {
            tracing::info!(
                problem = p.id,
                component = %p.component,
                priority = priority.as_str(),
                tasks = ?tasks,
                "problem priority assessed"
            );
        }
        Ok(AssessStats {
            problems: problems.len(),
            changed: changes.len(),
        })
    }

    /// Degradation of `values` (chronological) against `o`, and whether it is beyond
    /// tolerance; `None` without samples or baseline.
    pub fn judge(&self, o: &Objective, values: &[f64]) -> Option<(f64, bool)> {
        judge(
            values,
            self.cfg.window_samples as usize,
            o.baseline(),
            o.spec.higher_is_better,
            o.spec.tolerable_degradation,
        )
    }

    async fn stored_problems(&self, now_ms: i64) -> anyhow::Result<Vec<Stored>> {
        let rows = self
            .db
            .problems()
            .to_assess(now_ms - self.cfg.reassess_resolved_ms, MAX_ASSESSED)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let (id, kind) = (row.id, row.component_kind);
            let Ok(component_kind) =
                serde_json::from_value::<ComponentKind>(serde_json::Value::String(kind.clone()))
            else {
                tracing::warn!(problem = id, kind, "unknown component kind; not assessed");
                continue;
            };
            out.push(Stored {
                id,
                component_kind,
                component: row.component,
                first_seen_ms: row.first_seen_ms,
                end_ms: row.resolved_ms.unwrap_or(now_ms),
                priority: row.priority,
                affected: row.affected_tasks,
                blamed: serde_json::from_str::<rocemesh_proto::api::Evidence>(&row.evidence)
                    .map(|e| e.blamed.iter().filter_map(|b| b.task_id).collect())
                    .unwrap_or_default(),
            });
        }
        Ok(out)
    }

    async fn service_networks(
        &self,
        tasks: Arc<TaskEndpoints>,
    ) -> anyhow::Result<BTreeMap<u32, ServiceNetwork>> {
        let paths = self.paths.clone();
        // The trace scan and path walks are CPU work: keep them off the async workers.
        tokio::task::spawn_blocking(move || {
            let ips = service::task_ips(&tasks);
            let traces = paths.traces(
                &|t: &TracedPath| ips.contains(&t.src) && ips.contains(&t.dst),
                MAX_TRACES,
            );
            service::service_networks(&tasks, &traces, paths.map())
        })
        .await
        .context("service network computation failed")
    }

    /// Writes changed assessments in one transaction.
    async fn store(&self, changes: &[Change<'_>]) -> anyhow::Result<()> {
        let rows: Vec<Assessment<'_>> = changes
            .iter()
            .map(|(p, priority, json, tasks)| Assessment {
                id: p.id,
                priority: *priority,
                affected_json: json.as_deref(),
                tasks,
            })
            .collect();
        self.db.problems().set_assessments(&rows).await
    }
}
