//! Steps 1-4 of a tick: host down, agent restart, anomalous RNICs from ToR-mesh
//! probes (explain-away, sticky) and host noise.

use super::mesh::{Mesh, mesh_flow_of};
use super::{Candidate, Engine, Fails, Inputs, Outcome, Tallies, rnic_name};
use crate::diagnosis::policy;
use crate::diagnosis::tomography::chernoff_score;
use rocemesh_proto::api::{ComponentKind, Evidence, ProblemKind};
use std::collections::{HashMap, HashSet};

/// Fewest delays above the noise threshold before a host is noisy.
const MIN_NOISY_DELAYS: u32 = 5;

/// True when RNIC `r`'s host is strained (some processing delays above the noise
/// threshold): a young verdict on the RNIC waits, as host noise may yet explain it.
pub(super) fn strained(inp: &Inputs, hosts: &Tallies, r: u32) -> bool {
    inp.registry
        .get(r)
        .and_then(|e| hosts.get(&e.host_id))
        .is_some_and(|t| t.slow_delays > 0)
}

impl Engine {
    pub(super) fn host_name(inp: &Inputs, host: u32) -> String {
        inp.registry
            .host_name(host)
            .map_or_else(|| format!("host-{host}"), str::to_string)
    }

    /// Steps 1 and 2: host down, agent restart (informational, not the network);
    /// hosts no longer in the registry are forgotten.
    pub(super) fn host_verdicts(&self, inp: &Inputs, hosts: &Tallies, out: &mut Outcome) {
        let mut ids: Vec<u32> = inp.registry.host_ids().collect();
        ids.sort_unstable();
        for h in ids {
            let silent_ms = inp.now_ms - self.last_upload(inp, h);
            let tally = hosts.get(&h);
            // Only a host this analyzer (or, saved, a previous run) has heard from can be
            // declared down: a registry entry that never uploaded may be stale (its
            // timeouts are still set aside as a silent host's). One known only from the
            // previous run is judged by its saved last upload once every live agent has
            // had `host_silent_ms` to upload here.
            let known = inp.hosts.get(&h).is_some_and(|l| {
                !l.restored || inp.now_ms - inp.started_ms >= self.cfg.host_silent_ms as i64
            });
            if silent_ms > self.cfg.host_down_after_ms as i64 && known {
                out.candidates.push(Candidate {
                    kind: ProblemKind::HostDown,
                    component_kind: ComponentKind::Host,
                    component: Self::host_name(inp, h),
                    confidence: 1.0,
                    evidence: Evidence {
                        timeouts: tally.map_or(0, |t| t.silent_timeouts),
                        detail: format!(
                            "host down: no upload for {silent_ms} ms (> {} ms); timeouts towards it explained",
                            self.cfg.host_down_after_ms
                        ),
                        ..Evidence::default()
                    },
                });
            }
            if let Some(t) = tally.filter(|t| t.restart_timeouts > 0) {
                out.candidates.push(Candidate {
                    kind: ProblemKind::AgentRestart,
                    component_kind: ComponentKind::Agent,
                    component: Self::host_name(inp, h),
                    confidence: 1.0,
                    evidence: Evidence {
                        timeouts: t.restart_timeouts,
                        detail:
                            "agent restart: timeouts named a stale QPN or fell into the agent's \
                                 restart gap (+ pinglist grace); not a network problem"
                                .into(),
                        ..Evidence::default()
                    },
                });
            }
        }
    }

    /// Step 4 (delay half): hosts whose processing delays are far above normal.
    pub(super) fn noisy_hosts(&self, hosts: &Tallies) -> HashMap<u32, Evidence> {
        hosts
            .iter()
            .filter(|(_, t)| {
                t.slow_delays >= MIN_NOISY_DELAYS
                    && u64::from(t.slow_delays) * 100 >= u64::from(self.cfg.noise_percent) * u64::from(t.delays)
            })
            .map(|(&h, t)| {
                let e = Evidence {
                    probes: u64::from(t.delays),
                    timeouts: u64::from(t.slow_delays),
                    detail: format!(
                        "host noise: {} of {} processing delays above {} ns (>= {} %): CPU, not the network",
                        t.slow_delays, t.delays, self.cfg.noise_delay_ns, self.cfg.noise_percent
                    ),
                    ..Evidence::default()
                };
                (h, e)
            })
            .collect()
    }

