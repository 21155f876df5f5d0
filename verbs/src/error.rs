//! Every way opening or running the verbs transport can fail, each naming what is missing.

use crate::qp_state::QpStateError;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use thiserror::Error;

/// A verbs transport error. Set-up errors say what is missing so an operator can act.
#[derive(Debug, Error)]
pub enum VerbsError {
    /// libibverbs could not be loaded (not installed, or not on the loader path).
    #[error(
        "RDMA verbs unavailable: cannot load libibverbs ({library}): {reason}; install the libibverbs1 (rdma-core) package or use the udp transport"
    )]
    LibraryMissing {
        /// The file name(s) tried.
        library: String,
        /// The dynamic loader's message.
        reason: String,
    },
    /// The loaded libibverbs lacks a function this crate calls.
    #[error("libibverbs is too old: symbol {symbol} is missing ({reason})")]
    MissingSymbol {
        /// Symbol name.
        symbol: &'static str,
        /// The dynamic loader's message.
        reason: String,
    },
    /// `ibv_get_device_list` returned NULL with ENOSYS: the kernel has no RDMA subsystem.
    #[error(
        "no RDMA devices: ibv_get_device_list failed with ENOSYS (the kernel has no RDMA subsystem: ib_uverbs not loaded, /sys/class/infiniband_verbs missing)"
    )]
    NoRdmaSubsystem,
    /// `ibv_get_device_list` returned NULL for another reason.
    #[error("no RDMA devices: ibv_get_device_list failed: {0}")]
    DeviceListFailed(io::Error),
    /// The RDMA subsystem is there but has no device.
    #[error("no RDMA devices: ibv_get_device_list returned an empty list")]
    NoDevices,
    /// The named device is not in the device list (or in sysfs).
    #[error("no RDMA device named {name:?} (available: {})", if available.is_empty() { "none".to_string() } else { available.join(", ") })]
    NoSuchDevice {
        /// Requested name.
        name: String,
        /// Names that do exist.
        available: Vec<String>,
    },
    /// sysfs has no RDMA class directory: no RDMA driver is loaded.
    #[error("no RDMA devices: {0} does not exist (no RDMA driver loaded)")]
    NoRdmaSysfs(PathBuf),
    /// No RoCEv2 GID matches the wanted IP (or the device has no usable RoCEv2 GID).
    #[error("no RoCEv2 GID {wanted}: {detail}")]
    NoRoceV2Gid {
        /// What was looked for ("for 10.0.0.1", "on mlx5_0 port 1").
        wanted: String,
        /// What was found instead.
        detail: String,
    },
    /// The configured GID index override points at an empty or unreadable slot.
    #[error("GID index {index} on {device} port {port} is empty or unreadable")]
    BadGidIndex {
        /// Device name.
        device: String,
        /// Port number.
        port: u8,
        /// The configured index.
        index: u32,
    },
    /// The configuration cannot work.
    #[error("invalid verbs configuration: {0}")]
    Config(String),
    /// Reading sysfs failed.
    #[error("reading {path}: {source}")]
    Sysfs {
        /// File or directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A verb call failed.
    #[error("{call} failed: {source}")]
    Verb {
        /// Which verb (e.g. `ibv_create_qp`).
        call: &'static str,
        /// errno as an I/O error.
        source: io::Error,
    },
    /// An illegal QP transition was asked for.
    #[error(transparent)]
    QpState(#[from] QpStateError),
    /// Every send buffer is in flight: try again after completions are drained.
    #[error("send queue full: {0} sends in flight")]
    SendQueueFull(usize),
    /// A payload longer than a send buffer (the longest probe packet).
    #[error("payload of {0} bytes exceeds the longest probe packet")]
    PayloadTooLong(usize),
    /// The destination IP has no RoCEv2 source port for the requested UDP port.
    #[error("UDP source port {0} is outside the RoCEv2 range 0xC000..=0xFFFF")]
    SourcePortOutOfRange(u16),
}

impl VerbsError {
    /// A verb failure from the current `errno`.
    pub(crate) fn last_os(call: &'static str) -> Self {
        Self::Verb {
            call,
            source: io::Error::last_os_error(),
        }
    }

    /// A verb failure from a returned error number (verbs that return errno directly).
    pub(crate) fn from_code(call: &'static str, code: i32) -> Self {
        Self::Verb {
            call,
            source: io::Error::from_raw_os_error(code),
        }
    }

    /// No RoCEv2 GID for an IP address.
    pub(crate) fn no_gid_for_ip(ip: IpAddr, detail: String) -> Self {
        Self::NoRoceV2Gid {
            wanted: format!("for {ip}"),
            detail,
        }
    }
}

impl From<VerbsError> for io::Error {
    /// Lets a `Transport` implementation return verbs errors as `io::Error` (kinds kept:
    /// a full send queue is `WouldBlock`, a failed verb keeps its errno).
    fn from(e: VerbsError) -> Self {
        match e {
            VerbsError::SendQueueFull(_) => io::Error::new(io::ErrorKind::WouldBlock, e),
            VerbsError::Verb { source, call } => {
                io::Error::new(source.kind(), format!("{call} failed: {source}"))
            }
            VerbsError::SourcePortOutOfRange(_) | VerbsError::Config(_) => {
                io::Error::new(io::ErrorKind::InvalidInput, e)
            }
            other => io::Error::other(other),
        }
    }
}
