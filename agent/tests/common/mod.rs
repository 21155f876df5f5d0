//! A tiny blocking HTTP/1.1 server for tests: one thread, `Connection: close`, a closure
//! decides every response; and the one way these tests wait for a condition.

pub(crate) mod upload;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

/// Polls `cond` every 20 ms until it holds; panics after a deadline generous enough for a
/// loaded 2-core machine. Tests wait for what they assert, never for a fixed time.
pub(crate) fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// One received request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A response: status, extra headers, body.
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub(crate) fn json(status: u16, body: impl serde::Serialize) -> Self {
        Self {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: serde_json::to_vec(&body).unwrap(),
        }
    }
    pub(crate) fn empty(status: u16) -> Self {
        Self {
            status,
            headers: vec![],
            body: vec![],
        }
    }
}

/// Serves on 127.0.0.1 until the test process ends; returns the base URL.
pub(crate) fn serve(handler: impl Fn(&Request) -> Response + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handler = Arc::new(handler);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let handler = handler.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or_default().to_string();
                let path = parts.next().unwrap_or_default().to_string();
                let mut headers = Vec::new();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = h.trim_end().split_once(':') {
                        headers.push((k.trim().to_string(), v.trim().to_string()));
                    }
                }
                let len = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0usize);
                let mut body = vec![0; len];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let resp = handler(&Request {
                    method,
                    path,
                    headers,
                    body,
                });
                let mut out = format!(
                    "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                    resp.status,
                    resp.body.len()
                );
                for (k, v) in &resp.headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                let mut stream = stream;
                let _ = stream.write_all(out.as_bytes());
                let _ = stream.write_all(&resp.body);
            });
        }
    });
    url
}

/// The registration reply of a stand-in controller: host `host_id`, every registered
/// RNIC echoed with id `rnic_id`, the given analyzer URL and periods.
pub(crate) fn register_reply(
    r: &rocemesh_proto::api::RegisterRequest,
    host_id: u32,
    rnic_id: u32,
    analyzer_url: Option<String>,
    upload_period_ms: u64,
    pinglist_poll_ms: u64,
) -> rocemesh_proto::api::RegisterResponse {
    let rnics = r
        .rnics
        .iter()
        .map(|n| rocemesh_proto::api::RnicInfo {
            id: rnic_id,
            host_id,
            host: r.host.clone(),
            ifname: n.ifname.clone(),
            ip: n.ip,
            gid: n.gid.clone(),
            qpn: n.qpn,
            port: n.port,
            tor: n.tor.clone().unwrap_or_default(),
            rail: n.rail,
            epoch: r.epoch,
            registered_at_ms: 0,
        })
        .collect();
    rocemesh_proto::api::RegisterResponse {
        host_id,
        epoch: r.epoch,
        rnics,
        analyzer_url,
        upload_period_ms,
        pinglist_poll_ms,
        probe_auth: None,
        upload_key: Some(rocemesh_proto::host_key::HostKey(format!("{host_id:064x}"))),
    }
}
