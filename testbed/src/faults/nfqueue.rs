//! Delay and corruption: iptables `NFQUEUE` rules at a link's upper end (always a router)
//! send its packets to a helper process in that namespace which holds them for the delay
//! and/or flips a UDP payload byte (see [`crate::helper`]). The queue number is the fault id;
//! `--queue-bypass` lets traffic through unharmed if the helper dies.

use anyhow::Result;

use super::{Direction, Install};

/// iptables front end used for NFQUEUE rules. The nftables `queue` statement is not
/// available on every kernel; the xtables NFQUEUE target through iptables-legacy is.
const IPTABLES: &str = "iptables-legacy";

pub(super) fn install(ctx: &mut Install, link: &str, direction: Direction, delay_ms: u32, corrupt_percent: u8) -> Result<()> {
    let end = ctx.link(link)?.b.clone();
    let helper = ctx.fabric.helper()?;
    let queue = ctx.id.to_string();
    let mut cmd = crate::netns::command(&end.netns, &helper.program.to_string_lossy());
    cmd.args(&helper.args).args([
        "nfq",
        &queue,
        &delay_ms.to_string(),
        &corrupt_percent.to_string(),
    ]);
    ctx.spawn(cmd, "nfq", true)?;
    let mut rules = Vec::new();
    if direction.up() {
        rules.push(["PREROUTING", "-i"]);
    }
    if direction.down() {
        rules.push(["POSTROUTING", "-o"]);
    }
    for [chain, dir_flag] in rules {
        let rule = [dir_flag, &end.ifname, "-j", "NFQUEUE", "--queue-num", &queue, "--queue-bypass"];
        let base = ["ip", "netns", "exec", &end.netns, IPTABLES, "-w", "-t", "mangle"];
        let add: Vec<&str> = base.iter().chain(&["-A", chain]).chain(&rule).copied().collect();
        let del: Vec<&str> = base.iter().chain(&["-D", chain]).chain(&rule).copied().collect();
        ctx.command(&add, &del)?;
    }
    Ok(())
}
