//! Bearer-token access control of an HTTP API: the `[auth]` config section, the roles a
//! token grants and the middleware that wraps a server's whole router.
//!
//! Roles: `read` may GET (and HEAD) what its routes open to readers; `agent` may call only
//! the routes declared for agents; `admin` may call everything (see [`crate::Access`],
//! which each route declares). Outside `/api/` (health, readiness, `/metrics`, the
//! dashboard's page and assets) and the open routes (the OpenAPI document) need no token.
//! Without any token configured, auth is off (a warning is logged at start). An admitted
//! request carries its [`Role`], so handlers can hide what only administrators may see and
//! know that callers are authenticated.
//!
//! An agent token may name the hosts it stands for (`hosts`, exact names or `*` patterns):
//! its requests then carry [`AgentHosts`], and the registration refuses any other host;
//! since result batches are bound to the upload key a registration returns, its holder
//! cannot speak for any other host. A token without `hosts` (one secret shared by a
//! DaemonSet) may register any host name.

use crate::{HttpError, Policy};
use anyhow::{Context, Result, bail};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;

/// Shortest token accepted: anything shorter is guessable.
const MIN_TOKEN_LEN: usize = 16;
/// Longest token accepted (a header, not a file dump).
const MAX_TOKEN_LEN: usize = 4096;

/// What a token may do; an admitted request carries its caller's role as an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// GET of the API's views (operators, dashboards, scripts).
    Read,
    /// Everything (writes, deletes, configuration).
    Admin,
    /// Only the calls an agent makes.
    Agent,
}

impl Role {
    /// Lowercase name as in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Admin => "admin",
            Self::Agent => "agent",
        }
    }
}

/// The `[auth]` section of the server config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Accepted tokens; none = auth off.
    pub tokens: Vec<TokenConfig>,
}

/// One accepted token: inline (`token`) or read from a file at start (`token_file`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// What the token may do.
    pub role: Role,
    /// The token itself.
    #[serde(default)]
    pub token: Option<String>,
    /// A file holding the token (e.g. a mounted Kubernetes secret); surrounding whitespace
    /// is ignored.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Agent tokens only: the host names it may register (exact, or with `*` matching any
    /// run of characters); empty: any host.
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// Never prints the token: configs are logged and shown in errors.
impl std::fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenConfig")
            .field("role", &self.role)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .field("hosts", &self.hosts)
            .finish()
    }
}

/// Reads a token from a file: trimmed, checked like an inline one; the error names the file
/// (never the content).
pub fn read_token_file(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading token file {}", path.display()))?;
    let token = text.trim().to_string();
    check_token(&token).with_context(|| format!("token file {}", path.display()))?;
    Ok(token)
}

/// A token must fit in an `Authorization` header and be long enough not to be guessed.
fn check_token(token: &str) -> Result<()> {
    if token.len() < MIN_TOKEN_LEN || token.len() > MAX_TOKEN_LEN {
        bail!(
            "a token must be {MIN_TOKEN_LEN} to {MAX_TOKEN_LEN} characters long, this one has {}",
            token.len()
        );
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("a token must be printable ASCII without spaces");
    }
    Ok(())
}

/// What a presented token grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant<'a> {
    /// Its role.
    pub role: Role,
    /// Host-name patterns an agent token is limited to (empty: any host).
    pub hosts: &'a Arc<[String]>,
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters.
fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else {
        return rest.is_empty();
    };
    for part in parts {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The host-name patterns of an agent token limited to some hosts, carried by its requests
/// so that the registration can refuse any other host.
#[derive(Debug, Clone)]
pub struct AgentHosts(Arc<[String]>);

impl AgentHosts {
    /// Whether the token may register host `name` (any host when it names none).
    pub fn may_register(&self, name: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|p| matches(p, name))
    }
}

struct Entry {
    role: Role,
    token: Box<[u8]>,
    hosts: Arc<[String]>,
}

/// The accepted tokens, loaded once at start.
pub struct Tokens {
    entries: Vec<Entry>,
}

impl Tokens {
    /// Loads `[auth]` (reading token files); `None` when no token is configured (auth off).
    pub fn load(cfg: &AuthConfig) -> Result<Option<Arc<Self>>> {
        let mut entries: Vec<Entry> = Vec::with_capacity(cfg.tokens.len());
        for (i, t) in cfg.tokens.iter().enumerate() {
            let what = || format!("[auth] tokens[{i}] (role {})", t.role.as_str());
            let token = match (&t.token, &t.token_file) {
                (Some(token), None) => {
                    check_token(token).with_context(what)?;
                    token.clone()
                }
                (None, Some(path)) => read_token_file(path).with_context(what)?,
                _ => bail!("{}: give exactly one of token and token_file", what()),
            };
            if entries
                .iter()
                .any(|e| constant_time_eq(&e.token, token.as_bytes()))
            {
                bail!("{}: the same token is configured twice", what());
            }
            if !t.hosts.is_empty() && t.role != Role::Agent {
                bail!("{}: only agent tokens are limited to hosts", what());
            }
            if t.hosts.iter().any(|h| h.is_empty() || h.len() > 253) {
                bail!("{}: a hosts pattern must be 1 to 253 characters", what());
            }
            entries.push(Entry {
                role: t.role,
                token: token.into_bytes().into_boxed_slice(),
                hosts: t.hosts.as_slice().into(),
            });
        }
        Ok((!entries.is_empty()).then(|| Arc::new(Self { entries })))
    }

    /// What a presented token grants. Every configured token is compared, each in time
    /// independent of where the bytes differ, so timing tells nothing about the tokens.
    pub fn grant_of(&self, presented: &[u8]) -> Option<Grant<'_>> {
        let mut found = None;
        for e in &self.entries {
            if constant_time_eq(&e.token, presented) && found.is_none() {
                found = Some(Grant {
                    role: e.role,
                    hosts: &e.hosts,
                });
            }
        }
        found
    }
}

