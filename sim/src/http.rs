//! The HTTP driver: the simulated agents against a running `rocemesh server` (or separate
//! controller and analyzer instances), in wall-clock time. Each host registers with the
//! controller, polls its pinglist with `If-None-Match`, and uploads its batches to the
//! analyzer the controller named for it (the controller itself when none), moving when a
//! pinglist answer names another (`x-rocemesh-analyzer`, as real agents do); an upload
//! that fails makes the host register again, so it learns a new analyzer after a
//! failover. Blocking (ureq): run it on a plain thread.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use rocemesh_sim::{Shape, Sim, SimConfig, FaultSpec, http::HttpDriver};
//! let sim = Sim::new(SimConfig::new(
//!     Shape::LeafSpine { tors: 25, spines: 4, hosts_per_tor: 10, rnics_per_host: 8 }, 1))?;
//! std::fs::write("map.toml", sim.fabric_map_toml()?)?; // the analyzer's fabric_map
//! let mut d = HttpDriver::new(sim, "http://127.0.0.1:8080", None)?;
//! d.register_all()?;
//! d.run_for(std::time::Duration::from_secs(20))?;
//! let onset = rocemesh_proto::now_unix_ms();
//! d.sim_mut().inject(FaultSpec::LinkDown { link: "t3-s1".into(), at: None }, onset, None)?;
//! d.run_for(std::time::Duration::from_secs(20))?;
//! let score = d.score(onset)?;
//! # Ok(()) }
//! ```

use crate::control::{self, Action, Schedule};
use crate::score::{self, Score};
use crate::sim::Sim;
use anyhow::{Context, bail};
use rocemesh_analyzer::BaselineVote;
use rocemesh_proto::api::{API_PREFIX, Problem};
use rocemesh_proto::batch::CONTENT_TYPE;
use rocemesh_proto::http_client::named_analyzer;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Timeout of every request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest reply read.
const MAX_REPLY_BYTES: u64 = 64 << 20;
/// How often the driver looks for due requests.
const STEP: Duration = Duration::from_millis(100);

/// Request counters of a driver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HttpStats {
    /// Registrations accepted.
    pub registrations: u64,
    /// Pinglist polls answered.
    pub polls: u64,
    /// Batches accepted.
    pub uploads: u64,
    /// Requests that failed (transport error or refusal).
    pub errors: u64,
}

/// Simulated agents talking HTTP to a server (see the module doc).
pub struct HttpDriver {
    sim: Sim,
    base: String,
    auth: Option<String>,
    http: ureq::Agent,
    schedule: Schedule,
    /// Analyzer base URL per host (from its registration).
    analyzer: Vec<String>,
    stats: HttpStats,
    last_error: Option<String>,
}

