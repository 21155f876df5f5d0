//! The agent's HTTP(S) client, shared by registration, pinglist polls, uploads, throughput
//! samples and comm-info look-ups: the common rocemesh client ([`rocemesh_proto::http_client`])
//! plus this process's credential (a bearer token) and TLS trust (a CA file, optionally a
//! client certificate for mutual TLS). Both are set once at start, before the agent runs;
//! a token read from a file is read again when the server answers 401 (the file of a
//! rotated Kubernetes secret changes under a running agent).

use crate::config::AgentConfig;
use anyhow::{Context, Result};
use rocemesh_proto::http_client::{self, ClientTls};
use std::path::{Path, PathBuf};
use std::sync::{OnceLock, PoisonError, RwLock};
use std::time::Duration;

/// The `Authorization` value every request of this agent process carries.
static BEARER: RwLock<Option<ureq::http::HeaderValue>> = RwLock::new(None);
/// Where the token came from, when from a file ([`reload_token`] reads it again).
static TOKEN_FILE: OnceLock<PathBuf> = OnceLock::new();
/// What https connections of this process trust and present (set once at start).
static TLS: OnceLock<ClientTls> = OnceLock::new();

/// Makes every request of every [`http_agent`] built afterwards carry
/// `Authorization: Bearer <token>` (the server's `agent` role). One credential per process:
/// a second call with another token, or a token that cannot be a header, is an error.
pub fn set_bearer_token(token: &str) -> Result<()> {
    let value = header_value(token)?;
    let mut bearer = BEARER.write().unwrap_or_else(PoisonError::into_inner);
    anyhow::ensure!(
        bearer.as_ref().is_none_or(|v| *v == value),
        "a different agent token is already set in this process"
    );
    *bearer = Some(value);
    Ok(())
}

fn header_value(token: &str) -> Result<ureq::http::HeaderValue> {
    let mut value = ureq::http::HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| anyhow::anyhow!("the agent token must be printable ASCII"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// Like [`set_bearer_token`] for a token read from `path` (checked by the caller), and
/// remembers `path` for [`reload_token`].
pub fn set_token_file(path: &Path, token: &str) -> Result<()> {
    set_bearer_token(token)?;
    anyhow::ensure!(
        *TOKEN_FILE.get_or_init(|| path.to_path_buf()) == path,
        "a different agent token file is already set in this process"
    );
    Ok(())
}

/// Reads the token file again (after a 401: the token may have been rotated) and uses its
/// token from the next request on. True when the token changed; a missing, empty or
/// unusable file keeps the current token (logged).
pub(crate) fn reload_token() -> bool {
    let Some(path) = TOKEN_FILE.get() else {
        return false;
    };
    let token = match std::fs::read_to_string(path) {
        Ok(text) => text.trim().to_string(),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the agent token file again");
            return false;
        }
    };
    let value = match header_value(&token) {
        Ok(v) if !token.is_empty() => v,
        _ => {
            tracing::warn!(file = %path.display(), "the agent token file holds no usable token; keeping the current one");
            return false;
        }
    };
    let mut bearer = BEARER.write().unwrap_or_else(PoisonError::into_inner);
    if bearer.as_ref() == Some(&value) {
        return false;
    }
    *bearer = Some(value);
    tracing::info!(file = %path.display(), "agent token changed; using the new one");
    true
}

/// The TLS trust of `cfg`: its `ca_file` (else the public web roots) and, when both are
/// set, the client certificate and key presented to a server that asks (mutual TLS).
pub fn client_tls(cfg: &AgentConfig) -> Result<ClientTls> {
    let tls = ClientTls::load(cfg.ca_file.as_deref()).context("agent ca_file")?;
    match (&cfg.client_cert_file, &cfg.client_key_file) {
        (None, None) => Ok(tls),
        (Some(cert), Some(key)) => tls
            .with_client_certificate(cert, key)
            .context("agent client certificate"),
        _ => anyhow::bail!("give both client_cert_file and client_key_file, or neither"),
    }
}

/// Makes every [`http_agent`] built afterwards use `tls`; one trust per process.
pub fn set_tls(tls: ClientTls) -> Result<()> {
    TLS.set(tls)
        .map_err(|_| anyhow::anyhow!("the agent's TLS trust is already set in this process"))
}

/// A blocking HTTP(S) client that reports every status as a response (not an error), checks
/// server certificates against the process's trust and sends the agent's bearer token,
/// when one is set, on every request.
pub(crate) fn http_agent(timeout: Duration) -> ureq::Agent {
    let config = http_client::config(timeout, TLS.get().unwrap_or(&ClientTls::default()));
    config
        .middleware(
            |mut req: ureq::http::Request<ureq::SendBody>,
             next: ureq::middleware::MiddlewareNext| {
                let bearer = BEARER
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                if let Some(value) = bearer {
                    req.headers_mut()
                        .insert(ureq::http::header::AUTHORIZATION, value);
                }
                next.handle(req)
            },
        )
        .build()
        .into()
}
