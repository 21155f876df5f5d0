//! `ctl rnic`: one RNIC's registry entry, its latest SLA as a probe target and the
//! problems on it (or on its host).

use super::problems;
use super::resolve::{self, rnic_name};
use super::{Client, json_out, micros, time};
use anyhow::Result;
use clap::Args;
use rocemesh_proto::api::{ComponentKind, Problem, RnicInfo, SlaRow};
use serde::Serialize;

/// `ctl rnic` options.
#[derive(Debug, Args)]
pub struct RnicArgs {
    /// RNIC id, `host/ifname` or IP address.
    pub rnic: String,
}

/// What `rnic` shows (`--json`).
#[derive(Serialize)]
struct RnicView {
    rnic: RnicInfo,
    sla: Vec<SlaRow>,
    problems: Vec<Problem>,
}

/// Runs `ctl rnic`.
pub(super) fn run(client: &Client, args: &RnicArgs, json: bool) -> Result<String> {
    let all = resolve::rnics(client)?;
    let rnic = resolve::rnic(&all, &args.rnic)?.clone();
    let name = rnic_name(&rnic);
    let sla: Vec<SlaRow> = client.get(&format!("/sla/latest?scope=rnic&key={}", rnic.id))?;
    let problems: Vec<Problem> = client
        .get::<Vec<Problem>>("/problems?state=all&limit=1000")?
        .into_iter()
        .filter(|p| {
            p.component == name
                || (matches!(p.component_kind, ComponentKind::Host | ComponentKind::Agent)
                    && p.component == rnic.host)
        })
        .collect();
    let view = RnicView {
        rnic,
        sla,
        problems,
    };
    if json {
        return json_out(&view);
    }
    let r = &view.rnic;
    let mut out = format!(
        "rnic        {name} (id {})\nip          {} port {} qpn {}\ntor         {}{}\nregistered  {} (epoch {})\n",
        r.id,
        r.ip,
        r.port,
        r.qpn,
        r.tor,
        r.rail.map_or(String::new(), |x| format!(", rail {x}")),
        time(r.registered_at_ms),
        r.epoch,
    );
    match view.sla.first() {
        Some(s) => out.push_str(&format!(
            "sla         period {}: {} probes to it, {} timeouts ({:.3}%), RTT p50/p99 {}/{} us, responder delay p99 {} us\n",
            time(s.period_start_ms),
            s.probes,
            s.timeouts,
            s.timeout_rate * 100.0,
            micros(s.network_rtt_ns.p50),
            micros(s.network_rtt_ns.p99),
            micros(s.responder_delay_ns.p99),
        )),
        None => out.push_str("sla         no closed period with this RNIC yet\n"),
    }
    out.push('\n');
    out.push_str(&problems::table(&view.problems));
    Ok(out)
}
