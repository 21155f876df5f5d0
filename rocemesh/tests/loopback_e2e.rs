//! End to end on loopback: a real server process, three real agent processes, and a
//! tee between agents and analyzer that decodes every uploaded batch, so the test sees
//! each probe result exactly as the analyzer does.

mod support;

use axum::{Router, body::Bytes, extract::State, http::StatusCode, routing::post};
use rocemesh_proto::api::{HostInfo, Pinglist, RnicInfo, SlaRow};
use rocemesh_proto::batch::decode_batch;
use rocemesh_proto::{ProbeClass, ProbeResult, ProbeStatus, TimestampSource};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{
    Proc, get_json, loopback_agent, scratch_dir, serve_in_background, start_sqlite_server, wait_for,
};

type Seen = Arc<Mutex<Vec<ProbeResult>>>;

/// Forwards uploads to the real analyzer and keeps a decoded copy.
fn start_tee(analyzer: String, seen: Seen) -> String {
    async fn upload(
        State((analyzer, seen)): State<(String, Seen)>,
        body: Bytes,
    ) -> (StatusCode, String) {
        if let Ok(batch) = decode_batch(&body) {
            seen.lock().unwrap().extend(batch.records());
        }
        let forwarded = tokio::task::spawn_blocking(move || {
            ureq::post(&format!("{analyzer}/api/v1/results"))
                .header("content-type", rocemesh_proto::batch::CONTENT_TYPE)
                .config()
                .http_status_as_error(false)
                .build()
                .send(&body[..])
                .map(|mut r| {
                    (
                        r.status().as_u16(),
                        r.body_mut().read_to_string().unwrap_or_default(),
                    )
                })
        })
        .await
        .unwrap();
        match forwarded {
            Ok((status, text)) => (StatusCode::from_u16(status).unwrap(), text),
            Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()),
        }
    }
    serve_in_background(
        Router::new()
            .route("/api/v1/results", post(upload))
            .with_state((analyzer, seen)),
    )
}

fn start_agent(controller: &str, tee: &str, host: u8, tor: &str) -> Proc {
    let mut cmd = loopback_agent(
        controller,
        &format!("e2e-host-{host}"),
        &format!("127.88.{host}"),
        tor,
    );
    Proc(cmd.args(["--analyzer", tee]).spawn().expect("spawn agent"))
}

fn now_ns() -> u64 {
    rocemesh_proto::now_unix_ns()
}

fn in_window(seen: &Seen, from_ns: u64, to_ns: u64) -> Vec<ProbeResult> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|r| r.send_unix_ns >= from_ns && r.send_unix_ns < to_ns)
        .copied()
        .collect()
}

