//! Every Kubernetes API request this crate makes, as RBAC sees it. The chart's ClusterRole
//! is checked against this list (helm/tests/check_chart.py reads the `ApiRequest::new`
//! lines below), and the tests check that the requests a run makes are all listed.

/// One kind of request: API group (`""` = core), resource (with subresource), verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiRequest {
    /// API group.
    pub group: &'static str,
    /// Resource, `resource/subresource` for a subresource.
    pub resource: &'static str,
    /// RBAC verb.
    pub verb: &'static str,
}

impl ApiRequest {
    const fn new(group: &'static str, resource: &'static str, verb: &'static str) -> Self {
        Self {
            group,
            resource,
            verb,
        }
    }
}

/// The requests: pods and nodes are listed and watched (task discovery, ToR labels, the
/// conditions already written), a node's status is patched (its condition) and the node
/// itself (its taint).
pub const REQUESTS: &[ApiRequest] = &[
    ApiRequest::new("", "pods", "list"),
    ApiRequest::new("", "pods", "watch"),
    ApiRequest::new("", "nodes", "list"),
    ApiRequest::new("", "nodes", "watch"),
    ApiRequest::new("", "nodes", "patch"),
    ApiRequest::new("", "nodes/status", "patch"),
];

#[cfg(test)]
mod tests {
    #[test]
    fn every_entry_is_on_one_line_the_chart_check_can_read() {
        let source = include_str!("rbac.rs");
        let lines = source
            .lines()
            .filter(|l| l.trim_start().starts_with("ApiRequest::new(\""))
            .count();
        assert_eq!(lines, super::REQUESTS.len());
    }
}
