//! Per-hop latency: a fixed forwarding delay plus log-normal queueing at every switch,
//! congestion episodes (a switch queues much longer for a second or three, at random
//! times drawn from a stateless hash so nothing is stored per switch), and periodic
//! training bursts that load the fabric tiers for part of every iteration. Host
//! processing delays (prober, responder) are log-normal too, as NIC timestamps see them.
//!
//! The defaults keep every effect well below the analyzer's latency floor (50 µs), so a
//! fault-free run must report no latency problem.

use crate::rng::{Rng, hash, unit};
use crate::topology::{Fabric, Route, Tier};
use serde::{Deserialize, Serialize};

/// Length of the slots congestion episodes are drawn in.
const EPISODE_SLOT_MS: i64 = 10_000;

/// Latency parameters (ns unless named otherwise).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyModel {
    /// Fixed forwarding + propagation delay per switch hop.
    pub hop_ns: f64,
    /// Median queueing delay per switch hop.
    pub queue_median_ns: f64,
    /// Log-normal shape of the queueing delay.
    pub queue_sigma: f64,
    /// NIC send + receive delay per direction.
    pub nic_ns: f64,
    /// Probability that a switch has a congestion episode in a 10 s slot.
    pub episode_probability: f64,
    /// Median extra queueing during an episode.
    pub episode_median_ns: f64,
    /// Training iteration period (0 = no bursts).
    pub burst_period_ms: i64,
    /// Share of the period the burst lasts.
    pub burst_duty: f64,
    /// Median extra queueing on aggregation/spine switches during a burst.
    pub burst_median_ns: f64,
    /// Median prober / responder processing delay.
    pub host_median_ns: f64,
    /// Log-normal shape of the processing delays.
    pub host_sigma: f64,
}

impl Default for LatencyModel {
    fn default() -> Self {
        Self {
            hop_ns: 600.0,
            queue_median_ns: 300.0,
            queue_sigma: 0.7,
            nic_ns: 1_200.0,
            episode_probability: 0.02,
            episode_median_ns: 8_000.0,
            burst_period_ms: 1_000,
            burst_duty: 0.3,
            burst_median_ns: 2_000.0,
            host_median_ns: 3_000.0,
            host_sigma: 0.3,
        }
    }
}

impl LatencyModel {
    /// True while switch `sw` is in a congestion episode at `t_ms` (a pure function of
    /// the seed, the switch and the time).
    pub fn congested(&self, seed: u64, sw: u32, t_ms: i64) -> bool {
        let slot = t_ms.div_euclid(EPISODE_SLOT_MS);
        let h = hash(&[seed, 0xc0_96e5, u64::from(sw), slot as u64]);
        if unit(h) >= self.episode_probability {
            return false;
        }
        let start = (h >> 8) as i64 % (EPISODE_SLOT_MS / 2);
        let len = 1_000 + (h >> 24) as i64 % 2_000;
        let at = t_ms - slot * EPISODE_SLOT_MS;
        at >= start && at < start + len
    }

    fn bursting(&self, t_ms: i64) -> bool {
        self.burst_period_ms > 0
            && (t_ms.rem_euclid(self.burst_period_ms) as f64)
                < self.burst_duty * self.burst_period_ms as f64
    }

    /// One direction's delay over `route` at `t_ms` (NICs included, injected delays not).
    pub fn one_way_ns(
        &self,
        rng: &mut Rng,
        fabric: &Fabric,
        seed: u64,
        route: &Route,
        t_ms: i64,
    ) -> f64 {
        let bursting = self.bursting(t_ms);
        let mut ns = 2.0 * self.nic_ns;
        for &sw in route.switches() {
            ns += self.hop_ns + rng.lognormal(self.queue_median_ns, self.queue_sigma);
            if self.congested(seed, sw, t_ms) {
                ns += rng.lognormal(self.episode_median_ns, 0.5);
            }
            if bursting && fabric.switches[sw as usize].tier != Tier::Tor {
                ns += rng.lognormal(self.burst_median_ns, 0.5);
            }
        }
        ns
    }

    /// A processing delay of a healthy host.
    pub fn host_ns(&self, rng: &mut Rng) -> f64 {
        rng.lognormal(self.host_median_ns, self.host_sigma)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Shape;

    #[test]
    fn episodes_are_rare_bounded_and_reproducible() {
        let m = LatencyModel::default();
        let busy = (0..1_000u32)
            .filter(|&sw| (0..100).any(|s| m.congested(1, sw, s * 100)))
            .count();
        // 2 % of switches per slot, an episode of 1-3 s within the slot's first half.
        assert!(
            (5..=60).contains(&busy),
            "{busy} of 1000 switches congested"
        );
        assert_eq!(m.congested(1, 7, 12_345), m.congested(1, 7, 12_345));
        let f = Fabric::new(Shape::LeafSpine {
            tors: 2,
            spines: 2,
            hosts_per_tor: 1,
            rnics_per_host: 1,
        })
        .unwrap();
        let r = f.route(0, 1, |_, _, _| 0);
        let mut rng = Rng::new(3);
        let quiet: Vec<f64> = (0..1_000)
            .map(|_| m.one_way_ns(&mut rng, &f, 99, &r, 500))
            .collect();
        let busy: Vec<f64> = (0..1_000)
            .map(|_| m.one_way_ns(&mut rng, &f, 99, &r, 100))
            .collect();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        // Three switches of 600 ns + ~380 ns mean queueing, two NICs of 1.2 µs.
        assert!(
            (4_500.0..7_000.0).contains(&mean(&quiet)),
            "{}",
            mean(&quiet)
        );
        assert!(
            mean(&busy) > mean(&quiet) + 1_000.0,
            "the burst loads the spine"
        );
    }
}
