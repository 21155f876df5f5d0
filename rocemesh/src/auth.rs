//! Bearer-token access control of the HTTP API: the `[auth]` config section, the roles a
//! token grants and the axum middleware that wraps the server's whole router.
//!
//! Roles: `read` may GET (and HEAD) anything under `/api/v1` but pinglists (they carry
//! the cluster probe keys); `agent` may call only what an
//! agent calls (registration, pinglist polls, result and throughput uploads, task readiness,
//! the comm-info look-up of service tracing); `admin` may call everything. Outside `/api/`
//! (health, readiness, `/metrics`, the dashboard's page and assets) and the OpenAPI document
//! stay open. Without any token configured, auth is off (a warning is logged at start).
//! An admitted request carries its [`CallerRole`], so handlers can hide what only
//! administrators may see and know that callers are authenticated.
//!
//! An agent token may name the hosts it stands for (`hosts`, exact names or `*` patterns):
//! it can then register only those, and since result batches are bound to the upload key a
//! registration returns, its holder cannot speak for any other host. A token without
//! `hosts` (one secret shared by a DaemonSet) may register any host name.

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rocemesh_proto::api::{CallerRole, ErrorBody};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;

/// Path of the OpenAPI document, open to everyone.
pub const OPENAPI_PATH: &str = "/api/v1/openapi.json";
/// Shortest token accepted: anything shorter is guessable.
pub const MIN_TOKEN_LEN: usize = 16;
/// Longest token accepted (a header, not a file dump).
pub const MAX_TOKEN_LEN: usize = 4096;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// GET of every API route (operators, dashboards, scripts).
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

    /// Whether this role may call `method path` (a path under `/api/v1`).
    pub fn may(self, method: &Method, path: &str) -> bool {
        match self {
            Self::Admin => true,
            Self::Read => {
                (*method == Method::GET || *method == Method::HEAD) && !carries_probe_keys(path)
            }
            Self::Agent => is_agent_call(method, path),
        }
    }
}

/// Pinglists carry the cluster probe keys: agents and admins only.
fn carries_probe_keys(path: &str) -> bool {
    path.starts_with("/api/v1/pinglists/")
}

/// The calls an agent makes, and nothing else.
fn is_agent_call(method: &Method, path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/api/v1/") else {
        return false;
    };
    let segments: Vec<&str> = rest.split('/').collect();
    let get = *method == Method::GET || *method == Method::HEAD;
    let post = *method == Method::POST;
    match segments.as_slice() {
        ["agents", "register"] | ["results"] | ["throughput"] | ["tasks", _, "ready"] => post,
        ["pinglists", _] | ["rnics", "by-ip", _] => get,
        _ => false,
    }
}

/// Whether a path is served without a token.
pub fn is_open(path: &str) -> bool {
    !path.starts_with("/api/") || path == OPENAPI_PATH
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
    pub hosts: &'a [String],
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

impl Grant<'_> {
    /// Whether this grant may register host `name`.
    pub fn may_register(&self, name: &str) -> bool {
        self.hosts.is_empty() || self.hosts.iter().any(|p| matches(p, name))
    }
}

struct Entry {
    role: Role,
    token: Box<[u8]>,
    hosts: Vec<String>,
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
                hosts: t.hosts.clone(),
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

/// Wraps `router` in the token check; without tokens it is returned as is (auth off).
pub fn protect(router: Router, tokens: Option<Arc<Tokens>>) -> Router {
    match tokens {
        Some(tokens) => router.layer(middleware::from_fn_with_state(tokens, check)),
        None => {
            tracing::warn!(
                "no [auth] tokens configured: the API is open to anyone who can reach it"
            );
            router
        }
    }
}

fn refuse(status: StatusCode, error: String) -> Response {
    let mut resp = (status, axum::Json(ErrorBody { error })).into_response();
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}

/// The middleware: open paths pass; others need a known token whose role allows the call.
async fn check(State(tokens): State<Arc<Tokens>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let path = path.as_str();
    if is_open(path) {
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
    match tokens.grant_of(presented) {
        None => refuse(StatusCode::UNAUTHORIZED, "unknown token".into()),
        Some(grant) if grant.role.may(req.method(), path) => {
            req.extensions_mut().insert(match grant.role {
                Role::Read => CallerRole::Read,
                Role::Agent => CallerRole::Agent,
                Role::Admin => CallerRole::Admin,
            });
            if !grant.hosts.is_empty() && path == REGISTER_PATH {
                req = match registers_allowed_host(req, grant).await {
                    Ok(req) => req,
                    Err(refused) => return refused,
                };
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

/// The registration route, whose body names the host an agent stands for.
const REGISTER_PATH: &str = "/api/v1/agents/register";

/// Reads a registration's body (bounded like the controller's) and refuses it when the
/// host it names is not one `grant` may register; otherwise hands the request on intact.
/// A body that is no registration goes on to the handler, which says what is wrong.
async fn registers_allowed_host(req: Request, grant: Grant<'_>) -> Result<Request, Response> {
    #[derive(Deserialize)]
    struct Named {
        host: String,
    }
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, rocemesh_controller::api::MAX_BODY_BYTES)
        .await
        .map_err(|e| {
            refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("registration body: {e}"),
            )
        })?;
    if let Ok(named) = serde_json::from_slice::<Named>(&bytes)
        && !grant.may_register(&named.host)
    {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            format!("this agent token may not register host {:?}", named.host),
        ));
    }
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(toml_text: &str) -> Result<Option<Arc<Tokens>>> {
        Tokens::load(&toml::from_str::<AuthConfig>(toml_text)?)
    }

    #[test]
    fn roles_allow_what_the_contract_says() {
        let (get, post, delete) = (Method::GET, Method::POST, Method::DELETE);
        assert!(Role::Read.may(&get, "/api/v1/problems"));
        assert!(!Role::Read.may(&get, "/api/v1/pinglists/7"), "probe keys");
        assert!(!Role::Read.may(&post, "/api/v1/tasks"));
        assert!(Role::Admin.may(&delete, "/api/v1/hosts/3"));
        for (m, p) in [
            (&post, "/api/v1/agents/register"),
            (&get, "/api/v1/pinglists/7"),
            (&post, "/api/v1/results"),
            (&post, "/api/v1/throughput"),
            (&post, "/api/v1/tasks/4/ready"),
            (&get, "/api/v1/rnics/by-ip/10.0.0.1"),
        ] {
            assert!(Role::Agent.may(m, p), "{m} {p}");
        }
        for (m, p) in [
            (&get, "/api/v1/problems"),
            (&post, "/api/v1/tasks"),
            (&get, "/api/v1/tasks/4/ready"),
            (&post, "/api/v1/tasks/4/ready/x"),
            (&delete, "/api/v1/hosts/1"),
            (&get, "/api/v1/rnics"),
        ] {
            assert!(!Role::Agent.may(m, p), "{m} {p}");
        }
        assert!(is_open("/healthz") && is_open("/") && is_open("/assets/app.js"));
        assert!(is_open(OPENAPI_PATH) && is_open("/metrics"));
        assert!(!is_open("/api/v1/problems") && !is_open("/api/v2/x"));
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
            let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
            Grant {
                role: Role::Agent,
                hosts: &hosts,
            }
            .may_register(name)
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
        assert_eq!(t.grant_of(b"0123456789abcdef").unwrap().hosts, ["n1"]);
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
