//! RDMA verbs UD transport building blocks for rocemesh probes (R-Pingmesh §4.2.1, §5).
//!
//! One UD QP per RNIC ([`ud::UdTransport`]) sends the 64-byte probe packets with an
//! address handle per (destination GID, flow label), so the RoCEv2 UDP source port —
//! derived from the flow label ([`flow_label`]) — can follow any 5-tuple, including a
//! traced service flow's. Completions come from an extended CQ with NIC timestamps
//! ([`timestamp`]), woken through a completion channel. Every receive starts with the
//! 40-byte GRH ([`grh`]). The GID index is chosen from sysfs ([`gid_table`]).
//!
//! # Binding decision
//! Own minimal FFI, loaded at run time with `libloading` (see `README.md`):
//! `ibverbs` 0.9.2 cannot post UD sends; `sideway` 0.4 can, but needs cmake + libclang
//! at build time. A hand-written binding of the ~25 exported functions and the
//! structures actually used keeps builds plain, lets the agent start on hosts without
//! libibverbs (the error appears only when verbs is selected), and every mirrored
//! struct, offset, constant and the flow-label fold is verified against the installed
//! `<infiniband/verbs.h>` by a test that compiles a C program.
//!
//! # What runs where
//! The device path (`UdTransport::open/send/wait/next_event`) needs an RDMA device and
//! cannot run on the development machine (no RDMA, no Soft-RoCE: `ibv_get_device_list`
//! fails with ENOSYS, which is tested). All of its parts are tested on their own.

pub mod ah_cache;
pub mod device;
pub mod error;
pub(crate) mod ffi;
pub mod flow_label;
pub mod gid;
pub mod gid_table;
pub mod grh;
pub mod qp_state;
pub mod timestamp;
pub mod ud;

pub use device::rdma_device_names;
pub use error::VerbsError;
pub use gid::Gid;
pub use gid_table::{GidEntry, GidKind, GidSelector};
pub use timestamp::{CompletionStamp, StampClock};
pub use ud::event::{UdEvent, UdReceive};
pub use ud::{DEFAULT_QKEY, UdConfig, UdDestination, UdTransport};
