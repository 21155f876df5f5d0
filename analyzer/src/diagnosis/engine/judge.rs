//! Steps 1-2 of a tick on single timed-out probes: those towards a silent host, a
//! restarting agent (stale QPN, restart gap) or an agent not yet started are set aside,
//! the rest are left for the network, per flow. Judged afresh every tick, as what is
//! known about the hosts changes; the host tallies also get the processing delays.

use super::{Engine, Failed, Inputs, Tallies};
use crate::diagnosis::flows::table::FlowKey;
use rocemesh_proto::{ProbeClass, ProbeStatus};

/// Timeouts sent this long before a restarting agent's last old-epoch upload
/// still count as the restart's (the agent may have died right after uploading).
const RESTART_SLACK_MS: i64 = 1_000;

impl Engine {
    /// The tick's host tallies and the timeouts left for the network.
    pub(super) fn judge(&mut self, inp: &Inputs) -> (Tallies, Vec<Failed>) {
        let c = &self.cfg;
        let mut hosts = Tallies::default();
        for (r, (n, slow)) in self.window.delays().totals() {
            if let Some(e) = inp.registry.get(r) {
                let t = hosts.entry(e.host_id).or_default();
                t.delays += n;
                t.slow_delays += slow;
            }
        }
        let last_upload: foldhash::HashMap<u32, i64> = inp
            .registry
            .host_ids()
            .map(|h| (h, self.last_upload(inp, h)))
            .collect();
        let mut left: Vec<(FlowKey, ProbeClass, bool, i64)> = Vec::new();
        for r in self.window.timeouts() {
            let send_ms = (r.send_unix_ns / 1_000_000) as i64;
            if send_ms > inp.now_ms {
                continue;
            }
            let (Some(_), Some(t)) = (
                inp.registry.get(r.prober_rnic),
                inp.registry.get(r.target_rnic),
            ) else {
                continue;
            };
            let last = last_upload
                .get(&t.host_id)
                .copied()
                .unwrap_or(inp.started_ms);
            let tally = hosts.entry(t.host_id).or_default();
            if inp.now_ms - last > c.host_silent_ms as i64 {
                tally.silent_timeouts += 1;
                continue;
            }
            let stale_qpn = inp
                .registry
                .meta(r.target_rnic)
                .is_some_and(|m| m.qpn != r.target_qpn);
            let restarting = inp.hosts.get(&t.host_id).is_some_and(|l| {
                l.restarts.iter().any(|&(old, new)| {
                    send_ms >= old - RESTART_SLACK_MS && send_ms <= new + c.restart_grace_ms as i64
                })
            });
            if stale_qpn || restarting {
                tally.restart_timeouts += 1;
                continue;
            }
            // Sent before the target's agent was up (plus the pinglist grace):
            // start-up, not a fault, and not worth a problem either. The agent's
            // start is its registration; only without one is it the first upload
            // this analyzer heard, which an analyzer restart would move.
            let starting = match inp.registry.meta(r.target_rnic) {
                Some(m) if m.registered_at_ms > 0 => {
                    send_ms <= m.registered_at_ms + c.restart_grace_ms as i64
                }
                _ => inp
                    .hosts
                    .get(&t.host_id)
                    .is_none_or(|l| send_ms <= l.first_upload_ms + c.restart_grace_ms as i64),
            };
            if starting {
                continue;
            }
            if last < send_ms + c.liveness_margin_ms as i64 {
                continue; // not yet known whether the target host was alive
            }
            let key = FlowKey {
                prober: r.prober_rnic,
                target: r.target_rnic,
                sport: r.src_port,
                dport: r.dst_port,
            };
            left.push((key, r.class, r.status == ProbeStatus::Ack2Lost, send_ms));
        }
        let flows = self.window.flows_mut();
        let failed = left
            .into_iter()
            .filter_map(|(key, class, ack2, send_ms)| {
                let flow = flows.intern(key, class)?;
                flows.get_mut(flow).class = class;
                Some(Failed {
                    flow,
                    send_ms,
                    ack2,
                })
            })
            .collect();
        (hosts, failed)
    }
}
