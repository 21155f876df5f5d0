//! The agent's HTTP(S) client, shared by registration, pinglist polls, uploads, throughput
//! samples and comm-info look-ups: the common rocemesh client ([`rocemesh_proto::http_client`])
//! plus this process's credential (a bearer token) and TLS trust (a CA file, optionally a
//! client certificate for mutual TLS). Both are set once at start, before the agent runs.

use crate::config::AgentConfig;
use anyhow::{Context, Result};
use rocemesh_proto::http_client::{self, ClientTls};
use std::sync::OnceLock;
use std::time::Duration;

/// The `Authorization` value every request of this agent process carries (set once at start).
static BEARER: OnceLock<ureq::http::HeaderValue> = OnceLock::new();
/// What https connections of this process trust and present (set once at start).
static TLS: OnceLock<ClientTls> = OnceLock::new();

/// Makes every request of every [`http_agent`] built afterwards carry
/// `Authorization: Bearer <token>` (the server's `agent` role). One credential per process:
/// a second call with another token, or a token that cannot be a header, is an error.
pub fn set_bearer_token(token: &str) -> Result<()> {
    let mut value = ureq::http::HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| anyhow::anyhow!("the agent token must be printable ASCII"))?;
    value.set_sensitive(true);
    anyhow::ensure!(
        *BEARER.get_or_init(|| value.clone()) == value,
        "a different agent token is already set in this process"
    );
    Ok(())
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
pub fn http_agent(timeout: Duration) -> ureq::Agent {
    let mut config = http_client::config(timeout, TLS.get().unwrap_or(&ClientTls::default()));
    if let Some(value) = BEARER.get() {
        config = config.middleware(
            |mut req: ureq::http::Request<ureq::SendBody>,
             next: ureq::middleware::MiddlewareNext| {
                req.headers_mut()
                    .insert(ureq::http::header::AUTHORIZATION, value.clone());
                next.handle(req)
            },
        );
    }
    config.build().into()
}
