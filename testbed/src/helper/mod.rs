//! The fault helper process: `nfq` (NFQUEUE delayer/corrupter) and `blast` (paced background
//! UDP traffic). It runs inside a fabric namespace, started by [`crate::Fabric::apply`] as the
//! `rocemesh-testbed-helper` binary or as a hidden subcommand of another binary that calls
//! [`run`]. It prints [`crate::process::READY_LINE`] on stdout once set up.

mod blast;
mod nfq;

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: nfq QUEUE DELAY_MS CORRUPT_PERCENT | blast SRC_IP DST_IP:PORT MBPS";

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
    }
}
