//! Link, RNIC and spine down/flap with `ip link set down/up`.
//!
//! Taking an interface administratively down makes the kernel flush routes and neighbours
//! through it, so every "up" step also restores that namespace's static neighbours and routes
//! (idempotent `neigh/route replace`). The
//! peer of a downed veth only loses carrier; its routes stay (LINKDOWN) and, with
//! `ignore_routes_with_linkdown=0`, it keeps sending its ECMP share into the dead link.

use std::process::Command;

use anyhow::{Context, Result};

use super::Install;
use crate::state::{Undo, log_path};
use crate::topology::Endpoint;

/// Down (or flap) `ends`: a flapper shell loop toggles them every `period_ms / 2`.
fn down(ctx: &mut Install, ends: &[Endpoint], flap_period_ms: Option<u32>) -> Result<()> {
    let prefix = ctx.fabric.spec().prefix.clone();
    let mut namespaces: Vec<&str> = ends.iter().map(|e| e.netns.as_str()).collect();
    namespaces.dedup();
    // Restoring routes needs a batch file per namespace (also used by the flapper loop).
    let mut restore = Vec::new();
    for ns in &namespaces {
        let path = log_path(&prefix, &format!("f{}-{ns}-routes", ctx.id));
        std::fs::write(&path, ctx.fabric.restore_lines(ns).join("\n") + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        restore.push(format!("ip -n {ns} -force -batch {}", path.display()));
    }
    let set = |state: &str| -> Vec<String> {
        ends.iter()
            .map(|e| format!("ip -n {} link set {} {state}", e.netns, e.ifname))
            .collect()
    };
    let up_script = [set("up"), restore].concat().join("; ");
    let down_script = set("down").join("; ");
    // Undo (run in reverse): the flapper is killed first, then everything is brought up.
    ctx.undo.push(Undo::Command(vec![
        "sh".into(),
        "-c".into(),
        format!("{up_script}; true"),
    ]));
    match flap_period_ms {
        None => {
            let out = Command::new("sh")
                .args(["-c", &down_script])
                .output()
                .context("running sh")?;
            if !out.status.success() {
                anyhow::bail!(
                    "`{down_script}` failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Some(period) => {
            let half = format!("{}.{:03}", period / 2000, (period / 2) % 1000);
            let mut cmd = Command::new("sh");
            cmd.args([
                "-c",
                &format!(
                    "while :; do {down_script}; sleep {half}; {up_script}; sleep {half}; done"
                ),
            ]);
            ctx.spawn(cmd, "flap", false)?;
        }
    }
    Ok(())
}

/// Link down/flap: the upper end goes down, the lower end loses carrier.
pub(super) fn link_down(ctx: &mut Install, link: &str, flap_period_ms: Option<u32>) -> Result<()> {
    let end = ctx.link(link)?.b.clone();
    down(ctx, &[end], flap_period_ms)
}

/// Lower end down: the lower-tier interface goes down, the upper end loses carrier.
pub(super) fn lower_end_down(ctx: &mut Install, link: &str) -> Result<()> {
    let end = ctx.link(link)?.a.clone();
    down(ctx, &[end], None)
}

/// RNIC down/flap: the host's interface goes down, its ToR's port loses carrier.
pub(super) fn rnic_down(ctx: &mut Install, rnic: &str, flap_period_ms: Option<u32>) -> Result<()> {
    let (_, r) = ctx
        .fabric
        .topology()
        .rnic(rnic)
        .with_context(|| format!("unknown RNIC {rnic:?}"))?;
    let end = ctx.link(&r.link)?.a.clone();
    down(ctx, &[end], flap_period_ms)
}

/// Spine down: all its interfaces go down; ToRs keep hashing flows onto it (blackhole).
pub(super) fn spine_down(ctx: &mut Install, spine: &str) -> Result<()> {
    let ends: Vec<Endpoint> = ctx
        .fabric
        .topology()
        .links_of(spine)
        .map(|l| l.b.clone())
        .collect();
    down(ctx, &ends, None)
}
