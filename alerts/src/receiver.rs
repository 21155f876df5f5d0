//! A webhook receiver: where notifications go, the key that signs them and which
//! problems it wants. Validation is the same for config-file and API receivers.

use anyhow::bail;
use axum::http::Uri;
use rocemesh_proto::api::{ComponentKind, Priority};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Longest receiver name.
const MAX_NAME: usize = 64;
/// Longest webhook URL.
const MAX_URL: usize = 2_048;
/// Longest secret.
const MAX_SECRET: usize = 4_096;

/// The priority label of a problem the impact loop did not assess in time.
pub const UNKNOWN_PRIORITY: &str = "unknown";

/// Where a receiver was defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The `[alerts]` config section: read-only through the API.
    Config,
    /// `POST /api/v1/alerts/receivers` (stored in the database).
    Api,
}

/// Which problems a receiver wants; an empty list means no filter on that dimension.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Filters {
    /// Priorities (`"P0"`, `"P1"`, `"P2"`); with any set, "unknown" never matches.
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    pub priorities: Vec<Priority>,
    /// Component kinds (`"link"`, `"switch"`, `"rnic"`, `"host"`, `"agent"`).
    #[serde(default)]
    pub components: Vec<ComponentKind>,
}

impl Filters {
    /// True when a problem with `priority` (None: unknown) on a `component` passes.
    pub fn accepts(&self, priority: Option<Priority>, component: ComponentKind) -> bool {
        let priority_ok =
            self.priorities.is_empty() || priority.is_some_and(|p| self.priorities.contains(&p));
        let component_ok = self.components.is_empty() || self.components.contains(&component);
        priority_ok && component_ok
    }
}

/// A validated receiver.
#[derive(Clone, PartialEq, Eq)]
pub struct Receiver {
    /// Unique name; the `receiver` field of the payloads.
    pub name: String,
    /// Webhook URL.
    pub url: String,
    /// HMAC-SHA256 key of the `X-Rocemesh-Signature` header (None: unsigned).
    pub secret: Option<String>,
    /// What it wants.
    pub filters: Filters,
    /// Config file or API.
    pub source: Source,
}

/// What Debug output shows of a secret: whether there is one, never its value.
pub(crate) fn redacted(secret: &Option<String>) -> Option<&'static str> {
    secret.as_ref().map(|_| "<redacted>")
}

/// Debug output without the secret (receivers end up in logs and error messages).
impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("secret", &redacted(&self.secret))
            .field("filters", &self.filters)
            .field("source", &self.source)
            .finish()
    }
}

impl Receiver {
    /// Validates every field; the error says which one is wrong.
    pub fn new(
        name: String,
        url: String,
        secret: Option<String>,
        filters: Filters,
        source: Source,
    ) -> anyhow::Result<Self> {
        validate_name(&name)?;
        validate_url(&url)?;
        if secret
            .as_ref()
            .is_some_and(|s| s.is_empty() || s.len() > MAX_SECRET)
        {
            bail!("secret must be 1 to {MAX_SECRET} bytes");
        }
        Ok(Self {
            name,
            url,
            secret,
            filters,
            source,
        })
    }

    /// The public view (no secret).
    pub fn view(&self) -> ReceiverView {
        ReceiverView {
            name: self.name.clone(),
            url: self.url.clone(),
            signed: self.secret.is_some(),
            filters: self.filters.clone(),
            source: self.source,
        }
    }
}

/// `POST /api/v1/alerts/receivers` body.
#[derive(Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReceiverSpec {
    /// Unique name (letters, digits, `.`, `_`, `-`; at most 64).
    pub name: String,
    /// Webhook URL (`http(s)://host[:port]/path`).
    pub url: String,
    /// HMAC key for the signature header; stored, never returned.
    #[serde(default)]
    pub secret: Option<String>,
    /// Only these priorities (empty: all).
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    pub priorities: Vec<Priority>,
    /// Only these component kinds (empty: all).
    #[serde(default)]
    pub components: Vec<ComponentKind>,
}

/// Debug output without the secret (request bodies end up in logs).
impl std::fmt::Debug for ReceiverSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiverSpec")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("secret", &redacted(&self.secret))
            .field("priorities", &self.priorities)
            .field("components", &self.components)
            .finish()
    }
}

