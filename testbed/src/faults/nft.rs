//! nftables faults: random loss on a link's receiving interface(s) and silent drop of one
//! UDP 5-tuple in a router. Each fault owns one table per namespace, deleted on clear.

use anyhow::{Context, Result, bail};

use super::{Direction, Install, receivers};
use crate::fabric::Fabric;
use crate::netns;
use crate::topology::Router;
use rocemesh_proto::flow::FiveTuple;

/// Loads `ruleset` into namespace `ns` and records deletion of table `family name`.
fn add_table(ctx: &mut Install, ns: &str, family: &str, name: &str, ruleset: &str) -> Result<()> {
    netns::run_with_stdin(
        "ip",
        &["netns", "exec", ns, "nft", "-f", "-"],
        Some(ruleset),
    )?;
    ctx.undo.push(super::Undo::Command(
        [
            "ip", "netns", "exec", ns, "nft", "delete", "table", family, name,
        ]
        .map(String::from)
        .to_vec(),
    ));
    Ok(())
}

/// The nft rule dropping `percent` % of IPv4 packets; nft's numgen compares against
/// 0..=99, so 100 % is a plain drop.
fn loss_rule(percent: u8) -> String {
    if percent >= 100 {
        "meta protocol ip drop".to_string()
    } else {
        format!("meta protocol ip numgen random mod 100 < {percent} drop")
    }
}

/// Drops `percent` % of IPv4 packets arriving at the receiving end(s) of `link`.
pub(super) fn loss(ctx: &mut Install, link: &str, direction: Direction, percent: u8) -> Result<()> {
    let table = ctx.object_name();
    let ends: Vec<(String, String)> = receivers(ctx.link(link)?, direction)
        .into_iter()
        .map(|e| (e.netns.clone(), e.ifname.clone()))
        .collect();
    for (ns, ifname) in ends {
        let ruleset = format!(
            "table netdev {table} {{\n chain loss {{\n  type filter hook ingress device \"{ifname}\" priority 0;\n  \
             {}\n }}\n}}\n",
            loss_rule(percent)
        );
        add_table(ctx, &ns, "netdev", &table, &ruleset)?;
    }
    Ok(())
}

/// The router a flow drop is placed in: `at` if given, else the source RNIC's ToR.
pub(super) fn flow_drop_router<'a>(
    fabric: &'a Fabric,
    flow: &FiveTuple,
    at: Option<&str>,
) -> Result<&'a Router> {
    let t = fabric.topology();
    match at {
        Some(name) => t
            .router(name)
            .with_context(|| format!("unknown router {name:?}")),
        None => {
            let Some((_, rnic)) = t.rnic_by_ip(flow.src) else {
                bail!("{} is not an RNIC of the fabric", flow.src)
            };
            Ok(&t.tors[usize::from(rnic.tor)])
        }
    }
}

/// Silently drops the forwarded UDP packets of `flow` in one router.
pub(super) fn flow_drop(ctx: &mut Install, flow: &FiveTuple, at: Option<&str>) -> Result<()> {
    let ns = flow_drop_router(ctx.fabric, flow, at)?.netns.clone();
    let table = ctx.object_name();
    let ruleset = format!(
        "table ip {table} {{\n chain flowdrop {{\n  type filter hook forward priority 0;\n  \
         ip saddr {} ip daddr {} udp sport {} udp dport {} drop\n }}\n}}\n",
        flow.src, flow.dst, flow.sport, flow.dport
    );
    add_table(ctx, &ns, "ip", &table, &ruleset)
}

#[cfg(test)]
mod tests {
    #[test]
    fn full_loss_is_a_plain_drop_and_partial_loss_uses_numgen() {
        assert_eq!(super::loss_rule(100), "meta protocol ip drop");
        assert_eq!(
            super::loss_rule(10),
            "meta protocol ip numgen random mod 100 < 10 drop"
        );
    }
}
