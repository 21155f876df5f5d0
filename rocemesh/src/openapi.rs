//! The served OpenAPI document: every component crate's `openapi()` merged, with the
//! bearer-token security scheme of [`crate::auth`], at `GET /api/v1/openapi.json`.

use crate::auth::OPENAPI_PATH;
use crate::server::Roles;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, InfoBuilder, OpenApi, OpenApiBuilder, SecurityRequirement,
};

/// Name of the security scheme in the document.
pub const SECURITY_SCHEME: &str = "bearer";

/// `GET /api/v1/openapi.json`: this very document (open: no token needed).
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "meta", security(()),
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
    doc
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
