//! `ctl problems`: diagnosed problems, filtered by priority and state.

use super::client::encode;
use super::table::Table;
use super::{Client, json_out, time};
use anyhow::Result;
use clap::Args;
use rocemesh_proto::api::{Priority, Problem};

/// `ctl problems` options.
#[derive(Debug, Args)]
pub struct ProblemsArgs {
    /// Only this priority: P0, P1 or P2.
    #[arg(long, value_parser = parse_priority)]
    pub priority: Option<Priority>,
    /// active (default), resolved or all.
    #[arg(long, default_value = "active", value_parser = ["active", "resolved", "all"])]
    pub state: String,
    /// Most problems to list.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// Only problems last seen since then: `now`, a span ago (`1h`, `30m`) or RFC 3339.
    #[arg(long, value_parser = super::when::parse)]
    pub since: Option<i64>,
}

fn parse_priority(s: &str) -> Result<Priority, String> {
    Priority::parse(&s.to_ascii_uppercase()).ok_or_else(|| format!("{s:?} is not P0, P1 or P2"))
}

/// Runs `ctl problems`.
pub(super) fn run(client: &Client, args: &ProblemsArgs, json: bool) -> Result<String> {
    let mut query = format!(
        "/problems?state={}&limit={}",
        encode(&args.state),
        args.limit
    );
    if let Some(p) = args.priority {
        query.push_str(&format!("&priority={}", p.as_str()));
    }
    if let Some(ms) = args.since {
        query.push_str(&format!("&since_ms={ms}"));
    }
    let list: Vec<Problem> = client.get(&query)?;
    if json {
        return json_out(&list);
    }
    Ok(table(&list))
}

/// The problems as a table (or a line saying there are none).
pub(super) fn table(list: &[Problem]) -> String {
    if list.is_empty() {
        return "no problems\n".to_string();
    }
    let mut t = Table::new(&[
        "ID",
        "PRIO",
        "KIND",
        "COMPONENT",
        "STATE",
        "CONF",
        "FIRST SEEN",
        "LAST SEEN",
        "EVIDENCE",
    ]);
    for p in list {
        t.row(vec![
            p.id.to_string(),
            p.priority.map_or("-", |p| p.as_str()).to_string(),
            json_name(&p.kind),
            format!("{} {}", json_name(&p.component_kind), p.component),
            json_name(&p.state),
            format!("{:.2}", p.confidence),
            time(p.first_seen_ms),
            time(p.last_seen_ms),
            format!(
                "{} probes, {} timeouts, {} votes",
                p.evidence.probes, p.evidence.timeouts, p.evidence.votes
            ),
        ]);
    }
    t.render()
}

/// The wire name of a unit enum (`link_fault`, `rnic`, `active`).
pub(super) fn json_name(v: &impl serde::Serialize) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".to_string(),
    }
}
