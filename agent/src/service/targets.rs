//! Live service flows of this agent's RNICs and the probe targets they become.
//!
//! A flow `(pid, local QPN) → (dgid, dest QPN, flow label)` becomes the target
//! `ip = dgid` (IPv4-mapped GIDs as IPv4), `src_port` = the flow's RoCEv2 UDP source port,
//! and the remote RNIC's id, QPN and responder port from its comm info. Flows with the same
//! (destination, source port) are one 5-tuple and one target. The target goes to the engine
//! whose RNIC the kernel would send from towards the destination (the only one when the
//! agent has a single RNIC).

use super::comm::{CommCache, CommLookup};
use super::ownership::{NetnsId, Ownership};
use rocemesh_ebpf::{FlowEvent, FlowEventKind, FlowTable, ServiceFlow, TableChange};
use rocemesh_proto::api::{PingTarget, RnicInfo};
use rocemesh_verbs::Gid;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Instant;

/// Most live service flows tracked per agent (new ones are refused beyond it).
pub(crate) const MAX_FLOWS: usize = 65_536;

/// The probe target of `flow` given the remote RNIC's comm info.
pub(crate) fn target_of(flow: &ServiceFlow, info: &RnicInfo) -> PingTarget {
    PingTarget {
        rnic_id: info.id,
        ip: Gid(flow.dgid).to_ip(),
        port: info.port,
        qpn: info.qpn,
        src_port: flow.udp_sport,
    }
}

/// The local address the kernel routes from towards `dst` (no packet is sent).
pub(crate) fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let any: IpAddr = match dst {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let sock = UdpSocket::bind(SocketAddr::new(any, 0)).ok()?;
    sock.connect(SocketAddr::new(dst, 4791)).ok()?;
    sock.local_addr().ok().map(|a| a.ip())
}

/// The service flows of this agent and their targets per engine.
pub(crate) struct ServiceState {
    table: FlowTable,
    ownership: Ownership,
    /// Local IP of each engine, in engine order.
    engines: Vec<IpAddr>,
    cache: CommCache,
    route: fn(IpAddr) -> Option<IpAddr>,
}

impl ServiceState {
    /// Flows of processes `ownership` accepts, for engines with local IPs `engines`.
    pub(crate) fn new(ownership: Ownership, engines: Vec<IpAddr>) -> Self {
        Self {
            table: FlowTable::new(MAX_FLOWS),
            ownership,
            engines,
            cache: CommCache::default(),
            route: route_source,
        }
    }

    /// Applies one traced event (RTRs of processes that are not ours are ignored; a
    /// full table refuses new flows). Returns whether the set of flows changed.
    pub(crate) fn apply(
        &mut self,
        ev: &FlowEvent,
        netns_of: impl Fn(u32) -> Option<NetnsId>,
    ) -> bool {
        if ev.kind == FlowEventKind::Rtr && !self.ownership.owns(ev.pid, netns_of) {
            return false;
        }
        match self.table.apply(ev) {
            TableChange::Added | TableChange::Updated => true,
            TableChange::Removed(n) => n > 0,
            TableChange::Full => {
                tracing::warn!(
                    refused = self.table.refused(),
                    "service flow table full; flow not probed"
                );
                false
            }
        }
    }

    /// Drops flows of processes that are gone (exit events lost); returns whether any was.
    pub(crate) fn sweep(&mut self, is_alive: impl Fn(u32) -> bool) -> bool {
        matches!(self.table.remove_dead_processes(is_alive), TableChange::Removed(n) if n > 0)
    }

    /// Marks the comm info of `ips` stale (their probes time out).
    pub(crate) fn invalidate(&mut self, ips: &[IpAddr]) {
        for ip in ips {
            self.cache.invalidate(*ip);
        }
    }

    /// Number of live flows.
    pub(crate) fn flows(&self) -> usize {
        self.table.len()
    }

