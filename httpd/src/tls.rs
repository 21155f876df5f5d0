//! HTTPS for a server's listener: the `[tls]` config section, the rustls server
//! configuration built from PEM files (ring provider), optional client-certificate
//! verification (mutual TLS); [`crate::serve`] terminates it. Without `[tls]` the server
//! speaks plain HTTP and says so at start when tokens are configured (a bearer token in
//! clear text is a token given away).

use anyhow::{Context, Result};
use rocemesh_proto::http_client::{read_certificates, read_private_key};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig, crypto::ring};

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
fn server_config(cfg: &TlsConfig) -> Result<Arc<ServerConfig>> {
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
pub fn load_tls(tls: Option<&TlsConfig>, has_tokens: bool) -> Result<Option<Arc<ServerConfig>>> {
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
