//! The HTTP platform of every rocemesh listener (the server's API, the agent's
//! `/metrics`):
//!
//! - the one error answer, [`HttpError`] (a status and a JSON `ErrorBody`), and the
//!   extractors whose rejections are such errors ([`ApiJson`], [`ApiPath`], [`ApiQuery`]);
//! - routes declared with who may call them ([`Routes`], [`Access`]), checked against
//!   bearer tokens ([`protect`], the `[auth]` section [`AuthConfig`]);
//! - request body limits ([`limit_bodies`]) and the `[tls]` section ([`TlsConfig`]);
//! - the server loop ([`serve`]), built so that slow, silent or numerous clients cannot
//!   lock others out (below).
//!
//! The loop's guarantees:
//!
//! - every connection holds one slot of [`Limits::max_connections`] (clamped below the
//!   process's file-descriptor limit), and at most [`Limits::max_connections_per_ip`]
//!   come from one source address; a connection over either cap is refused at once
//!   (plain HTTP: a `503` answer, TLS: closed) instead of waiting in the kernel's backlog;
//! - over TLS, one source has at most [`Limits::max_handshakes_per_ip`] handshakes in
//!   progress, each cut off after [`Limits::handshake_timeout`]; there is no global
//!   handshake slot a stranger could hold;
//! - a request head must arrive within [`Limits::header_read_timeout`] (hyper's timer;
//!   it also bounds how long a kept-alive connection waits for its next request), and a
//!   connection on which nothing moves for [`Limits::idle_timeout`] is closed.
//!
//! [`raise_fd_limit`] lifts the soft descriptor limit to the hard one at start.

mod access;
mod auth;
mod body;
mod conn;
mod error;
mod extract;
mod fd;
mod gate;
mod limits;
mod tls;

pub use access::{Access, Policy, Routes, Rule};
pub use auth::{
    AgentHosts, AuthConfig, Grant, Role, TokenConfig, Tokens, protect, read_token_file,
};
pub use body::{DEFAULT_BODY_BYTES, MAX_REQUEST_BYTES, limit_bodies};
pub use error::HttpError;
pub use extract::{ApiJson, ApiPath, ApiQuery};
pub use fd::{FdLimit, raise_fd_limit};
pub use limits::Limits;
pub use tls::{TlsConfig, load_tls};

use axum::Router;
use gate::Gate;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;

/// Queued connections the kernel keeps for the accept loop (clamped by
/// `net.core.somaxconn`): a burst that overflows the queue costs each dropped client a
/// one-second SYN retransmit.
pub const BACKLOG: u32 = 4096;

/// Binds a listener with a [`BACKLOG`]-deep accept queue (std's default is 128).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Serves `router` on `listener` under `limits` — over TLS when `tls` is given — until
/// `stop` resolves; then stops accepting, lets in-flight requests finish and returns
/// once every connection is closed.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    router: Router,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let max = fd::connection_cap(limits.max_connections);
    let gate = Arc::new(Gate::new(limits, max));
    let acceptor = tls.map(TlsAcceptor::from);
    let (stopping_tx, stopping) = watch::channel(false);
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        match gate.admit(peer.ip(), acceptor.is_some()) {
            Ok(admitted) => {
                tokio::spawn(conn::run(
                    tcp,
                    admitted,
                    acceptor.clone(),
                    router.clone(),
                    stopping.clone(),
                ));
            }
            Err(refusal) => conn::refuse(tcp, peer, refusal, acceptor.is_none()),
        }
    }
    drop(listener);
    let _ = stopping_tx.send(true);
    gate.closed().await;
    Ok(())
}
