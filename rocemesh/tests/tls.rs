//! HTTPS, credentials and input limits over real connections: a real `rocemesh server` with
//! `[tls]` (certificates generated here by rcgen), real agent and `ctl` processes, and a
//! real https client. Covers: unauthenticated and wrongly-trusting clients refused clearly,
//! mutual TLS, every API route × role from the OpenAPI document, secrets absent from debug
//! logs, and over-long strings refused with 4xx before anything is stored.

mod support;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rocemesh_proto::api::HostInfo;
use rocemesh_proto::http_client::{self, ClientTls};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use support::{Proc, bin, closed_by_peer, connect_from, loopback_agent, scratch_dir, wait_for};

const ADMIN: &str = "admin-token-tls-3f9a0c1d5e7b";
const READ: &str = "read-token-tls-81c2d4e6f0a3";
const AGENT: &str = "agent-token-tls-6b8d0f2a4c5e";
const WEBHOOK_SECRET: &str = "webhook-secret-tls-0d1e2f3a4b5c";

/// A CA and the PEM files of a server certificate for 127.0.0.1 and a client certificate
/// it signed, plus a second CA nobody should trust.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    other_ca: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    dir: &Path,
    name: &str,
    san: &str,
    issuer: &CertifiedIssuer<'_, KeyPair>,
) -> (PathBuf, PathBuf) {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![san.to_string()])
        .unwrap()
        .signed_by(&key, issuer)
        .unwrap();
    let (c, k) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

fn pki(dir: &Path) -> Pki {
    let root = ca("rocemesh test CA");
    let other = ca("someone else's CA");
    let (ca_file, other_ca) = (dir.join("ca.crt"), dir.join("other-ca.crt"));
    std::fs::write(&ca_file, root.pem()).unwrap();
    std::fs::write(&other_ca, other.pem()).unwrap();
    let (cert, key) = leaf(dir, "server", "127.0.0.1", &root);
    let (client_cert, client_key) = leaf(dir, "agent", "agent.rocemesh.test", &root);
    Pki {
        ca: ca_file,
        cert,
        key,
        client_cert,
        client_key,
        other_ca,
    }
}

/// Starts a server on `dir/server.toml` (SQLite in `dir`, port 0, then `extra`) with its
/// stdout and stderr in `dir/server.log`; returns it, its URL and the log path.
fn start_logged_server(dir: &Path, extra: &str, log_level: &str) -> (Proc, String, PathBuf) {
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"sqlite://{}\"\n{extra}",
            dir.join("rocemesh.db").display()
        ),
    )
    .unwrap();
    let log = dir.join("server.log");
    let out = std::fs::File::create(&log).unwrap();
    let child = bin()
        .env("RUST_LOG", log_level)
        .args(["server", "--config"])
        .arg(&config)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let server = Proc(child);
    let url = wait_for("the server's address", Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&log).ok()?;
        let url = text.lines().find_map(|l| l.split("listening on ").nth(1))?;
        Some(url.trim().to_string())
    });
    (server, url, log)
}

fn tls_section(p: &Pki, client_ca: bool) -> String {
    let mut s = format!(
        "[tls]\ncert_file = {:?}\nkey_file = {:?}\n",
        p.cert.display().to_string(),
        p.key.display().to_string()
    );
    if client_ca {
        s += &format!("client_ca_file = {:?}\n", p.ca.display().to_string());
    }
    s
}

const AUTH: &str = concat!(
    "[auth]\ntokens = [{ role = \"admin\", token = \"admin-token-tls-3f9a0c1d5e7b\" }, ",
    "{ role = \"read\", token = \"read-token-tls-81c2d4e6f0a3\" }, ",
    "{ role = \"agent\", token = \"agent-token-tls-6b8d0f2a4c5e\" }]\n",
);

