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
const ADMIN: &str = "ctl-admin-token-90c4e1d7b3a5";

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
             [auth]\ntokens = [{{ role = \"read\", token = \"{READ}\" }}, {{ role = \"agent\", token = \"{AGENT}\" }}, {{ role = \"admin\", token = \"{ADMIN}\" }}]\n"
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

    // Source-port advice for the same pair: by name and by IP, table and JSON.
    let advice = stdout(&ctl(
        &url,
        Some(READ),
        &["advise", "ctl-host-1/r1", "127.92.2.2"],
    ));
    assert!(
        advice.starts_with("ctl-host-1/r1 -> ctl-host-2/r2\n"),
        "{advice}"
    );
    assert!(
        advice.contains("advised source ports: ") || advice.contains("no advice: "),
        "{advice}"
    );
    let json: rocemesh_analyzer::PortAdvice = serde_json::from_str(&stdout(&ctl(
        &url,
        Some(READ),
        &["--json", "advise", "ctl-host-1/r1", "ctl-host-2/r2"],
    )))
    .unwrap();
    assert_eq!(
        (json.src.as_str(), json.dst.as_str()),
        ("ctl-host-1/r1", "ctl-host-2/r2")
    );
    assert!(
        json.ports
            .iter()
            .all(|p| json.catalog.iter().any(|c| c.src_port == *p && c.advised))
    );
    let o = ctl(&url, Some(READ), &["advise", "ctl-host-1/r1", "no-such/r9"]);
    assert!(!o.status.success(), "an unknown RNIC is an error");

    // Tasks: created by an admin from flags, listed and shown with a read token, an
    // endpoint marked ready with the agent token.
    let created = stdout(&ctl(
        &url,
        Some(ADMIN),
        &[
            "tasks",
            "create",
            "--name",
            "job-1",
            "--endpoint",
            "ctl-host-1/r1",
            "--endpoint",
            "ctl-host-2/r1",
        ],
    ));
    assert!(created.starts_with("created: task job-1 (id "), "{created}");
    let list = stdout(&ctl(&url, Some(READ), &["tasks", "list"]));
    let row = list
        .lines()
        .find(|l| l.contains("job-1"))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(row.contains("preload") && row.contains("0/2"), "{list}");
    let id = created
        .split("(id ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap()
        .to_string();
    // An agent names the task by id (it may not list tasks); an admin may use the name.
    let ready = stdout(&ctl(
        &url,
        Some(AGENT),
        &["tasks", "ready", &id, "ctl-host-1/r1"],
    ));
    assert!(ready.starts_with("endpoint ready: task job-1"), "{ready}");
    let o = ctl(
        &url,
        Some(AGENT),
        &["tasks", "ready", "job-1", "ctl-host-2/r1"],
    );
    assert!(
        !o.status.success(),
        "an agent token may not look tasks up by name"
    );
    let shown: serde_json::Value = serde_json::from_str(&stdout(&ctl(
        &url,
        Some(READ),
        &["--json", "tasks", "show", "job-1"],
    )))
    .unwrap();
    let flags: Vec<(String, bool)> = shown["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e[0]["host"].as_str().unwrap().to_string(),
                e[0]["ready"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            ("ctl-host-1".to_string(), true),
            ("ctl-host-2".to_string(), false)
        ]
    );
    let show = stdout(&ctl(&url, Some(READ), &["tasks", "show", "job-1"]));
    assert!(
        show.contains("ready     1/2 endpoints") && show.contains("ctl-host-2/r1"),
        "{show}"
    );
    let o = ctl(
        &url,
        Some(READ),
        &[
            "tasks",
            "create",
            "--name",
            "job-2",
            "--endpoint",
            "ctl-host-1/r2",
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("may not POST /tasks") && err.contains("admin token"),
        "{err}"
    );

    // Human times: a span ago and RFC 3339; nonsense is refused before any request.
    let recent = stdout(&ctl(
        &url,
        Some(READ),
        &["--json", "problems", "--state", "all", "--since", "1h"],
    ));
    assert!(
        serde_json::from_str::<Vec<serde_json::Value>>(&recent).is_ok(),
        "{recent}"
    );
    let verdict = stdout(&ctl(
        &url,
        Some(READ),
        &["--json", "verdict", "job-1", "--since", "2h", "--to", "now"],
    ));
    let v: serde_json::Value = serde_json::from_str(&verdict).unwrap();
    let (from, to) = (v["from"].as_i64().unwrap(), v["to"].as_i64().unwrap());
    assert!((to - from - 7_200_000).abs() < 5_000, "{verdict}");
    // The hang/slow part: judged, or the reason it is not, on its own line.
    let text = stdout(&ctl(&url, Some(READ), &["verdict", "job-1"]));
    let line = text
        .lines()
        .find(|l| l.starts_with("health    "))
        .unwrap_or_else(|| panic!("{text}"));
    match v["health"].as_object() {
        None => assert!(line.contains("not judged: "), "{text}"),
        Some(_) => assert!(line.contains("straggler"), "{text}"),
    }
    let at = "2026-01-02T03:04:05Z";
    let v: serde_json::Value = serde_json::from_str(&stdout(&ctl(
        &url,
        Some(READ),
        &[
            "--json",
            "verdict",
            "job-1",
            "--from",
            at,
            "--to",
            "2026-01-02T06:04:05+02:00",
        ],
    )))
    .unwrap();
    assert_eq!(
        (v["from"].as_i64(), v["to"].as_i64()),
        (Some(1_767_323_045_000), Some(1_767_326_645_000))
    );
    let o = ctl(&url, Some(READ), &["problems", "--since", "yesterday"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("\"yesterday\" is not a time") && err.contains("RFC 3339"),
        "{err}"
    );

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

/// `rocemesh --help` lists every subcommand (the product's only: the lab's are in
/// `rocemesh-lab`) with a one-line description, and `ctl --help` every ctl subcommand.
#[test]
fn help_lists_every_subcommand_on_one_line() {
    for (args, names) in [
        (
            &["--help"][..],
            &["agent", "controller", "analyzer", "server", "ctl"][..],
        ),
        (
            &["ctl", "--help"][..],
            &[
                "status", "problems", "rnic", "path", "advise", "verdict", "tasks",
            ][..],
        ),
        (
            &["ctl", "tasks", "--help"][..],
            &["list", "show", "create", "ready"][..],
        ),
    ] {
        let o = bin().args(args).output().expect("run rocemesh --help");
        let help = stdout(&o);
        let section = help
            .split("Commands:\n")
            .nth(1)
            .and_then(|s| s.split("\n\n").next())
            .unwrap_or_else(|| panic!("no Commands section in {help}"));
        let listed: Vec<&str> = section
            .lines()
            .map(|l| {
                assert!(
                    l.starts_with("  ") && !l.starts_with("   "),
                    "continued description: {l:?}"
                );
                let (name, about) = l.trim().split_once(' ').unwrap_or((l.trim(), ""));
                assert!(
                    name == "help" || about.trim().len() >= 10,
                    "{name} has no description"
                );
                name
            })
            .filter(|n| *n != "help")
            .collect();
        assert_eq!(listed, names, "{args:?}:\n{help}");
    }
}
