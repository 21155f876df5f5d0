//! HTTPS for the server's one listener: the `[tls]` config section, the rustls server
//! configuration built from PEM files (ring provider), optional client-certificate
//! verification (mutual TLS), and the listener axum serves TLS connections from.
//!
//! Handshakes run in their own tasks (at most [`MAX_HANDSHAKES`] at once, each cut off
//! after [`HANDSHAKE_TIMEOUT`]), so a client that connects and says nothing holds no other
//! client up. Without `[tls]` the server speaks plain HTTP and says so at start when
//! tokens are configured (a bearer token in clear text is a token given away).

use anyhow::{Context, Result};
use axum::Router;
use rocemesh_proto::http_client::{read_certificates, read_private_key};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig, crypto::ring};

/// Longest a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most handshakes in progress at once; further connections wait in the kernel's backlog.
pub const MAX_HANDSHAKES: usize = 256;
/// Finished handshakes waiting for the HTTP server to take them.
const ACCEPTED_QUEUE: usize = 64;

/// The `[tls]` section of the server config: present = the listener speaks https only.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain (PEM, leaf first).
    pub cert_file: PathBuf,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// When set, every client must present a certificate signed by a CA of this PEM file
    /// (mutual TLS; bearer tokens are still checked on top).
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    Ok(read_certificates(path)?
        .iter()
        .map(|c| CertificateDer::from(c.der().to_vec()))
        .collect())
}

/// Builds the rustls server configuration of `[tls]`; every unreadable or unusable file is
/// an error naming it (never its content).
pub fn server_config(cfg: &TlsConfig) -> Result<Arc<ServerConfig>> {
    let chain = certificates(&cfg.cert_file).context("[tls] cert_file")?;
    let key = read_private_key(&cfg.key_file).context("[tls] key_file")?;
    let key = PrivateKeyDer::try_from(key.der().to_vec())
        .map_err(|e| anyhow::anyhow!("{}: {e}", cfg.key_file.display()))
        .context("[tls] key_file")?;
    let provider = Arc::new(ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match &cfg.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(path).context("[tls] client_ca_file")? {
                roots
                    .add(cert)
                    .with_context(|| format!("[tls] client_ca_file {}", path.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .context("[tls] client_ca_file")?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).with_context(|| {
        format!(
            "[tls] key_file {} does not match cert_file {}",
            cfg.key_file.display(),
            cfg.cert_file.display()
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Loads `[tls]` when configured; without it, warns if tokens would travel in clear text.
pub fn load(tls: Option<&TlsConfig>, has_tokens: bool) -> Result<Option<Arc<ServerConfig>>> {
    match tls {
        Some(cfg) => server_config(cfg).map(Some),
        None => {
            if has_tokens {
                tracing::warn!(
                    "[auth] tokens are configured but [tls] is not: tokens cross the network in clear text"
                );
            }
            Ok(None)
        }
    }
}

/// Serves `router` on `listener` — over TLS when `tls` is given — until `stop` resolves,
/// then finishes in-flight requests.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    router: Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match tls {
        None => {
            axum::serve(listener, router)
                .with_graceful_shutdown(stop)
                .await
        }
        Some(config) => {
            axum::serve(TlsListener::new(listener, config)?, router)
                .with_graceful_shutdown(stop)
                .await
        }
    }
}

/// A TCP listener whose connections come out TLS-terminated.
pub struct TlsListener {
    local: SocketAddr,
    accepted: mpsc::Receiver<(tokio_rustls::server::TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Starts accepting and handshaking on `listener` (stops when the listener is dropped).
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, accepted) = mpsc::channel(ACCEPTED_QUEUE);
        tokio::spawn(accept_loop(listener, TlsAcceptor::from(config), tx));
        Ok(Self { local, accepted })
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(tokio_rustls::server::TlsStream<TcpStream>, SocketAddr)>,
) {
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (tcp, peer) = tokio::select! {
            _ = tx.closed() => return,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (acceptor, tx) = (acceptor.clone(), tx.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = tx.send((stream, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(conn) => conn,
            // The accept loop only ends once this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_section_parses_and_bad_files_are_named() {
        let cfg: TlsConfig = toml::from_str(
            "cert_file = \"/nonexistent/c.pem\"\nkey_file = \"/nonexistent/k.pem\"\n",
        )
        .unwrap();
        assert!(cfg.client_ca_file.is_none());
        let err = format!("{:#}", server_config(&cfg).unwrap_err());
        assert!(
            err.contains("[tls] cert_file") && err.contains("/nonexistent/c.pem"),
            "{err}"
        );
        assert!(toml::from_str::<TlsConfig>("cert_file = \"a\"\n").is_err());
        assert!(
            toml::from_str::<TlsConfig>("cert_file = \"a\"\nkey_file = \"b\"\nca = 1\n").is_err()
        );
    }
}
