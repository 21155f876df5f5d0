//! `ctl status`: the fabric at a glance.

use super::problems::{self, json_name};
use super::resolve::rnic_name;
use super::table::Table;
use super::{Client, json_out, micros, time};
use anyhow::Result;
use rocemesh_proto::api::{
    ComponentKind, HostInfo, Priority, Problem, ProblemKind, RnicInfo, SlaRow,
};
use serde::Serialize;

/// Everything `status` shows, as the API returned it (`--json`).
#[derive(Serialize)]
struct Status {
    hosts: Vec<HostInfo>,
    rnics: Vec<RnicInfo>,
    active_problems: Vec<Problem>,
    cluster_sla: Vec<SlaRow>,
}

/// Runs `ctl status`.
pub(super) fn run(client: &Client, json: bool) -> Result<String> {
    let s = Status {
        hosts: client.get("/hosts")?,
        rnics: client.get("/rnics")?,
        active_problems: client.get("/problems?state=active&limit=10000")?,
        cluster_sla: client.get("/sla/latest?scope=cluster")?,
    };
    if json {
        return json_out(&s);
    }
    Ok(render(&s))
}

/// A host is down while an active host-down problem names it.
fn host_down(s: &Status, host: &str) -> bool {
    s.active_problems
        .iter()
        .any(|p| p.kind == ProblemKind::HostDown && p.component == host)
}

/// An RNIC is down with its host, or while an active problem blames the RNIC itself.
fn rnic_down(s: &Status, r: &RnicInfo) -> bool {
    let name = rnic_name(r);
    host_down(s, &r.host)
        || s.active_problems
            .iter()
            .any(|p| p.component_kind == ComponentKind::Rnic && p.component == name)
}

fn render(s: &Status) -> String {
    let hosts_down: Vec<&HostInfo> = s.hosts.iter().filter(|h| host_down(s, &h.host)).collect();
    let rnics_down: Vec<&RnicInfo> = s.rnics.iter().filter(|r| rnic_down(s, r)).collect();
    let count = |p: Option<Priority>| s.active_problems.iter().filter(|x| x.priority == p).count();
    let mut out = String::new();
    out.push_str(&format!(
        "hosts     {} up, {} down\n",
        s.hosts.len() - hosts_down.len(),
        hosts_down.len()
    ));
    out.push_str(&format!(
        "rnics     {} up, {} down\n",
        s.rnics.len() - rnics_down.len(),
        rnics_down.len()
    ));
    out.push_str(&format!(
        "problems  {} active: P0 {}, P1 {}, P2 {}, not assessed {}\n",
        s.active_problems.len(),
        count(Some(Priority::P0)),
        count(Some(Priority::P1)),
        count(Some(Priority::P2)),
        count(None)
    ));
    match s.cluster_sla.first() {
        Some(row) => out.push_str(&format!(
            "sla       period {} ({} ms): {} probes, {} timeouts ({:.3}%), RTT p50/p99/p99.9 {}/{}/{} us\n",
            time(row.period_start_ms),
            row.period_ms,
            row.probes,
            row.timeouts,
            row.timeout_rate * 100.0,
            micros(row.network_rtt_ns.p50),
            micros(row.network_rtt_ns.p99),
            micros(row.network_rtt_ns.p999),
        )),
        None => out.push_str("sla       no closed period yet\n"),
    }
    if !rnics_down.is_empty() {
        let mut t = Table::new(&["DOWN RNIC", "ID", "IP", "TOR"]);
        for r in rnics_down {
            t.row(vec![
                rnic_name(r),
                r.id.to_string(),
                r.ip.to_string(),
                r.tor.clone(),
            ]);
        }
        out.push('\n');
        out.push_str(&t.render());
    }
    if !s.active_problems.is_empty() {
        let mut sorted = s.active_problems.clone();
        // P0 first, unassessed last.
        sorted.sort_by_key(|p| (p.priority.is_none(), p.priority, json_name(&p.kind)));
        out.push('\n');
        out.push_str(&problems::table(&sorted));
    }
    out
}
