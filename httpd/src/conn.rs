//! One connection: TLS handshake under its deadline, then hyper's HTTP/1.1 with the
//! header-read timer, raced against the idle deadline and the listener's stop.

use crate::gate::{Admitted, Refusal};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// What a plain-HTTP client over a cap is told before the connection closes.
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 26\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections, retry\n";

/// Turns a connection away without a task or a wait: plain HTTP gets a 503 if the
/// socket takes it at once; request bytes already received are read off, so closing
/// sends FIN rather than a reset that could discard the answer.
pub(crate) fn refuse(tcp: TcpStream, peer: SocketAddr, why: Refusal, plain: bool) {
    tracing::debug!(%peer, reason = why.reason(), "connection refused");
    if plain {
        let _ = tcp.try_write(REFUSED);
    }
    let mut sink = [0u8; 4096];
    for _ in 0..4 {
        if !matches!(tcp.try_read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
}

/// Serves one admitted connection to its end.
pub(crate) async fn run(
    tcp: TcpStream,
    mut admitted: Admitted,
    tls: Option<TlsAcceptor>,
    router: Router,
    mut stopping: watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let limits = admitted.limits().clone();
    let activity = Arc::new(Activity::new());
    match tls {
        None => {
            let io = Tracked::new(tcp, activity.clone());
            http(io, &activity, router, &limits, stopping).await;
        }
        Some(acceptor) => {
            let handshake = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp));
            let stream = tokio::select! {
                _ = stopping.wait_for(|s| *s) => return,
                done = handshake => done,
            };
            admitted.handshake_over();
            match stream {
                Ok(Ok(stream)) => {
                    let io = Tracked::new(stream, activity.clone());
                    http(io, &activity, router, &limits, stopping).await;
                }
                Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake timed out"),
            }
        }
    }
    drop(admitted);
}

async fn http<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: Tracked<S>,
    activity: &Activity,
    router: Router,
    limits: &crate::Limits,
    mut stopping: watch::Receiver<bool>,
) {
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(router));
    tokio::pin!(conn);
    let check = (limits.idle_timeout / 4).max(Duration::from_millis(50));
    let mut ticks = tokio::time::interval(check);
    let mut stop_seen = false;
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(error = %e, "connection ended");
                }
                return;
            }
            _ = stopping.wait_for(|s| *s), if !stop_seen => {
                stop_seen = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = ticks.tick() => {
                if activity.idle_for() >= limits.idle_timeout {
                    tracing::debug!("connection idle too long; closed");
                    return;
                }
            }
        }
    }
}

/// When a byte last moved on a connection.
#[derive(Debug)]
struct Activity {
    origin: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        self.last_ms
            .store(self.origin.elapsed().as_millis() as u64, Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }
}

/// A stream that records in [`Activity`] every read or write that moved bytes.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Tracked<S> {
    fn new(inner: S, activity: Arc<Activity>) -> Self {
        activity.touch();
        Self { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
