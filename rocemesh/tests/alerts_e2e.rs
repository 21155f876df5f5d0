//! Alert webhooks end to end (issue #6 "must show"), root only: a namespace lab with real
//! agents; a link fault injected in the testbed reaches a real webhook receiver on
//! 127.0.0.1 as a signed firing alert naming the link and its priority (P2: no task
//! runs on the fabric), the server is restarted mid-incident, and after the fault clears
//! the receiver gets the resolved alert — each exactly once.

mod support;

use rocemesh_alerts::testing::TestReceiver;
use rocemesh_alerts::{Status, signature};
use rocemesh_testbed::Fault;
use std::time::{Duration, Instant};

const PREFIX: &str = "rmal";
const LINK: &str = "t0-s1";
const SECRET: &str = "e2e-webhook-secret";

/// Polls `cond` every 200 ms until it holds; panics naming `what` after `timeout`.
fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    start.elapsed()
}

/// Delivered alerts about the injected link: (status, priority, fingerprint).
fn link_alerts(rx: &TestReceiver) -> Vec<(Status, String, String)> {
    rx.delivered()
        .into_iter()
        .filter(|a| a.labels.get("component").map(String::as_str) == Some(LINK))
        .map(|a| (a.status, a.labels["priority"].clone(), a.fingerprint))
        .collect()
}

#[test]
fn link_fault_reaches_the_receiver_once_across_a_restart() {
    if !support::is_root() {
        println!("skipping alerts_e2e: needs root (network namespaces)");
        return;
    }
    let (_rt, rx, mut lab) = support::lab_with_receiver(PREFIX, 1_000, Some(SECRET));
    lab.wait_ready(Duration::from_secs(60))
        .expect("agents ready");
    std::thread::sleep(Duration::from_secs(8)); // baseline
    assert!(
        link_alerts(&rx).is_empty(),
        "alert before the fault: {:?}",
        link_alerts(&rx)
    );

    let fault = lab
        .fabric
        .apply(&Fault::LinkDown { link: LINK.into() })
        .expect("inject link down");
    let to_fire = wait_for("the firing alert", Duration::from_secs(40), || {
        !link_alerts(&rx).is_empty()
    });
    let fired = link_alerts(&rx);
    assert_eq!(fired.len(), 1, "{fired:?}");
    let (status, priority, fingerprint) = fired[0].clone();
    assert_eq!(status, Status::Firing);
    assert_eq!(
        priority, "P2",
        "no task covers the fabric: P2 (\"unknown\" = the impact loop did not assess it)"
    );
    let firing = rx
        .delivered()
        .into_iter()
        .find(|a| a.fingerprint == fingerprint)
        .expect("firing alert");
    assert_eq!(firing.labels["component_kind"], "link");
    assert_eq!(firing.labels["kind"], "link_fault");
    for req in rx.requests() {
        let sig = req.signature.as_deref().expect("signed request");
        assert!(
            signature::verify(SECRET.as_bytes(), &req.body, sig),
            "signature verifies"
        );
    }
    eprintln!("alerts_e2e: firing alert {to_fire:?} after the injection: {firing:?}");

    // Mid-incident restart: the analyzer restores the active problem; nothing is re-sent.
    let restart = Instant::now();
    lab.restart_server().expect("server restart");
    eprintln!("alerts_e2e: server restarted in {:?}", restart.elapsed());
    // Less than the analyzer's resolve_after (5 s): the restored episode is still active.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        link_alerts(&rx).len(),
        1,
        "re-sent after the restart: {:?}",
        link_alerts(&rx)
    );

    lab.fabric.clear(fault.id).expect("clear the fault");
    let to_resolve = wait_for("the resolved alert", Duration::from_secs(45), || {
        link_alerts(&rx)
            .iter()
            .any(|(s, _, _)| *s == Status::Resolved)
    });
    eprintln!("alerts_e2e: resolved alert {to_resolve:?} after the fault cleared");
    std::thread::sleep(Duration::from_secs(4)); // room for a duplicate to show up
    let all = link_alerts(&rx);
    assert_eq!(
        all,
        vec![
            (Status::Firing, "P2".to_string(), fingerprint.clone()),
            (Status::Resolved, "P2".to_string(), fingerprint)
        ],
        "exactly one firing then one resolved"
    );
    // Every other alert (if the analyzer blamed anything else) is also at most once per status.
    let mut keys = rx.delivered_keys();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(
        keys.len(),
        n,
        "a duplicate notification: {:?}",
        rx.delivered_keys()
    );
    drop(lab);
}