/// A fresh directory with its PKI and an https server with the three tokens and `extra`
/// TOML (at warn level): (directory, PKI, server, URL).
fn tls_server(what: &str, extra: &str) -> (PathBuf, Pki, Proc, String) {
    let dir = scratch_dir(what);
    let p = pki(&dir);
    let (server, url, _log) = start_logged_server(
        &dir,
        &format!("{extra}{AUTH}{}", tls_section(&p, false)),
        "warn",
    );
    (dir, p, server, url)
}

/// One request with `client`: (status, body).
fn call(
    client: &ureq::Agent,
    method: &str,
    url: &str,
    token: Option<&str>,
    body: &[u8],
) -> Result<(u16, String), ureq::Error> {
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(url)
        .header("Content-Type", "application/json");
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let mut resp = client.run(req.body(body.to_vec()).unwrap())?;
    let text = resp
        .body_mut()
        .with_config()
        .limit(4 << 20)
        .read_to_string()
        .unwrap_or_default();
    Ok((resp.status().as_u16(), text))
}

fn https_client(ca: &Path) -> ureq::Agent {
    http_client::agent(Duration::from_secs(10), &ClientTls::load(Some(ca)).unwrap())
}

/// An agent process over https (`net` like 1: RNICs at 127.77.{net}.1/.2), stderr piped.
fn agent(url: &str, host: &str, net: u8, extra: &[&str]) -> std::process::Command {
    let mut cmd = loopback_agent(url, host, &format!("127.77.{net}"), "tls-t0");
    cmd.env_remove("ROCEMESH_TOKEN")
        .env_remove("ROCEMESH_CA_FILE")
        .args(extra)
        .stderr(Stdio::piped());
    cmd
}

/// Runs `cmd` until `needle` shows in its stderr (or 20 s pass); returns the stderr so far.
fn stderr_until(cmd: &mut std::process::Command, needle: &str) -> String {
    use std::io::Read;
    let mut child = cmd.spawn().unwrap();
    let mut err = child.stderr.take().unwrap();
    let mut proc = Proc(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !log.contains(needle) && std::time::Instant::now() < deadline {
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(200)) {
            log += &String::from_utf8_lossy(&chunk);
        }
    }
    proc.kill();
    log
}

