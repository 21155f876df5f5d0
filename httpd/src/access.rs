//! Who may call which route: each component declares its routes together with the
//! [`Access`] they need ([`Routes`]), and the token check ([`crate::protect`]) looks each
//! request up in the [`Policy`] those declarations make, so the access rules sit next to
//! the routes they guard. Everything outside `/api/` is open.

use crate::Role;
use axum::Router;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, on};
use std::collections::BTreeMap;

/// Who may call a route; admin tokens may call every route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, without a token (the API's own description).
    Open,
    /// Read tokens (GET and HEAD only) and admins: an operator's view.
    Read,
    /// Agent and read tokens, and admins: a view agents use too.
    AgentRead,
    /// Agent tokens and admins: a call agents make that read tokens may not see (uploads,
    /// pinglists carrying the cluster probe keys).
    Agent,
    /// Admin tokens only: writes, deletes, configuration.
    Admin,
}

impl Access {
    /// Whether `role` may call a route of this access with `method`.
    pub fn admits(self, role: Role, method: &Method) -> bool {
        let safe = *method == Method::GET || *method == Method::HEAD;
        match (role, self) {
            (_, Self::Open) | (Role::Admin, _) => true,
            (Role::Read, Self::Read | Self::AgentRead) => safe,
            (Role::Agent, Self::Agent | Self::AgentRead) => true,
            _ => false,
        }
    }
}

/// One declared route: `method path` (a template such as `/api/v1/tasks/{id}`) and who
/// may call it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The method (a GET route answers HEAD too).
    pub method: Method,
    /// The path template.
    pub path: String,
    /// Who may call it.
    pub access: Access,
}

/// A component's routes, each declared with its [`Access`]: the router that serves them
/// and the rules the token check applies.
pub struct Routes<S = ()> {
    router: Router<S>,
    rules: Vec<Rule>,
}

impl<S: Clone + Send + Sync + 'static> Default for Routes<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: Clone + Send + Sync + 'static> Routes<S> {
    /// No routes.
    pub fn new() -> Self {
        Self {
            router: Router::new(),
            rules: Vec::new(),
        }
    }

    /// Serves `method path` with `handler`, callable by `access`. A path may be declared
    /// once per method.
    pub fn route<H, T>(mut self, method: Method, path: &str, access: Access, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        self.router = self.router.route(path, on(filter, handler));
        self.rules.push(Rule {
            method,
            path: path.to_owned(),
            access,
        });
        self
    }

    /// Applies `f` to the router (layers, fallbacks); the declared routes stay as they are.
    pub fn map_router(mut self, f: impl FnOnce(Router<S>) -> Router<S>) -> Self {
        self.router = f(self.router);
        self
    }

    /// Serves `inner` under `prefix` (`/api/v1`).
    pub fn nest(mut self, prefix: &str, inner: Self) -> Self {
        self.router = self.router.nest(prefix, inner.router);
        self.rules.extend(inner.rules.into_iter().map(|r| Rule {
            path: format!("{prefix}{}", r.path),
            ..r
        }));
        self
    }

    /// These routes and `other`'s.
    pub fn merge(mut self, other: Self) -> Self {
        self.router = self.router.merge(other.router);
        self.rules.extend(other.rules);
        self
    }

    /// Gives the handlers their state.
    pub fn with_state<S2>(self, state: S) -> Routes<S2> {
        Routes {
            router: self.router.with_state(state),
            rules: self.rules,
        }
    }

    /// The declared routes.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The router; the token check applies [`Policy::new`] of [`Self::rules`] around it.
    pub fn into_router(self) -> Router<S> {
        self.router
    }
}

/// The access rules of a server's routes, matched against request paths the way axum's
/// router matches them.
#[derive(Debug, Clone)]
pub struct Policy {
    paths: matchit::Router<Vec<(Method, Access)>>,
}

impl Policy {
    /// The policy of `rules`.
    pub fn new(rules: &[Rule]) -> Self {
        let mut by_path: BTreeMap<&str, Vec<(Method, Access)>> = BTreeMap::new();
        for r in rules {
            by_path
                .entry(&r.path)
                .or_default()
                .push((r.method.clone(), r.access));
        }
        let mut paths = matchit::Router::new();
        for (path, methods) in by_path {
            // The same router accepted these templates, so they cannot conflict here.
            paths
                .insert(path, methods)
                .unwrap_or_else(|e| panic!("route {path}: {e}"));
        }
        Self { paths }
    }

