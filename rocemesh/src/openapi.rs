//! The served OpenAPI document: every component crate's `openapi()` merged, with the
//! bearer-token security scheme of [`rocemesh_httpd::protect`] and the 401 / 403 answers
//! it gives on every protected operation, at `GET /api/v1/openapi.json`.

use crate::server::{Roles, api_rules};
use axum::extract::State;
use axum::http::Method;
use axum::http::header;
use axum::response::IntoResponse;
use rocemesh_httpd::{Access, Policy, Role, Routes, Rule};
use rocemesh_proto::api::ErrorBody;
use std::sync::Arc;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, InfoBuilder, OpenApi, OpenApiBuilder, Ref, RefOr, Response,
    ResponseBuilder, SecurityRequirement,
};

/// Path of the OpenAPI document, open to everyone.
pub const OPENAPI_PATH: &str = "/api/v1/openapi.json";

/// Name of the security scheme in the document.
pub const SECURITY_SCHEME: &str = "bearer";

/// `GET /api/v1/openapi.json`: this very document (open: no token needed).
#[utoipa::path(get, path = "/api/v1/openapi.json", operation_id = "getOpenApiDocument", tag = "meta", security(()),
    responses((status = 200, description = "OpenAPI 3.1 document of this server", content_type = "application/json")))]
async fn openapi_json(State(doc): State<Arc<str>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        doc.to_string(),
    )
}

/// The document of a server running `roles`.
pub fn document(roles: Roles) -> OpenApi {
    #[derive(utoipa::OpenApi)]
    #[openapi(paths(openapi_json))]
    struct Own;

    let mut doc = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("rocemesh")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "RoCE fabric monitoring: registry, pinglists, probe results, SLA, problems. \
                     Send `Authorization: Bearer <token>` (roles read, admin, agent).",
                ))
                .build(),
        )
        .components(Some(
            ComponentsBuilder::new()
                .schema_from::<ErrorBody>()
                .security_scheme(
                    SECURITY_SCHEME,
                    SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
                )
                .build(),
        ))
        .security(Some([SecurityRequirement::new(
            SECURITY_SCHEME,
            Vec::<String>::new(),
        )]))
        .build();
    doc.merge(<Own as utoipa::OpenApi>::openapi());
    if roles.controller() {
        doc.merge(rocemesh_controller::api::openapi());
    }
    if roles.analyzer() {
        doc.merge(rocemesh_analyzer::openapi());
        doc.merge(rocemesh_alerts::openapi());
    }
    if roles.controller() && roles.analyzer() {
        doc.merge(rocemesh_impact::openapi());
    }
    document_auth(&mut doc, &Policy::new(&api_rules(roles)));
    doc
}

/// The document's own route.
fn own_routes() -> Routes<Arc<str>> {
    Routes::new().route(Method::GET, OPENAPI_PATH, Access::Open, openapi_json)
}

/// The document's own route as the token check sees it.
pub(crate) fn own_rules() -> Vec<Rule> {
    own_routes().rules().to_vec()
}

/// Adds the answers the token check gives to every operation `policy` protects: 401
/// without an accepted token, 403 when the token's role may not make the call (naming the
/// roles that may).
fn document_auth(doc: &mut OpenApi, policy: &Policy) {
    let error = |description: String| -> RefOr<Response> {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build()
            .into()
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        if policy.is_open(path) {
            continue;
        }
        let operations = [
            (Method::GET, &mut item.get),
            (Method::POST, &mut item.post),
            (Method::PUT, &mut item.put),
            (Method::DELETE, &mut item.delete),
            (Method::PATCH, &mut item.patch),
        ];
        for (method, op) in operations {
            let Some(op) = op.as_mut() else { continue };
            let roles: Vec<&str> = [Role::Read, Role::Agent, Role::Admin]
                .into_iter()
                .filter(|r| policy.admits(*r, &method, path))
                .map(Role::as_str)
                .collect();
            let answers = &mut op.responses.responses;
            answers.entry("401".into()).or_insert_with(|| {
                error(
                    "No bearer token, or one the server does not accept (when [auth] has tokens)."
                        .into(),
                )
            });
            answers.entry("403".into()).or_insert_with(|| {
                error(format!(
                    "The token's role may not make this call; roles that may: {}.",
                    roles.join(", ")
                ))
            });
        }
    }
}

/// The route serving the document of `roles`, rendered once.
pub fn routes(roles: Roles) -> Routes {
    let body = document(roles).to_json().unwrap_or_else(|e| {
        tracing::error!(error = %e, "cannot render the OpenAPI document");
        "{}".to_string()
    });
    own_routes().with_state(Arc::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every declared route is documented and every documented operation is a declared
    /// route, so no route escapes its declared access.
    #[test]
    fn declared_routes_are_the_documented_operations() {
        let doc = document(Roles::Both);
        let mut documented = BTreeSet::new();
        for (path, item) in &doc.paths.paths {
            for (method, op) in [
                (Method::GET, &item.get),
                (Method::POST, &item.post),
                (Method::PUT, &item.put),
                (Method::DELETE, &item.delete),
                (Method::PATCH, &item.patch),
            ] {
                if op.is_some() {
                    documented.insert(format!("{method} {path}"));
                }
            }
        }
        let declared: BTreeSet<String> = api_rules(Roles::Both)
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        assert_eq!(declared, documented);
    }

    /// Agent tokens reach exactly the calls an agent makes, whichever component serves
    /// them: a new route open to agents must be added here on purpose.
    #[test]
    fn agent_routes_are_exactly_the_agent_calls() {
        let agent: BTreeSet<String> = api_rules(Roles::Both)
            .iter()
            .filter(|r| r.access.admits(Role::Agent, &r.method))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        let calls: BTreeSet<String> = [
            "POST /api/v1/agents/register",
            "GET /api/v1/pinglists/{host_id}",
            "POST /api/v1/results",
            "POST /api/v1/throughput",
            "POST /api/v1/tasks/{id}/ready",
            "GET /api/v1/rnics/by-ip/{ip}",
            // The document is open to everyone.
            "GET /api/v1/openapi.json",
        ]
        .map(String::from)
        .into();
        assert_eq!(agent, calls);
    }
}
