//! Ring-buffer records from the BPF programs (`bpf/flow_event.h`) and their decoder.
//!
//! The decoder takes arbitrary bytes: every field is bounds-checked and every unknown value
//! is an error, so a corrupted or truncated record is counted by the caller, never a panic.

use std::fmt;

/// Size of one `struct flow_event` record in bytes.
pub const EVENT_SIZE: usize = 80;

/// What happened to a service QP (or its process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowEventKind {
    /// The QP was modified to RTR: its remote end (dgid, dest QPN, flow label) is known.
    Rtr,
    /// The QP is being destroyed.
    Destroy,
    /// A process that owned traced QPs exited; all its QPs are gone.
    ProcessExit,
}

/// Which hook produced an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventSource {
    /// uprobe on libibverbs.
    User,
    /// kprobe on ib_core.
    Kernel,
    /// sched_process_exit tracepoint.
    Scheduler,
}

/// One decoded event: a service RC connection reaching RTR, being destroyed, or its process exiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEvent {
    /// What happened.
    pub kind: FlowEventKind,
    /// Which hook saw it.
    pub source: EventSource,
    /// Process id (tgid, host pid namespace).
    pub pid: u32,
    /// Thread id that made the call.
    pub tid: u32,
    /// cgroup v2 id of the caller (maps to a container / pod).
    pub cgroup_id: u64,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) when the hook fired.
    pub ktime_ns: u64,
    /// Local QP number (0 for [`FlowEventKind::ProcessExit`]).
    pub local_qpn: u32,
    /// Remote QP number (RTR only).
    pub dest_qpn: u32,
    /// GRH flow label, 20 bits (RTR only).
    pub flow_label: u32,
    /// Destination GID (RTR only), network byte order as on the wire.
    pub dgid: [u8; 16],
    /// Caller's command name (`comm`), lossily decoded.
    pub comm: String,
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The record is shorter than [`EVENT_SIZE`].
    #[error("event record is {0} bytes, expected at least {EVENT_SIZE}")]
    Truncated(usize),
    /// Unknown `kind` value.
    #[error("unknown event kind {0}")]
    UnknownKind(u32),
    /// Unknown `route` value.
    #[error("unknown event route {0}")]
    UnknownRoute(u32),
    /// A flow label wider than 20 bits cannot come from a real GRH.
    #[error("flow label {0:#x} exceeds 20 bits")]
    BadFlowLabel(u32),
}

fn u32_at(b: &[u8; EVENT_SIZE], off: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(v)
}

fn u64_at(b: &[u8; EVENT_SIZE], off: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(v)
}

/// Decodes one ring-buffer record (native byte order, as written by the kernel on this host).
pub fn decode_event(bytes: &[u8]) -> Result<FlowEvent, DecodeError> {
    let b: &[u8; EVENT_SIZE] = bytes
        .get(..EVENT_SIZE)
        .and_then(|s| s.try_into().ok())
        .ok_or(DecodeError::Truncated(bytes.len()))?;
    let kind = match u32_at(b, 0) {
        1 => FlowEventKind::Rtr,
        2 => FlowEventKind::Destroy,
        3 => FlowEventKind::ProcessExit,
        k => return Err(DecodeError::UnknownKind(k)),
    };
    let source = match u32_at(b, 4) {
        1 => EventSource::User,
        2 => EventSource::Kernel,
        3 => EventSource::Scheduler,
        r => return Err(DecodeError::UnknownRoute(r)),
    };
    let flow_label = u32_at(b, 40);
    if flow_label > 0xF_FFFF {
        return Err(DecodeError::BadFlowLabel(flow_label));
    }
    let mut dgid = [0u8; 16];
    dgid.copy_from_slice(&b[48..64]);
    let comm_bytes = &b[64..80];
    let comm_len = comm_bytes
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(comm_bytes.len());
    Ok(FlowEvent {
        kind,
        source,
        pid: u32_at(b, 8),
        tid: u32_at(b, 12),
        cgroup_id: u64_at(b, 16),
        ktime_ns: u64_at(b, 24),
        local_qpn: u32_at(b, 32),
        dest_qpn: u32_at(b, 36),
        flow_label,
        dgid,
        comm: String::from_utf8_lossy(&comm_bytes[..comm_len]).into_owned(),
    })
}

