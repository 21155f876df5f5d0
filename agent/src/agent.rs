//! Wiring: binds every RNIC, starts one engine per RNIC, the control thread and the
//! uploader, and stops them in order.

use crate::config::{AgentConfig, ServiceTracing, TransportKind};
use crate::control::{ControlClient, ControlLoop, SharedRegistration};
use crate::discovery;
use crate::metrics::{MetricsServer, Sources};
use crate::probe::engine::{Command, EngineHandle, EngineIdentity};
use crate::probe::event_loop::EventLoop;
use crate::probe::guard::GuardSettings;
use crate::probe::prober::DEFAULT_MAX_OUTSTANDING;
use crate::probe::random_qpn;
use crate::sample::counters::{CounterSource, INFINIBAND_SYSFS};
use crate::sample::{SampledRnic, SamplerHandle, SamplerOptions};
use crate::service::ownership::Ownership;
use crate::service::{ServiceTracker, TimeoutFeed, TrackerOptions};
use crate::stats::{AgentStats, Counters};
use crate::stop::StopSignal;
use crate::trace::{TracerHandle, TracerOptions};
use crate::transport::select::{self, Choice, list_rdma_devices};
use crate::transport::udp::DEFAULT_SEND_SOCKETS;
use crate::transport::{UdpOptions, UdpTransport, VerbsOptions, VerbsTransport};
use crate::upload::Uploader;
use crate::upload::buffer::{Marks, ResultBuffer};
use anyhow::{Context, Result};
use rocemesh_proto::api::{RegisterRequest, RnicRegistration};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Timeout of regular uploads.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the uploader looks for a registration before the first one.
const UNREGISTERED_RECHECK: Duration = Duration::from_millis(100);
/// Budget of the last upload at shutdown.
const FINAL_UPLOAD_TIMEOUT: Duration = Duration::from_secs(2);
/// After a fresh analyzer answered: time for the tracer to queue every path again
/// before they are uploaded.
const RESEND_FLUSH_DELAY: Duration = Duration::from_millis(200);

/// A running agent.
pub struct AgentHandle {
    epoch: u32,
    counters: Arc<Counters>,
    buffer: Arc<ResultBuffer>,
    registration: SharedRegistration,
    stop_control: Arc<StopSignal>,
    stop_upload: Arc<StopSignal>,
    engines: Arc<Vec<(String, EngineHandle)>>,
    tracer: Option<TracerHandle>,
    service: Option<ServiceTracker>,
    sampler: Option<SamplerHandle>,
    metrics: Option<MetricsServer>,
    control: JoinHandle<()>,
    uploader: JoinHandle<()>,
}

