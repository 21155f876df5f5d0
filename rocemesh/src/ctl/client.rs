//! The HTTP side of `ctl`: GETs and JSON POSTs with the bearer token, and every failure
//! turned into a message an operator can act on (which URL is unreachable, which token
//! is missing).

use anyhow::{Result, anyhow, bail};
use rocemesh_proto::api::{API_PREFIX, ErrorBody};
use rocemesh_proto::http_client::{self, ClientTls};
use serde::de::DeserializeOwned;
use std::time::Duration;

/// Timeout of one request.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read (problem and path lists are bounded server-side).
const MAX_BODY: u64 = 64 << 20;

/// A client of one server.
pub struct Client {
    http: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client of the server at `base` (e.g. `https://127.0.0.1:8080`), trusting `tls`.
    pub fn new(base: &str, token: Option<String>, tls: &ClientTls) -> Self {
        Self {
            http: http_client::agent(TIMEOUT, tls),
            base: base.trim_end_matches('/').to_string(),
            token: token.filter(|t| !t.is_empty()),
        }
    }

    /// `GET /api/v1{path}` decoded as `T`; `path` includes its query string.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = format!("{}{API_PREFIX}{path}", self.base);
        let mut req = self.http.get(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        self.answer("GET", path, &url, req.call())
    }

    /// `POST /api/v1{path}` with `body` as JSON, the answer decoded as `T`.
    pub fn post<T: DeserializeOwned>(&self, path: &str, body: &impl serde::Serialize) -> Result<T> {
        let url = format!("{}{API_PREFIX}{path}", self.base);
        let mut req = self.http.post(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        self.answer("POST", path, &url, req.send_json(body))
    }

    /// The decoded answer of a request, or an operator's error message.
    fn answer<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        url: &str,
        sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T> {
        let mut resp = sent.map_err(|e| {
            anyhow!(
                "cannot reach the rocemesh server at {}: {} (set --server or ROCEMESH_SERVER)",
                self.base,
                http_client::describe_error(&e)
            )
        })?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(|e| anyhow!("{method} {url}: reading the answer: {e}"))?;
        if (200..300).contains(&status) {
            return serde_json::from_str(&body)
                .map_err(|e| anyhow!("{method} {url}: unexpected answer: {e}"));
        }
        let reason = serde_json::from_str::<ErrorBody>(&body)
            .map_or_else(|_| body.trim().chars().take(200).collect(), |b| b.error);
        match (status, &self.token) {
            (401, None) => bail!(
                "the server requires a token: pass --token or set ROCEMESH_TOKEN (a read or admin token)"
            ),
            (401, Some(_)) => bail!(
                "the server does not accept this token ({reason}): check --token / ROCEMESH_TOKEN"
            ),
            (403, _) if method == "GET" => {
                bail!("this token's role may not read {path} ({reason}): use a read or admin token")
            }
            (403, _) => {
                bail!("this token's role may not {method} {path} ({reason}): use an admin token")
            }
            (404, _) => bail!("not found: {reason}"),
            _ => bail!("{method} {url}: HTTP {status}: {reason}"),
        }
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters stay).
pub(super) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn query_values_are_encoded() {
        assert_eq!(super::encode("h-1/eth0"), "h-1%2Feth0");
        assert_eq!(super::encode("t0->t1"), "t0-%3Et1");
    }
}
