//! The helper process: `nfq` (NFQUEUE delayer/corrupter), `blast` (paced background UDP traffic)
//! and `job` (one host's share of an emulated training job, paced or a ring). It runs inside a
//! fabric namespace, started by [`crate::Fabric::apply`] or [`crate::Fabric::start_job`] as the
//! `rocemesh-testbed-helper` binary or as a hidden subcommand of another binary that calls [`run`].
//! It prints [`crate::process::READY_LINE`] on stdout once set up.

mod blast;
mod job;
mod nfq;
mod ring;

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: nfq QUEUE DELAY_MS CORRUPT_PERCENT | blast SRC_IP DST_IP:PORT MBPS \
                     | job FABRIC_SPEC_JSON JOB_SPEC_JSON HOST START_UNIX_MS";

fn arg<T: FromStr>(args: &[String], i: usize, what: &str) -> Result<T> {
    let s = args
        .get(i)
        .with_context(|| format!("missing {what}; {USAGE}"))?;
    s.parse()
        .map_err(|_| anyhow::anyhow!("invalid {what} {s:?}; {USAGE}"))
}

/// Signals readiness to the parent (which waits for this line).
pub(crate) fn announce_ready() -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", crate::process::READY_LINE)?;
    out.flush().context("writing ready line")
}

/// Runs the helper with its arguments (without the program name); returns only on error.
pub fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("nfq") => {
            let queue: u16 = arg(args, 1, "QUEUE")?;
            let delay_ms: u64 = arg(args, 2, "DELAY_MS")?;
            let percent: u8 = arg(args, 3, "CORRUPT_PERCENT")?;
            if percent > 100 {
                bail!("CORRUPT_PERCENT {percent} > 100");
            }
            nfq::run(queue, Duration::from_millis(delay_ms), percent)
        }
        Some("blast") => {
            let src: Ipv4Addr = arg(args, 1, "SRC_IP")?;
            let dst: SocketAddrV4 = arg(args, 2, "DST_IP:PORT")?;
            let mbps: u32 = arg(args, 3, "MBPS")?;
            blast::run(src, dst, mbps)
        }
        Some("job") => {
            let fabric: String = arg(args, 1, "FABRIC_SPEC_JSON")?;
            let job_spec: String = arg(args, 2, "JOB_SPEC_JSON")?;
            let host: usize = arg(args, 3, "HOST")?;
            let start: u64 = arg(args, 4, "START_UNIX_MS")?;
            job::run(&fabric, &job_spec, host, start)
        }
        _ => bail!("{USAGE}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_arguments_are_clear_errors() {
        let v = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert!(run(&v("")).unwrap_err().to_string().contains("usage"));
        assert!(
            run(&v("nfq x 1 0"))
                .unwrap_err()
                .to_string()
                .contains("invalid QUEUE")
        );
        assert!(
            run(&v("nfq 1 1 101"))
                .unwrap_err()
                .to_string()
                .contains("> 100")
        );
        assert!(
            run(&v("blast 1.2.3.4"))
                .unwrap_err()
                .to_string()
                .contains("missing DST")
        );
        let fabric = serde_json::to_string(&crate::FabricSpec::default()).unwrap();
        let job = |s: &str| {
            let a = vec![
                "job".to_string(),
                fabric.clone(),
                s.to_string(),
                "0".into(),
                "1".into(),
            ];
            run(&a).unwrap_err().to_string()
        };
        assert!(job("{").contains("JOB_SPEC"));
        let big = r#"{"name":"j","tp":1,"pp":1,"dp":9,"iteration_ms":500,"pp_offset_ms":0,
            "allreduce_bytes":1,"activation_bytes":0,"jitter_ms":0,"seed":1}"#;
        assert!(job(big).contains("hosts"), "{}", job(big));
        assert!(
            run(&v("job {} {} 0 x"))
                .unwrap_err()
                .to_string()
                .contains("FABRIC_SPEC")
        );
    }
}
