//! The `[alerts]` section of the server configuration.

use crate::receiver::{Filters, Receiver, Source};
use anyhow::{Context, bail};
use rocemesh_proto::api::{ComponentKind, Priority};
use serde::Deserialize;
use std::path::PathBuf;

/// Knobs of the alerts service and the receivers defined in the config file (read-only
/// through the API).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsConfig {
    /// Base URL of this server as operators reach it: `externalURL` of every payload and
    /// the prefix of each alert's `generatorURL` (`{external_url}/api/v1/problems/{id}`).
    pub external_url: String,
    /// Interval between two looks at the problems table and the outbox.
    #[serde(rename = "poll", with = "rocemesh_proto::duration::millis")]
    pub poll_ms: u64,
    /// How long a new notification waits for others of its group (same receiver,
    /// priority and kind) to go out in one request.
    #[serde(rename = "group_wait", with = "rocemesh_proto::duration::millis")]
    pub group_wait_ms: u64,
    /// How long an active problem without a priority waits for the impact assessment
    /// before it goes out as priority "unknown" (only to receivers without a priority filter).
    #[serde(rename = "priority_wait", with = "rocemesh_proto::duration::millis")]
    pub priority_wait_ms: u64,
    /// How long outbox rows and de-duplication records are kept; a notification still
    /// undelivered after this long is given up (recorded as failed).
    #[serde(rename = "retention", with = "rocemesh_proto::duration::millis")]
    pub retention_ms: u64,
    /// First retry delay after a failed delivery; doubles per attempt, with jitter.
    #[serde(rename = "retry_initial", with = "rocemesh_proto::duration::millis")]
    pub retry_initial_ms: u64,
    /// Longest retry delay.
    #[serde(rename = "retry_max", with = "rocemesh_proto::duration::millis")]
    pub retry_max_ms: u64,
    /// Attempts after which a 4xx reply (other than 408 and 429) is a permanent failure.
    pub permanent_after_attempts: u32,
    /// Timeout of one webhook request (connect to last byte).
    #[serde(rename = "timeout", with = "rocemesh_proto::duration::millis")]
    pub timeout_ms: u64,
    /// CA certificates (PEM) https receivers must chain to (default: the public web
    /// roots). Invalid certificates are always refused.
    pub ca_file: Option<PathBuf>,
    /// Receivers from the config file.
    pub receivers: Vec<ReceiverConfig>,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            external_url: String::new(),
            poll_ms: 1_000,
            group_wait_ms: 2_000,
            priority_wait_ms: 10_000,
            retention_ms: 7 * 24 * 3_600_000,
            retry_initial_ms: 1_000,
            retry_max_ms: 300_000,
            permanent_after_attempts: 3,
            timeout_ms: 10_000,
            ca_file: None,
            receivers: Vec::new(),
        }
    }
}

/// One receiver as written in the config file.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverConfig {
    /// Unique name (letters, digits, `.`, `_`, `-`).
    pub name: String,
    /// Webhook URL (`http://...` or `https://...`).
    pub url: String,
    /// HMAC key of the signature header, inline.
    #[serde(default)]
    pub secret: Option<String>,
    /// HMAC key read from this file (trailing newline dropped); exclusive with `secret`.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// Only problems of these priorities (empty: all, including "unknown").
    #[serde(default)]
    pub priorities: Vec<Priority>,
    /// Only problems blamed on these component kinds (empty: all).
    #[serde(default)]
    pub components: Vec<ComponentKind>,
}

/// Debug output without the secret (the server config is logged).
impl std::fmt::Debug for ReceiverConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiverConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("secret", &crate::receiver::redacted(&self.secret))
            .field("secret_file", &self.secret_file)
            .field("priorities", &self.priorities)
            .field("components", &self.components)
            .finish()
    }
}