impl ReceiverSpec {
    /// Validates the body into an API receiver.
    pub fn into_receiver(self) -> anyhow::Result<Receiver> {
        Receiver::new(
            self.name,
            self.url,
            self.secret,
            Filters {
                priorities: self.priorities,
                components: self.components,
            },
            Source::Api,
        )
    }
}

impl ReceiverView {
    /// The view for a read-only caller: the URL keeps its scheme and host only (webhook
    /// URLs often carry a credential in their path or query).
    pub fn without_url_path(mut self) -> Self {
        let after_scheme = self.url.find("://").map_or(0, |i| i + 3);
        let host_end = self.url[after_scheme..]
            .find(['/', '?', '#'])
            .map_or(self.url.len(), |i| after_scheme + i);
        self.url = format!("{}/<redacted>", &self.url[..host_end]);
        self
    }
}

/// A receiver as the API shows it: everything but the secret.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReceiverView {
    /// Name.
    pub name: String,
    /// Webhook URL.
    pub url: String,
    /// True when notifications carry an `X-Rocemesh-Signature` header.
    pub signed: bool,
    /// Filters.
    #[serde(flatten)]
    pub filters: Filters,
    /// `config` (read-only) or `api`.
    pub source: Source,
}

fn validate_name(name: &str) -> anyhow::Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(ok_char) {
        bail!("name must be 1 to {MAX_NAME} letters, digits, '.', '_' or '-'");
    }
    Ok(())
}

/// Accepts an absolute `http://` or `https://` URL with a host and no credentials (put
/// those in the secret).
pub fn validate_url(url: &str) -> anyhow::Result<()> {
    if url.len() > MAX_URL || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        bail!("url must be at most {MAX_URL} characters without spaces or control characters");
    }
    let uri: Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("url {url:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => bail!("url {url:?} must start with http:// or https://"),
    }
    let authority = uri
        .authority()
        .ok_or_else(|| anyhow::anyhow!("url {url:?} has no host"))?;
    if authority.as_str().contains('@') {
        bail!("url must not carry credentials; use the receiver's secret");
    }
    if authority.host().is_empty() {
        bail!("url {url:?} has no host");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_views_keep_scheme_and_host_only() {
        let r = ReceiverSpec {
            name: "n".into(),
            url: "https://hooks.example:8443/services/T0/B1/s3cr3t?token=x".into(),
            secret: None,
            priorities: Vec::new(),
            components: Vec::new(),
        }
        .into_receiver()
        .unwrap();
        let v = r.view().without_url_path();
        assert_eq!(v.url, "https://hooks.example:8443/<redacted>");
        assert!(!serde_json::to_string(&v).unwrap().contains("s3cr3t"));
    }

    #[test]
    fn urls() {
        assert!(validate_url("http://127.0.0.1:8080/hook?x=1").is_ok());
        assert!(validate_url("http://alerts.example/").is_ok());
        assert!(validate_url("https://alerts.example/hook").is_ok());
        for bad in [
            "",
            "127.0.0.1:80",
            "ftp://x/",
            "https://",
            "http://",
            "http://u:p@x/",
            "http://x/a b",
            "/relative",
        ] {
            assert!(validate_url(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn filters() {
        let f = Filters {
            priorities: vec![Priority::P0],
            components: vec![ComponentKind::Link],
        };
        assert!(f.accepts(Some(Priority::P0), ComponentKind::Link));
        assert!(!f.accepts(Some(Priority::P2), ComponentKind::Link));
        assert!(!f.accepts(None, ComponentKind::Link));
        assert!(!f.accepts(Some(Priority::P0), ComponentKind::Switch));
        assert!(Filters::default().accepts(None, ComponentKind::Host));
    }

    #[test]
    fn debug_hides_the_secret() {
        let r = Receiver::new(
            "a".into(),
            "http://x/".into(),
            Some("topsecret".into()),
            Filters::default(),
            Source::Api,
        )
        .unwrap();
        assert!(!format!("{r:?}").contains("topsecret"));
        assert!(
            !serde_json::to_string(&r.view())
                .unwrap()
                .contains("topsecret")
        );
    }
}
