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
pub fn run(client: &Client, args: &VerdictArgs, json: bool) -> Result<String> {
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
    let list: Vec<Problem> = v
        .get("problems")
        .map(|p| serde_json::from_value(p.clone()))
        .transpose()?
        .unwrap_or_default();
    out.push('\n');
    out.push_str(&problems::table(&list));
    Ok(out)
}