impl AlertsConfig {
    /// Checks the knobs and turns the config receivers into validated [`Receiver`]s
    /// (reading secret files); any bad receiver or duplicate name is an error.
    pub fn validate(&self) -> anyhow::Result<Vec<Receiver>> {
        if !self.external_url.is_empty() {
            crate::receiver::validate_url(&self.external_url).context("alerts.external_url")?;
        }
        for (name, v) in [
            ("poll", self.poll_ms),
            ("timeout", self.timeout_ms),
            ("retry_initial", self.retry_initial_ms),
            ("retention", self.retention_ms),
        ] {
            if v == 0 {
                bail!("alerts.{name} must be positive");
            }
        }
        if self.retry_max_ms < self.retry_initial_ms {
            bail!("alerts.retry_max must be at least alerts.retry_initial");
        }
        if self.permanent_after_attempts == 0 {
            bail!("alerts.permanent_after_attempts must be positive");
        }
        let mut out: Vec<Receiver> = Vec::with_capacity(self.receivers.len());
        for r in &self.receivers {
            let secret = match (&r.secret, &r.secret_file) {
                (Some(_), Some(_)) => {
                    bail!(
                        "alerts receiver {:?}: give secret or secret_file, not both",
                        r.name
                    )
                }
                (Some(s), None) => Some(s.clone()),
                (None, Some(path)) => Some(
                    std::fs::read_to_string(path)
                        .with_context(|| {
                            format!(
                                "alerts receiver {:?}: reading secret_file {}",
                                r.name,
                                path.display()
                            )
                        })?
                        .trim_end_matches(['\n', '\r'])
                        .to_string(),
                ),
                (None, None) => None,
            };
            let receiver = Receiver::new(
                r.name.clone(),
                r.url.clone(),
                secret,
                Filters {
                    priorities: r.priorities.clone(),
                    components: r.components.clone(),
                },
                Source::Config,
            )
            .with_context(|| format!("alerts receiver {:?}", r.name))?;
            if out.iter().any(|o| o.name == receiver.name) {
                bail!("alerts receiver {:?} is defined twice", r.name);
            }
            out.push(receiver);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<Vec<Receiver>> {
        let cfg: AlertsConfig = toml::from_str(text)?;
        cfg.validate()
    }

    #[test]
    fn receivers_parse_with_filters_and_secret_file() {
        let dir = std::env::temp_dir().join(format!("alerts-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, "s3cret\n").unwrap();
        let text = format!(
            "poll = \"500ms\"\n[[receivers]]\nname = \"ops\"\nurl = \"http://127.0.0.1:9/hook\"\nsecret_file = {:?}\npriorities = [\"P0\", \"P1\"]\ncomponents = [\"link\"]\n",
            file.display().to_string()
        );
        let rs = parse(&text).unwrap();
        assert_eq!(rs.len(), 1);
        assert_eq!(rs[0].secret.as_deref(), Some("s3cret"));
        assert_eq!(rs[0].filters.priorities, vec![Priority::P0, Priority::P1]);
        assert_eq!(rs[0].filters.components, vec![ComponentKind::Link]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_receivers_are_refused() {
        let one = |body: &str| parse(&format!("[[receivers]]\n{body}\n"));
        assert!(one("name = \"a\"\nurl = \"ftp://x/\"").is_err());
        assert!(one("name = \"a b\"\nurl = \"http://x/\"").is_err());
        assert!(one("name = \"a\"\nurl = \"http://x/\"\npriorities = [\"P9\"]").is_err());
        assert!(one("name = \"a\"\nurl = \"http://x/\"\ncomponents = [\"cable\"]").is_err());
        assert!(
            one("name = \"a\"\nurl = \"http://x/\"\nsecret = \"s\"\nsecret_file = \"/f\"").is_err()
        );
        assert!(
            one("name = \"a\"\nurl = \"http://x/\"\nsecret_file = \"/nonexistent/s\"").is_err()
        );
        assert!(one("name = \"a\"\nurl = \"http://x/\"\nbogus = 1").is_err());
        let dup = "[[receivers]]\nname = \"a\"\nurl = \"http://x/\"\n[[receivers]]\nname = \"a\"\nurl = \"http://y/\"\n";
        assert!(parse(dup).unwrap_err().to_string().contains("twice"));
        assert!(parse("poll = \"0s\"").is_err());
    }
}