    /// Records a sticky verdict on RNIC `r` (and when it was first made).
    pub(super) fn stick(&mut self, r: u32, now_ms: i64, evidence: Evidence) {
        self.sticky
            .insert(r, (now_ms + self.cfg.rnic_sticky_ms as i64, evidence));
        self.rnic_found.entry(r).or_insert(now_ms);
    }

    /// True while the sticky verdict on RNIC `r` is held back: its host is strained and
    /// the verdict is younger than `strained_rnic_hold_ms`, so host noise may yet
    /// explain it.
    pub(super) fn held(&self, inp: &Inputs, hosts: &Tallies, r: u32) -> bool {
        strained(inp, hosts, r)
            && self
                .rnic_found
                .get(&r)
                .is_some_and(|&first| inp.now_ms - first < self.cfg.strained_rnic_hold_ms as i64)
    }

    /// Step 3 (+ step 4's several-RNICs rule): anomalous RNICs from ToR-mesh probes,
    /// found greedily so a dead RNIC's failed probes do not also blame its peers.
    /// Verdicts on noisy hosts are dropped (CPU, not the network) and those on strained
    /// hosts held ([`Self::held`]). Returns the anomalous RNICs, the noisy hosts and the
    /// RNICs whose ToR-mesh probes vouch for them.
    pub(super) fn rnic_verdicts(
        &mut self,
        inp: &Inputs,
        hosts: &Tallies,
        mut noisy: HashMap<u32, Evidence>,
        (mut mesh, fails): (Mesh, &Fails),
        out: &mut Outcome,
    ) -> (HashSet<u32>, HashSet<u32>, HashSet<u32>) {
        let c = self.cfg.clone();
        let host_of = |r: u32| inp.registry.get(r).map(|e| e.host_id);
        let ratio = |(n, f): (u32, u32)| {
            if n == 0 {
                0.0
            } else {
                f64::from(f) / f64::from(n)
            }
        };
        // Background: the pooled ToR-mesh timeout ratio, at least the configured floor.
        let (probes, failed) = mesh.counts.iter().fold((0u64, 0u64), |(n, f), x| {
            (n + u64::from(x[0]), f + u64::from(x[1]))
        });
        let floor = f64::from(c.background_loss_ppm) / 1e6;
        let p0 = if probes == 0 {
            floor
        } else {
            (failed as f64 / probes as f64).max(floor)
        }
        .min(0.5);
        let over = |n: u32, f: u32| {
            n >= c.rnic_min_probes
                && u64::from(f) * 100 > u64::from(c.rnic_timeout_percent) * u64::from(n)
        };
        let tor_of = |r: u32| inp.registry.get(r).map(|e| e.tor);
        let mut removed: HashSet<u32> = HashSet::new();
        loop {
            // The ToR-mesh probes of each ToR (a flow counted once, at its target): an RNIC
            // is judged against its ToR's other probes, so a ToR that drops everything
            // does not make its unluckiest RNIC a fault.
            let mut per_tor: HashMap<u16, (u32, u32)> = HashMap::new();
            for (r, x) in (0u32..).zip(&mesh.counts).filter(|(_, x)| x[0] > 0) {
                if let Some(t) = tor_of(r) {
                    let e = per_tor.entry(t).or_default();
                    e.0 += x[0];
                    e.1 += x[1];
                }
            }
            // `None` where the ToR has too few other ToR-mesh probes: with one peer
            // under it, an RNIC's ToR-mesh probes are its peer's and cross nothing but
            // the two RNICs and their ToR, so they single out none of the three (a lossy
            // ToR made its unluckier RNIC anomalous); tomography, over the RNIC's other
            // probes too, judges it.
            let null = |r: u32, x: &[u32; 4]| {
                let (n, f) = tor_of(r).and_then(|t| per_tor.get(&t)).map(|&(n, f)| {
                    (n.saturating_sub(x[0] + x[2]), f.saturating_sub(x[1] + x[3]))
                })?;
                (n >= c.rnic_min_probes).then(|| (f64::from(f) / f64::from(n)).clamp(p0, 0.5))
            };
            let best = (0u32..)
                .zip(&mesh.counts)
                .filter(|(r, x)| !removed.contains(r) && (over(x[0], x[1]) || over(x[2], x[3])))
                .filter_map(|(r, x)| Some((r, x, null(r, x)?)))
                .filter(|(_, x, q)| {
                    chernoff_score(f64::from(x[1] + x[3]), f64::from(x[0] + x[2]), *q)
                        >= f64::from(c.min_score)
                })
                .map(|(r, x, q)| {
                    let own = ratio((x[0] + x[2], x[1] + x[3]));
                    let all = ratio(mesh.all[r as usize]);
                    (r, *x, q, own, all)
                })
                .max_by(|a, b| {
                    a.3.total_cmp(&b.3)
                        .then(a.4.total_cmp(&b.4))
                        .then(b.0.cmp(&a.0))
                });
            let Some((r, x, q, _, _)) = best else { break };
            let evidence = Evidence {
                probes: u64::from(x[0] + x[2]),
                timeouts: u64::from(x[1] + x[3]),
                detail: format!(
                    "ToR-mesh: {} of {} probes to it and {} of {} from it timed out (> {} %, background {:.2} %)",
                    x[1],
                    x[0],
                    x[3],
                    x[2],
                    c.rnic_timeout_percent,
                    q * 100.0
                ),
                ..Evidence::default()
            };
            self.stick(r, inp.now_ms, evidence);
            removed.insert(r);
            // Its probes no longer count against its peers.
            let flows = self.window.flows();
            for i in flows.touching(r) {
                let Some(flow) = mesh_flow_of(&mesh, flows, fails, i) else {
                    continue;
                };
                let other = if flow.0 == r { flow.1 } else { flow.0 };
                if !removed.contains(&other) {
                    mesh.add(flow, false);
                }
            }
        }
        // Vouched: its ToR-mesh probes fail far less often than all its probes do, so
        // its other failures are not its own (an RNIC fault hits every probe alike).
        let vouched: HashSet<u32> = (0u32..)
            .zip(&mesh.counts)
            .filter(|(r, x)| {
                let (n, f) = (x[0] + x[2], x[1] + x[3]);
                let q = ratio(mesh.all[*r as usize]);
                !removed.contains(r)
                    && n >= c.rnic_min_probes
                    && chernoff_score(f64::from(n - f), f64::from(n), 1.0 - q)
                        >= f64::from(c.min_score)
            })
            .map(|(r, _)| r)
            .collect();
        self.sticky.retain(|_, (until, _)| *until > inp.now_ms);
        // Several RNICs of one host at once: the host, not its RNICs.
        let mut per_host: HashMap<u32, Vec<u32>> = HashMap::new();
        for &r in self.sticky.keys() {
            if let Some(h) = host_of(r) {
                per_host.entry(h).or_default().push(r);
            }
        }
        for (h, rnics) in per_host.into_iter().filter(|(_, v)| v.len() >= 2) {
            let timeouts = rnics
                .iter()
                .filter_map(|r| self.sticky.remove(r))
                .map(|(_, e)| e.timeouts)
                .sum();
            noisy.entry(h).or_insert_with(|| Evidence {
                timeouts,
                detail: format!(
                    "host noise: {} RNICs of the host fail ToR-mesh probes at once",
                    rnics.len()
                ),
                ..Evidence::default()
            });
        }
        let noisy_ids: HashSet<u32> = noisy.keys().copied().collect();
        self.sticky
            .retain(|&r, _| host_of(r).is_none_or(|h| !noisy_ids.contains(&h)));
        self.rnic_found.retain(|r, _| self.sticky.contains_key(r));
        let mut noisy: Vec<_> = noisy.into_iter().collect();
        noisy.sort_by_key(|(h, _)| *h);
        for (h, evidence) in noisy {
            out.candidates.push(Candidate {
                kind: ProblemKind::HostNoise,
                component_kind: ComponentKind::Host,
                component: Self::host_name(inp, h),
                confidence: 0.9,
                evidence,
            });
        }
        let mut sticky: Vec<_> = self.sticky.iter().collect();
        sticky.sort_by_key(|(r, _)| **r);
        for (&r, (until, evidence)) in sticky {
            let made = until - self.cfg.rnic_sticky_ms as i64;
            let failing = self
                .window
                .flows()
                .touching(r)
                .any(|i| fails.contains_key(&i));
            if !policy::rnic_reported(made, inp.now_ms, failing) || self.held(inp, hosts, r) {
                continue;
            }
            out.candidates.push(Candidate {
                kind: ProblemKind::RnicFault,
                component_kind: ComponentKind::Rnic,
                component: rnic_name(inp, r),
                confidence: 0.95,
                evidence: evidence.clone(),
            });
        }
        (self.sticky.keys().copied().collect(), noisy_ids, vouched)
    }
}
