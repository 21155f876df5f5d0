//! `rocemesh ctl`: the operator's command line over the REST API. Tables for people by
//! default, the API's JSON with `--json` for scripts; every failure is a clear message and
//! a non-zero exit.
//!
//! One module per subcommand; [`client`] talks HTTP and turns failures into operator
//! messages, [`table`] aligns columns, [`resolve`] finds RNICs and tasks by name,
//! [`when`] reads the times of time options (`1h`, RFC 3339).

mod advise;
mod client;
mod path;
mod problems;
mod resolve;
mod rnic;
mod status;
mod table;
mod tasks;
mod verdict;
mod when;

use anyhow::Result;
use clap::{Args, Subcommand};
pub use client::Client;

/// Default server URL (a server on this machine).
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// `rocemesh ctl` options.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// Server base URL.
    #[arg(long, env = "ROCEMESH_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Bearer token (read or admin role).
    #[arg(long, env = "ROCEMESH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// CA certificates (PEM) the server's https certificate must chain to (default: the
    /// public web roots).
    #[arg(long, env = "ROCEMESH_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to show.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// The `ctl` subcommands.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// Hosts and RNICs up/down, active problems by priority, latest cluster SLA.
    Status,
    /// Problems, most recently seen first.
    Problems(problems::ProblemsArgs),
    /// One RNIC: registry entry, latest SLA as a probe target, problems on it.
    Rnic(rnic::RnicArgs),
    /// Last traced paths and RTT between two RNICs.
    Path(path::PathArgs),
    /// Source ports for two RNICs whose traced paths avoid every open problem.
    Advise(advise::AdviseArgs),
    /// Is the network to blame for a task's performance?
    Verdict(verdict::VerdictArgs),
    /// Training tasks: list, show, create, ready.
    #[command(subcommand)]
    Tasks(tasks::TasksCommand),
}

/// Runs one `ctl` command, printing to stdout.
pub fn run(args: CtlArgs) -> Result<()> {
    let tls = rocemesh_proto::http_client::ClientTls::load(args.ca_file.as_deref())?;
    let client = Client::new(&args.server, args.token.clone(), &tls);
    let out = match &args.command {
        CtlCommand::Status => status::run(&client, args.json)?,
        CtlCommand::Problems(a) => problems::run(&client, a, args.json)?,
        CtlCommand::Rnic(a) => rnic::run(&client, a, args.json)?,
        CtlCommand::Path(a) => path::run(&client, a, args.json)?,
        CtlCommand::Advise(a) => advise::run(&client, a, args.json)?,
        CtlCommand::Verdict(a) => verdict::run(&client, a, args.json)?,
        CtlCommand::Tasks(c) => tasks::run(&client, c, args.json)?,
    };
    print!("{out}");
    Ok(())
}

/// Pretty JSON with a final newline (the `--json` output).
fn json_out(v: &impl serde::Serialize) -> Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}

/// A timestamp in ms since the Unix epoch as UTC `YYYY-MM-DD HH:MM:SS`.
fn time(ms: i64) -> String {
    let iso = rocemesh_proto::utc::rfc3339_ms(ms);
    let (date, clock) = iso.split_once('T').unwrap_or((&iso, ""));
    format!("{date} {}", clock.get(..8).unwrap_or(clock))
}

/// Nanoseconds as microseconds with one decimal, `-` when absent.
fn micros(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".to_string(), |n| format!("{:.1}", n as f64 / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_micros_render() {
        assert_eq!(time(0), "1970-01-01 00:00:00");
        assert_eq!(time(1_700_000_000_123), "2023-11-14 22:13:20");
        assert_eq!(time(951_825_600_000), "2000-02-29 12:00:00");
        assert_eq!(micros(Some(12_345)), "12.3");
        assert_eq!(micros(None), "-");
    }
}
