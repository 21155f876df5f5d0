//! The service tracer: loads the embedded BPF object, attaches the chosen route, and turns
//! ring-buffer records into [`FlowEvent`]s.

use std::collections::HashSet;
use std::fmt;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aya::maps::{Array, MapData, RingBuf};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeScope};
use aya::programs::{KProbe, TracePoint, UProbe};
use aya::{Ebpf, EbpfLoader};

use crate::elf_symbol::{VersionedSymbol, resolve_default};
use crate::event::{FlowEvent, decode_event};
use crate::hidden_btf;
use crate::kernel_offsets::KernelOffsets;
use crate::libraries::{self, FileId, LibraryFile};
use crate::route::Route;
use crate::tracefs;

static BPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/service_trace.bpf.o"));

const PROG_UPROBE_MODIFY: &str = "uprobe_ibv_modify_qp";
const PROG_UPROBE_DESTROY: &str = "uprobe_ibv_destroy_qp";
const PROG_KPROBE_MODIFY: &str = "kprobe_ib_modify_qp_with_udata";
const PROG_KPROBE_DESTROY: &str = "kprobe_ib_destroy_qp_user";
const PROG_EXIT: &str = "tracepoint_sched_process_exit";
const KPROBE_TARGETS: [(&str, &str); 2] = [
    (PROG_KPROBE_MODIFY, "ib_modify_qp_with_udata"),
    (PROG_KPROBE_DESTROY, "ib_destroy_qp_user"),
];
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";

/// How the tracer is set up.
#[derive(Debug, Clone)]
pub struct TracerOptions {
    /// Requested route.
    pub route: Route,
    /// libibverbs files to hook in addition to the host's and the discovered ones.
    pub libraries: Vec<PathBuf>,
    /// Find libibverbs copies mapped by running processes (containers) via `/proc`.
    pub scan_processes: bool,
    /// How often [`ServiceTracer::poll`] rescans `/proc` for new library copies.
    pub rescan_interval: Duration,
    /// Directory with `vmlinux` and `ib_core` BTF.
    pub btf_dir: PathBuf,
    /// ib_core offsets to use instead of reading `btf_dir` (kernels without module BTF).
    pub kernel_offsets: Option<KernelOffsets>,
    /// Upper bound on events returned by one poll (the rest stay in the ring buffer).
    pub max_events_per_poll: usize,
}

impl Default for TracerOptions {
    fn default() -> Self {
        TracerOptions {
            route: Route::Auto,
            libraries: Vec::new(),
            scan_processes: true,
            rescan_interval: Duration::from_secs(10),
            btf_dir: PathBuf::from("/sys/kernel/btf"),
            kernel_offsets: None,
            max_events_per_poll: 4096,
        }
    }
}

/// The route actually in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActiveRoute {
    /// kprobes on ib_core.
    Kernel,
    /// uprobes on libibverbs.
    User,
    /// Nothing attached (route `off`, or every route failed).
    None,
}

/// A hook the tracer tries to attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// ib_core kprobes.
    Kernel,
    /// libibverbs uprobes (per library file).
    User,
    /// sched_process_exit tracepoint.
    ProcessExit,
}

/// Where a hook failed; `Attach` means the program passed the verifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Reading ib_core BTF offsets.
    Offsets,
    /// Resolving the library symbols (user route).
    Symbols,
    /// Loading the program into the kernel (verifier).
    Load,
    /// Attaching the loaded program.
    Attach,
}

/// Why a hook is not in use; reported once, in [`ServiceTracer::failures`] and the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure {
    /// Which hook.
    pub hook: Hook,
    /// Which step failed.
    pub stage: Stage,
    /// Human-readable reason with the underlying error chain.
    pub message: String,
}

impl fmt::Display for HookFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} hook failed at {:?}: {}",
            self.hook, self.stage, self.message
        )
    }
}

/// A libibverbs file the user route is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedLibrary {
    /// Path used for attaching.
    pub path: PathBuf,
    /// The `ibv_modify_qp` definition hooked (the default version).
    pub modify_qp: VersionedSymbol,
    /// The `ibv_destroy_qp` definition hooked (the default version).
    pub destroy_qp: VersionedSymbol,
}

/// Counters for operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TracerStats {
    /// Events decoded.
    pub events: u64,
    /// Records that failed to decode (counted, skipped).
    pub bad_events: u64,
    /// Events the BPF side dropped because the ring buffer was full.
    pub ring_drops: u64,
}

