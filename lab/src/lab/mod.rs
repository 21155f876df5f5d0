//! A lab: a namespace fabric from the testbed, a server in the root namespace reachable
//! over the fabric's management network, and one real agent process per host. The root
//! demo and the evaluation suite both run on it.

pub mod skeleton_job;
pub mod task_job;

use anyhow::{Context, Result, bail};
use rocemesh::config::ServerConfig;
use rocemesh::server::{self, Roles, RunningServer};
use rocemesh_proto::api::{HostInfo, Problem, TaskEndpoint, TaskInfo, TaskSpec};
use rocemesh_testbed::{Fabric, FabricSpec, HelperCommand, Topology, netns};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Environment variable holding the agents' `RUST_LOG` (default `warn`); their logs are
/// kept in the lab's directory when it is set.
pub const AGENT_LOG_ENV: &str = "ROCEMESH_LAB_AGENT_LOG";

/// Timing knobs of a lab's server, tuned for seconds-scale detection.
#[derive(Debug, Clone)]
pub struct LabTiming {
    /// Agent upload period.
    pub upload_period_ms: u64,
    /// SLA period.
    pub period_ms: u64,
    /// Agents' throughput sampling interval (skeleton inference); `None`: the agent default.
    pub sample_interval_ms: Option<u64>,
}

impl Default for LabTiming {
    fn default() -> Self {
        Self {
            upload_period_ms: 1_000,
            period_ms: 5_000,
            sample_interval_ms: None,
        }
    }
}

/// The helper command that runs fault helpers through the `rocemesh-lab` binary.
pub fn helper_command() -> Result<HelperCommand> {
    Ok(HelperCommand {
        program: sibling_exe("rocemesh-lab", "ROCEMESH_LAB_BIN")?,
        args: vec!["testbed".into(), "helper".into()],
    })
}

/// The product binary the lab's agents run from: `ROCEMESH_BIN` when set, else the
/// `rocemesh` cargo builds next to this one.
pub fn rocemesh_exe() -> Result<PathBuf> {
    sibling_exe("rocemesh", "ROCEMESH_BIN")
}

/// Binary `name`: `$env` when set, else this process when it is `name`, else the `name`
/// cargo builds next to this executable or to a test binary (`target/<profile>/deps/test-…`
/// → `target/<profile>/name`).
fn sibling_exe(name: &str, env: &str) -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os(env) {
        return Ok(PathBuf::from(bin));
    }
    let me = std::env::current_exe().with_context(|| format!("locating the {name} binary"))?;
    if me.file_stem().is_some_and(|s| s == name) {
        return Ok(me);
    }
    me.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "no {name} binary next to {}: build it (`cargo build -p {name}`) or set {env}",
                me.display()
            )
        })
}

/// The analyzer's fabric map of `t` as the TOML file its `fabric_map` setting reads.
pub fn fabric_map_toml(t: &Topology) -> Result<String> {
    toml::to_string(&t.fabric_map()).context("rendering the fabric map")
}

/// Fails with a clear message unless running as root (namespaces need it).
pub fn require_root(what: &str) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "{what} builds network namespaces and needs root; without root use `rocemesh-lab demo --loopback`"
        );
    }
    Ok(())
}

/// A running lab; everything is torn down on drop.
pub struct Lab {
    /// The fabric.
    pub fabric: Fabric,
    /// Base URL of the server (on the management network).
    pub url: String,
    rt: tokio::runtime::Runtime,
    server: Option<RunningServer>,
    /// The server's configuration, kept for [`Lab::restart_server`].
    server_cfg: ServerConfig,
    agents: BTreeMap<String, Child>,
    /// Agent config file (settings that have no flag), passed with `--config`.
    agent_config: Option<PathBuf>,
    dir: PathBuf,
    exe: PathBuf,
}

impl Lab {
    /// Builds the fabric (with a management network), starts the server and one agent per host.
    pub fn up(spec: FabricSpec, timing: &LabTiming) -> Result<Lab> {
        Self::up_with(spec, timing, |_| {})
    }

