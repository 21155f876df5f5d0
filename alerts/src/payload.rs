//! The webhook body, compatible with Alertmanager's webhook payload version "4", so
//! receivers written for Alertmanager work unchanged.

use crate::receiver::UNKNOWN_PRIORITY;
use rocemesh_proto::api::{Priority, Problem};
use rocemesh_proto::utc::rfc3339_ms;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Alertmanager's "not ended" `endsAt` (Go's zero time).
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Alertmanager's `status` of an alert or a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The problem is active.
    Firing,
    /// The problem stopped.
    Resolved,
}

impl Status {
    /// The wire name, also stored in `alert_outbox.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Firing => "firing",
            Self::Resolved => "resolved",
        }
    }
}

/// One alert of a notification (Alertmanager `alerts[]` entry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    /// Firing or resolved.
    pub status: Status,
    /// alertname, kind, component_kind, component, priority, severity.
    pub labels: BTreeMap<String, String>,
    /// summary, description (with the evidence).
    pub annotations: BTreeMap<String, String>,
    /// First evidence (RFC 3339).
    pub starts_at: String,
    /// Resolution time, or Go's zero time while firing.
    pub ends_at: String,
    /// Where to look: the problem in the API.
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
    /// Stable id of the problem episode (same for its firing and resolved alerts).
    pub fingerprint: String,
}

/// One webhook request body (Alertmanager webhook payload, version "4").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// Always "4".
    pub version: String,
    /// Identifies the group: `{}:{kind="...",priority="..."}`.
    pub group_key: String,
    /// Alerts left out of this request (always 0: groups are sent whole).
    pub truncated_alerts: u32,
    /// Firing when any alert fires, else resolved.
    pub status: Status,
    /// Receiver name.
    pub receiver: String,
    /// The labels the group is keyed on: priority and kind.
    pub group_labels: BTreeMap<String, String>,
    /// Labels every alert of the request shares.
    pub common_labels: BTreeMap<String, String>,
    /// Annotations every alert of the request shares.
    pub common_annotations: BTreeMap<String, String>,
    /// The server's external URL.
    #[serde(rename = "externalURL")]
    pub external_url: String,
    /// The alerts.
    pub alerts: Vec<Alert>,
}

/// The priority label: "P0" / "P1" / "P2" or "unknown".
pub fn priority_label(p: Option<Priority>) -> &'static str {
    p.map_or(UNKNOWN_PRIORITY, Priority::as_str)
}

/// Severity in the usual Alertmanager vocabulary, from the priority.
fn severity(p: Option<Priority>) -> &'static str {
    match p {
        Some(Priority::P0) => "critical",
        Some(Priority::P1) | None => "warning",
        Some(Priority::P2) => "info",
    }
}

/// snake_case serde name of a unit enum variant (`link_fault`, `link`).
pub fn wire_name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// `link_fault` -> `RocemeshLinkFault`.
fn alertname(kind: &str) -> String {
    let mut out = String::from("Rocemesh");
    for word in kind.split('_') {
        let mut c = word.chars();
        if let Some(first) = c.next() {
            out.extend(first.to_uppercase());
            out.push_str(c.as_str());
        }
    }
    out
}

/// 16 hex digits identifying a problem episode.
fn fingerprint(p: &Problem) -> String {
    let digest = Sha256::digest(format!(
        "{}|{}|{}|{}",
        p.id,
        wire_name(&p.kind),
        wire_name(&p.component_kind),
        p.component
    ));
    hex::encode(&digest[..8])
}

fn description(p: &Problem) -> String {
    let e = &p.evidence;
    let mut d = format!(
        "{} (confidence {:.2}; probes {}, timeouts {}, tomography votes {}, paths ok {})",
        if e.detail.is_empty() {
            "no detail"
        } else {
            &e.detail
        },
        p.confidence,
        e.probes,
        e.timeouts,
        e.votes,
        e.ok_paths
    );
    if !e.example_paths.is_empty() {
        d.push_str("; example paths: ");
        d.push_str(&e.example_paths.join(" | "));
    }
    if !p.affected_tasks.is_empty() {
        let tasks: Vec<String> = p.affected_tasks.iter().map(u32::to_string).collect();
        d.push_str("; affected tasks: ");
        d.push_str(&tasks.join(", "));
    }
    d
}

/// The alert for `p` with the priority frozen when it first fired.
pub fn alert(p: &Problem, priority: Option<Priority>, status: Status, external_url: &str) -> Alert {
    let kind = wire_name(&p.kind);
    let component_kind = wire_name(&p.component_kind);
    let prio = priority_label(priority);
    let labels = BTreeMap::from([
        ("alertname".to_string(), alertname(&kind)),
        ("kind".to_string(), kind.clone()),
        ("component_kind".to_string(), component_kind.clone()),
        ("component".to_string(), p.component.clone()),
        ("priority".to_string(), prio.to_string()),
        ("severity".to_string(), severity(priority).to_string()),
    ]);
    let annotations = BTreeMap::from([
        (
            "summary".to_string(),
            format!("{kind} on {component_kind} {} ({prio})", p.component),
        ),
        ("description".to_string(), description(p)),
    ]);
    let ends_at = match (status, p.resolved_ms) {
        (Status::Resolved, Some(ms)) => rfc3339_ms(ms),
        (Status::Resolved, None) => rfc3339_ms(p.last_seen_ms),
        (Status::Firing, _) => ZERO_TIME.to_string(),
    };
    Alert {
        status,
        labels,
        annotations,
        starts_at: rfc3339_ms(p.first_seen_ms),
        ends_at,
        generator_url: format!(
            "{}/api/v1/problems/{}",
            external_url.trim_end_matches('/'),
            p.id
        ),
        fingerprint: fingerprint(p),
    }
}

