//! The in-process driver: the real controller (its axum router, called without a socket)
//! and the real analyzer over one SQLite database in a scratch directory, fed by the
//! simulated agents in virtual time. Every diagnosis tick advances the clock by
//! `diagnosis.tick_ms`: registrations and polls go through the controller's routes,
//! batches into [`Analyzer::ingest`], then [`Analyzer::tick`] and
//! [`Analyzer::diagnose`] run at the virtual time, as the server's loop would run them.

use crate::control::{self, Action, Schedule};
use crate::score::{self, BaselineTracker, Score};
use crate::sim::Sim;
use anyhow::Context;
use axum::body::Body;
use axum::http::{Method, Request, header};
use rocemesh_analyzer::{Analyzer, AnalyzerConfig};
use rocemesh_controller::{Clock, ControllerConfig, ControllerState};
use rocemesh_proto::api::{Problem, ProblemState};
use rocemesh_store::Db;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};
use tower::Service;

/// Where virtual time starts, ms since the Unix epoch (2027-01-15 08:00:15 UTC): the same
/// for every run, so a seed replays the same run. It is 15 s into a 20 s SLA period, so
/// with the default period and grace (7 s) the first period ends 5 s in and is finalized
/// 12 s in: a run of 15 s or more pays one finalization, as the server does every period.
const VIRTUAL_START_MS: i64 = 1_800_000_015_000;

/// Largest controller reply read (a pinglist of a big host).
const MAX_REPLY_BYTES: usize = 64 << 20;

/// Where the time of a run went (wall clock).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Timing {
    /// Simulating agents (probes, traces, batch encoding).
    pub simulate: Duration,
    /// `Analyzer::ingest` of every batch.
    pub ingest: Duration,
    /// `Analyzer::tick` (period finalization and SLA rows).
    pub finalize: Duration,
    /// `Analyzer::diagnose` (the whole pipeline, problems stored).
    pub diagnose: Duration,
    /// Diagnosis ticks run.
    pub ticks: u64,
    /// Records ingested.
    pub records: u64,
}

/// A simulated cluster wired to a real controller and analyzer in this process.
pub struct InProcess {
    sim: Sim,
    controller: axum::Router,
    analyzer: Arc<Analyzer>,
    schedule: Schedule,
    baseline: BaselineTracker,
    tick_ms: i64,
    now_ms: i64,
    /// The controller's clock: `now_ms`, shared.
    clock: Arc<AtomicI64>,
    started_ms: i64,
    timing: Timing,
    _dir: tempfile::TempDir,
}

impl InProcess {
    /// Starts a controller and an analyzer on a fresh SQLite database, the analyzer
    /// reading the simulated fabric's map; the controller's parallel paths default to
    /// the fabric's. Virtual time starts at [`VIRTUAL_START_MS`].
    pub async fn start(
        sim: Sim,
        mut controller: ControllerConfig,
        mut analyzer: AnalyzerConfig,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir().context("scratch directory")?;
        let map = dir.path().join("fabric_map.toml");
        std::fs::write(&map, sim.fabric_map_toml()?).context("writing the fabric map")?;
        analyzer.fabric_map = Some(map);
        controller.parallel_paths = controller
            .parallel_paths
            .or(Some(sim.fabric().shape().parallel_paths()));
        let url = format!("sqlite://{}", dir.path().join("sim.db").display());
        let db = Db::connect(&url).await?;
        let now_ms = VIRTUAL_START_MS;
        let clock = Arc::new(AtomicI64::new(now_ms));
        let state = ControllerState::with_clock(
            db.clone(),
            controller,
            Clock::virtual_at(Arc::clone(&clock)),
        )
        .await?;
        let tick_ms = analyzer.diagnosis.tick_ms as i64;
        let analyzer = Analyzer::new_at(db, analyzer, now_ms).await?;
        Ok(Self {
            schedule: Schedule::new(sim.hosts()),
            sim,
            controller: rocemesh_controller::router(state),
            analyzer,
            baseline: BaselineTracker::default(),
            tick_ms,
            now_ms,
            clock,
            started_ms: now_ms,
            timing: Timing::default(),
            _dir: dir,
        })
    }

    /// Virtual time now, ms since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// When the run started (virtual time).
    pub fn started_ms(&self) -> i64 {
        self.started_ms
    }

    /// The simulation (to inject faults).
    pub fn sim_mut(&mut self) -> &mut Sim {
        &mut self.sim
    }

    /// The simulation.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// The analyzer.
    pub fn analyzer(&self) -> &Arc<Analyzer> {
        &self.analyzer
    }