    /// As [`Lab::up`], with `configure` adjusting the server's configuration last (e.g. the
    /// controller's skeleton inference cadence for a test).
    pub fn up_with(
        mut spec: FabricSpec,
        timing: &LabTiming,
        configure: impl FnOnce(&mut ServerConfig),
    ) -> Result<Lab> {
        require_root("the lab")?;
        spec.management = true;
        let fabric = Fabric::up(&spec)?.with_helper(helper_command()?);
        let dir = std::env::temp_dir().join(format!(
            "rocemesh-lab-{}-{}",
            spec.prefix,
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let map_path = dir.join("fabric-map.toml");
        std::fs::write(&map_path, fabric_map_toml(fabric.topology())?)?;

        let mut cfg = ServerConfig {
            listen: (fabric.management_ip(), 0).into(),
            database: format!("sqlite://{}", dir.join("lab.db").display()),
            ..ServerConfig::default()
        };
        cfg.controller.upload_period_ms = timing.upload_period_ms;
        cfg.controller.pinglist_poll_ms = 1_000;
        cfg.controller.parallel_paths = Some(u32::from(spec.spines));
        cfg.analyzer.period_ms = timing.period_ms;
        cfg.analyzer.grace_ms = timing.upload_period_ms + 1_000;
        // A restarted analyzer has the agents' traced paths again one upload later (the
        // re-sent ones follow the first answer of the new instance): two periods and
        // slack for a loaded machine.
        cfg.analyzer.diagnosis.paths_settle_ms = 2 * timing.upload_period_ms + 2_000;
        cfg.analyzer.fabric_map = Some(map_path);
        // Seconds-scale detection: an agent silent for 4 upload periods is down; after
        // 2.5 periods its targets' timeouts are set aside rather than blamed on the network.
        cfg.analyzer.diagnosis.host_down_after_ms = 4 * timing.upload_period_ms.max(1_000);
        cfg.analyzer.diagnosis.host_silent_ms = 5 * timing.upload_period_ms.max(1_000) / 2;
        cfg.analyzer.diagnosis.resolve_after_ms = 5_000;
        configure(&mut cfg);
        let rt = rocemesh::cli::runtime()?;
        let server = rt.block_on(server::start(cfg.clone(), Roles::Both))?;
        let url = server.url();
        // Agent settings without a command-line flag go in a config file; flags override it.
        let agent_config = match timing.sample_interval_ms {
            Some(ms) => {
                let path = dir.join("agent.toml");
                let text = format!(
                    "controller_url = {url:?}\nrnics = []\nsample_interval = \"{ms}ms\"\nsample_upload = \"{}ms\"\n",
                    timing.upload_period_ms.max(ms)
                );
                std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
                Some(path)
            }
            None => None,
        };
        let mut lab = Lab {
            fabric,
            url,
            rt,
            server: Some(server),
            server_cfg: cfg,
            agents: BTreeMap::new(),
            agent_config,
            dir,
            exe: rocemesh_exe()?,
        };
        let hosts: Vec<String> = lab.fabric.hosts().iter().map(|h| h.name.clone()).collect();
        for h in &hosts {
            lab.start_agent(h)?;
        }
        Ok(lab)
    }

    /// Starts (or restarts) the agent of `host` inside its namespace.
    pub fn start_agent(&mut self, host: &str) -> Result<()> {
        let h = self
            .fabric
            .hosts()
            .iter()
            .find(|h| h.name == host)
            .with_context(|| format!("no host {host}"))?
            .clone();
        let log = std::fs::File::create(self.dir.join(format!("agent-{host}.log")))?;
        let mut cmd = netns::command(&h.netns, &self.exe.to_string_lossy());
        let level = std::env::var(AGENT_LOG_ENV).unwrap_or_else(|_| "warn".into());
        cmd.env("RUST_LOG", level)
            .args(["agent", "--controller", &self.url, "--host", &h.name]);
        if let Some(path) = &self.agent_config {
            cmd.arg("--config").arg(path);
        }
        for r in &h.rnics {
            cmd.args([
                "--rnic",
                &format!("{}={},tor=t{},rail={}", r.ifname, r.ip, r.tor, r.rail),
            ]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting the agent of {host}"))?;
        if let Some(mut old) = self.agents.insert(host.to_string(), child) {
            let _ = old.kill();
            let _ = old.wait();
        }
        Ok(())
    }

    /// Kills the agent of `host` (SIGKILL, as a crash or host failure would).
    pub fn kill_agent(&mut self, host: &str) {
        if let Some(mut c) = self.agents.remove(host) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Pid of `host`'s agent.
    pub fn agent_pid(&self, host: &str) -> Option<u32> {
        self.agents.get(host).map(Child::id)
    }

    /// Waits until every agent registered and had time to fetch its pinglist.
    pub fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let want = self.fabric.hosts().len();
        let deadline = Instant::now() + timeout;
        loop {
            let hosts: Vec<HostInfo> = self.get("/api/v1/hosts").unwrap_or_default();
            if hosts.len() == want {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "only {} of {want} agents registered within {timeout:?}",
                    hosts.len()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_millis(2_500)); // pinglist poll + first probes
        Ok(())
    }

    /// GET a JSON document from the server.
    pub fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = format!("{}{path}", self.url);
        let mut resp = ureq::get(&url)
            .call()
            .with_context(|| format!("GET {url}"))?;
        resp.body_mut()
            .read_json()
            .with_context(|| format!("GET {url}: bad JSON"))
    }

    /// POST a JSON body to the server and read its JSON reply (e.g. creating a task).
    pub fn post<B: serde::Serialize, T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T> {
        let url = format!("{}{path}", self.url);
        let mut resp = ureq::post(&url)
            .send_json(body)
            .with_context(|| format!("POST {url}"))?;
        resp.body_mut()
            .read_json()
            .with_context(|| format!("POST {url}: bad JSON"))
    }

    /// Creates task `name` over the REST API with every RNIC of `hosts` (fabric host
    /// indices) as endpoints in that order (host-major: the ranks of a job placed there),
    /// with namespace and pod, then registers each endpoint ready.
    pub fn create_task(&self, name: &str, hosts: &[usize]) -> Result<TaskInfo> {
        let all = self.fabric.hosts();
        let endpoints = hosts
            .iter()
            .map(|&i| all.get(i).with_context(|| format!("no host {i}")))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flat_map(|h| {
                h.rnics.iter().map(|r| TaskEndpoint {
                    host: h.name.clone(),
                    rnic: r.ifname.clone(),
                    rail: Some(u32::from(r.rail)),
                    namespace: Some("training".into()),
                    pod: Some(format!("{name}-{}", h.name)),
                    ready: false,
                })
            })
            .collect::<Vec<_>>();
        let spec = TaskSpec {
            name: name.to_string(),
            endpoints,
        };
        let mut task: TaskInfo = self.post("/api/v1/tasks", &spec)?;
        for e in &spec.endpoints {
            let body = serde_json::json!({"host": e.host, "rnic": e.rnic});
            task = self.post(&format!("/api/v1/tasks/{}/ready", task.id), &body)?;
        }
        if let Some((e, _)) = task.endpoints.iter().find(|(_, id)| id.is_none()) {
            bail!("task endpoint {}/{} is not registered", e.host, e.rnic);
        }
        Ok(task)
    }

    /// Stops the server gracefully and starts it again on the same address and database,
    /// as an operator's restart would; the agents keep running and reconnect.
    pub fn restart_server(&mut self) -> Result<()> {
        let old = self
            .server
            .take()
            .context("the lab has no server running")?;
        let mut cfg = self.server_cfg.clone();
        cfg.listen = old.addr;
        self.rt.block_on(old.shutdown())?;
        self.server = Some(self.rt.block_on(server::start(cfg, Roles::Both))?);
        Ok(())
    }

    /// All problems the analyzer has (active and resolved).
    pub fn problems(&self) -> Result<Vec<Problem>> {
        self.get("/api/v1/problems?state=all&limit=1000")
    }

    /// Folder with the lab's database, fabric map and agent logs.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Blocks until Ctrl-C / SIGTERM or `timeout`; true when interrupted.
    pub fn sleep_or_interrupt(&self, timeout: Duration) -> bool {
        self.rt.block_on(async {
            tokio::select! {
                _ = server::termination() => true,
                _ = tokio::time::sleep(timeout) => false,
            }
        })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let hosts: Vec<String> = self.agents.keys().cloned().collect();
        for h in hosts {
            self.kill_agent(&h);
        }
        if let Some(s) = self.server.take() {
            let _ = self.rt.block_on(s.shutdown());
        }
        let _ = Fabric::down(&self.fabric.spec().prefix);
        if std::env::var_os(AGENT_LOG_ENV).is_some() {
            eprintln!("lab: agent logs kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use rocemesh_analyzer::FabricMap;
    use rocemesh_testbed::{FabricSpec, Topology};

    #[test]
    fn the_rendered_map_is_what_the_analyzer_reads() {
        let t = Topology::new(&FabricSpec {
            tors: 3,
            ..FabricSpec::default()
        });
        let map = FabricMap::parse(&super::fabric_map_toml(&t).unwrap()).unwrap();
        let link = t.link("t2-s1").unwrap();
        assert!(map.link("t2-s1").is_some());
        assert_eq!(&*map.device(link.b.ip.into()), "s1");
        assert_eq!(&*map.device(link.a.ip.into()), "t2");
        assert!(
            map.link("h0r0-t0").is_none(),
            "RNIC links belong to the RNIC, not the map"
        );
    }
}
