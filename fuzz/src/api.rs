//! REST bodies, two ways: [`api_json`] deserializes the proto request types and checks
//! their JSON round trip (fast, no I/O); [`server_api`] sends the bytes
//! through the real router of an in-process server ([`crate::fixture`]), handlers and
//! database included, and requires a 2xx/4xx answer: a 5xx on bad input is a finding.

use rocemesh_proto::api::{ProbeAuth, RegisterRequest, TaskSpec, ThroughputUpload};
use rocemesh_proto::probe_auth::Keyring;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// Deserializes `body` and, if accepted, checks serializing gives back an equal value.
fn round_trip<T: DeserializeOwned + Serialize + PartialEq + Debug>(body: &[u8]) {
    if let Ok(v) = serde_json::from_slice::<T>(body) {
        let text = serde_json::to_vec(&v).expect("accepted value serializes");
        let again: T = serde_json::from_slice(&text).expect("serialized value parses");
        assert_eq!(again, v, "JSON round trip changed the value");
    }
}

/// The first byte picks the body type, the rest is the JSON: the request bodies of the
/// agent-facing routes (registration, tasks, throughput) and the probe keys an agent
/// takes from the controller's replies. Bodies of the alerts and impact routes are
/// covered by [`server_api`], through their handlers.
pub fn api_json(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => round_trip::<RegisterRequest>(body),
        1 => round_trip::<TaskSpec>(body),
        2 => round_trip::<ThroughputUpload>(body),
        _ => {
            if let Ok(auth) = serde_json::from_slice::<ProbeAuth>(body) {
                let _ = Keyring::from_api(&auth);
            }
        }
    }
}

/// Routes [`server_api`] can aim at: (method, path, content type).
#[cfg(feature = "server")]
const ROUTES: &[(&str, &str, &str)] = &[
    ("POST", "/api/v1/agents/register", "application/json"),
    ("POST", "/api/v1/tasks", "application/json"),
    ("PUT", "/api/v1/tasks/1", "application/json"),
    ("POST", "/api/v1/tasks/1/ready", "application/json"),
    ("POST", "/api/v1/throughput", "application/json"),
    ("POST", "/api/v1/tasks/1/metrics", "application/json"),
    ("PUT", "/api/v1/tasks/1/objective", "application/json"),
    ("POST", "/api/v1/alerts/receivers", "application/json"),
    (
        "POST",
        "/api/v1/results",
        rocemesh_proto::batch::CONTENT_TYPE,
    ),
];

/// The first byte picks a route (or, past the body routes, a `GET` whose path and query
/// are the rest of the input); the rest is the body.
#[cfg(feature = "server")]
pub fn server_api(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let f = crate::fixture::fixture();
    let reply = match ROUTES.get(usize::from(which) % (ROUTES.len() + 1)) {
        Some(&(method, path, content_type)) => f.send(method, path, content_type, rest),
        None => {
            let Ok(tail) = std::str::from_utf8(rest) else {
                return;
            };
            f.send("GET", &format!("/api/v1/{tail}"), "text/plain", &[])
        }
    };
    assert!(
        !reply.status.is_server_error(),
        "{}: {}",
        reply.status,
        String::from_utf8_lossy(&reply.body)
    );
}
