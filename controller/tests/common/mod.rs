//! Test harness: a controller served over real HTTP on 127.0.0.1, and a minimal raw
//! HTTP/1.1 client (raw so tests can send truncated and oversized bodies).

#![allow(dead_code)]

use rocemesh_controller::{ControllerConfig, ControllerState, router};
use rocemesh_store::Db;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running controller.
pub(crate) struct Server {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) async fn serve(db: Db, cfg: ControllerConfig) -> Server {
    serve_state(
        ControllerState::new(db, cfg)
            .await
            .expect("controller state"),
    )
    .await
}

/// Serves an existing state (tests that also call its public methods).
pub(crate) async fn serve_state(state: ControllerState) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, router(state)).await.unwrap();
    });
    Server { addr, task }
}

/// A parsed response.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The `error` of an `ErrorBody`, asserting the body is one.
    pub(crate) fn error(&self) -> String {
        self.json::<rocemesh_proto::api::ErrorBody>().error
    }
}

pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let (mut rd, mut wr) = stream.split();
    let mut raw = Vec::new();
    // Write and read concurrently: the server may answer (413) before reading the body.
    let write = async {
        let _ = wr.write_all(head.as_bytes()).await;
        let _ = wr.write_all(body).await;
    };
    let read = rd.read_to_end(&mut raw);
    let (_, read_result) = tokio::join!(write, read);
    if let Err(e) = read_result {
        assert!(!raw.is_empty(), "no response: {e}");
    }
    parse(&raw)
}

fn parse(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Response {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

pub(crate) async fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[], b"").await
}

pub(crate) async fn post_json(addr: SocketAddr, path: &str, body: &[u8]) -> Response {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body,
    )
    .await
}

pub(crate) async fn send_json(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &serde_json::Value,
) -> Response {
    request(
        addr,
        method,
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
    .await
}

/// A registration body: `rnics` as (ifname, ip, tor hint).
pub(crate) fn registration(
    host: &str,
    epoch: u32,
    rnics: &[(&str, &str, Option<&str>)],
) -> serde_json::Value {
    let rnics: Vec<_> = rnics
        .iter()
        .enumerate()
        .map(|(i, (ifname, ip, tor))| {
            serde_json::json!({"ifname": ifname, "ip": ip, "qpn": 1000 + epoch % 1000 + i as u32, "port": 4791, "tor": tor})
        })
        .collect();
    serde_json::json!({"host": host, "epoch": epoch, "rnics": rnics})
}

pub(crate) async fn register(addr: SocketAddr, body: &serde_json::Value) -> Response {
    post_json(addr, "/api/v1/agents/register", body.to_string().as_bytes()).await
}

/// Row counts of the registry tables, to prove a refused request changed nothing.
pub(crate) async fn row_counts(db: &Db) -> (i64, i64, i64) {
    let (hosts,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM hosts")
        .fetch_one(db.pool())
        .await
        .unwrap();
    let (rnics,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM rnics")
        .fetch_one(db.pool())
        .await
        .unwrap();
    let (regs,): (i64,) =
        sqlx::query_as("SELECT CAST(COALESCE(SUM(registrations), 0) AS BIGINT) FROM hosts")
            .fetch_one(db.pool())
            .await
            .unwrap();
    (hosts, rnics, regs)
}
