//! `rocemesh ctl` run as the real binary against a real server with data from real agent
//! processes on loopback, with auth on; and its errors (unreachable server, missing token,
//! unknown RNIC).

mod support;

use rocemesh_proto::api::{RnicInfo, SlaRow};
use std::process::{Output, Stdio};
use std::time::Duration;
use support::{Proc, bin, loopback_agent, scratch_dir, start_sqlite_server, wait_for};

const READ: &str = "ctl-read-token-7f3a91c2d5e8";
const AGENT: &str = "ctl-agent-token-2b6e04f9a1c7";

fn ctl(url: &str, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = bin();
    cmd.args(["ctl", "--server", url])
        .args(args)
        .env_remove("ROCEMESH_TOKEN");
    if let Some(t) = token {
        cmd.env("ROCEMESH_TOKEN", t);
    }
    cmd.stdin(Stdio::null()).output().expect("run rocemesh ctl")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "ctl failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[test]
fn ctl_against_a_live_server() {
    let dir = scratch_dir("ctl");
    let (_server, url) = start_sqlite_server(
        &dir,
        &format!(
            "[controller]\nupload_period = \"500ms\"\npinglist_poll = \"500ms\"\n[analyzer]\nperiod = \"1s\"\ngrace = \"500ms\"\n\
             [auth]\ntokens = [{{ role = \"read\", token = \"{READ}\" }}, {{ role = \"agent\", token = \"{AGENT}\" }}]\n"
        ),
    );
    let mut agents = Vec::new();
    for (host, tor) in [(1u8, "ctl-t0"), (2, "ctl-t1")] {
        let mut cmd = loopback_agent(
            &url,
            &format!("ctl-host-{host}"),
            &format!("127.92.{host}"),
            tor,
        );
        cmd.env("ROCEMESH_TOKEN", AGENT).stderr(Stdio::null());
        agents.push(Proc(cmd.spawn().unwrap()));
    }
    // Wait for a closed SLA period with probes, read through ctl itself.
    let status: serde_json::Value = wait_for("cluster SLA", Duration::from_secs(30), || {
        let o = ctl(&url, Some(READ), &["--json", "status"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        let sla: Vec<SlaRow> = serde_json::from_value(v["cluster_sla"].clone()).ok()?;
        (sla.first()?.probes > 0).then_some(v)
    });
    let rnics: Vec<RnicInfo> = serde_json::from_value(status["rnics"].clone()).unwrap();
    assert_eq!(rnics.len(), 4);

    let table = stdout(&ctl(&url, Some(READ), &["status"]));
    assert!(table.contains("rnics     4 up, 0 down"), "{table}");
    assert!(table.contains("hosts     2 up, 0 down"), "{table}");
    assert!(table.contains("RTT p50/p99/p99.9"), "{table}");

    let problems = stdout(&ctl(&url, Some(READ), &["problems", "--state", "all"]));
    assert!(
        problems.starts_with("no problems") || problems.starts_with("ID"),
        "{problems}"
    );
    let json = stdout(&ctl(
        &url,
        Some(READ),
        &["--json", "problems", "--priority", "P0"],
    ));
    assert!(
        serde_json::from_str::<Vec<serde_json::Value>>(&json).is_ok(),
        "{json}"
    );

    // One RNIC by host/ifname and by IP: the same registry entry.
    let by_name = stdout(&ctl(&url, Some(READ), &["rnic", "ctl-host-1/r1"]));
    let by_ip = stdout(&ctl(&url, Some(READ), &["rnic", "127.92.1.1"]));
    assert_eq!(by_name, by_ip);
    assert!(
        by_name.contains("ctl-host-1/r1") && by_name.contains("ctl-t0"),
        "{by_name}"
    );
    let src = rnics
        .iter()
        .find(|r| r.host == "ctl-host-1" && r.ifname == "r1")
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&stdout(&ctl(
        &url,
        Some(READ),
        &["--json", "rnic", &src.id.to_string()],
    )))
    .unwrap();
    assert_eq!(json["rnic"]["ip"], "127.92.1.1");

    // A path across ToRs: the ToR pair's RTT is shown.
    let path = stdout(&ctl(
        &url,
        Some(READ),
        &["path", "ctl-host-1/r1", "127.92.2.2"],
    ));
    assert!(
        path.contains("ctl-host-1/r1 (127.92.1.1, ctl-t0) -> ctl-host-2/r2"),
        "{path}"
    );
    assert!(path.contains("tor pair ctl-t0->ctl-t1"), "{path}");

    // Errors: non-zero exit and a message naming what is wrong.
    let o = ctl(&url, None, &["status"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("requires a token") && err.contains("ROCEMESH_TOKEN"),
        "{err}"
    );
    let o = ctl(&url, Some("wrong-token-000000000000"), &["status"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not accept this token"));
    let o = ctl(&url, Some(READ), &["rnic", "ctl-host-9/r1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no RNIC \"ctl-host-9/r1\""));
    let o = ctl(&url, Some(READ), &["verdict", "no-such-task"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no task"));
    drop(agents);
    let dead = "http://127.0.0.1:9";
    let o = ctl(dead, Some(READ), &["status"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot reach the rocemesh server at http://127.0.0.1:9"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
