//! `ctl tasks`: training tasks — list, show, create (from a JSON spec or flags), and mark
//! an endpoint ready to be probed.

use super::problems::json_name;
use super::table::Table;
use super::{Client, json_out};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use rocemesh_proto::api::{TaskEndpoint, TaskInfo, TaskSpec};
use std::path::PathBuf;

/// `ctl tasks` subcommands.
#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Every task: phase, endpoints ready, probe pairs.
    List,
    /// One task (id or name): its pinglist phase, skeleton and endpoints.
    Show {
        /// Task id or name.
        task: String,
    },
    /// Creates a task from a JSON spec (`--file`, `-` for stdin) or from flags.
    Create(CreateArgs),
    /// Marks an endpoint (`host/rnic`) of a task ready to be probed.
    Ready {
        /// Task id, or name (a name is looked up, which an agent token may not do).
        task: String,
        /// The endpoint, as `host/rnic`.
        endpoint: String,
    },
}

/// `ctl tasks create` options.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// A TaskSpec as JSON (`{"name": ..., "endpoints": [{"host": ..., "rnic": ...}]}`),
    /// `-` for stdin.
    #[arg(long, conflicts_with_all = ["name", "endpoint"])]
    pub file: Option<PathBuf>,
    /// Task name (with `--endpoint`).
    #[arg(long, requires = "endpoint")]
    pub name: Option<String>,
    /// An endpoint `host/rnic`, repeated for each.
    #[arg(long, requires = "name")]
    pub endpoint: Vec<String>,
}

/// Runs one `ctl tasks` command.
pub(super) fn run(client: &Client, cmd: &TasksCommand, json: bool) -> Result<String> {
    let (task, out) = match cmd {
        TasksCommand::List => {
            let tasks: Vec<TaskInfo> = client.get("/tasks")?;
            if json {
                return json_out(&tasks);
            }
            return Ok(list(&tasks));
        }
        TasksCommand::Show { task } => (super::resolve::task(client, task)?, None),
        TasksCommand::Create(args) => {
            let spec = spec(args)?;
            let task: TaskInfo = client.post("/tasks", &spec)?;
            (task, Some("created"))
        }
        TasksCommand::Ready { task, endpoint } => {
            let (host, rnic) = endpoint_name(endpoint)?;
            let id = match task.parse::<u32>() {
                Ok(id) => id,
                Err(_) => super::resolve::task(client, task)?.id,
            };
            let body = serde_json::json!({ "host": host, "rnic": rnic });
            let task: TaskInfo = client.post(&format!("/tasks/{id}/ready"), &body)?;
            (task, Some("endpoint ready"))
        }
    };
    if json {
        return json_out(&task);
    }
    let head = out.map_or(String::new(), |what| {
        format!("{what}: task {} (id {})\n\n", task.name, task.id)
    });
    Ok(head + &show(&task))
}

/// `host/rnic` split in two.
fn endpoint_name(s: &str) -> Result<(&str, &str)> {
    match s.split_once('/') {
        Some((host, rnic)) if !host.is_empty() && !rnic.is_empty() && !rnic.contains('/') => {
            Ok((host, rnic))
        }
        _ => bail!("endpoint {s:?} is not host/rnic (e.g. gpu-node-7/mlx5_0)"),
    }
}

/// The spec `create` sends.
fn spec(args: &CreateArgs) -> Result<TaskSpec> {
    if let Some(path) = &args.file {
        let text = if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading the task spec from stdin")?
        } else {
            std::fs::read_to_string(path)
                .with_context(|| format!("reading the task spec {}", path.display()))?
        };
        return serde_json::from_str(&text)
            .with_context(|| format!("{} is not a task spec", path.display()));
    }
    let Some(name) = &args.name else {
        bail!("give --file SPEC.json, or --name and one --endpoint host/rnic per endpoint");
    };
    let endpoints = args
        .endpoint
        .iter()
        .map(|e| {
            let (host, rnic) = endpoint_name(e)?;
            Ok(TaskEndpoint::new(host, rnic))
        })
        .collect::<Result<_>>()?;
    Ok(TaskSpec {
        name: name.clone(),
        endpoints,
    })
}

/// Endpoints ready / total.
fn readiness(t: &TaskInfo) -> String {
    let ready = t.endpoints.iter().filter(|(e, _)| e.ready).count();
    format!("{ready}/{}", t.endpoints.len())
}

/// The tasks as a table.
fn list(tasks: &[TaskInfo]) -> String {
    if tasks.is_empty() {
        return "no tasks\n".to_string();
    }
    let mut t = Table::new(&[
        "ID",
        "NAME",
        "PHASE",
        "READY",
        "PAIRS ACTIVE",
        "BASIC",
        "FULL MESH",
    ]);
    for task in tasks {
        t.row(vec![
            task.id.to_string(),
            task.name.clone(),
            json_name(&task.phase),
            readiness(task),
            task.active_pairs.to_string(),
            task.basic_pairs.to_string(),
            task.full_mesh_pairs.to_string(),
        ]);
    }
    t.render()
}

/// One task in full.
fn show(t: &TaskInfo) -> String {
    let mut out = format!(
        "task      {} (id {})\nphase     {}\nready     {} endpoints\npairs     {} probed, {} basic (same rail), {} full mesh\n",
        t.name,
        t.id,
        json_name(&t.phase).replace('_', " "),
        readiness(t),
        t.active_pairs,
        t.basic_pairs,
        t.full_mesh_pairs,
    );
    if let Some(s) = &t.skeleton {
        out.push_str(&format!(
            "skeleton  DP {} × TP·PP {}, {} pairs{}\n",
            s.dp,
            s.tp_pp,
            s.pairs,
            s.fallback_reason
                .as_ref()
                .map_or(String::new(), |r| format!(" (basic list kept: {r})"))
        ));
    }
    out.push('\n');
    let mut table = Table::new(&["ENDPOINT", "RNIC ID", "RAIL", "POD", "READY"]);
    for (e, id) in &t.endpoints {
        table.row(vec![
            format!("{}/{}", e.host, e.rnic),
            id.map_or("unregistered".into(), |i| i.to_string()),
            e.rail.map_or("-".into(), |r| r.to_string()),
            match (&e.namespace, &e.pod) {
                (Some(ns), Some(pod)) => format!("{ns}/{pod}"),
                (None, Some(pod)) => pod.clone(),
                _ => "-".into(),
            },
            if e.ready { "yes" } else { "no" }.into(),
        ]);
    }
    out + &table.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_host_slash_rnic() {
        assert_eq!(endpoint_name("n7/mlx5_0").unwrap(), ("n7", "mlx5_0"));
        for bad in ["n7", "/mlx5_0", "n7/", "a/b/c"] {
            assert!(endpoint_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_make_a_spec() {
        let args = CreateArgs {
            file: None,
            name: Some("job-1".into()),
            endpoint: vec!["n1/r0".into(), "n2/r1".into()],
        };
        let s = spec(&args).unwrap();
        assert_eq!(s.name, "job-1");
        assert_eq!(
            s.endpoints
                .iter()
                .map(|e| (e.host.as_str(), e.rnic.as_str()))
                .collect::<Vec<_>>(),
            [("n1", "r0"), ("n2", "r1")]
        );
    }
}