/// Entries of `maps` equal in all of them.
fn common(maps: &[&BTreeMap<String, String>]) -> BTreeMap<String, String> {
    let Some((first, rest)) = maps.split_first() else {
        return BTreeMap::new();
    };
    first
        .iter()
        .filter(|(k, v)| rest.iter().all(|m| m.get(*k) == Some(*v)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// One request body for `receiver` carrying `alerts` of the group (`priority`, `kind`).
pub fn notification(
    receiver: &str,
    priority: &str,
    kind: &str,
    external_url: &str,
    alerts: Vec<Alert>,
) -> Notification {
    let labels: Vec<_> = alerts.iter().map(|a| &a.labels).collect();
    let annotations: Vec<_> = alerts.iter().map(|a| &a.annotations).collect();
    let status = if alerts.iter().any(|a| a.status == Status::Firing) {
        Status::Firing
    } else {
        Status::Resolved
    };
    Notification {
        version: "4".to_string(),
        group_key: format!("{{}}:{{kind={kind:?}, priority={priority:?}}}"),
        truncated_alerts: 0,
        status,
        receiver: receiver.to_string(),
        group_labels: BTreeMap::from([
            ("kind".to_string(), kind.to_string()),
            ("priority".to_string(), priority.to_string()),
        ]),
        common_labels: common(&labels),
        common_annotations: common(&annotations),
        external_url: external_url.to_string(),
        alerts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::api::{ComponentKind, Evidence, ProblemKind, ProblemState};

    fn problem(id: i64, component: &str) -> Problem {
        Problem {
            id,
            kind: ProblemKind::LinkFault,
            component_kind: ComponentKind::Link,
            component: component.into(),
            state: ProblemState::Active,
            confidence: 0.9,
            network: true,
            first_seen_ms: 1_714_564_805_250,
            last_seen_ms: 1_714_564_815_250,
            resolved_ms: None,
            evidence: Evidence {
                probes: 40,
                timeouts: 12,
                detail: "tomography".into(),
                ..Evidence::default()
            },
            priority: Some(Priority::P2),
            affected_tasks: Vec::new(),
        }
    }

    #[test]
    fn alert_fields() {
        let a = alert(
            &problem(7, "t0-s1"),
            Some(Priority::P2),
            Status::Firing,
            "http://rm:8080/",
        );
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["status"], "firing");
        assert_eq!(v["labels"]["alertname"], "RocemeshLinkFault");
        assert_eq!(v["labels"]["component"], "t0-s1");
        assert_eq!(v["labels"]["priority"], "P2");
        assert_eq!(v["labels"]["severity"], "info");
        assert_eq!(v["startsAt"], "2024-05-01T12:00:05.250Z");
        assert_eq!(v["endsAt"], ZERO_TIME);
        assert_eq!(v["generatorURL"], "http://rm:8080/api/v1/problems/7");
        assert_eq!(v["fingerprint"].as_str().unwrap().len(), 16);
        assert!(
            v["annotations"]["description"]
                .as_str()
                .unwrap()
                .contains("timeouts 12")
        );
        let mut p = problem(7, "t0-s1");
        p.resolved_ms = Some(p.last_seen_ms);
        let r = alert(&p, Some(Priority::P2), Status::Resolved, "");
        assert_eq!(r.ends_at, "2024-05-01T12:00:15.250Z");
        assert_eq!(r.fingerprint, a.fingerprint, "one episode, one fingerprint");
        assert_ne!(
            alert(&problem(8, "t0-s1"), None, Status::Firing, "").fingerprint,
            a.fingerprint
        );
    }

    #[test]
    fn group_has_common_labels_and_status() {
        let a = alert(&problem(1, "t0-s1"), Some(Priority::P2), Status::Firing, "");
        let mut p = problem(2, "t1-s0");
        p.resolved_ms = Some(p.last_seen_ms);
        let b = alert(&p, Some(Priority::P2), Status::Resolved, "");
        let n = notification("ops", "P2", "link_fault", "http://rm", vec![a, b.clone()]);
        assert_eq!(n.status, Status::Firing);
        assert_eq!(
            n.common_labels.get("kind").map(String::as_str),
            Some("link_fault")
        );
        assert!(!n.common_labels.contains_key("component"));
        assert_eq!(n.group_key, "{}:{kind=\"link_fault\", priority=\"P2\"}");
        let v = serde_json::to_value(&n).unwrap();
        for k in [
            "version",
            "groupKey",
            "truncatedAlerts",
            "groupLabels",
            "commonLabels",
            "commonAnnotations",
            "externalURL",
            "alerts",
        ] {
            assert!(v.get(k).is_some(), "{k} missing");
        }
        assert_eq!(
            notification("ops", "P2", "link_fault", "", vec![b]).status,
            Status::Resolved
        );
    }
}