/// Formats a GID like `ip -6` does (`fe80::1`, `::ffff:10.0.0.1` shown as IPv6).
pub struct GidDisplay<'a>(pub &'a [u8; 16]);

impl fmt::Display for GidDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        std::net::Ipv6Addr::from(*self.0).fmt(f)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Encodes an event the way the BPF program lays it out (test helper for other modules too).
    pub(crate) fn encode(kind: u32, route: u32, pid: u32, qpn: u32, dqpn: u32, fl: u32) -> Vec<u8> {
        let mut b = vec![0u8; EVENT_SIZE];
        b[0..4].copy_from_slice(&kind.to_ne_bytes());
        b[4..8].copy_from_slice(&route.to_ne_bytes());
        b[8..12].copy_from_slice(&pid.to_ne_bytes());
        b[12..16].copy_from_slice(&(pid + 1).to_ne_bytes());
        b[16..24].copy_from_slice(&77u64.to_ne_bytes());
        b[24..32].copy_from_slice(&5u64.to_ne_bytes());
        b[32..36].copy_from_slice(&qpn.to_ne_bytes());
        b[36..40].copy_from_slice(&dqpn.to_ne_bytes());
        b[40..44].copy_from_slice(&fl.to_ne_bytes());
        b[48..64].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        b[64..68].copy_from_slice(b"nccl");
        b
    }

    #[test]
    fn decodes_every_field() {
        let ev = decode_event(&encode(1, 1, 42, 0x11, 0x22, 0xABCDE)).unwrap();
        assert_eq!(ev.kind, FlowEventKind::Rtr);
        assert_eq!(ev.source, EventSource::User);
        assert_eq!((ev.pid, ev.tid, ev.cgroup_id, ev.ktime_ns), (42, 43, 77, 5));
        assert_eq!(
            (ev.local_qpn, ev.dest_qpn, ev.flow_label),
            (0x11, 0x22, 0xABCDE)
        );
        assert_eq!(GidDisplay(&ev.dgid).to_string(), "fe80::1");
        assert_eq!(ev.comm, "nccl");
    }

    #[test]
    fn rejects_bad_records() {
        assert_eq!(decode_event(&[0u8; 79]), Err(DecodeError::Truncated(79)));
        assert_eq!(decode_event(&[]), Err(DecodeError::Truncated(0)));
        assert_eq!(
            decode_event(&encode(9, 1, 1, 1, 1, 1)),
            Err(DecodeError::UnknownKind(9))
        );
        assert_eq!(
            decode_event(&encode(1, 0, 1, 1, 1, 1)),
            Err(DecodeError::UnknownRoute(0))
        );
        assert_eq!(
            decode_event(&encode(1, 1, 1, 1, 1, 0x10_0000)),
            Err(DecodeError::BadFlowLabel(0x10_0000))
        );
    }

    #[test]
    fn full_comm_without_nul_and_trailing_bytes_are_accepted() {
        let mut b = encode(2, 2, 1, 1, 0, 0);
        b[64..80].copy_from_slice(b"0123456789abcdef");
        b.extend_from_slice(&[0xff; 8]); // ring buffer records may be padded
        assert_eq!(decode_event(&b).unwrap().comm, "0123456789abcdef");
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // Deterministic xorshift fuzz over lengths 0..200; valid headers are planted half the
        // time so the field checks behind the kind/route checks are exercised too.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..20_000usize {
            let mut buf: Vec<u8> = (0..i % 200)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            if i % 2 == 0 && buf.len() >= 8 {
                buf[0..4].copy_from_slice(&(1 + (i as u32 % 3)).to_ne_bytes());
                buf[4..8].copy_from_slice(&(1 + (i as u32 / 2 % 3)).to_ne_bytes());
            }
            let _ = decode_event(&buf);
        }
    }
}