fn hosts(client: &ureq::Agent, url: &str) -> Vec<HostInfo> {
    let (s, body) = call(
        client,
        "GET",
        &format!("{url}/api/v1/hosts"),
        Some(ADMIN),
        b"",
    )
    .unwrap();
    assert_eq!(s, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn https_server_refuses_untrusted_and_unauthenticated_clients() {
    let (dir, p, _server, url) = tls_server(
        "tls-e2e",
        "[controller]\nupload_period = \"500ms\"\npinglist_poll = \"500ms\"\n",
    );
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let client = https_client(&p.ca);
    assert_eq!(
        call(&client, "GET", &format!("{url}/healthz"), None, b"")
            .unwrap()
            .0,
        200
    );

    // A client trusting another CA, or only the public roots, is refused with a clear error.
    for tls in [
        ClientTls::load(Some(&p.other_ca)).unwrap(),
        ClientTls::default(),
    ] {
        let err = call(
            &http_client::agent(Duration::from_secs(5), &tls),
            "GET",
            &format!("{url}/healthz"),
            None,
            b"",
        )
        .unwrap_err();
        assert!(http_client::is_certificate_error(&err), "{err:?}");
        assert!(
            http_client::describe_error(&err).contains("not trusted"),
            "{err}"
        );
    }
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = url.replace("https://", "http://");
    let plain_client = http_client::agent(Duration::from_secs(5), &ClientTls::default());
    assert!(call(&plain_client, "GET", &format!("{plain}/healthz"), None, b"").is_err());

    // ctl: refused without the CA, works with it.
    let ctl = |extra: &[&str]| {
        let out = bin()
            .args(["ctl", "--server", &url, "--token", READ])
            .args(extra)
            .arg("status")
            .env_remove("ROCEMESH_CA_FILE")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = ctl(&[]);
    assert!(
        !ok && err.contains("not trusted") && err.contains("--ca-file"),
        "{err}"
    );
    let (ok, err) = ctl(&["--ca-file", p.ca.to_str().unwrap()]);
    assert!(ok, "{err}");

    // Agents: without a token refused (401), without the CA refused (certificate), with
    // both registered and uploading over https.
    let ca_arg = ["--ca-file", p.ca.to_str().unwrap()];
    let log = stderr_until(
        &mut agent(&url, "tls-anon", 1, &ca_arg),
        "refused this agent's credential",
    );
    assert!(log.contains("401"), "{log}");
    let log = stderr_until(
        agent(&url, "tls-noca", 2, &[]).env("ROCEMESH_TOKEN", AGENT),
        "invalid peer certificate",
    );
    assert!(log.contains("UnknownIssuer"), "{log}");
    let _good = Proc(
        agent(&url, "tls-good", 3, &ca_arg)
            .env("ROCEMESH_TOKEN", AGENT)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(
        "the agent's uploads over https",
        Duration::from_secs(30),
        || {
            let (_, body) = call(
                &client,
                "GET",
                &format!("{url}/api/v1/ingest/stats"),
                Some(READ),
                b"",
            )
            .ok()?;
            let v: serde_json::Value = serde_json::from_str(&body).ok()?;
            (v["batches"].as_u64()? > 0).then_some(())
        },
    );
    let names: Vec<String> = hosts(&client, &url).into_iter().map(|h| h.host).collect();
    assert_eq!(
        names,
        ["tls-good"],
        "only the agent with a token and the CA registered"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The first bytes of a TLS ClientHello (a record of 512 bytes announced, 6 sent): a
/// handshake that stalls after it began.
const STALLED_HELLO: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01];

#[test]
fn silent_and_stalled_tls_clients_lock_nobody_out() {
    let (dir, p, _server, url) = tls_server(
        "tls-slow",
        "[http]\nhandshake_timeout = \"6s\"\nmax_handshakes_per_ip = 32\n",
    );
    let addr: std::net::SocketAddr = url.trim_start_matches("https://").parse().unwrap();
    let _ = rocemesh_httpd::raise_fd_limit();
    let started = std::time::Instant::now();
    // 300 silent connections from ten hosts (30 each, under the per-source cap), and 60
    // stalled handshakes from one more host (over it).
    let silent: Vec<std::net::TcpStream> = (0..300)
        .map(|i| connect_from(format!("127.66.0.{}", 1 + i % 10).parse().unwrap(), addr))
        .collect();
    let stalled: Vec<std::net::TcpStream> = (0..60)
        .map(|_| {
            let mut s = connect_from("127.66.1.1".parse().unwrap(), addr);
            std::io::Write::write_all(&mut s, STALLED_HELLO).unwrap();
            s
        })
        .collect();
    // An operator's and an agent's calls still answer at once, from a fresh connection.
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        let client = https_client(&p.ca);
        let t = std::time::Instant::now();
        let (s, _) = call(&client, "GET", &format!("{url}/healthz"), None, b"").unwrap();
        assert_eq!(s, 200);
        hosts(&client, &url);
        worst = worst.max(t.elapsed());
    }
    let held_during = started.elapsed();
    eprintln!(
        "360 silent/stalled connections: /healthz + authenticated call answered in {worst:?} at worst ({held_during:?} into the attack)"
    );
    // A blocked server would answer only once the held connections time out (seconds
    // more); a loaded machine's fresh connection and call take well under 3 s.
    assert!(worst < Duration::from_secs(3), "{worst:?}");
    // The attack was in place while they answered: every silent connection still open.
    assert!(
        held_during < Duration::from_secs(6),
        "calls came too late: {held_during:?}"
    );
    let early = silent.iter().filter(|s| closed_by_peer(s)).count();
    assert_eq!(early, 0, "silent connections closed early");
    // The stalled host got its 32 handshakes; the other 28 connections were closed at once.
    let refused = stalled.iter().filter(|s| closed_by_peer(s)).count();
    assert_eq!(refused, 28, "connections over the per-source handshake cap");
    // Each handshake is cut off at its deadline.
    wait_for(
        "silent connections cut off",
        Duration::from_secs(30),
        || {
            silent
                .iter()
                .chain(stalled.iter())
                .all(closed_by_peer)
                .then_some(())
        },
    );
    let cut = started.elapsed();
    assert!(
        cut >= Duration::from_secs(5),
        "cut off before the deadline: {cut:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn mutual_tls_requires_a_client_certificate() {
    let dir = scratch_dir("tls-mtls");
    let p = pki(&dir);
    let (_server, url, _log) = start_logged_server(&dir, &tls_section(&p, true), "warn");
    let health = format!("{url}/healthz");
    assert!(call(&https_client(&p.ca), "GET", &health, None, b"").is_err());
    let with_cert = ClientTls::load(Some(&p.ca))
        .unwrap()
        .with_client_certificate(&p.client_cert, &p.client_key)
        .unwrap();
    let client = http_client::agent(Duration::from_secs(10), &with_cert);
    assert_eq!(call(&client, "GET", &health, None, b"").unwrap().0, 200);
    // A real agent with the client certificate registers.
    let _agent = Proc(
        agent(
            &url,
            "tls-mtls",
            4,
            &[
                "--ca-file",
                p.ca.to_str().unwrap(),
                "--client-cert",
                p.client_cert.to_str().unwrap(),
                "--client-key",
                p.client_key.to_str().unwrap(),
            ],
        )
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    );
    wait_for(
        "the mTLS agent to register",
        Duration::from_secs(20),
        || {
            let (s, body) = call(&client, "GET", &format!("{url}/api/v1/hosts"), None, b"").ok()?;
            (s == 200 && body.contains("tls-mtls")).then_some(())
        },
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_tls_files_stop_the_server_with_a_clear_error() {
    let dir = scratch_dir("tls-bad");
    let p = pki(&dir);
    let config = dir.join("server.toml");
    let run = |tls: &str| {
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:0\"\ndatabase = \"sqlite://{}\"\n{tls}",
                dir.join("db").display()
            ),
        )
        .unwrap();
        let out = bin()
            .args(["server", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&format!(
        "[tls]\ncert_file = \"/nonexistent/s.crt\"\nkey_file = {:?}\n",
        p.key.display().to_string()
    ));
    assert!(
        err.contains("[tls] cert_file") && err.contains("/nonexistent/s.crt"),
        "{err}"
    );
    // The CA's certificate with the server's key: they do not match.
    let err = run(&format!(
        "[tls]\ncert_file = {:?}\nkey_file = {:?}\n",
        p.other_ca.display().to_string(),
        p.key.display().to_string()
    ));
    assert!(err.contains("does not match"), "{err}");
    let err = run(&format!(
        "[tls]\ncert_file = {:?}\nkey_file = {:?}\n",
        p.cert.display().to_string(),
        p.cert.display().to_string()
    ));
    assert!(err.contains("no PEM PRIVATE KEY"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The calls an agent makes (method, OpenAPI path): the only ones its token may make.
const AGENT_CALLS: [(&str, &str); 6] = [
    ("POST", "/api/v1/agents/register"),
    ("GET", "/api/v1/pinglists/{host_id}"),
    ("POST", "/api/v1/results"),
    ("POST", "/api/v1/throughput"),
    ("POST", "/api/v1/tasks/{id}/ready"),
    ("GET", "/api/v1/rnics/by-ip/{ip}"),
];

#[test]
fn every_api_route_enforces_every_role() {
    let dir = scratch_dir("tls-roles");
    let p = pki(&dir);
    let (_server, url, _log) =
        start_logged_server(&dir, &format!("{AUTH}{}", tls_section(&p, false)), "warn");
    let tls = ClientTls::load(Some(&p.ca)).unwrap();
    let (s, doc) = call(
        &https_client(&p.ca),
        "GET",
        &format!("{url}/api/v1/openapi.json"),
        None,
        b"",
    )
    .unwrap();
    assert_eq!(s, 200);
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.push((method.to_uppercase(), path.clone()));
        }
    }
    for (m, p) in AGENT_CALLS {
        assert!(
            routes.iter().any(|(rm, rp)| rm == m && rp == p),
            "{m} {p} missing from the document"
        );
    }
    let mut checked = 0;
    for (method, path) in &routes {
        if path == "/api/v1/openapi.json" {
            continue;
        }
        // Path parameters get a plausible value; the role check comes before the handler.
        let concrete: String = path
            .split('/')
            .map(|seg| match seg {
                "{ip}" => "127.0.0.1",
                s if s.starts_with('{') => "1",
                s => s,
            })
            .collect::<Vec<_>>()
            .join("/");
        let target = format!("{url}{concrete}");
        // A fresh connection per call: a refused request's body may be left unread, and
        // the server then closes a connection the client would have pooled and reused.
        let status = |token| {
            let fresh = http_client::agent(Duration::from_secs(10), &tls);
            call(&fresh, method, &target, token, b"{}").unwrap().0
        };
        let is_agent_call = AGENT_CALLS.iter().any(|(m, p)| m == method && p == path);
        let expect = |role: &str, allowed: bool, got: u16| {
            if allowed {
                assert!(
                    got != 401 && got != 403,
                    "{role} refused on {method} {path}: {got}"
                );
            } else {
                assert_eq!(got, 403, "{role} not forbidden on {method} {path}");
            }
        };
        assert_eq!(status(None), 401, "{method} {path} open without a token");
        assert_eq!(
            status(Some("not-a-configured-token-000")),
            401,
            "{method} {path}"
        );
        // Pinglists carry the cluster's probe keys: agents and admins only.
        let read_ok = method == "GET" && !path.starts_with("/api/v1/pinglists/");
        expect("read", read_ok, status(Some(READ)));
        expect("agent", is_agent_call, status(Some(AGENT)));
        expect("admin", true, status(Some(ADMIN)));
        checked += 1;
    }
    eprintln!("{checked} API routes × 5 credentials checked");
    assert!(checked >= 20, "only {checked} routes in the document");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn secrets_never_reach_the_logs() {
    let dir = scratch_dir("tls-secrets");
    let p = pki(&dir);
    let api_secret = "api-receiver-secret-7a6b5c4d3e2f";
    let (mut server, url, log) = start_logged_server(
        &dir,
        &format!(
            "{AUTH}{}[[alerts.receivers]]\nname = \"cfg\"\nurl = \"https://127.0.0.1:9/hook\"\nsecret = \"{WEBHOOK_SECRET}\"\n",
            tls_section(&p, false)
        ),
        "debug",
    );
    let client = https_client(&p.ca);
    let receivers = format!("{url}/api/v1/alerts/receivers");
    let body = format!(
        r#"{{"name":"api","url":"https://127.0.0.1:9/hooks/T0/url-credential-9f8e","secret":"{api_secret}"}}"#
    );
    let (s, text) = call(&client, "POST", &receivers, Some(ADMIN), body.as_bytes()).unwrap();
    assert!(s == 201 || s == 200, "{s} {text}");
    assert!(
        !text.contains(api_secret),
        "the API returned the secret: {text}"
    );
    let (s, text) = call(&client, "GET", &receivers, Some(READ), b"").unwrap();
    assert_eq!(s, 200);
    assert!(
        !text.contains(api_secret) && !text.contains(WEBHOOK_SECRET),
        "{text}"
    );
    // A read token sees each receiver's scheme and host, not the path that carries a
    // credential; an admin sees the whole URL.
    assert!(
        !text.contains("url-credential-9f8e") && text.contains("https://127.0.0.1:9/<redacted>"),
        "{text}"
    );
    let (s, text) = call(&client, "GET", &receivers, Some(ADMIN), b"").unwrap();
    assert_eq!(s, 200);
    assert!(text.contains("/hooks/T0/url-credential-9f8e"), "{text}");
    call(
        &client,
        "GET",
        &receivers,
        Some("wrong-token-but-long-enough"),
        b"",
    )
    .unwrap();
    // An agent at debug level, logging to its own file.
    let agent_log = dir.join("agent.log");
    let mut a = agent(
        &url,
        "tls-secret",
        5,
        &["--ca-file", p.ca.to_str().unwrap()],
    );
    a.env("ROCEMESH_TOKEN", AGENT)
        .env("RUST_LOG", "debug")
        .stderr(std::fs::File::create(&agent_log).unwrap());
    let mut a = Proc(a.spawn().unwrap());
    wait_for("the agent to register", Duration::from_secs(20), || {
        hosts(&client, &url)
            .iter()
            .any(|h| h.host == "tls-secret")
            .then_some(())
    });
    a.terminate();
    server.terminate();
    let logs =
        std::fs::read_to_string(&log).unwrap() + &std::fs::read_to_string(&agent_log).unwrap();
    assert!(
        logs.len() > 1000,
        "debug logs too short to mean anything:\n{logs}"
    );
    for secret in [ADMIN, READ, AGENT, WEBHOOK_SECRET, api_secret] {
        assert!(!logs.contains(secret), "{secret} appears in the logs");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn over_long_strings_are_refused_and_nothing_is_stored() {
    let dir = scratch_dir("tls-limits");
    let p = pki(&dir);
    let (_server, url, _log) =
        start_logged_server(&dir, &format!("{AUTH}{}", tls_section(&p, false)), "warn");
    let client = https_client(&p.ca);
    let long = "x".repeat(300);
    let register = |host: &str, ifname: &str, tor: &str| {
        format!(
            r#"{{"host":"{host}","epoch":1,"rnics":[{{"ifname":"{ifname}","ip":"10.9.0.1","qpn":1,"port":4791,"tor":"{tor}"}}]}}"#
        )
    };
    let task = |name: &str, host: &str| {
        format!(
            r#"{{"name":"{name}","endpoints":[{{"host":"{host}","rnic":"r1"}},{{"host":"h2","rnic":"r1"}}]}}"#
        )
    };
    let receiver = |name: &str, url: &str| format!(r#"{{"name":"{name}","url":"{url}"}}"#);
    let long_url = format!("https://example.invalid/{}", "a".repeat(3000));
    let cases: [(&str, String, &str); 7] = [
        ("/agents/register", register(&long, "r1", "t0"), "/hosts"),
        ("/agents/register", register("h1", &long, "t0"), "/hosts"),
        ("/agents/register", register("h1", "r1", &long), "/hosts"),
        ("/tasks", task(&long, "h1"), "/tasks"),
        ("/tasks", task("job", &long), "/tasks"),
        (
            "/alerts/receivers",
            receiver(&long, "https://example.invalid/"),
            "/alerts/receivers",
        ),
        (
            "/alerts/receivers",
            receiver("r", &long_url),
            "/alerts/receivers",
        ),
    ];
    for (path, body, list) in cases {
        let api = |p: &str| format!("{url}/api/v1{p}");
        let before = call(&client, "GET", &api(list), Some(ADMIN), b"").unwrap();
        let token = if path == "/agents/register" {
            AGENT
        } else {
            ADMIN
        };
        let (s, text) = call(&client, "POST", &api(path), Some(token), body.as_bytes()).unwrap();
        assert!(
            (400..500).contains(&s),
            "POST {path} with a 300-byte string: {s} {text}"
        );
        assert!(
            text.contains("longer than") || text.contains("at most") || text.contains("must be"),
            "{text}"
        );
        let after = call(&client, "GET", &api(list), Some(ADMIN), b"").unwrap();
        assert_eq!(before, after, "POST {path} refused but {list} changed");
    }
    // The same requests with short strings are taken (the refusals were about length).
    let (s, text) = call(
        &client,
        "POST",
        &format!("{url}/api/v1/agents/register"),
        Some(AGENT),
        register("h1", "r1", "t0").as_bytes(),
    )
    .unwrap();
    assert_eq!(s, 200, "{text}");
    std::fs::remove_dir_all(&dir).ok();
}
