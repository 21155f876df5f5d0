//! Control plane: registration with the controller (with backoff) and pinglist polling
//! with ETags, handing each RNIC engine its identity and lists.

use crate::http_client::http_agent;
use crate::probe::engine::{Command, EngineHandle};
use crate::probe::guard::GuardSettings;
use crate::stats::Counters;
use crate::stop::StopSignal;
use crate::upload::Destination;
use anyhow::{Context, Result, bail};
use rocemesh_proto::api::{API_PREFIX, Pinglist, ProbeAuth, RegisterRequest, RegisterResponse};
use rocemesh_proto::host_key::HostKey;
use rocemesh_proto::http_client::named_analyzer;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// First registration retry delay; doubles up to [`BACKOFF_MAX`].
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Longest registration retry delay.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Timeout of every controller request.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest pinglist body accepted.
const MAX_PINGLIST_BYTES: u64 = 32 * 1024 * 1024;
/// Shortest poll/upload period honoured, whatever the controller says.
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// What the agent learned from its last registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Registration {
    /// Controller-assigned host id.
    pub host_id: u32,
    /// Where results go.
    pub analyzer_url: String,
    /// Upload period.
    pub upload_period: Duration,
    /// Pinglist poll period.
    pub poll_period: Duration,
    /// Controller id of each configured RNIC, in configuration order.
    pub rnic_ids: Vec<Option<u32>>,
    /// The upload key proving this host to the analyzer (from a controller that issues one).
    pub upload_key: Option<HostKey>,
}

impl Registration {
    /// Where result batches go, as this host.
    pub(crate) fn destination(&self) -> Destination<'_> {
        Destination {
            analyzer_url: &self.analyzer_url,
            host_id: self.host_id,
            host_key: self.upload_key.as_ref(),
        }
    }
}

/// Registration state shared between the control thread, the uploader and the handle.
pub(crate) type SharedRegistration = Arc<Mutex<Option<Registration>>>;

/// Result of one pinglist poll: what happened to the list, and the analyzer the
/// controller named, if any.
#[derive(Debug)]
pub(crate) struct PollReply {
    /// The list's fate.
    pub outcome: Poll,
    /// A usable `http(s)://` URL from the `x-rocemesh-analyzer` header ([`named_analyzer`]).
    pub analyzer: Option<String>,
}

/// What a pinglist poll did to the list.
#[derive(Debug)]
pub(crate) enum Poll {
    /// 304: what we have is current.
    Unchanged,
    /// 200: a new pinglist and its ETag.
    Changed(Box<Pinglist>, Option<String>),
    /// 404/409: the controller does not know this incarnation; register again.
    Reregister,
}

/// Blocking client of the controller API.
#[derive(Debug)]
pub(crate) struct ControlClient {
    http: ureq::Agent,
    base: String,
    request: RegisterRequest,
}

impl ControlClient {
    /// A client registering `request` at `controller_url`.
    pub(crate) fn new(controller_url: &str, request: RegisterRequest) -> Self {
        Self {
            http: http_agent(REQUEST_TIMEOUT),
            base: controller_url.trim_end_matches('/').to_string(),
            request,
        }
    }

    /// `POST /api/v1/agents/register`.
    pub(crate) fn register(&self) -> Result<RegisterResponse> {
        let url = format!("{}{API_PREFIX}/agents/register", self.base);
        let mut resp = self
            .http
            .post(&url)
            .send_json(&self.request)
            .with_context(|| format!("POST {url}"))?;
        if !resp.status().is_success() {
            let body = resp
                .body_mut()
                .with_config()
                .limit(64 * 1024)
                .read_to_string()
                .unwrap_or_default();
            let hint = match resp.status().as_u16() {
                401 | 403 => {
                    " (the server refused this agent's credential: set the agent token with --token-file or ROCEMESH_TOKEN)"
                }
                _ => "",
            };
            bail!("POST {url}: HTTP {}: {}{hint}", resp.status(), body.trim());
        }
        resp.body_mut()
            .with_config()
            .limit(MAX_PINGLIST_BYTES)
            .read_json()
            .with_context(|| format!("POST {url}: bad reply"))
    }

    /// `GET /api/v1/pinglists/{host_id}?epoch=` with `If-None-Match`.
    pub(crate) fn poll(&self, host_id: u32, etag: Option<&str>) -> Result<PollReply> {
        let url = format!(
            "{}{API_PREFIX}/pinglists/{host_id}?epoch={}",
            self.base, self.request.epoch
        );
        let mut req = self.http.get(&url);
        if let Some(tag) = etag {
            req = req.header("If-None-Match", tag);
        }
        let mut resp = req.call().with_context(|| format!("GET {url}"))?;
        let analyzer = named_analyzer(resp.headers());
        let outcome = match resp.status().as_u16() {
            304 => Poll::Unchanged,
            404 | 409 => Poll::Reregister,
            200 => {
                let tag = resp
                    .headers()
                    .get("etag")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let list: Pinglist = resp
                    .body_mut()
                    .with_config()
                    .limit(MAX_PINGLIST_BYTES)
                    .read_json()
                    .with_context(|| format!("GET {url}: bad pinglist"))?;
                Poll::Changed(Box::new(list), tag)
            }
            s => bail!("GET {url}: HTTP {s}"),
        };
        Ok(PollReply { outcome, analyzer })
    }
}