impl HttpDriver {
    /// Agents of `sim` talking to the controller at `url`, with bearer `token` (the
    /// server's `agent` role) when the server requires one.
    pub fn new(sim: Sim, url: &str, token: Option<&str>) -> anyhow::Result<Self> {
        let base = url.trim_end_matches('/').to_string();
        if !base.starts_with("http://") && !base.starts_with("https://") {
            bail!("server URL {url:?} is not http:// or https://");
        }
        let http = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Self {
            schedule: Schedule::new(sim.hosts()),
            analyzer: vec![base.clone(); sim.hosts() as usize],
            sim,
            base,
            auth: token.map(|t| format!("Bearer {t}")),
            http,
            stats: HttpStats::default(),
            last_error: None,
        })
    }

    /// The simulation (to inject faults).
    pub fn sim_mut(&mut self) -> &mut Sim {
        &mut self.sim
    }

    /// The simulation.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// Request counters.
    pub fn stats(&self) -> HttpStats {
        self.stats
    }

    /// The latest request failure, if any.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The analyzer URL `host` uploads to.
    pub fn analyzer_of(&self, host: u32) -> &str {
        &self.analyzer[host as usize]
    }

    fn send(
        &self,
        method: &str,
        url: &str,
        body: Option<(&str, &[u8])>,
        etag: Option<&str>,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        self.send_with_analyzer(method, url, body, etag)
            .map(|(status, bytes, _)| (status, bytes))
    }

    /// [`Self::send`], also returning the analyzer the controller named in
    /// `x-rocemesh-analyzer` ([`named_analyzer`]), as real agents read it from pinglist
    /// answers.
    fn send_with_analyzer(
        &self,
        method: &str,
        url: &str,
        body: Option<(&str, &[u8])>,
        etag: Option<&str>,
    ) -> anyhow::Result<(u16, Vec<u8>, Option<String>)> {
        let mut req = ureq::http::Request::builder().method(method).uri(url);
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        if let Some(tag) = etag {
            req = req.header("If-None-Match", tag);
        }
        let mut resp = match body {
            Some((ct, b)) => self
                .http
                .run(req.header("Content-Type", ct).body(b.to_vec())?),
            None => self.http.run(req.body(())?),
        }
        .with_context(|| format!("{method} {url}"))?;
        let status = resp.status().as_u16();
        let analyzer = named_analyzer(resp.headers());
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_REPLY_BYTES)
            .read_to_vec()
            .with_context(|| format!("{method} {url}: reading the reply"))?;
        Ok((status, bytes, analyzer))
    }

    fn act(&mut self, action: Action, now_ms: i64) -> anyhow::Result<()> {
        match action {
            Action::Register(h) => {
                let body = serde_json::to_vec(&self.sim.registration(h))?;
                let url = format!("{}{}", self.base, control::REGISTER_PATH);
                let (status, reply) =
                    self.send("POST", &url, Some(("application/json", &body)), None)?;
                let resp = control::register_answer(status, &reply)?;
                self.analyzer[h as usize] = resp
                    .analyzer_url
                    .as_deref()
                    .unwrap_or(&self.base)
                    .trim_end_matches('/')
                    .to_string();
                self.schedule.registered(&mut self.sim, h, &resp, now_ms)?;
                self.stats.registrations += 1;
            }
            Action::Poll(h) => {
                let Some(id) = self.sim.host_id(h) else {
                    return Ok(());
                };
                let url = format!(
                    "{}{}",
                    self.base,
                    control::pinglist_path(id, self.sim.epoch(h))
                );
                let version = self.sim.pinglist_version(h).map(str::to_string);
                let (status, reply, analyzer) =
                    self.send_with_analyzer("GET", &url, None, version.as_deref())?;
                let answer = control::poll_answer(status, &reply)?;
                // The shard's owner changed: upload where the controller says now.
                if let Some(url) = analyzer {
                    self.analyzer[h as usize] = url;
                }
                self.schedule.polled(&mut self.sim, h, answer, now_ms);
                self.stats.polls += 1;
            }
            Action::Upload(h) => {
                let url = format!("{}{}", self.analyzer[h as usize], control::RESULTS_PATH);
                for body in self.sim.collect(h, now_ms, self.schedule.timeout_ms) {
                    let sent = self.send("POST", &url, Some((CONTENT_TYPE, &body)), None);
                    match sent {
                        Ok((status, _)) if (200..300).contains(&status) => self.stats.uploads += 1,
                        other => {
                            // The analyzer may have moved: ask the controller again.
                            self.sim.must_register(h);
                            bail!(
                                "upload of host {h} to {url} failed: {:?}",
                                other.map(|(s, _)| s)
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs every request due at `now_ms` (wall clock); failures are counted, remembered
    /// in [`Self::last_error`] and retried when next due.
    pub fn step(&mut self, now_ms: i64) {
        for a in self.schedule.due(&mut self.sim, now_ms) {
            if let Err(e) = self.act(a, now_ms) {
                self.stats.errors += 1;
                self.last_error = Some(format!("{e:#}"));
            }
        }
    }

    /// Registers every agent and fetches its pinglist; the first failure is an error.
    pub fn register_all(&mut self) -> anyhow::Result<()> {
        let now = rocemesh_proto::now_unix_ms();
        for a in self.schedule.due(&mut self.sim, now) {
            self.act(a, now)?;
        }
        let now = rocemesh_proto::now_unix_ms();
        for a in self.schedule.due(&mut self.sim, now) {
            self.act(a, now)?;
        }
        Ok(())
    }

    /// Runs the agents for `d` of wall-clock time.
    pub fn run_for(&mut self, d: Duration) -> anyhow::Result<()> {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.step(rocemesh_proto::now_unix_ms());
            std::thread::sleep(STEP.min(end.saturating_duration_since(Instant::now())));
        }
        Ok(())
    }

    fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let url = format!("{}{API_PREFIX}{path}", self.base);
        let (status, body) = self.send("GET", &url, None, None)?;
        if status != 200 {
            bail!(
                "GET {url}: HTTP {status}: {}",
                String::from_utf8_lossy(&body).trim()
            );
        }
        serde_json::from_slice(&body).with_context(|| format!("GET {url}: bad reply"))
    }

    /// Every problem the server lists (active and resolved, up to 10,000).
    pub fn problems(&self) -> anyhow::Result<Vec<Problem>> {
        self.get_json("/problems?state=all&limit=10000")
    }

    /// The server's Algorithm 1 votes of its latest diagnosis.
    pub fn baseline_votes(&self) -> anyhow::Result<Vec<BaselineVote>> {
        self.get_json("/diagnosis/baseline")
    }

    /// The server's problems first seen from `since_ms` on, scored against the truth.
    pub fn score(&self, since_ms: i64) -> anyhow::Result<Score> {
        Ok(score::score(&self.sim.truth(), &self.problems()?, since_ms))
    }
}
