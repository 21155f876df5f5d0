//! The tick's one pass over the flows: buckets that left the window are cleared, idle
//! flows forgotten, baselines moved, and every RNIC's probes counted into dense
//! per-RNIC arrays (the RNIC verdicts read them), with no hashing per flow. Also the
//! tick's slow probes per flow, with the pairs alarmed now judged by their buckets.

use super::{Engine, Fails, Inputs};
use crate::diagnosis::flows::table::{Flow, FlowTable};
use crate::registry::Registry;
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::Evidence;
use std::collections::HashMap;

/// One ToR-mesh flow for the RNIC verdicts: (prober, target, probes, failed).
pub(super) type MeshFlow = (u32, u32, u32, u32);

/// What the counts make of an RNIC.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Unregistered,
    Registered,
    /// On a noisy host: its ToR-mesh flows are left out.
    Noisy,
}

/// Probe counts of the window per RNIC, dense by RNIC id.
pub(super) struct Mesh {
    /// ToR-mesh probes (to it, failed to it, from it, failed from it); flows with an
    /// end on a noisy host are left out.
    pub counts: Vec<[u32; 4]>,
    /// Probes of every class touching it: (probes, failed).
    pub all: Vec<(u32, u32)>,
    ends: Vec<End>,
}

impl Mesh {
    fn new(registry: &Registry, noisy_hosts: &HashMap<u32, Evidence>) -> Self {
        let n = registry.id_bound();
        let mut ends = vec![End::Unregistered; n];
        for r in registry.rnic_ids() {
            let noisy = registry
                .get(r)
                .is_some_and(|e| noisy_hosts.contains_key(&e.host_id));
            ends[r as usize] = if noisy { End::Noisy } else { End::Registered };
        }
        Self {
            counts: vec![[0; 4]; n],
            all: vec![(0, 0); n],
            ends,
        }
    }

    fn end(&self, r: u32) -> End {
        self.ends
            .get(r as usize)
            .copied()
            .unwrap_or(End::Unregistered)
    }

    /// The flow as the ToR-mesh counts see it, `None` when they leave it out.
    pub(super) fn mesh_flow(&self, f: &Flow, (timeouts, ack2): (u32, u32)) -> Option<MeshFlow> {
        let counted = f.class == ProbeClass::TorMesh
            && self.end(f.key.prober) == End::Registered
            && self.end(f.key.target) == End::Registered;
        let fail = timeouts + ack2;
        counted.then_some((f.key.prober, f.key.target, f.ok + fail, fail))
    }

    /// Adds (or takes away) one ToR-mesh flow to its target's and prober's counts.
    pub(super) fn add(&mut self, (p, t, n, fail): MeshFlow, add: bool) {
        for (r, at) in [(t, 0), (p, 2)] {
            let x = &mut self.counts[r as usize];
            if add {
                x[at] += n;
                x[at + 1] += fail;
            } else {
                x[at] -= n;
                x[at + 1] -= fail;
            }
        }
    }

    /// Counts a flow (unless an end is not registered).
    fn count(&mut self, f: &Flow, fails: (u32, u32)) {
        if [f.key.prober, f.key.target]
            .iter()
            .any(|&r| self.end(r) == End::Unregistered)
        {
            return;
        }
        let fail = fails.0 + fails.1;
        for r in [f.key.prober, f.key.target] {
            let a = &mut self.all[r as usize];
            a.0 += f.ok + fail;
            a.1 += fail;
        }
        if let Some(m) = self.mesh_flow(f, fails) {
            self.add(m, true);
        }
    }
}

impl Engine {
    /// Moves every flow to the window at this tick (slots `expired` cleared, idle flows
    /// forgotten, baselines moved) and counts the probes per RNIC; returns the counts
    /// and the flows with slow probes.
    pub(super) fn sweep(
        &mut self,
        inp: &Inputs,
        expired: &[usize],
        fails: &Fails,
        noisy_hosts: &HashMap<u32, Evidence>,
    ) -> (Mesh, Vec<u32>) {
        let mut mesh = Mesh::new(inp.registry, noisy_hosts);
        let mut slow = Vec::new();
        self.window.sweep(expired, |i, f| {
            let failed = match fails.get(&i) {
                Some(&x) => x,
                None if f.ok == 0 => return false,
                None => (0, 0),
            };
            mesh.count(f, failed);
            if f.slow > 0 {
                slow.push(i);
            }
            true
        });
        (mesh, slow)
    }

    /// Slow probes per flow this tick, `flagged` being the flows with slow probes as
    /// judged on arrival. A pair alarmed now has every arrival of a bucket whose least
    /// RTT is above the alarm's threshold slow (the alarm may be younger than them).
    pub(super) fn slow_flows(
        &self,
        inp: &Inputs,
        flagged: Vec<u32>,
    ) -> foldhash::HashMap<u32, u32> {
        let flows = self.window.flows();
        let mut slow: foldhash::HashMap<u32, u32> = flagged
            .into_iter()
            .map(|i| (i, flows.get(i).slow))
            .collect();
        for (&(p, t), alarm) in inp.latency.iter() {
            for i in flows.between(p, t) {
                let n: u32 = flows
                    .ring(i)
                    .iter()
                    .map(|s| {
                        if s.ok > 0 && alarm.is_slow(s.min_rtt) {
                            u32::from(s.ok)
                        } else {
                            u32::from(s.slow)
                        }
                    })
                    .sum();
                if n > 0 {
                    slow.insert(i, n);
                }
            }
        }
        slow
    }
}

/// Probes and failures of a flow this tick: the ToR-mesh view of flow `i`, if counted.
pub(super) fn mesh_flow_of(
    mesh: &Mesh,
    flows: &FlowTable,
    fails: &Fails,
    i: u32,
) -> Option<MeshFlow> {
    mesh.mesh_flow(flows.get(i), fails.get(&i).copied().unwrap_or_default())
}
