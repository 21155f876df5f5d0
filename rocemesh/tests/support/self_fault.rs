//! Shared by the self-fault tests (issue 8 item 3: faults of rocemesh itself): what counts
//! as a false alarm and how long recovery took.

use rocemesh_proto::api::Problem;
use std::time::{Duration, Instant};

/// Every problem (active or resolved) at the analyzer `url` that blames the network:
/// during a fault of rocemesh itself each one is a false alarm.
pub(crate) fn network_problems(url: &str) -> Vec<Problem> {
    let all: Vec<Problem> = super::get_json(&format!("{url}/api/v1/problems?state=all&limit=1000"));
    all.into_iter().filter(|p| p.network).collect()
}

/// Asserts the analyzer at `url` raised no network problem, naming `when` on failure.
pub(crate) fn assert_no_false_alarm(url: &str, when: &str) {
    let alarms = network_problems(url);
    assert!(alarms.is_empty(), "false alarm {when}: {alarms:#?}");
}

/// `GET url` status and body text, whatever the status (a refused connection is `None`).
pub(crate) fn status_of(url: &str) -> Option<(u16, String)> {
    let mut resp = ureq::get(url)
        .config()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .call()
        .ok()?;
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    Some((resp.status().as_u16(), text))
}

/// Polls `url/readyz` until it answers 200; returns how long that took from `since`.
pub(crate) fn wait_ready_again(url: &str, since: Instant, timeout: Duration) -> Duration {
    super::wait_for("/readyz to answer 200 again", timeout, || {
        matches!(status_of(&format!("{url}/readyz")), Some((200, _))).then_some(())
    });
    since.elapsed()
}

/// The value of one series (`name{labels}` exactly as exposed, counters with `_total`)
/// in a Prometheus text exposition.
pub(crate) fn metric(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// An agent's own `/metrics`, read from its `--metrics-listen` address.
pub(crate) fn agent_metrics(addr: &str) -> String {
    match status_of(&format!("http://{addr}/metrics")) {
        Some((200, text)) => text,
        other => panic!("agent metrics at {addr}: {other:?}"),
    }
}

/// Registers host `host` with one RNIC at `ip` (a database write on the controller) and
/// returns the status and body of the reply, whatever the status.
pub(crate) fn register_host(url: &str, host: &str, ip: &str) -> (u16, String) {
    let body = serde_json::json!({
        "host": host,
        "epoch": 1,
        "rnics": [{"ifname": "r1", "ip": ip, "qpn": 7, "port": 4791}],
    });
    let mut resp = ureq::post(&format!("{url}/api/v1/agents/register"))
        .config()
        .http_status_as_error(false)
        .build()
        .send_json(&body)
        .expect("the server answers");
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (resp.status().as_u16(), text)
}

/// Cluster SLA periods the analyzer at `url` stored from `from_ms` on, oldest first.
pub(crate) fn cluster_periods(url: &str, from_ms: i64) -> Vec<rocemesh_proto::api::SlaRow> {
    let mut rows: Vec<rocemesh_proto::api::SlaRow> = super::get_json(&format!(
        "{url}/api/v1/sla?scope=cluster&from_ms={from_ms}&limit=1000"
    ));
    rows.sort_by_key(|r| r.period_start_ms);
    rows
}

/// Starts two loopback agents (`{name}-1` under ToR `tor-a` at `{net}.1.x`, `{name}-2`
/// under `tor-b` at `{net}.2.x`) against `url` and waits until two SLA periods are stored;
/// returns them with the time (ms) they were started.
pub(crate) fn two_agents_storing(url: &str, name: &str, net: &str) -> (Vec<super::Proc>, i64) {
    let agents = [(1, "tor-a"), (2, "tor-b")]
        .iter()
        .map(|&(h, tor)| {
            let mut cmd =
                super::loopback_agent(url, &format!("{name}-{h}"), &format!("{net}.{h}"), tor);
            super::Proc(cmd.spawn().expect("spawn agent"))
        })
        .collect();
    let start_ms = rocemesh_proto::now_unix_ms();
    super::wait_for("two stored SLA periods", Duration::from_secs(30), || {
        (cluster_periods(url, start_ms).len() >= 2).then_some(())
    });
    (agents, start_ms)
}