#[test]
fn server_and_three_agents_probe_measure_and_notice_a_dead_agent() {
    let dir = scratch_dir("e2e");
    let (_server, url) = start_sqlite_server(
        &dir,
        "[controller]\nupload_period = \"1s\"\npinglist_poll = \"1s\"\n[analyzer]\nperiod = \"2s\"\ngrace = \"1500ms\"\n",
    );
    let seen: Seen = Arc::default();
    let tee = start_tee(url.clone(), seen.clone());
    let mut agents: Vec<Proc> = [(1, "tor-a"), (2, "tor-a"), (3, "tor-b")]
        .iter()
        .map(|&(h, t)| start_agent(&url, &tee, h, t))
        .collect();

    let hosts: Vec<HostInfo> = wait_for("3 registered hosts", Duration::from_secs(20), || {
        let h: Vec<HostInfo> = get_json(&format!("{url}/api/v1/hosts"));
        (h.len() == 3).then_some(h)
    });
    let rnics: Vec<RnicInfo> = get_json(&format!("{url}/api/v1/rnics"));
    assert_eq!(rnics.len(), 6);

    // Expected rate of every (prober, target, src port, class) from the served pinglists.
    let mut expected: HashMap<(u32, u32, u16, ProbeClass), f64> = HashMap::new();
    for h in &hosts {
        let pl: Pinglist = get_json(&format!("{url}/api/v1/pinglists/{}", h.id));
        for r in &pl.rnics {
            for list in &r.lists {
                for e in &list.entries {
                    *expected
                        .entry((r.rnic_id, e.rnic_id, e.src_port, list.class))
                        .or_default() += list.pps / list.entries.len() as f64;
                }
            }
        }
    }
    assert!(expected.keys().any(|k| k.3 == ProbeClass::TorMesh));
    assert!(
        expected.keys().any(|k| k.3 == ProbeClass::InterTor),
        "two ToRs must get inter-ToR lists"
    );

    // Start the window once every pinglist entry has been probed (each agent fetched its
    // lists), and read it once every agent has uploaded results sent after its end.
    let keys_seen = |since: u64| -> std::collections::HashSet<(u32, u32, u16, ProbeClass)> {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|r| r.send_unix_ns >= since)
            .map(|r| (r.prober_rnic, r.target_rnic, r.src_port, r.class))
            .collect()
    };
    let listed = now_ns();
    wait_for(
        "every pinglist entry probed",
        Duration::from_secs(60),
        || {
            let got = keys_seen(listed);
            expected.keys().all(|k| got.contains(k)).then_some(())
        },
    );
    // Results are uploaded in the order they complete, and a probe completes within its
    // 500 ms timeout: once every prober has uploaded a result sent a second after `t`,
    // every result of a probe sent before `t` is in.
    let uploaded_past = |t: u64, probers: &[u32]| {
        wait_for("uploads past the window", Duration::from_secs(60), || {
            let got = seen
                .lock()
                .unwrap()
                .iter()
                .filter(|r| r.send_unix_ns > t + 1_000_000_000)
                .map(|r| r.prober_rnic)
                .collect::<std::collections::HashSet<_>>();
            probers.iter().all(|p| got.contains(p)).then_some(())
        })
    };
    let all_probers: Vec<u32> = expected.keys().map(|k| k.0).collect();
    let t0 = now_ns();
    std::thread::sleep(Duration::from_secs(8));
    let t1 = now_ns();
    uploaded_past(t1, &all_probers);
    let window = in_window(&seen, t0, t1);
    let secs = (t1 - t0) as f64 / 1e9;
    let mut counts: HashMap<(u32, u32, u16, ProbeClass), f64> = HashMap::new();
    for r in &window {
        *counts
            .entry((r.prober_rnic, r.target_rnic, r.src_port, r.class))
            .or_default() += 1.0;
    }
    // Within 20 % of the listed rate, or two probes where that is less (a probe more or
    // less at each end of the window is scheduling, not a wrong rate).
    for (key, rate) in &expected {
        let got = counts.get(key).copied().unwrap_or(0.0);
        let want = rate * secs;
        assert!(
            (got - want).abs() <= (0.2 * want).max(2.0),
            "{key:?}: {got} probes in {secs:.1} s, pinglist rate {rate:.2}/s"
        );
    }
    let ok: Vec<_> = window
        .iter()
        .filter(|r| r.status == ProbeStatus::Ok)
        .collect();
    assert!(
        ok.len() as f64 >= 0.99 * window.len() as f64,
        "{} of {} ok",
        ok.len(),
        window.len()
    );
    for r in &ok {
        assert_eq!(r.ts_source, TimestampSource::Software, "{r:?}");
        assert!(
            r.network_rtt_ns > 0 && r.network_rtt_ns < r.app_rtt_ns,
            "kernel RTT not inside app RTT: {r:?}"
        );
    }

    // The analyzer's own figures agree: kernel RTT below application RTT.
    let cluster: Vec<SlaRow> = wait_for("cluster SLA rows", Duration::from_secs(10), || {
        let rows: Vec<SlaRow> = get_json(&format!("{url}/api/v1/sla?scope=cluster"));
        rows.iter().any(|r| r.probes > 0).then_some(rows)
    });
    let row = cluster.iter().find(|r| r.probes > 0).unwrap();
    assert!(
        row.network_rtt_ns.p50.unwrap() < row.app_rtt_ns.p50.unwrap(),
        "{row:?}"
    );

    // Kill host 3's agent: every probe to its RNICs times out.
    let host3 = hosts
        .iter()
        .find(|h| h.host == "e2e-host-3")
        .unwrap()
        .clone();
    let host3_rnics: Vec<u32> = rnics
        .iter()
        .filter(|r| r.host_id == host3.id)
        .map(|r| r.id)
        .collect();
    let to_host3: Vec<u32> = expected
        .keys()
        .filter(|k| host3_rnics.contains(&k.1) && !host3_rnics.contains(&k.0))
        .map(|k| k.0)
        .collect();
    agents[2].kill();
    std::thread::sleep(Duration::from_secs(1));
    let k0 = now_ns();
    std::thread::sleep(Duration::from_secs(4));
    let k1 = now_ns();
    uploaded_past(k1, &to_host3);
    let to_dead: Vec<_> = in_window(&seen, k0, k1)
        .into_iter()
        .filter(|r| host3_rnics.contains(&r.target_rnic))
        .collect();
    assert!(
        to_dead.len() >= 20,
        "only {} probes to the dead host",
        to_dead.len()
    );
    assert!(
        to_dead.iter().all(|r| r.status.is_timeout()),
        "a probe to a dead agent succeeded"
    );

    // Restart it: new epoch, same RNIC ids, probes succeed again once pinglists refresh.
    agents[2] = start_agent(&url, &tee, 3, "tor-b");
    let again: HostInfo = wait_for("re-registration", Duration::from_secs(20), || {
        let h: HostInfo = get_json(&format!("{url}/api/v1/hosts/{}", host3.id));
        (h.registrations == 2).then_some(h)
    });
    assert_ne!(again.epoch, host3.epoch, "restart must change the epoch");
    let rnics_after: Vec<RnicInfo> = get_json(&format!("{url}/api/v1/rnics"));
    let ids_after: Vec<u32> = rnics_after
        .iter()
        .filter(|r| r.host_id == host3.id)
        .map(|r| r.id)
        .collect();
    assert_eq!(
        ids_after, host3_rnics,
        "RNIC ids are stable across restarts"
    );
    // The window opens once every prober of host 3 has been answered by the new agent
    // (its pinglist refreshed with the new QPNs).
    let registered = now_ns();
    wait_for(
        "answers from the restarted agent",
        Duration::from_secs(60),
        || {
            let answered = seen
                .lock()
                .unwrap()
                .iter()
                .filter(|r| r.send_unix_ns > registered && r.status == ProbeStatus::Ok)
                .filter(|r| host3_rnics.contains(&r.target_rnic))
                .map(|r| r.prober_rnic)
                .collect::<std::collections::HashSet<_>>();
            to_host3.iter().all(|p| answered.contains(p)).then_some(())
        },
    );
    let r0 = now_ns();
    std::thread::sleep(Duration::from_secs(3));
    let r1 = now_ns();
    uploaded_past(r1, &to_host3);
    let back: Vec<_> = in_window(&seen, r0, r1)
        .into_iter()
        .filter(|r| host3_rnics.contains(&r.target_rnic))
        .collect();
    let back_ok = back.iter().filter(|r| r.status == ProbeStatus::Ok).count();
    assert!(
        back_ok as f64 >= 0.95 * back.len() as f64 && !back.is_empty(),
        "{back_ok} of {} ok after restart",
        back.len()
    );

    for a in &mut agents {
        assert!(a.terminate(), "agent did not exit cleanly on SIGTERM");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_over_http_gets_clear_errors() {
    let dir = scratch_dir("e2e-bad");
    let (_server, url) = start_sqlite_server(&dir, "");
    let post = |path: &str, ctype: &str, body: &[u8]| {
        let mut r = ureq::post(&format!("{url}{path}"))
            .header("content-type", ctype)
            .config()
            .http_status_as_error(false)
            .build()
            .send(body)
            .unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    };
    let (s, b) = post(
        "/api/v1/results",
        rocemesh_proto::batch::CONTENT_TYPE,
        b"RMB1 not really a batch at all........",
    );
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("error"), "{b}");
    let (s, b) = post(
        "/api/v1/agents/register",
        "application/json",
        b"{\"host\": \"h\", \"epoch\": ",
    );
    assert_eq!(s, 400, "{b}");
    let (s, _) = post(
        "/api/v1/agents/register",
        "application/json",
        br#"{"host":"h","epoch":1,"rnics":[]}"#,
    );
    assert_eq!(s, 400);
    let hosts: Vec<HostInfo> = get_json(&format!("{url}/api/v1/hosts"));
    assert!(hosts.is_empty(), "a refused registration stored something");
    let mut r = ureq::get(&format!("{url}/api/v1/pinglists/4242"))
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        404,
        "{}",
        r.body_mut().read_to_string().unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