/// Errors that stop the tracer as a whole.
#[derive(Debug, thiserror::Error)]
pub enum TracerError {
    /// The BPF object could not be loaded at all (no CAP_BPF, no BPF ring buffer support...).
    #[error("cannot load the service-trace BPF object: {0}")]
    Object(String),
    /// Waiting on the ring buffer failed.
    #[error("waiting for service-trace events: {0}")]
    Poll(#[source] std::io::Error),
}

struct Loaded {
    ebpf: Ebpf,
    ring: RingBuf<MapData>,
    drops: Array<MapData, u64>,
}

/// Discovers service RC connections (RTR / destroy / process exit) with eBPF.
pub struct ServiceTracer {
    opts: TracerOptions,
    active: ActiveRoute,
    failures: Vec<HookFailure>,
    loaded: Option<Loaded>,
    libraries: Vec<AttachedLibrary>,
    tried_libraries: HashSet<FileId>,
    last_scan: Instant,
    events: u64,
    bad_events: u64,
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

impl ServiceTracer {
    /// Loads the BPF object and attaches the route `opts.route` asks for. A route that cannot
    /// attach is logged once, recorded in [`Self::failures`], and skipped (auto falls back to
    /// the user route); only a BPF object that cannot be loaded at all is an error.
    pub fn start(opts: TracerOptions) -> Result<ServiceTracer, TracerError> {
        let mut tracer = ServiceTracer {
            active: ActiveRoute::None,
            failures: Vec::new(),
            loaded: None,
            libraries: Vec::new(),
            tried_libraries: HashSet::new(),
            last_scan: Instant::now(),
            events: 0,
            bad_events: 0,
            opts,
        };
        if tracer.opts.route == Route::Off {
            return Ok(tracer);
        }
        let wants_kernel = matches!(tracer.opts.route, Route::Auto | Route::Kernel);
        let offsets = if wants_kernel {
            tracer.kernel_offsets()
        } else {
            None
        };
        tracer.loaded = Some(Self::load_object(offsets)?);
        if offsets.is_some() && tracer.attach_kernel() {
            tracer.active = ActiveRoute::Kernel;
        } else if matches!(tracer.opts.route, Route::Auto | Route::User) && tracer.load_user() {
            tracer.active = ActiveRoute::User;
            tracer.rescan_libraries();
        }
        if tracer.active != ActiveRoute::None {
            tracer.attach_process_exit();
        }
        tracing::info!(requested = %tracer.opts.route, active = ?tracer.active, "service tracer started");
        Ok(tracer)
    }

    fn fail(&mut self, hook: Hook, stage: Stage, message: String) {
        let failure = HookFailure {
            hook,
            stage,
            message,
        };
        tracing::warn!("service tracing: {failure}");
        self.failures.push(failure);
    }

    fn kernel_offsets(&mut self) -> Option<KernelOffsets> {
        if let Some(o) = self.opts.kernel_offsets {
            return Some(o);
        }
        match KernelOffsets::from_sys_fs(&self.opts.btf_dir) {
            Ok(o) => Some(o),
            Err(e) => {
                self.fail(Hook::Kernel, Stage::Offsets, error_chain(&e));
                None
            }
        }
    }

    /// Loads the object without letting aya parse vmlinux BTF when the process may: the
    /// programs read fixed offsets handed in as globals (header offsets for the user route,
    /// ib_core BTF offsets read before this, from the real `btf_dir`, for the kernel route),
    /// so no CO-RE relocation needs it, yet `EbpfLoader::new()` parses it (~15 MB of peak
    /// RSS). See [`hidden_btf`].
    fn load_object(offsets: Option<KernelOffsets>) -> Result<Loaded, TracerError> {
        match hidden_btf::run_without_vmlinux_btf(move || Self::load_object_here(offsets)) {
            Ok(loaded) => loaded,
            Err(e) => {
                tracing::debug!(
                    "cannot hide /sys/kernel/btf for the BPF load ({e}); aya parses vmlinux BTF"
                );
                Self::load_object_here(offsets)
            }
        }
    }

    /// Loads the object on the calling thread.
    fn load_object_here(offsets: Option<KernelOffsets>) -> Result<Loaded, TracerError> {
        let mut loader = EbpfLoader::new();
        // No CO-RE: whatever BTF the constructor found is not used.
        loader.btf(None);
        let values;
        if let Some(o) = offsets {
            values = [1, o.qp_num, o.qp_state, o.dest_qp_num, o.dgid, o.flow_label];
            let names = [
                "K_OFFSETS_VALID",
                "K_QP_NUM_OFF",
                "K_QP_STATE_OFF",
                "K_DEST_QP_NUM_OFF",
                "K_DGID_OFF",
                "K_FLOW_LABEL_OFF",
            ];
            for (name, value) in names.into_iter().zip(values.iter()) {
                loader.override_global(name, value, true);
            }
        }
        let object_err = |what: &str, e: &dyn std::error::Error| {
            TracerError::Object(format!("{what}: {}", error_chain(e)))
        };
        let mut ebpf = loader
            .load(BPF_OBJECT)
            .map_err(|e| object_err("load", &e))?;
        let map = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| TracerError::Object(format!("map {name} missing from the object")))
        };
        let ring =
            RingBuf::try_from(map(&mut ebpf, "EVENTS")?).map_err(|e| object_err("EVENTS", &e))?;
        let drops = Array::try_from(map(&mut ebpf, "RING_DROPS")?)
            .map_err(|e| object_err("RING_DROPS", &e))?;
        Ok(Loaded { ebpf, ring, drops })
    }

