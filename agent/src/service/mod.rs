//! Service tracing (R-Pingmesh §4.2.2): probe the 5-tuples of the RC connections services
//! on this host open, while they live.
//!
//! [`tracker`] runs `rocemesh_ebpf::ServiceTracer` on a thread and keeps its flow table;
//! [`ownership`] decides which traced processes use this agent's RNICs; [`comm`] fetches
//! (and caches) the remote RNIC's comm info from the controller; [`targets`] turns each
//! live flow into a probe target of class `Service` on the engine owning its source IP.
//! Engines report service targets whose probes time out through a [`TimeoutFeed`], so a
//! peer's QPN reset is picked up at once instead of at the next cache refresh.

pub(crate) mod comm;
pub(crate) mod ownership;
pub(crate) mod targets;
pub(crate) mod tracker;

pub(crate) use tracker::{ServiceTracker, TrackerOptions};

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Mutex;

/// Most distinct timed-out service target IPs remembered between two reads.
const MAX_TIMED_OUT: usize = 4096;

/// Service target IPs whose probes timed out, from the engines to the tracker (bounded:
/// beyond [`MAX_TIMED_OUT`] distinct IPs the rest wait for the regular refresh).
#[derive(Debug, Default)]
pub struct TimeoutFeed {
    ips: Mutex<HashSet<IpAddr>>,
}

impl TimeoutFeed {
    /// Records that a probe to `ip` timed out.
    pub fn report(&self, ip: IpAddr) {
        let mut ips = self.ips.lock().unwrap_or_else(|p| p.into_inner());
        if ips.len() < MAX_TIMED_OUT {
            ips.insert(ip);
        }
    }

    /// Takes every IP reported since the last call.
    pub fn take(&self) -> Vec<IpAddr> {
        let mut ips = self.ips.lock().unwrap_or_else(|p| p.into_inner());
        ips.drain().collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn timeout_feed_dedups_and_is_bounded() {
        let feed = TimeoutFeed::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        feed.report(ip);
        feed.report(ip);
        assert_eq!(feed.take(), vec![ip]);
        assert!(feed.take().is_empty());
        for i in 0..(MAX_TIMED_OUT as u32 + 10) {
            feed.report(IpAddr::from(std::net::Ipv4Addr::from(i)));
        }
        assert_eq!(feed.take().len(), MAX_TIMED_OUT);
    }
}
