//! Delay and corruption: iptables `NFQUEUE` rules at a link's upper end (always a router)
//! send its packets to a helper process in that namespace which holds them for the delay
//! and/or flips a UDP payload byte (see [`crate::helper`]). The queue number is the fault id;
//! `--queue-bypass` lets traffic through unharmed if the helper dies.

use anyhow::{Result, bail};

use super::{Direction, Install};

/// iptables front ends tried in order for NFQUEUE rules. The nftables `queue` statement is
/// not compiled into every kernel; iptables-nft's NFQUEUE works on the reference machine, and
/// iptables-legacy (the xtables target) is the fallback where it does not.
const IPTABLES: [&str; 2] = ["iptables-nft", "iptables-legacy"];

pub(super) fn install(
    ctx: &mut Install,
    link: &str,
    direction: Direction,
    delay_ms: u32,
    corrupt_percent: u8,
) -> Result<()> {
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
        let rule = [
            dir_flag,
            &end.ifname,
            "-j",
            "NFQUEUE",
            "--queue-num",
            &queue,
            "--queue-bypass",
        ];
        let mut failures = Vec::new();
        for iptables in IPTABLES {
            let base = [
                "ip", "netns", "exec", &end.netns, iptables, "-w", "-t", "mangle",
            ];
            let add: Vec<&str> = base
                .iter()
                .chain(&["-A", chain])
                .chain(&rule)
                .copied()
                .collect();
            let del: Vec<&str> = base
                .iter()
                .chain(&["-D", chain])
                .chain(&rule)
                .copied()
                .collect();
            match ctx.command(&add, &del) {
                Ok(()) => break,
                Err(e) => failures.push(format!("{e:#}")),
            }
        }
        if failures.len() == IPTABLES.len() {
            bail!("cannot add NFQUEUE rule: {}", failures.join("; "));
        }
    }
    Ok(())
}