    fn ebpf(&mut self) -> Option<&mut Ebpf> {
        self.loaded.as_mut().map(|l| &mut l.ebpf)
    }

    /// Loads and attaches both kprobes; on failure unloads them and records why.
    fn attach_kernel(&mut self) -> bool {
        let Some(ebpf) = self.ebpf() else {
            return false;
        };
        let result = load_and_attach_kprobes(ebpf);
        if let Err((stage, message)) = result {
            if let Some(ebpf) = self.ebpf() {
                for (prog, _) in KPROBE_TARGETS {
                    if let Some(p) = ebpf
                        .program_mut(prog)
                        .and_then(|p| <&mut KProbe>::try_from(p).ok())
                    {
                        // Detaches whatever did attach; an unload error leaves nothing to do.
                        let _ = p.unload();
                    }
                }
            }
            self.fail(Hook::Kernel, stage, message);
            return false;
        }
        true
    }

    fn load_user(&mut self) -> bool {
        let Some(ebpf) = self.ebpf() else {
            return false;
        };
        let mut result = Ok(());
        for prog in [PROG_UPROBE_MODIFY, PROG_UPROBE_DESTROY] {
            result = result.and_then(|()| {
                uprobe(ebpf, prog)?
                    .load()
                    .map_err(|e| format!("{prog}: {}", error_chain(&e)))
            });
        }
        match result {
            Ok(()) => true,
            Err(message) => {
                self.fail(Hook::User, Stage::Load, message);
                false
            }
        }
    }

    fn attach_process_exit(&mut self) {
        let Some(ebpf) = self.ebpf() else { return };
        let result = (|| -> Result<(), (Stage, String)> {
            let tp: &mut TracePoint = ebpf
                .program_mut(PROG_EXIT)
                .ok_or((Stage::Load, format!("program {PROG_EXIT} missing")))?
                .try_into()
                .map_err(|e| (Stage::Load, error_chain(&e)))?;
            tp.load().map_err(|e| (Stage::Load, error_chain(&e)))?;
            tracefs::ensure_mounted().map_err(|e| (Stage::Attach, e.to_string()))?;
            tp.attach("sched", "sched_process_exit")
                .map_err(|e| (Stage::Attach, error_chain(&e)))?;
            Ok(())
        })();
        if let Err((stage, message)) = result {
            self.fail(Hook::ProcessExit, stage, format!("{message} (flows of exited processes are only dropped by FlowTable::remove_dead_processes)"));
        }
    }

    /// Attaches the user route to libibverbs files not yet hooked (new containers); returns
    /// how many were added. Called by [`Self::poll`] every `rescan_interval`.
    pub fn rescan_libraries(&mut self) -> usize {
        self.last_scan = Instant::now();
        if self.active != ActiveRoute::User {
            return 0;
        }
        let found = libraries::discover(
            &self.opts.libraries,
            self.opts.scan_processes,
            Path::new("/proc"),
        );
        let mut added = 0;
        for lib in found {
            if !self.tried_libraries.insert(lib.id) {
                continue;
            }
            let Some(ebpf) = self.ebpf() else {
                return added;
            };
            match attach_library(ebpf, &lib) {
                Ok(attached) => {
                    tracing::info!(path = %attached.path.display(), version = ?attached.modify_qp.version, "service tracing: hooked libibverbs");
                    self.libraries.push(attached);
                    added += 1;
                }
                Err((stage, message)) => self.fail(
                    Hook::User,
                    stage,
                    format!("{}: {message}", lib.path.display()),
                ),
            }
        }
        added
    }

