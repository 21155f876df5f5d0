//! Bearer-token auth and request size limits over real HTTP: a real server process with
//! read, admin and agent tokens, and real agent processes with a wrong and a right token.

mod support;

use rocemesh_proto::api::{ErrorBody, HostInfo};
use std::io::Read;
use std::process::Stdio;
use std::time::Duration;
use support::{Proc, loopback_agent, scratch_dir, start_sqlite_server, wait_for};

const ADMIN: &str = "admin-token-8c1f2e9a77d04b1e";
const READ: &str = "read-token-5b0d93c1e2a64f7a";
const AGENT: &str = "agent-token-1e7c4a90b3d2f865";

/// One request; every status comes back as (status, body).
fn call(method: &str, url: &str, token: Option<&str>, body: Option<&[u8]>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    req = req.header("Content-Type", "application/json");
    let resp = agent.run(req.body(body.unwrap_or_default().to_vec()).unwrap());
    let mut resp = resp.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let text = resp
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .unwrap_or_default();
    (resp.status().as_u16(), text)
}

/// A POST of a `len`-byte body over a raw connection (status, body). With `send` false the
/// body is only announced, so the answer must come from the headers alone; with `send` it
/// is written from another thread, ignoring the server closing the connection early.
fn post_sized(url: &str, path: &str, token: Option<&str>, len: usize, send: bool) -> (u16, String) {
    use std::io::Write;
    let addr = url.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{auth}Content-Length: {len}\r\n\r\n"
    )
    .unwrap();
    if send {
        let mut writer = conn.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = writer.write_all(&vec![b' '; len]);
        });
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Read the head and whatever body arrives until the server closes or goes quiet.
    while let Ok(n) = conn.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let want = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_string)
                })
                .and_then(|v| v.trim().parse::<usize>().ok());
            if want.is_some_and(|w| body.len() >= w) {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

/// The `ErrorBody` reason of a refusal (it must be one).
fn reason(body: &str) -> String {
    serde_json::from_str::<ErrorBody>(body)
        .unwrap_or_else(|e| panic!("not an ErrorBody ({e}): {body}"))
        .error
}

fn start_agent(url: &str, host: &str, net: u8) -> std::process::Command {
    let mut cmd = loopback_agent(url, host, &format!("127.91.{net}"), "auth-t0");
    cmd.env_remove("ROCEMESH_TOKEN").stderr(Stdio::piped());
    cmd
}

#[test]
fn tokens_roles_limits_and_agents() {
    let dir = scratch_dir("auth-e2e");
    let agent_file = dir.join("agent.token");
    std::fs::write(&agent_file, format!("{AGENT}\n")).unwrap();
    let (_server, url) = start_sqlite_server(
        &dir,
        &format!(
            "[controller]\nupload_period = \"500ms\"\npinglist_poll = \"500ms\"\n\
             [auth]\ntokens = [{{ role = \"admin\", token = \"{ADMIN}\" }}, {{ role = \"read\", token = \"{READ}\" }}, {{ role = \"agent\", token_file = {:?} }}]\n",
            agent_file.display().to_string(),
        ),
    );
    let api = |p: &str| format!("{url}/api/v1{p}");

    // Open routes stay open.
    assert_eq!(call("GET", &format!("{url}/healthz"), None, None).0, 200);
    assert_eq!(call("GET", &api("/openapi.json"), None, None).0, 200);

    // No or unknown token: 401 with a JSON reason.
    let (s, body) = call("GET", &api("/hosts"), None, None);
    assert_eq!(s, 401);
    assert!(reason(&body).contains("missing token"), "{body}");
    let (s, body) = call("GET", &api("/hosts"), Some("nobody-knows-this-token"), None);
    assert_eq!(s, 401);
    assert!(reason(&body).contains("unknown token"), "{body}");

    // Read: GETs only.
    assert_eq!(call("GET", &api("/hosts"), Some(READ), None).0, 200);
    assert_eq!(call("GET", &api("/problems"), Some(READ), None).0, 200);
    let (s, body) = call("DELETE", &api("/hosts/1"), Some(READ), None);
    assert_eq!(s, 403, "{body}");
    assert!(
        reason(&body).contains("read token may not DELETE"),
        "{body}"
    );
    let task =
        br#"{"name":"auth-job","endpoints":[{"host":"h1","rnic":"r1"},{"host":"h2","rnic":"r1"}]}"#;
    assert_eq!(call("POST", &api("/tasks"), Some(READ), Some(task)).0, 403);

    // Agent: only what agents call.
    assert_eq!(call("GET", &api("/problems"), Some(AGENT), None).0, 403);
    assert_eq!(call("GET", &api("/hosts"), Some(AGENT), None).0, 403);
    assert_eq!(call("POST", &api("/tasks"), Some(AGENT), Some(task)).0, 403);

    // Admin: everything (the handler decides: 201, 404).
    let (s, body) = call("POST", &api("/tasks"), Some(ADMIN), Some(task));
    assert_eq!(s, 201, "{body}");
    assert_eq!(call("DELETE", &api("/hosts/999"), Some(ADMIN), None).0, 404);

    // Size limits: the register route's own 1 MiB, and the server's 16 MiB ceiling; both
    // answer 413 with an ErrorBody.
    let (s, body) = post_sized(&url, "/api/v1/agents/register", Some(ADMIN), 2 << 20, true);
    assert_eq!(s, 413, "{body}");
    reason(&body);
    let (s, body) = post_sized(&url, "/api/v1/tasks", Some(ADMIN), 17 << 20, false);
    assert_eq!(s, 413, "{body}");
    assert!(reason(&body).contains("too large"), "{body}");
    // Unauthenticated oversize bodies are refused for the token first.
    assert_eq!(
        post_sized(&url, "/api/v1/tasks", None, 17 << 20, false).0,
        401
    );

    // An agent with a wrong token is refused, clearly; it never registers.
    let mut bad = start_agent(&url, "auth-bad", 1)
        .env("ROCEMESH_TOKEN", "wrong-token-0000000000")
        .spawn()
        .unwrap();
    let mut bad_err = bad.stderr.take().unwrap();
    let mut bad = Proc(bad);
    // An agent with the right token file registers and uploads.
    let _good = Proc(
        start_agent(&url, "auth-good", 2)
            .arg("--token-file")
            .arg(&agent_file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let hosts = wait_for(
        "the good agent to register",
        Duration::from_secs(20),
        || {
            let (s, body) = call("GET", &api("/hosts"), Some(ADMIN), None);
            let hosts: Vec<HostInfo> = serde_json::from_str(&body).ok()?;
            (s == 200 && hosts.iter().any(|h| h.host == "auth-good")).then_some(hosts)
        },
    );
    wait_for("the good agent's uploads", Duration::from_secs(20), || {
        let (_, body) = call("GET", &api("/ingest/stats"), Some(READ), None);
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        (v["batches"].as_u64()? > 0).then_some(())
    });
    assert!(hosts.iter().all(|h| h.host != "auth-bad"), "{hosts:?}");
    bad.kill();
    let mut log = String::new();
    bad_err.read_to_string(&mut log).unwrap();
    assert!(
        log.contains("401") && log.contains("refused this agent's credential"),
        "{log}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
