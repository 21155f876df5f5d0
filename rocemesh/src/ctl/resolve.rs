//! Finding RNICs and tasks the way operators name them.

use super::Client;
use anyhow::{Result, bail};
use rocemesh_proto::api::{RnicInfo, TaskInfo};
use std::net::IpAddr;

/// The registry's RNICs.
pub(super) fn rnics(client: &Client) -> Result<Vec<RnicInfo>> {
    client.get("/rnics")
}

/// The RNIC named by id, `host/ifname` or IP address.
pub(super) fn rnic<'a>(all: &'a [RnicInfo], spec: &str) -> Result<&'a RnicInfo> {
    let ip: Option<IpAddr> = spec.parse().ok();
    let id: Option<u32> = spec.parse().ok();
    let found = all.iter().find(|r| {
        Some(r.id) == id || Some(r.ip) == ip || format!("{}/{}", r.host, r.ifname) == spec
    });
    match found {
        Some(r) => Ok(r),
        None => bail!("no RNIC {spec:?} (give an id, host/ifname or IP address)"),
    }
}

/// `host/ifname` of an RNIC: how problems name it.
pub(super) fn rnic_name(r: &RnicInfo) -> String {
    format!("{}/{}", r.host, r.ifname)
}

/// The task named by id or name.
pub(super) fn task(client: &Client, spec: &str) -> Result<TaskInfo> {
    let tasks: Vec<TaskInfo> = client.get("/tasks")?;
    let id: Option<u32> = spec.parse().ok();
    match tasks
        .into_iter()
        .find(|t| Some(t.id) == id || t.name == spec)
    {
        Some(t) => Ok(t),
        None => bail!("no task {spec:?} (give a task id or name)"),
    }
}
