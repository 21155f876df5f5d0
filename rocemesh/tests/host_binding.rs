//! Result batches are bound to their sender: with auth on, a batch counts for the host its
//! header names only when the caller presents that host's upload key. The attack: an
//! agent-token holder forges empty batches naming another host's id, epoch and the next
//! sequence numbers, which used to fill that host's de-duplication window so its real
//! batches were dropped as retries. Real server and agent processes.

mod support;

use rocemesh_proto::api::{HostInfo, RegisterResponse};
use rocemesh_proto::batch::{BatchHeader, CONTENT_TYPE, encode_batch};
use rocemesh_proto::host_key;
use std::time::Duration;
use support::{Proc, loopback_agent, scratch_dir, start_sqlite_server, wait_for};

const ADMIN: &str = "admin-token-0b7e2c4d9a51f386";
const AGENT: &str = "agent-token-6f2a9d0c4e83b175";

fn call(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = agent
        .run(req.body(body.to_vec()).unwrap())
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (resp.status().as_u16(), text)
}

fn stats(url: &str) -> serde_json::Value {
    let (s, body) = call(
        "GET",
        &format!("{url}/api/v1/ingest/stats"),
        &[("Authorization", &format!("Bearer {ADMIN}"))],
        b"",
    );
    assert_eq!(s, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn host_stats(v: &serde_json::Value, host_id: u32) -> Option<serde_json::Value> {
    v["hosts"]
        .as_array()?
        .iter()
        .find(|h| h["host_id"].as_u64() == Some(u64::from(host_id)))
        .cloned()
}

#[test]
fn forged_batches_for_another_host_are_refused_and_counted() {
    let dir = scratch_dir("host-binding");
    let (_server, url) = start_sqlite_server(
        &dir,
        &format!(
            "[controller]\nupload_period = \"300ms\"\npinglist_poll = \"500ms\"\n\
             [auth]\ntokens = [{{ role = \"admin\", token = \"{ADMIN}\" }}, {{ role = \"agent\", token = \"{AGENT}\" }}]\n"
        ),
    );
    let mut victim = loopback_agent(&url, "bind-victim", "127.92.1", "bind-t0");
    victim.env("ROCEMESH_TOKEN", AGENT);
    let _victim = Proc(victim.spawn().unwrap());
    let admin = format!("Bearer {ADMIN}");
    let agent_auth = format!("Bearer {AGENT}");
    let victim_host = wait_for("the victim to register", Duration::from_secs(30), || {
        let (_, body) = call(
            "GET",
            &format!("{url}/api/v1/hosts"),
            &[("Authorization", &admin)],
            b"",
        );
        let hosts: Vec<HostInfo> = serde_json::from_str(&body).ok()?;
        hosts.into_iter().find(|h| h.host == "bind-victim")
    });
    wait_for("the victim's uploads", Duration::from_secs(30), || {
        host_stats(&stats(&url), victim_host.id)
            .filter(|h| h["epoch"].as_u64() == Some(u64::from(victim_host.epoch)))
    });

    // The attacker holds an agent token and registers a host of its own: it has a key,
    // but not the victim's.
    let reg = br#"{"host":"bind-attacker","epoch":1,"rnics":[{"ifname":"r1","ip":"127.92.3.1","qpn":1,"port":4791,"tor":"bind-t0"}]}"#;
    let (s, body) = call(
        "POST",
        &format!("{url}/api/v1/agents/register"),
        &[
            ("Authorization", &agent_auth),
            ("Content-Type", "application/json"),
        ],
        reg,
    );
    assert_eq!(s, 200, "{body}");
    let attacker: RegisterResponse = serde_json::from_str(&body).unwrap();
    let own_key = attacker
        .upload_key
        .expect("a key is issued at registration")
        .0;
    assert_eq!(own_key.len(), host_key::KEY_HEX_LEN);

    let before = stats(&url);
    let forged = |seq: u64, key: Option<&str>| {
        let body = encode_batch(
            BatchHeader {
                host_id: victim_host.id,
                epoch: victim_host.epoch,
                batch_seq: seq,
                dropped: 0,
            },
            &[],
        );
        let mut headers = vec![
            ("Authorization", agent_auth.as_str()),
            ("Content-Type", CONTENT_TYPE),
        ];
        if let Some(k) = key {
            headers.push((host_key::HEADER, k));
        }
        call("POST", &format!("{url}/api/v1/results"), &headers, &body)
    };
    // 168 forged batches as in the report, without a key and with the attacker's own.
    let mut refused = 0;
    for seq in 1..=168u64 {
        let key = if seq % 2 == 0 {
            Some(own_key.as_str())
        } else {
            None
        };
        let (s, body) = forged(seq, key);
        assert_eq!(s, 403, "seq {seq}: {body}");
        assert!(body.contains(&format!("host {}", victim_host.id)), "{body}");
        refused += 1;
    }
    let after = stats(&url);
    assert_eq!(
        after["rejected_batches"]["wrong_host"].as_u64().unwrap()
            - before["rejected_batches"]["wrong_host"].as_u64().unwrap(),
        refused,
        "every forged batch counted"
    );
    let (_, metrics) = call("GET", &format!("{url}/metrics"), &[], b"");
    assert!(
        metrics.contains(&format!(
            "rocemesh_ingest_rejected_batches_total{{reason=\"wrong_host\"}} {refused}"
        )),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("rejected_batches"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The victim's next real batches (whose numbers the forgeries covered) all count:
    // none is taken for a retry.
    let batches0 = after["batches"].as_u64().unwrap();
    wait_for("three more victim batches", Duration::from_secs(30), || {
        (stats(&url)["batches"].as_u64()? >= batches0 + 3).then_some(())
    });
    let end = stats(&url);
    assert_eq!(
        end["duplicate_batches"].as_u64(),
        before["duplicate_batches"].as_u64(),
        "no real batch was dropped as a duplicate: {end}"
    );
    // A batch with the right key is taken (what the victim's agent does all along).
    assert!(host_stats(&end, victim_host.id).is_some());
    std::fs::remove_dir_all(&dir).ok();
}

/// An agent token that names its hosts registers those only, so its holder never gets the
/// upload key of another host; a token without `hosts` stays usable by any agent.
#[test]
fn a_host_scoped_agent_token_registers_only_its_hosts() {
    const SCOPED: &str = "agent-token-scoped-71c3e09b2d";
    let dir = scratch_dir("host-scope");
    let (_server, url) = start_sqlite_server(
        &dir,
        &format!(
            "[auth]\ntokens = [{{ role = \"admin\", token = \"{ADMIN}\" }}, \
             {{ role = \"agent\", token = \"{SCOPED}\", hosts = [\"gpu-a-*\"] }}, \
             {{ role = \"agent\", token = \"{AGENT}\" }}]\n"
        ),
    );
    let register = |token: &str, host: &str, ip: &str| {
        let body = serde_json::json!({"host": host, "epoch": 1, "rnics": [
            {"ifname": "mlx5_0", "ip": ip, "qpn": 100, "port": 4791}
        ]});
        call(
            "POST",
            &format!("{url}/api/v1/agents/register"),
            &[
                ("Authorization", &format!("Bearer {token}")),
                ("content-type", "application/json"),
            ],
            body.to_string().as_bytes(),
        )
    };
    let (s, body) = register(SCOPED, "gpu-a-7", "10.77.0.1");
    assert_eq!(s, 200, "{body}");
    let reg: RegisterResponse = serde_json::from_str(&body).unwrap();
    assert_eq!(reg.rnics.len(), 1);
    let (s, body) = register(SCOPED, "gpu-b-1", "10.77.0.2");
    assert_eq!(s, 403, "{body}");
    assert!(body.contains("gpu-b-1"), "{body}");
    // Nothing was stored for the refused name; the unscoped token still registers it.
    let hosts = || -> Vec<String> {
        let (s, body) = call(
            "GET",
            &format!("{url}/api/v1/hosts"),
            &[("Authorization", &format!("Bearer {ADMIN}"))],
            b"",
        );
        assert_eq!(s, 200, "{body}");
        let hosts: Vec<HostInfo> = serde_json::from_str(&body).unwrap();
        hosts.into_iter().map(|h| h.host).collect()
    };
    assert_eq!(hosts(), ["gpu-a-7"]);
    let (s, body) = register(AGENT, "gpu-b-1", "10.77.0.2");
    assert_eq!(s, 200, "{body}");
    // A malformed registration reaches the handler and gets its error, not a pass.
    let (s, body) = call(
        "POST",
        &format!("{url}/api/v1/agents/register"),
        &[
            ("Authorization", &format!("Bearer {SCOPED}")),
            ("content-type", "application/json"),
        ],
        b"{\"host\": 5}",
    );
    assert!((400..500).contains(&s) && s != 403, "{s} {body}");
    assert_eq!(hosts().len(), 2);
}
