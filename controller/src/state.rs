//! The controller's shared state: settings, topology, the registry mirror of the database,
//! and the pinglist cache. Every change is committed to the database before it is
//! applied in memory and acknowledged.

mod error;
mod scaleout;
mod tasks;

use crate::clock::Clock;
use crate::config::{ControllerConfig, DEFAULT_PARALLEL_PATHS};
use crate::metrics::{Inventory, PollCounters, phase_slot};
use crate::pinglist::{self, PinglistCache, PinglistParams, PortRange, coverage};
use crate::probe_keys::{KeyPolicy, ProbeKeys};
use crate::registry::{self, Registry, validate};
use crate::tasks::TaskBook;
use crate::tasks::resolve::Derived;
use crate::tasks::service::{self, ServiceParams};
use crate::throughput::ThroughputStore;
use crate::topology::{NodeLabels, Topology, UNKNOWN_TOR};
pub use error::StateError;
use rocemesh_proto::api::{
    HostInfo, Pinglist, ProbeAuth, RegisterRequest, RegisterResponse, RnicInfo, TopologyInfo,
};
use rocemesh_store::Db;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// Shared controller state; cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct ControllerState {
    inner: Arc<Inner>,
}

struct Inner {
    db: Db,
    cfg: ControllerConfig,
    /// The file's topology plus the ToRs of node labels (written by task discovery).
    topology: RwLock<Topology>,
    parallel_paths: u32,
    params: PinglistParams,
    registry: RwLock<Registry>,
    /// Serializes writers: plan, commit, apply must not interleave.
    writer: tokio::sync::Mutex<()>,
    pinglists: PinglistCache,
    warned_unknown_tor: AtomicBool,
    /// Training tasks. Lock order: `registry` before `tasks` before `derived`/`pinglists`.
    tasks: RwLock<TaskBook>,
    /// Tasks resolved against the registry, for the last generations asked for.
    derived: std::sync::Mutex<Option<Arc<Derived>>>,
    service: ServiceParams,
    throughput: std::sync::Mutex<ThroughputStore>,
    polls: PollCounters,
    /// The cluster probe keys handed to agents.
    probe_keys: Arc<ProbeKeys>,
    /// Scale-out membership (`None`: this controller does everything).
    leadership: Option<crate::leader::Leadership>,
    /// Dates registrations and tasks and rotates the pinglists.
    clock: Clock,
}

/// Answers per source agents allow, as a multiple of the most one prober can legitimately
/// send one RNIC (its whole ToR-mesh, inter-ToR and service lists at once).
const SOURCE_MARGIN: f64 = 2.0;

/// The per-source answer limit agents are told: `(pps, burst)`; the burst is a quarter
/// second of it (probers send what is due within a 10 ms tick at once).
fn source_limit(cfg: &ControllerConfig, tuples_per_tor: u32) -> (f64, u32) {
    let most = cfg.tormesh_pps
        + cfg.intertor_link_pps * f64::from(tuples_per_tor)
        + cfg.task_max_pps_per_rnic;
    let pps = SOURCE_MARGIN * most;
    (pps, ((pps / 4.0).ceil() as u32).max(16))
}

/// What `GET /pinglists/{host}` can end in besides a list.
pub(crate) enum PinglistError {
    UnknownHost,
    StaleEpoch { current: u32 },
}

impl ControllerState {
    /// Validates the settings, reads the topology file and loads the registry from `db`
    /// (a restarted controller serves the same ids and pinglists).
    pub async fn new(db: Db, cfg: ControllerConfig) -> anyhow::Result<Self> {
        Self::with_clock(db, cfg, Clock::default()).await
    }