    fn engine_for(&self, dst: IpAddr) -> Option<usize> {
        if let [_] = self.engines[..] {
            return Some(0);
        }
        let src = (self.route)(dst)?;
        self.engines.iter().position(|ip| *ip == src)
    }

    /// The targets of every engine (sorted, one per 5-tuple), looking comm info up through
    /// `lookup` where missing or due. Flows whose peer is unknown wait for a later call.
    pub(crate) fn targets(
        &mut self,
        now: Instant,
        lookup: &dyn CommLookup,
    ) -> Vec<Vec<PingTarget>> {
        let mut per_engine: Vec<BTreeMap<(IpAddr, u16), PingTarget>> =
            vec![BTreeMap::new(); self.engines.len()];
        let flows: Vec<ServiceFlow> = self.table.flows().cloned().collect();
        for flow in &flows {
            let dst = Gid(flow.dgid).to_ip();
            let Some(engine) = self.engine_for(dst) else {
                tracing::debug!(%dst, pid = flow.pid, "service flow leaves from none of our RNICs");
                continue;
            };
            if let Some(info) = self.cache.get(dst, now, lookup) {
                let t = target_of(flow, info);
                per_engine[engine].insert((t.ip, t.src_port), t);
            }
        }
        let live: std::collections::HashSet<IpAddr> =
            flows.iter().map(|f| Gid(f.dgid).to_ip()).collect();
        self.cache.retain(|ip| live.contains(ip));
        per_engine
            .into_iter()
            .map(|m| m.into_values().collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::comm::tests::{FakeLookup, info};
    use rocemesh_ebpf::EventSource;

    const OURS: NetnsId = NetnsId::fake(1);
    const THEIRS: NetnsId = NetnsId::fake(2);

    /// Pids below 100 live in our namespace, the rest elsewhere.
    fn netns_of(pid: u32) -> Option<NetnsId> {
        Some(if pid < 100 { OURS } else { THEIRS })
    }

    fn ev(kind: FlowEventKind, pid: u32, qpn: u32, dst: &str, label: u32) -> FlowEvent {
        let ip: IpAddr = dst.parse().unwrap();
        FlowEvent {
            kind,
            source: EventSource::User,
            pid,
            tid: pid,
            cgroup_id: 0,
            ktime_ns: 1,
            local_qpn: qpn,
            dest_qpn: 0x77,
            flow_label: label,
            dgid: Gid::from_ip(ip).0,
            comm: "nccl".into(),
        }
    }

    fn state(engines: &[&str]) -> ServiceState {
        ServiceState::new(
            Ownership::SameNetns(OURS),
            engines.iter().map(|s| s.parse().unwrap()).collect(),
        )
    }

    #[test]
    fn flow_becomes_target_with_comm_info_and_flow_sport() {
        let mut t = FlowTable::new(4);
        t.apply(&ev(FlowEventKind::Rtr, 1, 5, "10.0.0.2", 0xABCDE));
        let f = t.get(1, 5).unwrap();
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        let target = target_of(f, &info(ip, 9, 0x1234));
        assert_eq!(
            target,
            PingTarget {
                rnic_id: 9,
                ip,
                port: 4792,
                qpn: 0x1234,
                src_port: rocemesh_verbs::flow_label::flow_label_to_udp_sport(0xABCDE),
            }
        );
        assert!(target.src_port >= 0xC000);
    }

    #[test]
    fn only_our_processes_and_known_peers_are_probed() {
        let fake = FakeLookup::default();
        fake.add("10.0.0.2", 2, 0x22);
        let mut s = state(&["10.0.0.1"]);
        assert!(s.apply(&ev(FlowEventKind::Rtr, 1, 5, "10.0.0.2", 0x11), netns_of));
        assert!(!s.apply(&ev(FlowEventKind::Rtr, 500, 6, "10.0.0.2", 0x12), netns_of));
        // Same 5-tuple from another QP of ours: one target.
        assert!(s.apply(&ev(FlowEventKind::Rtr, 2, 7, "10.0.0.2", 0x11), netns_of));
        // Peer unknown to the controller: no target (yet).
        assert!(s.apply(&ev(FlowEventKind::Rtr, 1, 8, "10.0.0.3", 0x13), netns_of));
        assert_eq!(s.flows(), 3);
        let t = s.targets(Instant::now(), &fake);
        assert_eq!(t.len(), 1);
        assert_eq!(
            t[0].iter()
                .map(|t| (t.ip.to_string(), t.src_port, t.qpn))
                .collect::<Vec<_>>(),
            vec![("10.0.0.2".to_string(), 0xC011, 0x22)]
        );
    }

    #[test]
    fn destroy_and_exit_remove_targets() {
        let fake = FakeLookup::default();
        fake.add("10.0.0.2", 2, 0x22);
        let mut s = state(&["10.0.0.1"]);
        s.apply(&ev(FlowEventKind::Rtr, 1, 5, "10.0.0.2", 0x11), netns_of);
        s.apply(&ev(FlowEventKind::Rtr, 1, 6, "10.0.0.2", 0x12), netns_of);
        s.apply(&ev(FlowEventKind::Rtr, 2, 6, "10.0.0.2", 0x13), netns_of);
        let now = Instant::now();
        assert_eq!(s.targets(now, &fake)[0].len(), 3);
        assert!(s.apply(&ev(FlowEventKind::Destroy, 1, 5, "::", 0), netns_of));
        assert!(!s.apply(&ev(FlowEventKind::Destroy, 1, 5, "::", 0), netns_of));
        assert_eq!(s.targets(now, &fake)[0].len(), 2);
        assert!(s.apply(&ev(FlowEventKind::ProcessExit, 1, 0, "::", 0), netns_of));
        assert_eq!(
            s.targets(now, &fake)[0]
                .iter()
                .map(|t| t.src_port)
                .collect::<Vec<_>>(),
            vec![0xC013]
        );
        // Exit event lost: the sweep drops the dead process's flows.
        assert!(s.sweep(|pid| pid != 2));
        assert!(s.targets(now, &fake)[0].is_empty());
        assert_eq!(s.flows(), 0);
        assert!(s.cache.is_empty(), "comm info of dead flows is dropped");
    }

    #[test]
    fn stale_peer_qpn_is_refetched_after_timeouts() {
        let fake = FakeLookup::default();
        fake.add("10.0.0.2", 2, 0x22);
        let mut s = state(&["10.0.0.1"]);
        s.apply(&ev(FlowEventKind::Rtr, 1, 5, "10.0.0.2", 0x11), netns_of);
        let t0 = Instant::now();
        assert_eq!(s.targets(t0, &fake)[0][0].qpn, 0x22);
        fake.add("10.0.0.2", 2, 0x33);
        s.invalidate(&["10.0.0.2".parse().unwrap()]);
        let t1 = t0 + crate::service::comm::MIN_REFETCH;
        assert_eq!(s.targets(t1, &fake)[0][0].qpn, 0x33);
    }

    #[test]
    fn several_rnics_pick_the_routed_source() {
        let fake = FakeLookup::default();
        fake.add("127.0.0.9", 2, 0x22);
        // 10.255.255.1 is no address of this host; loopback destinations leave from 127.0.0.1.
        let mut s = state(&["10.255.255.1", "127.0.0.1"]);
        s.apply(&ev(FlowEventKind::Rtr, 1, 5, "127.0.0.9", 0x11), netns_of);
        let t = s.targets(Instant::now(), &fake);
        assert_eq!((t[0].len(), t[1].len()), (0, 1));
        assert_eq!(
            route_source("127.0.0.9".parse().unwrap()),
            Some("127.0.0.1".parse().unwrap())
        );
    }
}
