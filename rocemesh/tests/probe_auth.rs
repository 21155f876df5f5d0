//! Probe authentication end to end: a real server process with auth tokens hands the
//! cluster key only to agent callers, two real agent processes probe each other with
//! tagged packets, and a stranger's probes (untagged, forged, a valid probe replayed from
//! other addresses or ports or after its window, or a flood of them) get no answer or a
//! bounded one, never more bytes than they carried.

mod support;

use rocemesh_proto::api::{Pinglist, ProbeAuth, RegisterResponse, RnicInfo};
use rocemesh_proto::packet::Wire;
use rocemesh_proto::probe_auth::{Flow, Keyring};
use rocemesh_proto::{Packet, PacketKind, ProbeClass};
use std::net::UdpSocket;
use std::time::{Duration, Instant};
use support::{Proc, loopback_agent, scratch_dir, start_sqlite_server, wait_for};

const ADMIN: &str = "admin-token-3f7a1c9e5b2d4068";
const READ: &str = "read-token-9d2e6b1a7c4f3085";
const AGENT: &str = "agent-token-6a1f8c3e2d9b7054";
/// The stranger's address (agents answer on their port there).
const STRANGER: &str = "127.97.9.9";

fn call(method: &str, url: &str, token: Option<&str>, body: Option<&[u8]>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(url)
        .header("Content-Type", "application/json");
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let mut resp = agent
        .run(req.body(body.unwrap_or_default().to_vec()).unwrap())
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (resp.status().as_u16(), text)
}

