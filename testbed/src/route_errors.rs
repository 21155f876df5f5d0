//! The host's budget of ICMP "unreachable" for packets a router has no route for.
//!
//! Linux limits those per sender to one a second after a burst of five
//! (`net.ipv4.route.error_cost` / `error_burst`), and unlike the ICMP limits set in each
//! router namespace the budget is global to the host. A spine whose link to a ToR is down
//! has no route to that ToR: it answers a TTL-limited packet with "unreachable" (the route
//! lookup comes before the TTL check), and the probes it black-holes spend the budget of
//! their sender first, so a trace from that sender sees the spine silent and cannot tell
//! the link into the spine from the link out of it. A switch CPU answers hundreds a second.
//! The budget is lifted while any fabric is up; the values it had are saved and put back
//! when the last fabric goes down.

use crate::state::STATE_DIR;
use anyhow::{Context, Result};
use std::fs;
use std::path::PathBuf;

/// The sysctls, in the root namespace's /proc (they exist nowhere else).
const KNOBS: [&str; 2] = [
    "/proc/sys/net/ipv4/route/error_cost",
    "/proc/sys/net/ipv4/route/error_burst",
];
/// What they are set to while a fabric is up: a zero cost never runs out.
const LIFTED: [&str; 2] = ["0", "1250"];

fn saved_path() -> PathBuf {
    PathBuf::from(STATE_DIR).join("route-error-budget.saved")
}

/// Lifts the budget, saving the host's values unless a fabric already did.
pub(crate) fn lift() -> Result<()> {
    let saved = saved_path();
    if !saved.exists() {
        let values = KNOBS
            .iter()
            .map(|k| read(k))
            .collect::<Result<Vec<_>>>()?;
        fs::write(&saved, values.join(" ") + "\n")
            .with_context(|| format!("writing {}", saved.display()))?;
    }
    for (k, v) in KNOBS.iter().zip(LIFTED) {
        fs::write(k, v).with_context(|| format!("writing {v} to {k}"))?;
    }
    Ok(())
}

/// Puts the saved values back when no fabric's state file is left.
pub(crate) fn restore_if_last() -> Result<()> {
    let saved = saved_path();
    let Ok(text) = fs::read_to_string(&saved) else {
        return Ok(());
    };
    let fabrics_left = fs::read_dir(STATE_DIR)?
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(".json"));
    if fabrics_left {
        return Ok(());
    }
    let values: Vec<&str> = text.split_whitespace().collect();
    anyhow::ensure!(
        values.len() == KNOBS.len() && values.iter().all(|v| v.parse::<u64>().is_ok()),
        "{} is not two numbers: {text:?}",
        saved.display()
    );
    for (k, v) in KNOBS.iter().zip(values) {
        fs::write(k, v).with_context(|| format!("writing {v} to {k}"))?;
    }
    fs::remove_file(&saved).with_context(|| format!("removing {}", saved.display()))
}

fn read(knob: &str) -> Result<String> {
    Ok(fs::read_to_string(knob)
        .with_context(|| format!("reading {knob}"))?
        .trim()
        .to_string())
}