/// Starts the agent: opens every RNIC's transport first (a missing IP, or `verbs` without
/// an RDMA device, is a clear error), starts probing and responding at once, then
/// registers, uploads and traces service flows in the background.
pub fn start(cfg: AgentConfig) -> Result<AgentHandle> {
    cfg.validate()?;
    // Send sockets need many descriptors (512 per RNIC): failure is logged, not fatal.
    let _ = rocemesh_httpd::raise_fd_limit();
    let counters = Arc::new(Counters::default());
    let buffer = Arc::new(ResultBuffer::new(cfg.buffer_capacity, counters.clone()));
    let metrics = match cfg.metrics_listen {
        Some(addr) => Some(MetricsServer::spawn(
            addr,
            Sources {
                counters: counters.clone(),
                buffer: buffer.clone(),
                buffer_capacity: cfg.buffer_capacity,
            },
        )?),
        None => None,
    };
    let epoch = rand::random_range(1..=u32::MAX);
    let token: u64 = rand::random();
    let tracer = if cfg.trace_enabled {
        let opts = TracerOptions {
            max_hops: cfg.trace_max_hops,
            pps: cfg.trace_pps,
            refresh: Duration::from_millis(cfg.trace_refresh_ms),
            dscp: cfg.dscp,
        };
        Some(TracerHandle::spawn(opts, counters.clone(), buffer.clone())?)
    } else {
        None
    };
    let service_on = cfg.service_tracing != ServiceTracing::Off;
    let service_timeouts = Arc::new(TimeoutFeed::default());
    // Listing devices loads libibverbs: only when some RNIC may use verbs.
    let devices = match cfg.transport {
        TransportKind::Auto => list_rdma_devices().map_err(|e| e.to_string()),
        _ => Err("not listed".to_string()),
    };
    let mut rnics = Vec::with_capacity(cfg.rnics.len());
    let mut engines = Vec::with_capacity(cfg.rnics.len());
    let mut engine_ips = Vec::with_capacity(cfg.rnics.len());
    let mut any_verbs = false;
    let mut sampled = Vec::with_capacity(cfg.rnics.len());
    // Every UDP RNIC on one thread and one epoll; each verbs RNIC blocks on its own.
    let mut udp_loop = EventLoop::new("rnics");
    for (config_index, r) in cfg.rnics.iter().enumerate() {
        let ip = match (r.ip, &r.interface) {
            (Some(ip), _) => ip,
            (None, Some(ifname)) => {
                discovery::interface_ip(ifname).with_context(|| format!("RNIC {}", r.name))?
            }
            (None, None) => anyhow::bail!("RNIC {}: give an ip or an interface", r.name),
        };
        let ifname = r.interface.clone().or_else(|| discovery::interface_of(ip));
        let identity = |qpn| EngineIdentity {
            name: format!("rnic-{}", r.name),
            qpn,
            token,
            port: cfg.port,
            max_outstanding: DEFAULT_MAX_OUTSTANDING,
            trace: tracer.as_ref().map(TracerHandle::feed),
            service_timeouts: service_on.then(|| service_timeouts.clone()),
        };
        let choice = select::choose(cfg.transport, r, ip, &devices);
        let (engine, qpn, gid, source) = match &choice {
            Choice::Udp { reason } => {
                tracing::info!(rnic = %r.name, %ip, transport = "udp", %reason, "RNIC transport");
                let opts = UdpOptions {
                    ip,
                    port: cfg.port,
                    dscp: cfg.dscp,
                    hardware_timestamps_on: ifname.clone().filter(|_| cfg.hardware_timestamps),
                    max_send_sockets: DEFAULT_SEND_SOCKETS,
                };
                let transport = UdpTransport::open(opts, counters.clone())
                    .with_context(|| format!("RNIC {}", r.name))?;
                let qpn = random_qpn();
                let engine =
                    udp_loop.add(identity(qpn), transport, counters.clone(), buffer.clone());
                // 127.x aliases are not listed as addresses of `lo`, but live there.
                let netdev = ifname
                    .clone()
                    .or_else(|| ip.is_loopback().then(|| "lo".to_string()));
                let source = netdev.map(|ifname| CounterSource::NetDev { ifname });
                (engine, qpn, None, source)
            }
            Choice::Verbs { device } => {
                any_verbs = true;
                let opts = VerbsOptions {
                    ip,
                    device: device.clone(),
                    gid_index: r.gid_index,
                    dscp: cfg.dscp,
                };
                let transport = VerbsTransport::open(&opts, counters.clone())
                    .with_context(|| format!("RNIC {}: verbs transport", r.name))?;
                let (qpn, gid) = (transport.qpn(), transport.gid().clone());
                tracing::info!(rnic = %r.name, %ip, transport = "verbs", device = %gid.device, port = gid.port, gid_index = gid.index, qpn, "RNIC transport");
                let engine = EngineHandle::spawn(
                    identity(qpn),
                    transport,
                    counters.clone(),
                    buffer.clone(),
                )?;
                let source = CounterSource::rdma_port(
                    std::path::Path::new(INFINIBAND_SYSFS),
                    &gid.device,
                    gid.port,
                );
                (engine, qpn, Some(gid.gid.to_string()), Some(source))
            }
        };
        match source {
            Some(source) => sampled.push(SampledRnic {
                config_index,
                source,
            }),
            None => {
                tracing::warn!(rnic = %r.name, %ip, "no interface holds this IP; its throughput is not sampled")
            }
        }
        counters
            .transports
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(r.name.clone(), choice.name());
        engines.push((r.name.clone(), engine));
        engine_ips.push(ip);
        rnics.push(RnicRegistration {
            ifname: r.name.clone(),
            ip,
            gid,
            qpn,
            port: cfg.port,
            tor: r.tor.clone(),
            rail: r.rail,
            gateway: ifname.as_deref().and_then(discovery::gateway),
        });
    }
    // Nothing is answered or trusted until the controller hands out the probe keys.
    let closed = Arc::new(GuardSettings::closed());
    for (_, engine) in &engines {
        engine.send(Command::Guard(closed.clone()))?;
    }
    if !udp_loop.is_empty() {
        udp_loop.spawn()?;
    }
    let engines = Arc::new(engines);
    let service = if service_on {
        let opts = TrackerOptions {
            controller_url: cfg.controller_url.clone(),
            ownership: Ownership::for_agent(any_verbs)
                .context("reading this thread's network namespace")?,
            engine_ips,
        };
        Some(ServiceTracker::spawn(
            cfg.service_tracing,
            cfg.service_libraries.clone(),
            opts,
            engines.clone(),
            service_timeouts,
            counters.clone(),
        )?)
    } else {
        *counters
            .service_route
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = "off";
        None
    };
    let registration: SharedRegistration = Arc::new(Mutex::new(None));
    let stop_control = Arc::new(StopSignal::default());
    let stop_upload = Arc::new(StopSignal::default());
    let control = ControlLoop {
        client: ControlClient::new(
            &cfg.controller_url,
            RegisterRequest {
                host: cfg.host.clone(),
                epoch,
                rnics,
            },
        ),
        engines: engines.clone(),
        analyzer_override: cfg.analyzer_url.clone(),
        registration: registration.clone(),
        probing: cfg.probing,
        counters: counters.clone(),
        stop: stop_control.clone(),
    };
    let sampler = if cfg.sampling_enabled && !sampled.is_empty() {
        let opts = SamplerOptions {
            interval: Duration::from_millis(cfg.sample_interval_ms),
            upload_period: Duration::from_millis(cfg.sample_upload_ms),
            controller_url: cfg.controller_url.clone(),
            epoch,
        };
        Some(SamplerHandle::spawn(
            opts,
            sampled,
            registration.clone(),
            counters.clone(),
        )?)
    } else {
        None
    };
    let control = std::thread::Builder::new()
        .name("control".into())
        .spawn(move || control.run())?;
    let uploader = Uploader::new(buffer.clone(), counters.clone(), epoch, UPLOAD_TIMEOUT)
        .with_resender(tracer.as_ref().map(TracerHandle::resender));
    let (reg, st) = (registration.clone(), stop_upload.clone());
    let uploader = std::thread::Builder::new()
        .name("upload".into())
        .spawn(move || upload_loop(uploader, &reg, &st))?;
    tracing::info!(host = %cfg.host, epoch, rnics = cfg.rnics.len(), "agent started");
    Ok(AgentHandle {
        epoch,
        counters,
        buffer,
        registration,
        stop_control,
        stop_upload,
        engines,
        tracer,
        service,
        sampler,
        metrics,
        control,
        uploader,
    })
}

