//! Checks on a task spec before anything is written: every reason is a sentence the
//! submitter can act on, returned as a 400.

use crate::registry::validate::name;
use rocemesh_proto::api::{TaskEndpoint, TaskSpec};
use std::collections::HashSet;

/// Fewest endpoints of a task: one RNIC has nothing to probe.
pub(crate) const MIN_ENDPOINTS: usize = 2;
/// Most endpoints of a task (the largest training jobs have tens of thousands of GPUs).
pub(crate) const MAX_ENDPOINTS: usize = 100_000;

/// Structural checks of a whole spec (pair-count bounds need the registry's rails).
pub(crate) fn spec(spec: &TaskSpec) -> Result<(), String> {
    name("task name", &spec.name)?;
    let n = spec.endpoints.len();
    if !(MIN_ENDPOINTS..=MAX_ENDPOINTS).contains(&n) {
        return Err(format!(
            "a task has {MIN_ENDPOINTS}..={MAX_ENDPOINTS} endpoints, got {n}"
        ));
    }
    let mut seen = HashSet::with_capacity(n);
    for (i, e) in spec.endpoints.iter().enumerate() {
        endpoint(e).map_err(|err| format!("endpoints[{i}]: {err}"))?;
        if !seen.insert((e.host.as_str(), e.rnic.as_str())) {
            return Err(format!(
                "endpoints[{i}]: duplicate endpoint {}/{}",
                e.host, e.rnic
            ));
        }
    }
    Ok(())
}

fn endpoint(e: &TaskEndpoint) -> Result<(), String> {
    name("host", &e.host)?;
    name("rnic", &e.rnic)?;
    if let Some(ns) = &e.namespace {
        name("namespace", ns)?;
    }
    if let Some(pod) = &e.pod {
        name("pod", pod)?;
    }
    if let Some(rail) = e.rail
        && rail > u32::from(u16::MAX)
    {
        return Err(format!("rail {rail} exceeds {}", u16::MAX));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(host: &str, rnic: &str) -> TaskEndpoint {
        TaskEndpoint::new(host, rnic)
    }

    #[test]
    fn accepts_a_normal_task_and_refuses_each_bad_field() {
        let ok = TaskSpec {
            name: "llama-70b".into(),
            endpoints: vec![ep("h1", "mlx5_0"), ep("h2", "mlx5_0")],
        };
        spec(&ok).unwrap();
        let with = |f: fn(&mut TaskSpec)| {
            let mut s = ok.clone();
            f(&mut s);
            s
        };
        let cases = [
            (with(|s| s.name = String::new()), "task name is empty"),
            (with(|s| s.endpoints.truncate(1)), "2..=100000"),
            (
                with(|s| {
                    s.endpoints = (0..=MAX_ENDPOINTS)
                        .map(|i| ep(&format!("h{i}"), "e"))
                        .collect()
                }),
                "got 100001",
            ),
            (
                with(|s| s.endpoints[1] = ep("h1", "mlx5_0")),
                "duplicate endpoint h1/mlx5_0",
            ),
            (with(|s| s.endpoints[0].host = "a\u{0}".into()), "control"),
            (with(|s| s.endpoints[0].rnic = "x".repeat(300)), "longer"),
            (with(|s| s.endpoints[1].rail = Some(70_000)), "rail 70000"),
            (
                with(|s| s.endpoints[1].pod = Some(" p".into())),
                "whitespace",
            ),
            (
                with(|s| s.endpoints[1].namespace = Some(String::new())),
                "namespace is empty",
            ),
        ];
        for (s, why) in cases {
            let err = spec(&s).unwrap_err();
            assert!(err.contains(why), "{why}: {err}");
        }
    }
}
