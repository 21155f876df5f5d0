//! CPU starvation of one process (e.g. an agent): it is moved into its own cgroup v1 cpu
//! group with a CFS quota of `percent` % of one CPU, and moved back on clear.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{Context, Result, bail};

use super::Install;
use crate::fabric::Fabric;
use crate::state::Undo;
use rocemesh_proto::api::Component;
use rocemesh_proto::api::ComponentKind;

/// cgroup v1 cpu controller mount point.
const CPU_CGROUP_ROOT: &str = "/sys/fs/cgroup/cpu";

/// CFS period used for the quota.
const PERIOD_US: u32 = 100_000;

/// The host whose namespace `pid` lives in; `None` for a process outside the fabric.
pub(super) fn owner(fabric: &Fabric, pid: u32) -> Result<Option<Component>> {
    let ns =
        fs::metadata(format!("/proc/{pid}/ns/net")).with_context(|| format!("no process {pid}"))?;
    let host = fabric.hosts().iter().find(|h| {
        fs::metadata(format!("/var/run/netns/{}", h.netns))
            .is_ok_and(|m| m.ino() == ns.ino() && m.dev() == ns.dev())
    });
    Ok(host.map(|h| Component::new(ComponentKind::Host, h.name.clone())))
}

/// The `cgroup.procs` file of the cpu cgroup `pid` is in now.
fn current_procs(pid: u32) -> Result<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .with_context(|| format!("no process {pid}"))?;
    let rel = text
        .lines()
        .filter_map(|l| {
            // "hierarchy-id:controller-list:path"
            let mut parts = l.splitn(3, ':');
            parts.next();
            Some((parts.next()?, parts.next()?))
        })
        .find(|(controllers, _)| controllers.split(',').any(|c| c == "cpu"))
        .map(|(_, path)| path.to_string())
        .with_context(|| format!("process {pid} has no cgroup v1 cpu controller"))?;
    Ok(format!(
        "{CPU_CGROUP_ROOT}{}/cgroup.procs",
        rel.trim_end_matches('/')
    ))
}

fn write(path: &str, value: &str) -> Result<()> {
    fs::write(path, value).with_context(|| format!("writing {value} to {path}"))
}

pub(super) fn starve(ctx: &mut Install, pid: u32, percent: u8) -> Result<()> {
    if !Path::new(CPU_CGROUP_ROOT).join("cpu.cfs_quota_us").exists() {
        bail!("cgroup v1 cpu controller not mounted at {CPU_CGROUP_ROOT}");
    }
    let original_procs = current_procs(pid)?;
    let dir = format!(
        "{CPU_CGROUP_ROOT}/rocemesh-testbed-{}-f{}",
        ctx.fabric.spec().prefix,
        ctx.id
    );
    fs::create_dir_all(&dir).with_context(|| format!("creating {dir}"))?;
    ctx.undo.push(Undo::Cgroup {
        dir: dir.clone(),
        pid,
        original_procs,
    });
    write(&format!("{dir}/cpu.cfs_period_us"), &PERIOD_US.to_string())?;
    write(
        &format!("{dir}/cpu.cfs_quota_us"),
        &(PERIOD_US / 100 * u32::from(percent)).to_string(),
    )?;
    write(&format!("{dir}/cgroup.procs"), &pid.to_string())
}

/// Moves every process of `dir` (the starved one and any children) back, then removes `dir`.
pub(super) fn release(dir: &str, pid: u32, original_procs: &str) -> Result<()> {
    let procs = fs::read_to_string(format!("{dir}/cgroup.procs")).unwrap_or_default();
    for p in procs.lines().filter(|l| !l.is_empty()) {
        // A process that exited meanwhile cannot be moved; that is fine.
        if write(original_procs, p).is_err() {
            tracing::debug!(pid, "process {p} left the cgroup before release");
        }
    }
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing cgroup {dir}")),
    }
}