/// The control thread's state: engines by RNIC name, in configuration order.
pub(crate) struct ControlLoop {
    /// Controller client.
    pub client: ControlClient,
    /// (RNIC name, engine) pairs.
    pub engines: Arc<Vec<(String, EngineHandle)>>,
    /// Analyzer URL from the configuration, overriding the controller's.
    pub analyzer_override: Option<String>,
    /// Shared registration state.
    pub registration: SharedRegistration,
    /// Hand the engines their pinglists (`false`: a responder-only host probes nothing).
    pub probing: bool,
    /// Counters.
    pub counters: Arc<Counters>,
    /// Shutdown.
    pub stop: Arc<StopSignal>,
}

impl ControlLoop {
    /// Registers, then polls the pinglist until stopped, re-registering when told to.
    pub(crate) fn run(self) {
        while let Some(mut reg) = self.register_with_backoff() {
            let mut etag: Option<String> = None;
            let mut failing = false;
            loop {
                let reply = self.client.poll(reg.host_id, etag.as_deref());
                if let Ok(PollReply {
                    analyzer: Some(url),
                    ..
                }) = &reply
                {
                    self.follow_analyzer(&mut reg, url);
                }
                match reply.map(|r| r.outcome) {
                    Ok(Poll::Unchanged) => failing = false,
                    Ok(Poll::Changed(list, tag)) => {
                        failing = false;
                        self.apply_pinglist(&list, &reg);
                        etag = tag.or(Some(format!("\"{}\"", list.version)));
                    }
                    Ok(Poll::Reregister) => {
                        tracing::info!("controller no longer knows this agent; registering again");
                        break;
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(error = %format!("{e:#}"), "pinglist poll failed; keeping the current lists");
                        }
                        failing = true;
                    }
                }
                if self.stop.sleep(reg.poll_period) {
                    return;
                }
            }
        }
    }

    /// Registers until it works or the agent stops (`None`).
    fn register_with_backoff(&self) -> Option<Registration> {
        let mut delay = BACKOFF_MIN;
        loop {
            if self.stop.is_stopped() {
                return None;
            }
            match self.client.register() {
                Ok(resp) => return Some(self.apply_registration(&resp)),
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), retry_in = ?delay, "registration failed")
                }
            }
            if self.stop.sleep(delay) {
                return None;
            }
            delay = (delay * 2).min(BACKOFF_MAX);
        }
    }

    /// Moves uploads to the analyzer the controller named in a poll answer (its shard's
    /// owner changed), unless the configuration pins the analyzer.
    fn follow_analyzer(&self, reg: &mut Registration, url: &str) {
        if self.analyzer_override.is_some() || reg.analyzer_url == url {
            return;
        }
        tracing::info!(from = %reg.analyzer_url, to = %url, "controller moved this agent to another analyzer");
        reg.analyzer_url = url.to_string();
        if let Some(shared) = self
            .registration
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            shared.analyzer_url = url.to_string();
        }
    }

    fn apply_registration(&self, resp: &RegisterResponse) -> Registration {
        let reg = Registration {
            host_id: resp.host_id,
            analyzer_url: self
                .analyzer_override
                .clone()
                .or_else(|| resp.analyzer_url.clone())
                .unwrap_or_else(|| self.client.base.clone()),
            upload_period: Duration::from_millis(resp.upload_period_ms).max(MIN_PERIOD),
            poll_period: Duration::from_millis(resp.pinglist_poll_ms).max(MIN_PERIOD),
            rnic_ids: self
                .engines
                .iter()
                .map(|(name, _)| resp.rnics.iter().find(|r| &r.ifname == name).map(|r| r.id))
                .collect(),
            upload_key: resp.upload_key.clone(),
        };
        for ((name, engine), id) in self.engines.iter().zip(&reg.rnic_ids) {
            match id {
                Some(id) => {
                    if let Err(e) = engine.send(Command::RnicId(*id)) {
                        tracing::warn!(rnic = %name, error = %e, "cannot hand the RNIC its id");
                    }
                }
                None => tracing::warn!(rnic = %name, "controller returned no id for this RNIC"),
            }
        }
        self.apply_probe_auth(resp.probe_auth.as_ref());
        self.counters.registrations.fetch_add(1, Relaxed);
        tracing::info!(host_id = reg.host_id, analyzer = %reg.analyzer_url, "registered");
        *self.registration.lock().unwrap_or_else(|p| p.into_inner()) = Some(reg.clone());
        reg
    }

    /// Hands every engine the controller's probe keys and answer limit; unusable settings
    /// are logged and the engines keep what they have.
    fn apply_probe_auth(&self, auth: Option<&ProbeAuth>) {
        let settings = match GuardSettings::from_api(auth) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "unusable probe keys from the controller; keeping the current ones");
                return;
            }
        };
        for (name, engine) in self.engines.iter() {
            if let Err(e) = engine.send(Command::Guard(settings.clone())) {
                tracing::warn!(rnic = %name, error = %e, "cannot hand the RNIC its probe keys");
            }
        }
    }

    fn apply_pinglist(&self, list: &Pinglist, reg: &Registration) {
        self.apply_probe_auth(list.probe_auth.as_ref());
        let timeout = Duration::from_millis(list.timeout_ms.clamp(1, 60_000));
        for ((name, engine), id) in self.engines.iter().zip(&reg.rnic_ids) {
            let lists = id
                .filter(|_| self.probing)
                .and_then(|id| list.rnics.iter().find(|r| r.rnic_id == id))
                .map(|r| r.lists.clone())
                .unwrap_or_default();
            if let Err(e) = engine.send(Command::Lists(lists, timeout)) {
                tracing::warn!(rnic = %name, error = %e, "cannot hand the RNIC its pinglist");
            }
        }
        *self
            .counters
            .pinglist_version
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(list.version.clone());
        self.counters.pinglist_updates.fetch_add(1, Relaxed);
    }
}