/// One counter of an agent's `/metrics` (0 when absent or the agent is not up yet).
fn metric(metrics_url: &str, series: &str) -> f64 {
    let text = ureq::get(metrics_url)
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Datagrams that arrive until the socket stays quiet for its read timeout.
fn answers(sock: &UdpSocket) -> Vec<Packet> {
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    while let Ok((n, _)) = sock.recv_from(&mut buf) {
        out.extend(Packet::decode(&buf[..n]).ok());
    }
    out
}

#[test]
fn keys_reach_only_agents_and_strangers_get_no_answers() {
    let dir = scratch_dir("probe-auth");
    let (_server, url) = start_sqlite_server(
        &dir,
        &format!(
            "[controller]\nupload_period = \"500ms\"\npinglist_poll = \"500ms\"\n\
             probe_tag_window = \"3s\"\n\
             [auth]\ntokens = [{{ role = \"admin\", token = \"{ADMIN}\" }}, {{ role = \"read\", token = \"{READ}\" }}, {{ role = \"agent\", token = \"{AGENT}\" }}]\n"
        ),
    );
    let api = |p: &str| format!("{url}/api/v1{p}");
    let reg = br#"{"host":"pa-probe","epoch":1,"rnics":[{"ifname":"x","ip":"127.97.9.8","qpn":5,"port":4792,"tor":"pa-elsewhere"}]}"#;

    // No token: refused, no key in the answer. A read token may not see pinglists.
    let (s, body) = call("POST", &api("/agents/register"), None, Some(reg));
    assert_eq!(s, 401);
    assert!(!body.contains("probe_auth"), "{body}");
    let (s, body) = call("POST", &api("/agents/register"), Some(AGENT), Some(reg));
    assert_eq!(s, 200, "{body}");
    let fake: RegisterResponse = serde_json::from_str(&body).unwrap();
    let auth: ProbeAuth = fake.probe_auth.clone().expect("keys for an agent");
    assert!(auth.sign_key.is_some() && !auth.keys.is_empty(), "{auth:?}");
    let pinglist = api(&format!("/pinglists/{}", fake.host_id));
    assert_eq!(call("GET", &pinglist, Some(READ), None).0, 403);
    let (s, body) = call("GET", &pinglist, Some(AGENT), None);
    assert_eq!(s, 200);
    let list: Pinglist = serde_json::from_str(&body).unwrap();
    assert_eq!(list.probe_auth.as_ref(), Some(&auth));
    let ring = Keyring::from_api(&auth)
        .unwrap()
        .expect("required by default");

    // Two agents under one ToR probe each other with tagged packets.
    let agents: Vec<(Proc, String)> = [(1, "pa-a"), (2, "pa-b")]
        .into_iter()
        .map(|(n, host)| {
            let metrics = format!("127.97.{n}.9:9464");
            let mut cmd = loopback_agent(&url, host, &format!("127.97.{n}"), "pa-t0");
            cmd.env("ROCEMESH_TOKEN", AGENT)
                .args(["--metrics-listen", &metrics])
                .stderr(std::process::Stdio::null());
            (
                Proc(cmd.spawn().unwrap()),
                format!("http://{metrics}/metrics"),
            )
        })
        .collect();
    for (_, m) in &agents {
        wait_for("tagged probes answered", Duration::from_secs(30), || {
            (metric(m, "rocemesh_agent_probe_results_total{status=\"ok\"}") >= 20.0).then_some(())
        });
    }

    // A stranger aims at pa-a's r1 with the right QPN: untagged and forged probes get
    // nothing; the same socket with the cluster key is answered.
    let target = wait_for("pa-a's RNIC", Duration::from_secs(10), || {
        let (_, body) = call("GET", &api("/rnics/by-ip/127.97.1.1"), Some(ADMIN), None);
        serde_json::from_str::<RnicInfo>(&body).ok()
    });
    let sock = UdpSocket::bind((STRANGER, target.port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let dest = (target.ip, target.port);
    let probe = |seq| Packet::probe(ProbeClass::TorMesh, seq, 0, 0x77, target.id, target.qpn, 1);
    let flow = Flow {
        src: STRANGER.parse().unwrap(),
        src_port: target.port,
        dst: target.ip,
        dst_port: target.port,
    };
    let now_ms = || rocemesh_proto::now_unix_ns() / 1_000_000;
    let seal = |seq| ring.seal(&probe(seq), &flow, now_ms()).as_bytes().to_vec();
    let forged = Keyring::new(ring.sign_id(), &[(ring.sign_id(), [0x42; 32])]).unwrap();
    sock.send_to(Wire::new(&probe(1)).as_bytes(), dest).unwrap();
    sock.send_to(forged.seal(&probe(2), &flow, now_ms()).as_bytes(), dest)
        .unwrap();
    assert!(answers(&sock).is_empty(), "a stranger was answered");
    let m = &agents[0].1;
    // "No answer" does not mean the agent has handled the datagram yet: poll its counters.
    let rejected_at_least = |reason: &str, n: f64| {
        let series = format!("rocemesh_agent_probes_rejected_total{{reason=\"{reason}\"}}");
        wait_for(&format!("{series} >= {n}"), Duration::from_secs(30), || {
            (metric(m, &series) >= n).then_some(())
        })
    };
    rejected_at_least("untagged", 1.0);
    rejected_at_least("bad_tag", 1.0);
    // A valid probe of the stranger's flow (what a member on that flow sends, as a
    // capture would hold it) is answered there, and only there, and only in its window.
    let captured = seal(3);
    sock.send_to(&captured, dest).unwrap();
    let got = answers(&sock);
    assert_eq!(got.len(), 2, "a tagged probe gets ACK1 + ACK2: {got:?}");
    let elsewhere = UdpSocket::bind(("127.97.9.10", target.port)).unwrap();
    elsewhere
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let other_port = UdpSocket::bind((STRANGER, 0)).unwrap();
    for (from, answers_at) in [(&elsewhere, &elsewhere), (&other_port, &sock)] {
        from.send_to(&captured, dest).unwrap();
        assert!(
            answers(answers_at).is_empty(),
            "a replay from {:?} was answered",
            from.local_addr()
        );
    }
    rejected_at_least("bad_tag", 3.0);
    std::thread::sleep(Duration::from_millis(3_300));
    sock.send_to(&captured, dest).unwrap();
    assert!(
        answers(&sock).is_empty(),
        "a replay after its window was answered"
    );
    rejected_at_least("stale", 1.0);

    // A flood of valid (replayed) probes from one source: at most the bucket plus its refill.
    let sent = 4_000u32;
    let t0 = Instant::now();
    let mut sent_bytes = 0;
    for seq in 0..sent {
        sent_bytes += sock.send_to(&seal(10 + seq), dest).unwrap();
        if seq % 25 == 24 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let got = answers(&sock);
    // Up to the last answer (read until quiet): the agent may still be working through the
    // flood after the sender is done, and its bucket refills meanwhile.
    let elapsed = t0.elapsed().as_secs_f64();
    let ack1 = got.iter().filter(|p| p.kind == PacketKind::Ack1).count() as f64;
    // Every answer is a 64-byte packet; every probe was 256 bytes.
    let answered_bytes = got.len() * rocemesh_proto::packet::PACKET_LEN;
    eprintln!(
        "reflection: {sent_bytes} B sent, {answered_bytes} B answered, ratio {:.3}",
        answered_bytes as f64 / sent_bytes as f64
    );
    assert!(answered_bytes <= sent_bytes);
    let bound = f64::from(auth.source_burst) + auth.source_pps * elapsed;
    eprintln!(
        "flood: {sent} probes in {elapsed:.3} s, {ack1} answered (bound {bound:.0}: burst {} + {} pps)",
        auth.source_burst, auth.source_pps
    );
    assert!(
        ack1 <= bound && ack1 < f64::from(sent),
        "{ack1} answers, bound {bound}"
    );
    rejected_at_least("rate_limited", 1.0);
    // The agents' own probing never tripped the guard.
    for (_, m) in &agents {
        for reason in ["bad_tag", "unknown_key", "rate_limited"] {
            if m == &agents[0].1 && reason != "unknown_key" {
                continue;
            }
            let series = format!("rocemesh_agent_probes_rejected_total{{reason=\"{reason}\"}}");
            assert_eq!(metric(m, &series), 0.0, "{m} {reason}");
        }
    }
    drop(agents);
    std::fs::remove_dir_all(&dir).ok();
}