    /// [`ControllerState::new`] dating registrations and tasks and rotating pinglists by
    /// `clock` (a simulation's virtual time).
    pub async fn with_clock(db: Db, cfg: ControllerConfig, clock: Clock) -> anyhow::Result<Self> {
        cfg.validate()?;
        let topology = match &cfg.topology_file {
            Some(path) => Topology::load(path)?,
            None => Topology::default(),
        };
        let parallel_paths = cfg
            .parallel_paths
            .or(topology.parallel_paths)
            .unwrap_or(DEFAULT_PARALLEL_PATHS);
        let tuples_per_tor = coverage::tuples_per_tor(parallel_paths, cfg.coverage_probability);
        let rotated = (cfg.rotation_fraction * f64::from(tuples_per_tor)).ceil() as u32;
        let params = PinglistParams {
            tormesh_pps: cfg.tormesh_pps,
            intertor_link_pps: cfg.intertor_link_pps,
            tuples_per_tor,
            rotated_per_period: rotated.min(tuples_per_tor),
            ports: PortRange {
                min: cfg.src_port_min,
                max: cfg.src_port_max,
            },
            timeout_ms: cfg.probe_timeout_ms,
            tormesh_max_targets: cfg.tormesh_max_targets,
        };
        let service = ServiceParams {
            pair_pps: cfg.task_pair_pps,
            max_pps: cfg.task_max_pps_per_rnic,
            ports: params.ports,
        };
        let (hosts, rnics) = registry::load(&db, &topology).await?;
        let tasks = crate::tasks::load(&db).await?;
        tracing::info!(
            hosts = hosts.len(),
            rnics = rnics.len(),
            tasks = tasks.len(),
            parallel_paths,
            tuples_per_tor,
            "registry loaded"
        );
        let throughput = ThroughputStore::new(cfg.throughput_window);
        let (source_pps, source_burst) = source_limit(&cfg, tuples_per_tor);
        let policy = KeyPolicy {
            mode: cfg.probe_auth,
            rotate_ms: i64::try_from(cfg.probe_key_rotate_s.saturating_mul(1000))
                .unwrap_or(i64::MAX),
            lead_ms: i64::try_from(cfg.probe_key_lead_ms()).unwrap_or(i64::MAX),
            source_pps,
            source_burst,
            tag_window: cfg.probe_tag_window,
        };
        let probe_keys = ProbeKeys::start(db.clone(), policy).await?;
        let leadership = crate::leader::Leadership::new(&db, &cfg.scaleout)?;
        let state = Self {
            inner: Arc::new(Inner {
                db,
                cfg,
                topology: RwLock::new(topology),
                parallel_paths,
                params,
                registry: RwLock::new(Registry::from_records(hosts, rnics)),
                writer: tokio::sync::Mutex::new(()),
                pinglists: PinglistCache::default(),
                warned_unknown_tor: AtomicBool::new(false),
                tasks: RwLock::new(TaskBook::from_records(tasks)),
                derived: std::sync::Mutex::new(None),
                service,
                throughput: std::sync::Mutex::new(throughput),
                polls: PollCounters::default(),
                probe_keys,
                leadership,
                clock,
            }),
        };
        state.warn_unknown_tors();
        Ok(state)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.inner
            .registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.inner
            .registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn topology_read(&self) -> std::sync::RwLockReadGuard<'_, Topology> {
        self.inner
            .topology
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn topology_write(&self) -> std::sync::RwLockWriteGuard<'_, Topology> {
        self.inner
            .topology
            .write()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Places host `host`'s RNICs where its Kubernetes node labels say (ToR and rail, per
    /// RNIC or node-wide; empty: the labels are gone), below the topology file and the
    /// agent's hints. Registered RNICs whose place changes move now (database first; when
    /// that fails nothing changes and the next call tries again); a host not registered yet
    /// is placed when it registers. Returns how many RNICs moved.
    pub async fn set_node_labels(&self, host: &str, labels: NodeLabels) -> anyhow::Result<usize> {
        for t in labels.tors() {
            validate::name("ToR label", t).map_err(anyhow::Error::msg)?;
        }
        let _writer = self.inner.writer.lock().await;
        let (previous, moved) = {
            let mut topology = self.topology_write();
            let previous = topology.node_labels(host);
            if !topology.set_node_labels(host, labels) {
                return Ok(0);
            }
            (previous, self.read().plan_placement(host, &topology))
        };
        if moved.is_empty() {
            return Ok(0);
        }
        if let Err(e) = registry::save_placement(&self.inner.db, &moved).await {
            self.topology_write().set_node_labels(host, previous);
            return Err(e);
        }
        let n = moved.len();
        self.write().apply_placement(moved);
        tracing::info!(host, rnics = n, "node labels moved the host's RNICs");
        Ok(n)
    }

    /// The registered RNICs of host `host` (name, IP, rail), for callers that map
    /// their own view of a host (a pod's interfaces) onto registered RNICs.
    pub fn host_rnics(&self, host: &str) -> Vec<(String, IpAddr, Option<u32>)> {
        let reg = self.read();
        reg.host_id(host)
            .map(|id| {
                reg.rnics_of(id)
                    .map(|r| (r.ifname.clone(), r.ip, r.rail))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Logs (once per process) that some RNICs could not be placed under a ToR.
    fn warn_unknown_tors(&self) {
        let unplaced: Vec<String> = {
            let reg = self.read();
            reg.rnics()
                .filter(|r| r.tor == UNKNOWN_TOR)
                .map(|r| {
                    format!(
                        "{}/{}",
                        reg.host(r.host_id).map_or("?", |h| h.name.as_str()),
                        r.ifname
                    )
                })
                .collect()
        };
        if !unplaced.is_empty() && !self.inner.warned_unknown_tor.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                rnics = ?unplaced,
                "RNICs without a ToR (no topology entry, agent hint or gateway) share ToR \"{UNKNOWN_TOR}\"; further ones are not logged"
            );
        }
    }

    /// Registers (or re-registers) a host: validate, commit to the database, then apply.
    pub(crate) async fn register(
        &self,
        req: RegisterRequest,
    ) -> Result<RegisterResponse, StateError> {
        validate::request(&req).map_err(StateError::Invalid)?;
        let cfg = &self.inner.cfg;
        for (i, rnic) in req.rnics.iter().enumerate() {
            crate::prefix::rnic_address_allowed(&cfg.rnic_prefixes, rnic.ip)
                .map_err(|e| StateError::Invalid(format!("rnics[{i}]: {e}")))?;
        }
        let _writer = self.inner.writer.lock().await;
        let plan = self
            .read()
            .plan_registration(
                &req,
                &self.topology_read(),
                cfg.max_rnics_per_tor,
                self.inner.clock.now_ms(),
            )
            .map_err(StateError::Invalid)?;
        let upload_key = new_upload_key()?;
        let (host_id, rnic_ids) = self
            .inner
            .db
            .inventory()
            .save_registration(&plan, &rocemesh_proto::host_key::fingerprint(&upload_key.0))
            .await?;
        let epoch = plan.host.epoch;
        let rnics: Vec<RnicInfo> = {
            let mut reg = self.write();
            reg.apply_registration(plan, host_id, &rnic_ids);
            rnic_ids
                .iter()
                .filter_map(|id| reg.rnic_info(*id))
                .collect()
        };
        tracing::info!(host = %req.host, host_id, epoch, rnics = rnics.len(), "host registered");
        self.warn_unknown_tors();
        Ok(RegisterResponse {
            host_id,
            epoch,
            analyzer_url: self
                .home_analyzer(&rnics)
                .or_else(|| cfg.analyzer_url.clone()),
            rnics,
            upload_period_ms: cfg.upload_period_ms,
            pinglist_poll_ms: cfg.pinglist_poll_ms,
            probe_auth: Some(self.probe_auth()),
            upload_key: Some(upload_key),
        })
    }

    /// The probe keys and answer limit agents get now.
    pub(crate) fn probe_auth(&self) -> ProbeAuth {
        self.inner.probe_keys.current(rocemesh_proto::now_unix_ms())
    }

    /// Reads the probe keys again and rotates them when due (what the background task
    /// does every few seconds); for tests and operators that cannot wait.
    pub async fn refresh_probe_keys(&self, now_ms: i64) -> anyhow::Result<()> {
        self.inner.probe_keys.refresh(now_ms).await
    }

    /// Decommissions a host and its RNICs; `false` if it was unknown.
    pub(crate) async fn delete_host(&self, host_id: u32) -> Result<bool, StateError> {
        let _writer = self.inner.writer.lock().await;
        if self.read().host(host_id).is_none() {
            return Ok(false);
        }
        self.inner.db.inventory().delete_host(host_id).await?;
        self.write().remove_host(host_id);
        tracing::info!(host_id, "host decommissioned");
        Ok(true)
    }

    /// The host's current pinglist, checked against the agent's epoch when it sends one.
    pub(crate) fn pinglist(
        &self,
        host_id: u32,
        epoch: Option<u32>,
    ) -> Result<Arc<Pinglist>, PinglistError> {
        let arrived = Instant::now();
        let rotation = self.inner.clock.now_ms().max(0) as u64 / self.inner.cfg.rotation_period_ms;
        {
            let reg = self.read();
            let host = reg.host(host_id).ok_or(PinglistError::UnknownHost)?;
            if let Some(e) = epoch
                && e != host.epoch
            {
                return Err(PinglistError::StaleEpoch {
                    current: host.epoch,
                });
            }
        }
        let key_now = || {
            (
                self.read().generation(),
                self.tasks_read().generation(),
                rotation,
            )
        };
        let build = || {
            let (reg, book) = (self.read(), self.tasks_read());
            let derived = self.derived_for(&reg, &book);
            let service = service::lists(&reg, &derived, self.inner.service);
            let key = (reg.generation(), book.generation(), rotation);
            (
                key,
                pinglist::build_all(&reg, &self.inner.params, rotation, service),
            )
        };
        self.inner
            .pinglists
            .get(arrived, host_id, key_now, build)
            .ok_or(PinglistError::UnknownHost)
    }

    /// Pinglist polls by answer (`/metrics`).
    pub(crate) fn poll_counters(&self) -> &PollCounters {
        &self.inner.polls
    }

    /// Registry size and tasks per phase (`/metrics`).
    pub(crate) fn inventory(&self) -> Inventory {
        let reg = self.read();
        let mut tasks = [0; 3];
        for t in self.tasks_read().tasks() {
            tasks[phase_slot(t.runtime.phase()).0] += 1;
        }
        Inventory {
            hosts: reg.hosts().count() as u64,
            rnics: reg.rnics().count() as u64,
            tasks,
        }
    }

    /// All RNICs by id.
    pub(crate) fn rnics(&self) -> Vec<RnicInfo> {
        let reg = self.read();
        reg.rnics().filter_map(|r| reg.rnic_info(r.id)).collect()
    }

    /// One RNIC.
    pub(crate) fn rnic(&self, id: u32) -> Option<RnicInfo> {
        self.read().rnic_info(id)
    }

    /// The RNIC owning an IP (comm info for service tracing).
    pub(crate) fn rnic_by_ip(&self, ip: IpAddr) -> Option<RnicInfo> {
        self.read().rnic_by_ip(ip)
    }

    /// All hosts by id.
    pub(crate) fn hosts(&self) -> Vec<HostInfo> {
        let reg = self.read();
        reg.hosts().filter_map(|h| reg.host_info(h.id)).collect()
    }

    /// One host.
    pub(crate) fn host(&self, id: u32) -> Option<HostInfo> {
        self.read().host_info(id)
    }

    /// ToRs with their RNICs, N and k.
    pub(crate) fn topology(&self) -> TopologyInfo {
        TopologyInfo {
            tors: pinglist::tor_infos(&self.read()),
            parallel_paths: self.inner.parallel_paths,
            tuples_per_tor: self.inner.params.tuples_per_tor,
        }
    }
}

/// A fresh upload key for a registering host: 32 bytes from the OS RNG, in hex.
fn new_upload_key() -> anyhow::Result<rocemesh_proto::host_key::HostKey> {
    use anyhow::Context;
    use rand::TryRngCore;
    let mut key = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut key)
        .context("the OS random source failed")?;
    Ok(rocemesh_proto::host_key::HostKey(
        key.iter().map(|b| format!("{b:02x}")).collect(),
    ))
}