    fn methods(&self, path: &str) -> &[(Method, Access)] {
        self.paths
            .at(path)
            .map(|m| m.value.as_slice())
            .unwrap_or(&[])
    }

    /// The access of `method path`, when a route declares it (HEAD is GET's).
    pub fn access(&self, method: &Method, path: &str) -> Option<Access> {
        let method = if *method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        self.methods(path)
            .iter()
            .find(|(m, _)| m == method)
            .map(|(_, a)| *a)
    }

    /// Whether `path` is served without a token: outside `/api/`, or an open route.
    pub fn is_open(&self, path: &str) -> bool {
        !path.starts_with("/api/") || self.methods(path).iter().any(|(_, a)| *a == Access::Open)
    }

    /// Whether `role` may call `method path`. A call no route declares is judged as a
    /// [`Access::Read`] one: readers may look (and get a 404 or 405), agents may not.
    pub fn admits(&self, role: Role, method: &Method, path: &str) -> bool {
        self.access(method, path)
            .unwrap_or(Access::Read)
            .admits(role, method)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ok() {}

    #[test]
    fn roles_allow_what_the_routes_declare() {
        let routes: Routes = Routes::new()
            .route(Method::GET, "/api/v1/problems", Access::Read, ok)
            .route(Method::POST, "/api/v1/tasks", Access::Admin, ok)
            .route(Method::GET, "/api/v1/tasks", Access::Read, ok)
            .route(Method::POST, "/api/v1/tasks/{id}/ready", Access::Agent, ok)
            .route(Method::GET, "/api/v1/pinglists/{id}", Access::Agent, ok)
            .route(Method::GET, "/api/v1/rnics", Access::Read, ok)
            .route(
                Method::GET,
                "/api/v1/rnics/by-ip/{ip}",
                Access::AgentRead,
                ok,
            )
            .route(Method::DELETE, "/api/v1/hosts/{id}", Access::Admin, ok)
            .route(Method::GET, "/api/v1/openapi.json", Access::Open, ok);
        let p = Policy::new(routes.rules());
        let (get, head, post, delete) = (Method::GET, Method::HEAD, Method::POST, Method::DELETE);
        assert!(p.admits(Role::Read, &get, "/api/v1/problems"));
        assert!(p.admits(Role::Read, &head, "/api/v1/problems"));
        assert!(
            p.admits(Role::Read, &get, "/api/v1/unknown"),
            "404 for readers"
        );
        assert!(
            !p.admits(Role::Read, &get, "/api/v1/pinglists/7"),
            "probe keys"
        );
        assert!(
            !p.admits(Role::Read, &head, "/api/v1/pinglists/7"),
            "probe keys"
        );
        assert!(!p.admits(Role::Read, &post, "/api/v1/tasks"));
        assert!(!p.admits(Role::Read, &delete, "/api/v1/problems"));
        assert!(p.admits(Role::Admin, &delete, "/api/v1/hosts/3"));
        for (m, path) in [
            (&get, "/api/v1/pinglists/7"),
            (&post, "/api/v1/tasks/4/ready"),
            (&get, "/api/v1/rnics/by-ip/10.0.0.1"),
        ] {
            assert!(p.admits(Role::Agent, m, path), "{m} {path}");
        }
        assert!(p.admits(Role::Read, &get, "/api/v1/rnics/by-ip/10.0.0.1"));
        for (m, path) in [
            (&get, "/api/v1/problems"),
            (&post, "/api/v1/tasks"),
            (&get, "/api/v1/tasks/4/ready"),
            (&post, "/api/v1/tasks/4/ready/x"),
            (&delete, "/api/v1/hosts/1"),
            (&get, "/api/v1/rnics"),
        ] {
            assert!(!p.admits(Role::Agent, m, path), "{m} {path}");
        }
        assert!(p.is_open("/healthz") && p.is_open("/") && p.is_open("/assets/app.js"));
        assert!(p.is_open("/api/v1/openapi.json") && p.is_open("/metrics"));
        assert!(!p.is_open("/api/v1/problems") && !p.is_open("/api/v2/x"));
    }

    #[test]
    fn nested_routes_carry_the_prefix() {
        let inner: Routes = Routes::new().route(Method::POST, "/results", Access::Agent, ok);
        let routes: Routes = Routes::new().nest("/api/v1", inner);
        assert_eq!(routes.rules()[0].path, "/api/v1/results");
        let p = Policy::new(routes.rules());
        assert_eq!(
            p.access(&Method::POST, "/api/v1/results"),
            Some(Access::Agent)
        );
    }
}
