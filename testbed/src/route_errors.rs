//! The host's budget of ICMP "unreachable" for packets a router has no route for.
//!
//! Linux limits those per sender to one a second after a burst of five
//! (`net.ipv4.route.error_cost` / `error_burst`), and unlike the ICMP limits set in each
//! router namespace the budget is global to the host. A spine whose link to a ToR is down
//! has no route to that ToR: it answers a TTL-limited packet with "unreachable" (the route
//! lookup comes before the TTL check), and the probes it black-holes spend the budget of
//! their sender first, so a trace from that sender sees the spine silent and cannot tell
//! the link into the spine from the link out of it. A switch CPU answers hundreds a second.
//! While any fabric is up the cost is zero (the budget never runs out); the value it had
//! is saved and put back when the last fabric goes down.

use crate::state::STATE_DIR;
use anyhow::{Context, Result};
use std::fs;
use std::path::PathBuf;

/// The sysctl, in the root namespace's /proc (it exists nowhere else).
const COST: &str = "/proc/sys/net/ipv4/route/error_cost";

fn saved_path() -> PathBuf {
    PathBuf::from(STATE_DIR).join("route-error-cost.saved")
}

/// Lifts the budget, saving the host's value unless a fabric already did.
pub(crate) fn lift() -> Result<()> {
    let saved = saved_path();
    if !saved.exists() {
        let cost = fs::read_to_string(COST).with_context(|| format!("reading {COST}"))?;
        fs::write(&saved, cost).with_context(|| format!("writing {}", saved.display()))?;
    }
    fs::write(COST, "0").with_context(|| format!("writing 0 to {COST}"))
}

/// Puts the saved value back when no fabric's state file is left.
pub(crate) fn restore_if_last() -> Result<()> {
    let saved = saved_path();
    let Ok(text) = fs::read_to_string(&saved) else {
        return Ok(());
    };
    if crate::state::any_fabric()? {
        return Ok(());
    }
    let cost = text.trim();
    anyhow::ensure!(
        cost.parse::<u64>().is_ok(),
        "{} does not hold a number: {text:?}",
        saved.display()
    );
    fs::write(COST, cost).with_context(|| format!("writing {cost} to {COST}"))?;
    fs::remove_file(&saved).with_context(|| format!("removing {}", saved.display()))
}