    /// Where the time went so far.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        json: Option<Vec<u8>>,
        etag: Option<&str>,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        let mut req = Request::builder().method(method).uri(path);
        if json.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        if let Some(tag) = etag {
            req = req.header(header::IF_NONE_MATCH, tag);
        }
        let req = req.body(json.map_or_else(Body::empty, Body::from))?;
        let mut svc = self.controller.clone();
        std::future::poll_fn(|cx| Service::<Request<Body>>::poll_ready(&mut svc, cx)).await?;
        let resp = svc.call(req).await?;
        let status = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), MAX_REPLY_BYTES).await?;
        Ok((status, body.to_vec()))
    }

    async fn act(&mut self, action: Action) -> anyhow::Result<bool> {
        let now = self.now_ms;
        match action {
            Action::Register(h) => {
                let body = serde_json::to_vec(&self.sim.registration(h))?;
                let (status, reply) = self
                    .call(Method::POST, control::REGISTER_PATH, Some(body), None)
                    .await?;
                let resp = control::register_answer(status, &reply)?;
                self.schedule.registered(&mut self.sim, h, &resp, now)?;
                return Ok(true);
            }
            Action::Poll(h) => {
                let Some(id) = self.sim.host_id(h) else {
                    return Ok(false);
                };
                let path = control::pinglist_path(id, self.sim.epoch(h));
                let version = self.sim.pinglist_version(h).map(str::to_string);
                let (status, reply) = self
                    .call(Method::GET, &path, None, version.as_deref())
                    .await?;
                let answer = control::poll_answer(status, &reply)?;
                self.schedule.polled(&mut self.sim, h, answer, now);
            }
            Action::Upload(h) => {
                let t = Instant::now();
                let bodies = self.sim.collect(h, now, self.schedule.timeout_ms);
                self.timing.simulate += t.elapsed();
                let t = Instant::now();
                for b in bodies {
                    let ack = self.analyzer.ingest(&b, now)?;
                    self.timing.records += ack.accepted + ack.dropped;
                }
                self.timing.ingest += t.elapsed();
            }
        }
        Ok(false)
    }

    /// Runs every request due now; registrations refresh the analyzer's registry (as
    /// the server does on an unknown RNIC) before anything is uploaded.
    async fn run_due(&mut self) -> anyhow::Result<()> {
        let due = self.schedule.due(&mut self.sim, self.now_ms);
        let mut registered = false;
        let (regs, rest): (Vec<Action>, Vec<Action>) = due
            .into_iter()
            .partition(|a| matches!(a, Action::Register(_)));
        for a in regs {
            registered |= self.act(a).await?;
        }
        if registered {
            self.analyzer.refresh_registry().await?;
            // Fresh incarnations fetch their pinglists at once.
            for a in self.schedule.due(&mut self.sim, self.now_ms) {
                self.act(a).await?;
            }
        }
        for a in rest {
            self.act(a).await?;
        }
        Ok(())
    }

    /// Registers every agent and gives it its pinglist (virtual time does not move).
    pub async fn register_all(&mut self) -> anyhow::Result<()> {
        self.run_due().await
    }

    /// Advances virtual time by `ms`, one diagnosis tick at a time.
    pub async fn run_for(&mut self, ms: i64) -> anyhow::Result<()> {
        let end = self.now_ms + ms;
        let want = self.sim.truth().len();
        while self.now_ms < end {
            self.now_ms = (self.now_ms + self.tick_ms).min(end);
            self.clock.store(self.now_ms, Ordering::Relaxed);
            self.run_due().await?;
            let now = self.now_ms;
            let t = Instant::now();
            self.analyzer.tick(now).await?;
            self.timing.finalize += t.elapsed();
            let t = Instant::now();
            self.analyzer.diagnose(now).await?;
            self.timing.diagnose += t.elapsed();
            self.timing.ticks += 1;
            self.baseline
                .observe(&self.analyzer.baseline_votes(), want, now);
        }
        Ok(())
    }

    /// Every problem diagnosed in this run (active and resolved).
    pub fn problems(&self) -> Vec<Problem> {
        let mut p = self.analyzer.problems(ProblemState::Active);
        p.extend(self.analyzer.problems(ProblemState::Resolved));
        p
    }

    /// The analyzer's problems first seen from `since_ms` on, scored against the truth.
    pub fn score(&self, since_ms: i64) -> Score {
        score::score(&self.sim.truth(), &self.problems(), since_ms)
    }

    /// Algorithm 1's answers from `since_ms` on, scored against the truth.
    pub fn baseline_score(&self, since_ms: i64) -> Score {
        self.baseline.score(&self.sim.truth(), since_ms)
    }
}
