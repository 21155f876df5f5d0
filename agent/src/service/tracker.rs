//! The service-tracking thread: runs the eBPF tracer, keeps the flow table, and hands each
//! engine its service targets whenever they change.

use super::TimeoutFeed;
use super::comm::{CommLookup, HttpCommLookup};
use super::ownership::{NetnsId, Ownership};
use super::targets::ServiceState;
use crate::config::ServiceTracing;
use crate::probe::engine::{Command, EngineHandle};
use crate::stats::Counters;
use crate::stop::StopSignal;
use rocemesh_ebpf::{ActiveRoute, FlowEvent, Route, ServiceTracer, TracerOptions, pid_is_alive};
use rocemesh_proto::api::PingTarget;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest wait for tracer events: how soon a stop is noticed.
const POLL: Duration = Duration::from_millis(100);
/// How often targets are rebuilt without a flow change (comm-info refresh) and dead
/// processes swept.
const HOUSEKEEPING: Duration = Duration::from_secs(1);

/// Where service events come from: the eBPF tracer, or a stand-in in tests.
pub(crate) trait FlowSource: Send {
    /// Waits up to `timeout` for events.
    fn poll(&mut self, timeout: Duration) -> Result<Vec<FlowEvent>, String>;
}

impl FlowSource for ServiceTracer {
    fn poll(&mut self, timeout: Duration) -> Result<Vec<FlowEvent>, String> {
        ServiceTracer::poll(self, timeout).map_err(|e| e.to_string())
    }
}

/// What the tracker needs besides the engines.
#[derive(Debug, Clone)]
pub(crate) struct TrackerOptions {
    /// Controller base URL (comm-info look-ups).
    pub controller_url: String,
    /// Which traced processes are ours.
    pub ownership: Ownership,
    /// Local IP of each engine, in engine order.
    pub engine_ips: Vec<IpAddr>,
}

/// The running tracker thread.
#[derive(Debug)]
pub(crate) struct ServiceTracker {
    stop: Arc<StopSignal>,
    thread: JoinHandle<()>,
}

fn tracer_route(r: ServiceTracing) -> Route {
    match r {
        ServiceTracing::Auto => Route::Auto,
        ServiceTracing::Kernel => Route::Kernel,
        ServiceTracing::User => Route::User,
        ServiceTracing::Off => Route::Off,
    }
}

/// Starts the eBPF tracer; when it cannot start or attaches nothing, warns once and says
/// so in the stats (`failed` / `none`), and the agent carries on without service probes.
pub(crate) fn start_tracer(
    route: ServiceTracing,
    libraries: Vec<PathBuf>,
    counters: &Counters,
) -> Option<ServiceTracer> {
    let set_route = |name| {
        *counters
            .service_route
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = name
    };
    let opts = TracerOptions {
        route: tracer_route(route),
        libraries,
        ..TracerOptions::default()
    };
    match ServiceTracer::start(opts) {
        Ok(t) => {
            let (name, ok) = match t.route() {
                ActiveRoute::Kernel => ("kernel", true),
                ActiveRoute::User => ("user", true),
                ActiveRoute::None => ("none", false),
            };
            set_route(name);
            if ok {
                tracing::info!(route = name, "service tracing active");
                Some(t)
            } else {
                let why: Vec<String> = t.failures().iter().map(|f| f.to_string()).collect();
                tracing::warn!(reasons = %why.join("; "), "service tracing: no hook could be attached; service flows are not probed");
                None
            }
        }
        Err(e) => {
            set_route("failed");
            tracing::warn!(error = %e, "service tracing cannot start (needs root or CAP_BPF + CAP_PERFMON); service flows are not probed");
            None
        }
    }
}