    /// Waits up to `timeout` for events and returns those available (at most
    /// `max_events_per_poll`). Undecodable records are counted in [`TracerStats::bad_events`].
    /// With no route active it just sleeps for `timeout`.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<FlowEvent>, TracerError> {
        if self.opts.scan_processes && self.last_scan.elapsed() >= self.opts.rescan_interval {
            self.rescan_libraries();
        }
        if self.active == ActiveRoute::None {
            std::thread::sleep(timeout);
            return Ok(Vec::new());
        }
        let mut out = self.drain();
        if out.is_empty() {
            if let Some(loaded) = &self.loaded {
                let mut pfd = libc::pollfd {
                    fd: loaded.ring.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
                // SAFETY: one valid pollfd for the duration of the call.
                if unsafe { libc::poll(&mut pfd, 1, ms) } < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(TracerError::Poll(e));
                    }
                }
            }
            out = self.drain();
        }
        Ok(out)
    }

    fn drain(&mut self) -> Vec<FlowEvent> {
        let mut out = Vec::new();
        let Some(loaded) = &mut self.loaded else {
            return out;
        };
        while out.len() < self.opts.max_events_per_poll {
            let Some(item) = loaded.ring.next() else {
                break;
            };
            match decode_event(&item) {
                Ok(ev) => out.push(ev),
                Err(e) => {
                    self.bad_events += 1;
                    tracing::debug!("service tracing: bad event: {e}");
                }
            }
        }
        self.events += out.len() as u64;
        out
    }

    /// The route in use.
    pub fn route(&self) -> ActiveRoute {
        self.active
    }

    /// Every hook that could not be used, and why.
    pub fn failures(&self) -> &[HookFailure] {
        &self.failures
    }

    /// libibverbs files the user route is attached to.
    pub fn attached_libraries(&self) -> &[AttachedLibrary] {
        &self.libraries
    }

    /// Event counters.
    pub fn stats(&self) -> TracerStats {
        let ring_drops = self
            .loaded
            .as_ref()
            .and_then(|l| l.drops.get(&0, 0).ok())
            .unwrap_or(0);
        TracerStats {
            events: self.events,
            bad_events: self.bad_events,
            ring_drops,
        }
    }
}

fn uprobe<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut UProbe, String> {
    ebpf.program_mut(name)
        .ok_or_else(|| format!("program {name} missing from the object"))?
        .try_into()
        .map_err(|e| format!("{name}: {}", error_chain(&e)))
}

fn load_and_attach_kprobes(ebpf: &mut Ebpf) -> Result<(), (Stage, String)> {
    for (prog, _) in KPROBE_TARGETS {
        let kp: &mut KProbe = ebpf
            .program_mut(prog)
            .ok_or((
                Stage::Load,
                format!("program {prog} missing from the object"),
            ))?
            .try_into()
            .map_err(|e| (Stage::Load, error_chain(&e)))?;
        kp.load()
            .map_err(|e| (Stage::Load, format!("{prog}: {}", error_chain(&e))))?;
    }
    for (prog, function) in KPROBE_TARGETS {
        let kp: &mut KProbe = ebpf
            .program_mut(prog)
            .ok_or((
                Stage::Attach,
                format!("program {prog} missing from the object"),
            ))?
            .try_into()
            .map_err(|e| (Stage::Attach, error_chain(&e)))?;
        kp.attach(function, 0).map_err(|e| {
            let hint = if Path::new(KPROBE_PMU).exists() {
                "is the ib_core module loaded?".to_owned()
            } else {
                format!("this kernel has no kprobe PMU ({KPROBE_PMU} missing), so kprobes cannot be used; use the user route")
            };
            (Stage::Attach, format!("cannot attach kprobe to {function}: {}; {hint}", error_chain(&e)))
        })?;
    }
    Ok(())
}

fn attach_library(ebpf: &mut Ebpf, lib: &LibraryFile) -> Result<AttachedLibrary, (Stage, String)> {
    let symbol =
        |name| resolve_default(&lib.path, name).map_err(|e| (Stage::Symbols, e.to_string()));
    let modify_qp = symbol("ibv_modify_qp")?;
    let destroy_qp = symbol("ibv_destroy_qp")?;
    let modify = uprobe(ebpf, PROG_UPROBE_MODIFY).map_err(|m| (Stage::Attach, m))?;
    let modify_link = modify
        .attach(
            UProbeAttachLocation::AbsoluteOffset(modify_qp.file_offset),
            &lib.path,
            UProbeScope::AllProcesses,
        )
        .map_err(|e| (Stage::Attach, format!("ibv_modify_qp: {}", error_chain(&e))))?;
    let destroy_result = uprobe(ebpf, PROG_UPROBE_DESTROY).and_then(|p| {
        p.attach(
            UProbeAttachLocation::AbsoluteOffset(destroy_qp.file_offset),
            &lib.path,
            UProbeScope::AllProcesses,
        )
        .map_err(|e| format!("ibv_destroy_qp: {}", error_chain(&e)))
    });
    if let Err(message) = destroy_result {
        // Half a library (RTR without destroy) would leak flows: undo the modify hook.
        if let Ok(p) = uprobe(ebpf, PROG_UPROBE_MODIFY) {
            let _ = p.detach(modify_link);
        }
        return Err((Stage::Attach, message));
    }
    Ok(AttachedLibrary {
        path: lib.path.clone(),
        modify_qp,
        destroy_qp,
    })
}
