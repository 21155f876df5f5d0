//! `ctl path`: the last traced paths between two RNICs and the RTT between them.

use super::resolve::{self, rnic_name};
use super::table::Table;
use super::{Client, json_out, micros, time};
use anyhow::Result;
use clap::Args;
use rocemesh_proto::api::{RnicInfo, SlaRow};
use serde::Serialize;
use serde_json::Value;

/// `ctl path` options.
#[derive(Debug, Args)]
pub struct PathArgs {
    /// Source RNIC: id, `host/ifname` or IP address.
    pub src: String,
    /// Destination RNIC: id, `host/ifname` or IP address.
    pub dst: String,
}

/// What `path` shows (`--json`).
#[derive(Serialize)]
struct PathView {
    src: RnicInfo,
    dst: RnicInfo,
    /// `GET /api/v1/paths` answer as the analyzer gave it.
    paths: Value,
    /// Latest SLA of the ToR pair (`src tor->dst tor`).
    tor_pair_sla: Vec<SlaRow>,
    /// Latest SLA of the destination as a probe target.
    dst_sla: Vec<SlaRow>,
}

/// Runs `ctl path`.
pub(super) fn run(client: &Client, args: &PathArgs, json: bool) -> Result<String> {
    let all = resolve::rnics(client)?;
    let src = resolve::rnic(&all, &args.src)?.clone();
    let dst = resolve::rnic(&all, &args.dst)?.clone();
    let pair = super::client::encode(&format!("{}->{}", src.tor, dst.tor));
    let view = PathView {
        paths: client.get(&format!("/paths?src_rnic={}&dst_rnic={}", src.id, dst.id))?,
        tor_pair_sla: client.get(&format!("/sla/latest?scope=tor_pair&key={pair}"))?,
        dst_sla: client.get(&format!("/sla/latest?scope=rnic&key={}", dst.id))?,
        src,
        dst,
    };
    if json {
        return json_out(&view);
    }
    let mut out = format!(
        "{} ({}, {}) -> {} ({}, {})\n",
        rnic_name(&view.src),
        view.src.ip,
        view.src.tor,
        rnic_name(&view.dst),
        view.dst.ip,
        view.dst.tor
    );
    let rtt = |what: &str, rows: &[SlaRow]| match rows.first() {
        Some(s) => format!(
            "{what}: RTT p50/p99/p99.9 {}/{}/{} us, {} probes, {} timeouts\n",
            micros(s.network_rtt_ns.p50),
            micros(s.network_rtt_ns.p99),
            micros(s.network_rtt_ns.p999),
            s.probes,
            s.timeouts
        ),
        None => format!("{what}: no closed period yet\n"),
    };
    out.push_str(&rtt(
        &format!("tor pair {}->{}", view.src.tor, view.dst.tor),
        &view.tor_pair_sla,
    ));
    out.push_str(&rtt("to the destination", &view.dst_sla));
    out.push('\n');
    let paths = view
        .paths
        .get("paths")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if paths.is_empty() {
        out.push_str("no traced path between them yet\n");
        return Ok(out);
    }
    let mut t = Table::new(&["DIR", "SPORT", "DPORT", "REACHED", "TRACED", "HOPS"]);
    for p in paths {
        let field = |k: &str| p.get(k).map_or("?".to_string(), |v| v.to_string());
        let hops: Vec<&str> = p
            .get("hop_names")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|h| h.as_str().unwrap_or("?"))
            .collect();
        t.row(vec![
            p.get("direction")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string(),
            field("src_port"),
            field("dst_port"),
            if p.get("reached") == Some(&Value::Bool(true)) {
                "yes"
            } else {
                "no"
            }
            .to_string(),
            p.get("traced_at_ms")
                .and_then(Value::as_i64)
                .map_or("?".into(), time),
            hops.join(" > "),
        ]);
    }
    out.push_str(&t.render());
    Ok(out)
}