/// Uploads every period once registered; at stop, one last upload within the final budget.
fn upload_loop(mut uploader: Uploader, registration: &SharedRegistration, stop: &StopSignal) {
    let current = || {
        registration
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    };
    loop {
        // Until registered there is nowhere to upload: check again soon.
        let period = current().map_or(UNREGISTERED_RECHECK, |r| {
            uploader.next_delay(r.upload_period)
        });
        if stop.sleep(period) {
            break;
        }
        if let Some(reg) = current() {
            uploader.upload_all(&reg.destination());
            // A fresh analyzer: its traced paths were queued again (by the tracer thread,
            // within milliseconds); deliver them now, its tomography waits for them.
            if uploader.take_resend_pending() && !stop.sleep(RESEND_FLUSH_DELAY) {
                uploader.upload_all(&reg.destination());
            }
        }
    }
    if let Some(reg) = current() {
        uploader.set_timeout(FINAL_UPLOAD_TIMEOUT);
        uploader.upload_chunk(&reg.destination(), Marks::ALL);
    }
}

impl AgentHandle {
    /// Snapshot of every counter.
    pub fn stats(&self) -> AgentStats {
        self.counters.snapshot(self.buffer.len())
    }

    /// Host id once registered.
    pub fn host_id(&self) -> Option<u32> {
        self.registration
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|r| r.host_id)
    }

    /// Where `/metrics` is served, when `metrics_listen` is set.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::local_addr)
    }

    /// This incarnation's epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Stops the engines (their last results are kept), does one last upload (≤ 2 s) and
    /// joins every thread.
    pub fn shutdown(self) -> Result<()> {
        if let Some(s) = &self.service {
            s.request_stop();
        }
        self.stop_control.stop();
        let mut result = self
            .control
            .join()
            .map_err(|_| anyhow::anyhow!("control thread panicked"));
        if let Some(s) = self.service {
            result = result.and(s.stop());
        }
        // With the control and service threads gone, this handle holds the only reference to the engines.
        let engines =
            Arc::try_unwrap(self.engines).map_err(|_| anyhow::anyhow!("engines still shared"))?;
        for (_, engine) in &engines {
            engine.request_stop();
        }
        for (name, engine) in engines {
            if let Err(e) = engine.stop() {
                result = result.and(Err(e.context(format!("RNIC {name}"))));
            }
        }
        if let Some(t) = self.tracer
            && let Err(e) = t.stop()
        {
            result = result.and(Err(e));
        }
        // The last result upload and the last sample upload overlap.
        self.stop_upload.stop();
        if let Some(s) = self.sampler {
            result = result.and(s.stop());
        }
        let upload = self
            .uploader
            .join()
            .map_err(|_| anyhow::anyhow!("upload thread panicked"));
        if let Some(m) = self.metrics {
            result = result.and(m.stop());
        }
        result.and(upload)
    }
}
