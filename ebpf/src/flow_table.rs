//! Live table of service RC connections, fed by [`FlowEvent`]s.

use std::collections::HashMap;

use crate::event::{EventSource, FlowEvent, FlowEventKind};
use crate::roce::flow_label_to_udp_sport;

/// A service RC connection the agent should probe on its 5-tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceFlow {
    /// Owning process (host pid).
    pub pid: u32,
    /// Local QP number.
    pub local_qpn: u32,
    /// Destination GID (IPv6 or IPv4-mapped address of the remote RNIC).
    pub dgid: [u8; 16],
    /// Remote QP number.
    pub dest_qpn: u32,
    /// GRH flow label (20 bits).
    pub flow_label: u32,
    /// RoCEv2 UDP source port derived from the flow label.
    pub udp_sport: u16,
    /// Owning process's command name.
    pub comm: String,
    /// Owning process's cgroup id.
    pub cgroup_id: u64,
    /// Which hook discovered it.
    pub source: EventSource,
    /// When it reached RTR (`CLOCK_MONOTONIC` ns).
    pub since_ktime_ns: u64,
}

/// What applying one event did to the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableChange {
    /// A new flow was added.
    Added,
    /// An existing (pid, QPN) was re-connected; its remote end changed or was refreshed.
    Updated,
    /// This many flows were removed (destroy: 0 or 1; process exit: any).
    Removed(usize),
    /// The table is full; the new flow was not recorded.
    Full,
}

/// Service flows keyed by (pid, local QPN), bounded to `capacity` entries.
///
/// A full table refuses new flows (counted) rather than evicting live ones: the flows
/// already being probed keep their history, and space frees as QPs are destroyed.
#[derive(Debug)]
pub struct FlowTable {
    flows: HashMap<(u32, u32), ServiceFlow>,
    capacity: usize,
    refused: u64,
}

impl FlowTable {
    /// An empty table holding at most `capacity` flows.
    pub fn new(capacity: usize) -> Self {
        Self {
            flows: HashMap::new(),
            capacity,
            refused: 0,
        }
    }

    /// Applies one event.
    pub fn apply(&mut self, ev: &FlowEvent) -> TableChange {
        match ev.kind {
            FlowEventKind::Rtr => {
                let key = (ev.pid, ev.local_qpn);
                let existed = self.flows.contains_key(&key);
                if !existed && self.flows.len() >= self.capacity {
                    self.refused += 1;
                    return TableChange::Full;
                }
                self.flows.insert(
                    key,
                    ServiceFlow {
                        pid: ev.pid,
                        local_qpn: ev.local_qpn,
                        dgid: ev.dgid,
                        dest_qpn: ev.dest_qpn,
                        flow_label: ev.flow_label,
                        udp_sport: flow_label_to_udp_sport(ev.flow_label),
                        comm: ev.comm.clone(),
                        cgroup_id: ev.cgroup_id,
                        source: ev.source,
                        since_ktime_ns: ev.ktime_ns,
                    },
                );
                if existed {
                    TableChange::Updated
                } else {
                    TableChange::Added
                }
            }
            FlowEventKind::Destroy => TableChange::Removed(usize::from(
                self.flows.remove(&(ev.pid, ev.local_qpn)).is_some(),
            )),
            FlowEventKind::ProcessExit => self.remove_where(|pid| pid == ev.pid),
        }
    }

    /// Drops the flows of processes for which `is_alive(pid)` is false: a safety net for exit
    /// events lost to a full ring buffer. Use [`pid_is_alive`] for the host's `/proc`.
    pub fn remove_dead_processes(&mut self, is_alive: impl Fn(u32) -> bool) -> TableChange {
        self.remove_where(|pid| !is_alive(pid))
    }

    fn remove_where(&mut self, doomed: impl Fn(u32) -> bool) -> TableChange {
        let before = self.flows.len();
        self.flows.retain(|&(pid, _), _| !doomed(pid));
        TableChange::Removed(before - self.flows.len())
    }

    /// The flow of (pid, local QPN), if live.
    pub fn get(&self, pid: u32, local_qpn: u32) -> Option<&ServiceFlow> {
        self.flows.get(&(pid, local_qpn))
    }

    /// All live flows, in no particular order.
    pub fn flows(&self) -> impl Iterator<Item = &ServiceFlow> {
        self.flows.values()
    }

    /// Number of live flows.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// True when no flow is live.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// How many new flows were refused because the table was full.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

/// True when `/proc/<pid>` exists (the process has not been reaped).
pub fn pid_is_alive(pid: u32) -> bool {
    std::path::Path::new("/proc").join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::decode_event;
    use crate::event::tests::encode;

    fn ev(kind: u32, pid: u32, qpn: u32, dqpn: u32, fl: u32) -> FlowEvent {
        decode_event(&encode(kind, 1, pid, qpn, dqpn, fl)).unwrap()
    }

    #[test]
    fn rtr_adds_then_updates_and_destroy_removes() {
        let mut t = FlowTable::new(8);
        assert_eq!(t.apply(&ev(1, 10, 100, 200, 0x4001)), TableChange::Added);
        let f = t.get(10, 100).unwrap();
        assert_eq!(
            (f.dest_qpn, f.flow_label, f.udp_sport, f.comm.as_str()),
            (200, 0x4001, 0xC000, "nccl")
        );
        assert_eq!(t.apply(&ev(1, 10, 100, 300, 5)), TableChange::Updated);
        assert_eq!(t.get(10, 100).unwrap().dest_qpn, 300);
        assert_eq!(t.len(), 1);
        // Same QPN in another process is another flow.
        assert_eq!(t.apply(&ev(1, 11, 100, 200, 5)), TableChange::Added);
        assert_eq!(t.apply(&ev(2, 10, 100, 0, 0)), TableChange::Removed(1));
        assert_eq!(t.apply(&ev(2, 10, 100, 0, 0)), TableChange::Removed(0));
        assert!(t.get(10, 100).is_none());
        assert!(t.get(11, 100).is_some());
    }

    #[test]
    fn process_exit_removes_all_its_flows() {
        let mut t = FlowTable::new(8);
        for q in 1..=3 {
            t.apply(&ev(1, 7, q, 9, 0));
        }
        t.apply(&ev(1, 8, 1, 9, 0));
        assert_eq!(t.apply(&ev(3, 7, 0, 0, 0)), TableChange::Removed(3));
        assert_eq!(t.flows().map(|f| f.pid).collect::<Vec<_>>(), vec![8]);
    }

    #[test]
    fn bounded_refuses_new_but_updates_existing() {
        let mut t = FlowTable::new(2);
        t.apply(&ev(1, 1, 1, 9, 0));
        t.apply(&ev(1, 1, 2, 9, 0));
        assert_eq!(t.apply(&ev(1, 1, 3, 9, 0)), TableChange::Full);
        assert_eq!(t.refused(), 1);
        assert_eq!(t.apply(&ev(1, 1, 2, 10, 0)), TableChange::Updated);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn dead_processes_are_swept() {
        let mut t = FlowTable::new(8);
        let me = std::process::id();
        t.apply(&ev(1, me, 1, 9, 0));
        t.apply(&ev(1, u32::MAX - 1, 1, 9, 0)); // no such pid
        assert_eq!(
            t.remove_dead_processes(pid_is_alive),
            TableChange::Removed(1)
        );
        assert!(t.get(me, 1).is_some());
    }
}
