//! Congestion / PFC-like pause: a tbf root qdisc at a low rate on the sending interface(s)
//! (packets queue up to [`TBF_LATENCY_MS`], then tail-drop), optionally filled by paced
//! background UDP traffic from a helper process in a host namespace.

use anyhow::{Context, Result};

use super::{Background, Direction, Install};
use crate::netns;

/// Longest time a packet may wait in the tbf queue before it is dropped.
pub(super) const TBF_LATENCY_MS: u32 = 200;

/// Discard port (RFC 863) the background traffic is sent to.
const DISCARD_PORT: u16 = 9;

pub(super) fn congestion(
    ctx: &mut Install,
    link: &str,
    direction: Direction,
    rate_kbit: u32,
    background: Option<&Background>,
) -> Result<()> {
    let l = ctx.link(link)?.clone();
    let mut senders = Vec::new();
    if direction.up() {
        senders.push(&l.a);
    }
    if direction.down() {
        senders.push(&l.b);
    }
    // Burst: at least one MTU, else about 10 ms at the configured rate.
    let burst = (rate_kbit / 8 * 10).max(1600).to_string();
    let rate = format!("{}kbit", rate_kbit.max(8));
    let latency = format!("{TBF_LATENCY_MS}ms");
    for e in senders {
        let base = ["ip", "netns", "exec", &e.netns, "tc", "qdisc"];
        let add: Vec<&str> = base
            .iter()
            .chain(&[
                "add", "dev", &e.ifname, "root", "tbf", "rate", &rate, "burst", &burst, "latency",
                &latency,
            ])
            .copied()
            .collect();
        let del: Vec<&str> = base
            .iter()
            .chain(&["del", "dev", &e.ifname, "root"])
            .copied()
            .collect();
        ctx.command(&add, &del)?;
    }
    if let Some(bg) = background {
        let t = ctx.fabric.topology();
        let (host, from) = t
            .rnic(&bg.from)
            .with_context(|| format!("unknown RNIC {:?}", bg.from))?;
        let (_, to) = t
            .rnic(&bg.to)
            .with_context(|| format!("unknown RNIC {:?}", bg.to))?;
        let helper = ctx.fabric.helper()?;
        let mut cmd = netns::command(&host.netns, &helper.program.to_string_lossy());
        cmd.args(&helper.args).args([
            "blast".to_string(),
            from.ip.to_string(),
            format!("{}:{DISCARD_PORT}", to.ip),
            bg.mbps.to_string(),
        ]);
        ctx.spawn(cmd, "blast", true)?;
    }
    Ok(())
}
