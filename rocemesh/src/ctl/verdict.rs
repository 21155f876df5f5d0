//! `ctl verdict`: is the network to blame for a task's performance?

use super::problems;
use super::{Client, json_out, time};
use anyhow::Result;
use clap::Args;
use rocemesh_proto::api::Problem;
use serde_json::Value;

/// `ctl verdict` options.
#[derive(Debug, Args)]
pub struct VerdictArgs {
    /// Task id or name.
    pub task: String,
    /// Start of the interval: `now`, a span ago (`1h`, `30m`) or RFC 3339 (server
    /// default: an hour before `--to`).
    #[arg(long, visible_alias = "since", value_parser = super::when::parse)]
    pub from: Option<i64>,
    /// End of the interval, as `--from` (server default: now).
    #[arg(long, value_parser = super::when::parse)]
    pub to: Option<i64>,
}

/// Runs `ctl verdict`.
pub(super) fn run(client: &Client, args: &VerdictArgs, json: bool) -> Result<String> {
    let task = super::resolve::task(client, &args.task)?;
    let mut query = format!("/tasks/{}/verdict", task.id);
    let bounds: Vec<String> = [("from", args.from), ("to", args.to)]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
        .collect();
    if !bounds.is_empty() {
        query = format!("{query}?{}", bounds.join("&"));
    }
    let v: Value = client.get(&query)?;
    if json {
        return json_out(&v);
    }
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    let ms = |k: &str| v.get(k).and_then(Value::as_i64).map_or("?".into(), time);
    let mut out = format!(
        "task      {} (id {})\ninterval  {} .. {}\nverdict   {}\nreason    {}\n",
        task.name,
        task.id,
        ms("from"),
        ms("to"),
        text("verdict").replace('_', " "),
        text("reason"),
    );
    if let Some(c) = v.get("coverage") {
        let n = |k: &str| c.get(k).and_then(Value::as_u64).unwrap_or(0);
        out.push_str(&format!(
            "coverage  {}/{} endpoints probed ({} probes)\n",
            n("covered"),
            n("endpoints"),
            n("probes")
        ));
    }
    if let Some(m) = v
        .get("metric")
        .filter(|m| m.get("samples").and_then(Value::as_u64) > Some(0))
    {
        let f = |k: &str| {
            m.get(k)
                .and_then(Value::as_f64)
                .map_or("-".into(), |x| format!("{x:.3}"))
        };
        out.push_str(&format!(
            "metric    {}: median {}, worst {}, baseline {}, degradation {} (tolerated {})\n",
            m.get("name").and_then(Value::as_str).unwrap_or("?"),
            f("median"),
            f("worst"),
            f("baseline"),
            f("degradation"),
            f("tolerable_degradation"),
        ));
    }
    out.push_str(&health(&v));
    let list: Vec<Problem> = v
        .get("problems")
        .map(|p| serde_json::from_value(p.clone()))
        .transpose()?
        .unwrap_or_default();
    out.push('\n');
    out.push_str(&problems::table(&list));
    Ok(out)
}

/// Bad windows listed in full; older ones are counted.
const MAX_BAD_WINDOWS: usize = 5;

/// The hang/slow lines of a verdict: worst class and straggler, windows per class, the
/// newest bad windows with their evidence, probe attributions.
fn health(v: &Value) -> String {
    let Some(h) = v.get("health").filter(|h| !h.is_null()) else {
        let why = v
            .get("health_note")
            .and_then(Value::as_str)
            .unwrap_or("not judged");
        return format!("health    not judged: {why}\n");
    };
    let s = |x: &Value| x.as_str().unwrap_or("-").replace('_', " ");
    let ranks: Vec<&str> = h["ranks"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let rank = |x: &Value| {
        x.as_u64()
            .and_then(|i| ranks.get(i as usize))
            .map_or("-".to_string(), |n| (*n).to_string())
    };
    let windows = h["windows"].as_array().cloned().unwrap_or_default();
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for w in &windows {
        *counts.entry(s(&w["class"])).or_default() += 1;
    }
    let mut out = format!(
        "health    {} (straggler {}), healthy period {}\n",
        s(&h["worst"]),
        h["straggler"].as_str().unwrap_or("-"),
        h["baseline_period_ms"]
            .as_f64()
            .map_or("-".into(), |p| format!("{p:.0} ms"))
    );
    if let Some(note) = h["note"].as_str() {
        out.push_str(&format!("          {note}\n"));
    }
    let tally: Vec<String> = counts.iter().map(|(c, n)| format!("{n} {c}")).collect();
    if !tally.is_empty() {
        out.push_str(&format!("windows   {}\n", tally.join(", ")));
    }
    let bad: Vec<&Value> = windows.iter().filter(|w| w["class"] != "healthy").collect();
    for w in bad.iter().rev().take(MAX_BAD_WINDOWS) {
        out.push_str(&format!(
            "  {} {:<24} {:<16} {}\n",
            w["from_ms"].as_i64().map_or("?".into(), time),
            s(&w["class"]),
            rank(&w["straggler"]),
            w["evidence"].as_str().unwrap_or("")
        ));
    }
    if bad.len() > MAX_BAD_WINDOWS {
        out.push_str(&format!(
            "  ({} older bad windows)\n",
            bad.len() - MAX_BAD_WINDOWS
        ));
    }
    for a in h["attributions"].as_array().into_iter().flatten() {
        let target = match a["pair"].as_array() {
            Some(p) if p.len() == 2 => format!("{} -> {}", rank(&p[0]), rank(&p[1])),
            _ => rank(&a["rank"]),
        };
        out.push_str(&format!(
            "blame     {} {target}: {}\n",
            s(&a["blame"]),
            a["evidence"].as_str().unwrap_or("")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn health_lines_name_ranks_and_say_why_when_absent() {
        let v = json!({"health": {
            "ranks": ["h0/eth1", "h1/eth1"], "worst": "non_communication_hang",
            "straggler": "h1/eth1", "baseline_period_ms": 1000.0, "note": null,
            "windows": [
                {"from_ms": 0, "to_ms": 1000, "class": "healthy", "straggler": null, "evidence": "ok"},
                {"from_ms": 1000, "to_ms": 9000, "class": "non_communication_hang", "straggler": 1,
                 "evidence": "no burst for 8000 ms"}],
            "attributions": [{"blame": "connection", "rank": null, "pair": [0, 1],
                              "evidence": "pair 0 -> 1 bad"}]}});
        let out = health(&v);
        assert!(
            out.contains("non communication hang (straggler h1/eth1), healthy period 1000 ms"),
            "{out}"
        );
        assert!(out.contains("1 healthy, 1 non communication hang"), "{out}");
        assert!(
            out.contains("h1/eth1") && out.contains("no burst for 8000 ms"),
            "{out}"
        );
        assert!(
            out.contains("blame     connection h0/eth1 -> h1/eth1: pair 0 -> 1 bad"),
            "{out}"
        );
        let out = health(&json!({"health": null, "health_note": "no throughput samples"}));
        assert_eq!(out, "health    not judged: no throughput samples\n");
    }
}
