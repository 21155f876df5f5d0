//! Service tracing for rocemesh (R-Pingmesh §4.2.2): discovers the RC connections services
//! open (when a QP reaches RTR) and close (QP destroyed, process exit) with eBPF, so the agent
//! can probe each flow's own 5-tuple (dgid + UDP source port derived from the flow label).
//!
//! Two routes feed one BPF ring buffer:
//! - user: uprobes on libibverbs `ibv_modify_qp` / `ibv_destroy_qp`, attached by the file
//!   offset of the default symbol version (see [`elf_symbol`]) on every library copy found on
//!   the host and in containers ([`libraries`]);
//! - kernel: kprobes on ib_core `ib_modify_qp_with_udata` / `ib_destroy_qp_user`, with struct
//!   offsets read from the module BTF at start-up ([`btf`], [`kernel_offsets`]).
//!
//! ```no_run
//! use rocemesh_ebpf::{FlowTable, ServiceTracer, TracerOptions};
//! let mut tracer = ServiceTracer::start(TracerOptions::default())?;
//! let mut table = FlowTable::new(65536);
//! for ev in tracer.poll(std::time::Duration::from_millis(100))? {
//!     table.apply(&ev);
//! }
//! # Ok::<(), rocemesh_ebpf::TracerError>(())
//! ```

pub mod btf;
pub mod elf_symbol;
pub mod event;
pub mod flow_table;
mod hidden_btf;
pub mod kernel_offsets;
pub mod libraries;
pub mod roce;
pub mod route;
mod tracefs;
pub mod tracer;

pub use event::{DecodeError, EventSource, FlowEvent, FlowEventKind, GidDisplay, decode_event};
pub use flow_table::{FlowTable, ServiceFlow, TableChange, pid_is_alive};
pub use kernel_offsets::KernelOffsets;
pub use roce::flow_label_to_udp_sport;
pub use route::Route;
pub use tracer::{
    ActiveRoute, AttachedLibrary, Hook, HookFailure, ServiceTracer, Stage, TracerError,
    TracerOptions, TracerStats,
};