/// Equality whose time depends on the lengths only, not on where the bytes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The accepted tokens and the access rules of the routes they are checked against.
struct Guard {
    tokens: Arc<Tokens>,
    policy: Policy,
}

/// Wraps `router` in the token check of `policy` (the rules of its routes, from
/// [`crate::Routes`]); without tokens it is returned as is (auth off).
pub fn protect(router: Router, tokens: Option<Arc<Tokens>>, policy: Policy) -> Router {
    match tokens {
        Some(tokens) => router.layer(middleware::from_fn_with_state(
            Arc::new(Guard { tokens, policy }),
            check,
        )),
        None => {
            tracing::warn!(
                "no [auth] tokens configured: the API is open to anyone who can reach it"
            );
            router
        }
    }
}

fn refuse(status: StatusCode, error: String) -> Response {
    let mut resp = HttpError::new(status, error).into_response();
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}

/// The middleware: open paths pass; others need a known token whose role allows the call.
async fn check(State(guard): State<Arc<Guard>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let path = path.as_str();
    if guard.policy.is_open(path) {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    let Some(presented) = presented else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "missing token: send `Authorization: Bearer <token>`".into(),
        );
    };
    match guard.tokens.grant_of(presented) {
        None => refuse(StatusCode::UNAUTHORIZED, "unknown token".into()),
        Some(grant) if guard.policy.admits(grant.role, req.method(), path) => {
            let hosts = (!grant.hosts.is_empty()).then(|| AgentHosts(grant.hosts.clone()));
            req.extensions_mut().insert(grant.role);
            if let Some(hosts) = hosts {
                req.extensions_mut().insert(hosts);
            }
            next.run(req).await
        }
        Some(grant) => refuse(
            StatusCode::FORBIDDEN,
            format!(
                "a {} token may not {} {path}",
                grant.role.as_str(),
                req.method()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(toml_text: &str) -> Result<Option<Arc<Tokens>>> {
        Tokens::load(&toml::from_str::<AuthConfig>(toml_text)?)
    }

    #[test]
    fn tokens_load_inline_and_from_files() {
        assert!(tokens("").unwrap().is_none(), "no tokens = auth off");
        let dir = std::env::temp_dir().join(format!("rocemesh-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("agent");
        std::fs::write(&file, "agent-token-0123456789\n").unwrap();
        let t = tokens(&format!(
            "tokens = [{{ role = \"admin\", token = \"admin-token-0123456789\" }}, {{ role = \"agent\", token_file = {:?} }}]",
            file.display().to_string()
        ))
        .unwrap()
        .unwrap();
        let role = |p: &[u8]| t.grant_of(p).map(|g| g.role);
        assert_eq!(role(b"admin-token-0123456789"), Some(Role::Admin));
        assert_eq!(role(b"agent-token-0123456789"), Some(Role::Agent));
        assert_eq!(role(b"agent-token-012345678"), None);
        assert_eq!(role(b""), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn host_patterns_match_whole_names() {
        let grant = |hosts: &[&str], name: &str| {
            AgentHosts(hosts.iter().map(|h| h.to_string()).collect()).may_register(name)
        };
        assert!(grant(&[], "anything"));
        assert!(grant(&["gpu-7"], "gpu-7"));
        assert!(!grant(&["gpu-7"], "gpu-70") && !grant(&["gpu-7"], "xgpu-7"));
        assert!(grant(&["gpu-*"], "gpu-12") && grant(&["gpu-*"], "gpu-"));
        assert!(!grant(&["gpu-*"], "cpu-12"));
        assert!(grant(&["rack*-node*.dc1"], "rack3-node17.dc1"));
        assert!(!grant(&["rack*-node*.dc1"], "rack3-node17.dc2"));
        assert!(!grant(&["a*a"], "a"), "prefix and suffix may not overlap");
        assert!(grant(&["x", "*-y"], "host-y"));
        let t = tokens(
            "tokens = [{ role = \"agent\", token = \"0123456789abcdef\", hosts = [\"n1\"] }]",
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.grant_of(b"0123456789abcdef").unwrap().hosts[..], ["n1"]);
        let err = tokens(
            "tokens = [{ role = \"admin\", token = \"0123456789abcdef\", hosts = [\"n1\"] }]",
        )
        .err()
        .unwrap();
        assert!(format!("{err:#}").contains("only agent tokens"), "{err:#}");
    }

    #[test]
    fn bad_tokens_are_clear_errors_without_the_secret() {
        let err = tokens("tokens = [{ role = \"read\", token_file = \"/nonexistent/tok\" }]")
            .err()
            .unwrap();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("/nonexistent/tok") && msg.contains("role read"),
            "{msg}"
        );
        let err = tokens("tokens = [{ role = \"read\", token = \"short\" }]")
            .err()
            .unwrap();
        assert!(!format!("{err:#}").contains("short\""), "{err:#}");
        assert!(tokens("tokens = [{ role = \"read\" }]").is_err());
        assert!(tokens("tokens = [{ role = \"root\", token = \"0123456789abcdef\" }]").is_err());
        let dup = "tokens = [{ role = \"read\", token = \"0123456789abcdef\" }, { role = \"admin\", token = \"0123456789abcdef\" }]";
        assert!(format!("{:#}", tokens(dup).err().unwrap()).contains("twice"));
        let c: AuthConfig =
            toml::from_str("tokens = [{ role = \"read\", token = \"0123456789abcdef\" }]").unwrap();
        assert!(!format!("{c:?}").contains("0123456789abcdef"));
    }
}
