//! The served OpenAPI document: every component crate's `openapi()` merged, with the
//! bearer-token security scheme of [`crate::auth`] and the 401 / 403 answers it gives on
//! every protected operation, at `GET /api/v1/openapi.json`.

use crate::auth::{OPENAPI_PATH, Role};
use crate::server::Roles;
use axum::Router;
use axum::extract::State;
use axum::http::Method;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use rocemesh_proto::api::ErrorBody;
use std::sync::Arc;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, InfoBuilder, OpenApi, OpenApiBuilder, Ref, RefOr, Response,
    ResponseBuilder, SecurityRequirement,
};

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
        doc.merge(rocemesh_analyzer::api::openapi());
        doc.merge(rocemesh_alerts::openapi());
    }
    if roles.controller() && roles.analyzer() {
        doc.merge(rocemesh_impact::openapi());
    }
    document_auth(&mut doc);
    doc
}

/// Adds the answers [`crate::auth`] gives to every operation it protects: 401 without an
/// accepted token, 403 when the token's role may not make the call (naming the roles
/// that may).
fn document_auth(doc: &mut OpenApi) {
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
        if crate::auth::is_open(path) {
            continue;
        }
        // A concrete path of the template, for the role rules (`{id}` -> `0`).
        let concrete: String = path
            .split('/')
            .map(|s| if s.starts_with('{') { "0" } else { s })
            .collect::<Vec<_>>()
            .join("/");
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
                .filter(|r| r.may(&method, &concrete))
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
pub fn router(roles: Roles) -> Router {
    let body = document(roles).to_json().unwrap_or_else(|e| {
        tracing::error!(error = %e, "cannot render the OpenAPI document");
        "{}".to_string()
    });
    Router::new()
        .route(OPENAPI_PATH, get(openapi_json))
        .with_state(Arc::from(body))
}
