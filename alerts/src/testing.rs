//! A real webhook receiver for tests (feature `testing`): an HTTP server on 127.0.0.1
//! that records every request, checks nothing itself, and can be told to fail or stall.

use crate::payload::{Alert, Notification, Status};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Request {
    /// Raw body.
    pub body: Vec<u8>,
    /// `X-Rocemesh-Signature` header, if any.
    pub signature: Option<String>,
    /// The status it answered.
    pub answered: u16,
}

impl Request {
    /// The body as a notification (panics on a malformed one: that is a test failure).
    pub fn notification(&self) -> Notification {
        serde_json::from_slice(&self.body).expect("webhook body is a v4 notification")
    }
}

#[derive(Default)]
struct Behaviour {
    requests: Vec<Request>,
    /// Answer this many next requests with `fail_status`.
    fail_next: u32,
    fail_status: u16,
    delay: Duration,
}

/// The receiver; stops when dropped.
pub struct TestReceiver {
    /// `http://127.0.0.1:PORT/hook`.
    pub url: String,
    state: Arc<Mutex<Behaviour>>,
    stop: CancellationToken,
}

async fn hook(
    State(state): State<Arc<Mutex<Behaviour>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let delay = lock(&state).delay;
    tokio::time::sleep(delay).await;
    let mut b = lock(&state);
    let status = if b.fail_next > 0 {
        b.fail_next -= 1;
        b.fail_status
    } else {
        200
    };
    b.requests.push(Request {
        body: body.to_vec(),
        signature: headers
            .get(crate::signature::HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        answered: status,
    });
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn lock(m: &Mutex<Behaviour>) -> std::sync::MutexGuard<'_, Behaviour> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TestReceiver {
    /// Starts a receiver on an ephemeral port of 127.0.0.1 (inside a tokio runtime).
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(Behaviour::default()));
        let app = axum::Router::new()
            .route("/hook", post(hook))
            .with_state(state.clone());
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled().await })
                .await;
        });
        Ok(Self {
            url: format!("http://{addr}/hook"),
            state,
            stop,
        })
    }

    /// Answers the next `n` requests with `status`.
    pub fn fail_next(&self, n: u32, status: u16) {
        let mut b = lock(&self.state);
        b.fail_next = n;
        b.fail_status = status;
    }

    /// Waits this long before answering each request.
    pub fn set_delay(&self, delay: Duration) {
        lock(&self.state).delay = delay;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.state).requests.clone()
    }

    /// Alerts of the requests answered 2xx, in arrival order.
    pub fn delivered(&self) -> Vec<Alert> {
        self.requests()
            .iter()
            .filter(|r| (200..300).contains(&r.answered))
            .flat_map(|r| r.notification().alerts)
            .collect()
    }

    /// (fingerprint, status) of every delivered alert, in arrival order.
    pub fn delivered_keys(&self) -> Vec<(String, Status)> {
        self.delivered()
            .into_iter()
            .map(|a| (a.fingerprint, a.status))
            .collect()
    }
}

impl Drop for TestReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
