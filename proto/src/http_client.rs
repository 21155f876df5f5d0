//! The one way rocemesh builds an HTTP(S) client — the agent, `rocemesh ctl` and the alert
//! webhook sender all start here: ureq over rustls (ring provider), every status returned
//! as an answer rather than an error, and https certificates checked against the roots the
//! operator chose ([`ClientTls`]). Invalid certificates are always refused; there is no
//! "insecure" switch.
//!
//! It lives in `proto` (behind the `http-client` feature) because the three users share no
//! other crate: `alerts` must not depend on `agent`, and `proto` is below all of them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

/// Largest PEM file read (a CA bundle, a certificate chain or a key).
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// A PEM file that cannot be used; the message names the file, never its content.
#[derive(Debug, thiserror::Error)]
pub enum PemFileError {
    /// The file cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_PEM_BYTES`].
    #[error("{path} is larger than {MAX_PEM_BYTES} bytes: not a PEM certificate or key file")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not valid PEM.
    #[error("{path} is not valid PEM: {detail}")]
    BadPem {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        detail: String,
    },
    /// The file holds no item of the wanted kind.
    #[error("{path} holds no PEM {what}")]
    Missing {
        /// The file.
        path: PathBuf,
        /// "CERTIFICATE" or "PRIVATE KEY".
        what: &'static str,
    },
}

/// The PEM items of a file: certificates and private keys, in file order.
struct PemFile {
    certs: Vec<Certificate<'static>>,
    keys: Vec<PrivateKey<'static>>,
}

/// Reads and parses a PEM file (at most [`MAX_PEM_BYTES`]).
fn read_pem(path: &Path) -> Result<PemFile, PemFileError> {
    use std::io::Read;
    let read = |source| PemFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PEM_BYTES + 1).read_to_end(&mut bytes))
        .map_err(read)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(PemFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let mut file = PemFile {
        certs: Vec::new(),
        keys: Vec::new(),
    };
    for item in ureq::tls::parse_pem(&bytes) {
        match item.map_err(|e| PemFileError::BadPem {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })? {
            PemItem::Certificate(c) => file.certs.push(c),
            PemItem::PrivateKey(k) => file.keys.push(k),
            _ => {}
        }
    }
    Ok(file)
}

/// The certificates of a PEM file (a CA bundle or a chain); none is an error.
pub fn read_certificates(path: &Path) -> Result<Vec<Certificate<'static>>, PemFileError> {
    let certs = read_pem(path)?.certs;
    if certs.is_empty() {
        return Err(PemFileError::Missing {
            path: path.to_path_buf(),
            what: "CERTIFICATE",
        });
    }
    Ok(certs)
}

/// The first private key of a PEM file; none is an error.
pub fn read_private_key(path: &Path) -> Result<PrivateKey<'static>, PemFileError> {
    read_pem(path)?
        .keys
        .into_iter()
        .next()
        .ok_or_else(|| PemFileError::Missing {
            path: path.to_path_buf(),
            what: "PRIVATE KEY",
        })
}

/// What a client trusts and presents over https.
#[derive(Clone, Default)]
pub struct ClientTls {
    roots: Option<Arc<Vec<Certificate<'static>>>>,
    identity: Option<ClientCert>,
}

/// Names what is configured, not the key material.
impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca_certificates", &self.roots.as_ref().map(|r| r.len()))
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

impl ClientTls {
    /// Trusts the CA certificates of `ca_file` (PEM) instead of the public web roots: a
    /// cluster's own CA for the rocemesh server, a company CA for webhook receivers.
    /// `None` keeps the Mozilla root set (public https receivers).
    pub fn load(ca_file: Option<&Path>) -> Result<Self, PemFileError> {
        Ok(Self {
            roots: ca_file.map(read_certificates).transpose()?.map(Arc::new),
            identity: None,
        })
    }

    /// Also presents the certificate chain of `cert_file` with the key of `key_file` to
    /// servers that ask for one (mutual TLS).
    pub fn with_client_certificate(
        mut self,
        cert_file: &Path,
        key_file: &Path,
    ) -> Result<Self, PemFileError> {
        let chain = read_certificates(cert_file)?;
        let key = read_private_key(key_file)?;
        self.identity = Some(ClientCert::new_with_certs(&chain, key));
        Ok(self)
    }

    fn tls_config(&self) -> TlsConfig {
        let roots = match &self.roots {
            Some(certs) => RootCerts::Specific(certs.clone()),
            None => RootCerts::WebPki,
        };
        TlsConfig::builder()
            .root_certs(roots)
            .client_cert(self.identity.clone())
            .build()
    }
}

/// The configuration every rocemesh client starts from: one timeout for the whole request,
/// statuses as answers (callers read error bodies), certificates checked against `tls`.
/// Callers add their own middleware (the agent's bearer token) and build.
pub fn config(
    timeout: Duration,
    tls: &ClientTls,
) -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .tls_config(tls.tls_config())
}

/// [`config`] built into an agent.
pub fn agent(timeout: Duration, tls: &ClientTls) -> ureq::Agent {
    config(timeout, tls).build().into()
}

/// Whether a request failed because the server's certificate was refused (unknown CA,
/// wrong name, expired) — the one failure a retry cannot fix.
pub fn is_certificate_error(err: &ureq::Error) -> bool {
    match err {
        ureq::Error::Rustls(rustls::Error::InvalidCertificate(_)) => true,
        ureq::Error::Io(io) => io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .is_some_and(|e| matches!(e, rustls::Error::InvalidCertificate(_))),
        _ => false,
    }
}

/// A failed request as an operator reads it: certificate refusals say what to do.
pub fn describe_error(err: &ureq::Error) -> String {
    if is_certificate_error(err) {
        format!(
            "the server's TLS certificate is not trusted ({err}): give the CA that signed it with --ca-file / ca_file"
        )
    } else {
        err.to_string()
    }
}

/// The analyzer a controller's answer names in [`crate::api::ANALYZER_HEADER`], when the
/// header holds a usable URL ([`crate::api::analyzer_url`]).
pub fn named_analyzer(headers: &ureq::http::HeaderMap) -> Option<String> {
    headers
        .get(crate::api::ANALYZER_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::api::analyzer_url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str, content: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rocemesh-pem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn bad_pem_files_are_clear_errors_naming_the_file() {
        let missing = Path::new("/nonexistent/ca.pem");
        let err = ClientTls::load(Some(missing)).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");

        let empty = scratch("empty.pem", b"no pem here\n");
        let err = ClientTls::load(Some(&empty)).unwrap_err().to_string();
        assert!(err.contains("holds no PEM CERTIFICATE"), "{err}");
        let err = read_private_key(&empty).unwrap_err().to_string();
        assert!(err.contains("holds no PEM PRIVATE KEY"), "{err}");

        let broken = scratch(
            "broken.pem",
            b"-----BEGIN CERTIFICATE-----\n@@@@\n-----END CERTIFICATE-----\n",
        );
        let err = ClientTls::load(Some(&broken)).unwrap_err().to_string();
        assert!(err.contains("is not valid PEM"), "{err}");

        let huge = scratch("huge.pem", &vec![b'A'; MAX_PEM_BYTES as usize + 10]);
        let err = ClientTls::load(Some(&huge)).unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");

        assert!(format!("{:?}", ClientTls::load(None).unwrap()).contains("None"));
    }
}