impl ServiceTracker {
    /// Starts the eBPF tracer (route `route`, extra libibverbs `libraries`) on a new thread
    /// and tracks flows until stopped.
    pub(crate) fn spawn(
        route: ServiceTracing,
        libraries: Vec<PathBuf>,
        opts: TrackerOptions,
        engines: Arc<Vec<(String, EngineHandle)>>,
        feed: Arc<TimeoutFeed>,
        counters: Arc<Counters>,
    ) -> std::io::Result<Self> {
        let c = counters.clone();
        Self::spawn_with(
            move || start_tracer(route, libraries, &c),
            opts,
            engines,
            feed,
            counters,
        )
    }

    /// Like [`ServiceTracker::spawn`] with any event source (`None`: nothing to track; the
    /// thread ends at once).
    pub(crate) fn spawn_with<S: FlowSource + 'static>(
        source: impl FnOnce() -> Option<S> + Send + 'static,
        opts: TrackerOptions,
        engines: Arc<Vec<(String, EngineHandle)>>,
        feed: Arc<TimeoutFeed>,
        counters: Arc<Counters>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(StopSignal::default());
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("service".into())
            .spawn(move || {
                if let Some(mut source) = source() {
                    let lookup = HttpCommLookup::new(&opts.controller_url);
                    let mut run = Run {
                        state: ServiceState::new(opts.ownership, opts.engine_ips),
                        sent: vec![Vec::new(); engines.len()],
                        engines,
                        feed,
                        counters,
                        lookup: &lookup,
                    };
                    run.run(&mut source, &st);
                }
            })?;
        Ok(Self { stop, thread })
    }

    /// Asks the thread to stop without waiting (it notices within ~100 ms, or once the
    /// tracer has finished starting).
    pub(crate) fn request_stop(&self) {
        self.stop.stop();
    }

    /// Stops the thread and joins it.
    pub(crate) fn stop(self) -> anyhow::Result<()> {
        self.stop.stop();
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("service thread panicked"))
    }
}

struct Run<'a> {
    state: ServiceState,
    /// What each engine was last given.
    sent: Vec<Vec<PingTarget>>,
    engines: Arc<Vec<(String, EngineHandle)>>,
    feed: Arc<TimeoutFeed>,
    counters: Arc<Counters>,
    lookup: &'a dyn CommLookup,
}

impl Run<'_> {
    fn run(&mut self, source: &mut dyn FlowSource, stop: &StopSignal) {
        let mut last_housekeeping = Instant::now();
        let mut failing = false;
        while !stop.is_stopped() {
            let mut changed = false;
            match source.poll(POLL) {
                Ok(events) => {
                    failing = false;
                    self.counters
                        .service_events
                        .fetch_add(events.len() as u64, Relaxed);
                    for ev in &events {
                        changed |= self.state.apply(ev, NetnsId::of_pid);
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "service tracing: polling events failed");
                    }
                    failing = true;
                    if stop.sleep(POLL) {
                        break;
                    }
                }
            }
            let stale = self.feed.take();
            if !stale.is_empty() {
                self.state.invalidate(&stale);
                changed = true;
            }
            if last_housekeeping.elapsed() >= HOUSEKEEPING {
                last_housekeeping = Instant::now();
                self.state.sweep(pid_is_alive);
                changed = true;
            }
            if changed {
                self.publish();
            }
        }
    }

    /// Hands every engine whose targets changed its new set.
    fn publish(&mut self) {
        let targets = self.state.targets(Instant::now(), self.lookup);
        self.counters
            .service_flows
            .store(self.state.flows() as u64, Relaxed);
        for (i, t) in targets.into_iter().enumerate() {
            if self.sent[i] == t {
                continue;
            }
            let (name, engine) = &self.engines[i];
            match engine.send(Command::ServiceTargets(t.clone())) {
                Ok(()) => {
                    tracing::info!(rnic = %name, targets = t.len(), "service targets updated");
                    self.sent[i] = t;
                }
                Err(e) => {
                    tracing::warn!(rnic = %name, error = %e, "cannot hand the RNIC its service targets")
                }
            }
        }
    }
}
