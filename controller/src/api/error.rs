//! Every error the API returns: a status and an `ErrorBody`, never axum's plain text.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rocemesh_proto::api::ErrorBody;

/// An HTTP error with a reason for the client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    /// Any status with a reason.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// 400: the request is wrong; nothing was changed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404: no such host/RNIC/route.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 500: a server-side failure (database); the details go to the log, not the client.
    /// An unavailable database (down, refusing connections, disk full) is a 503 naming
    /// the database's own reason, so clients know to retry later.
    pub fn internal(err: anyhow::Error) -> Self {
        tracing::error!(error = format!("{err:#}"), "request failed");
        if rocemesh_store::is_unavailable(&err) {
            return Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("database unavailable: {}", err.root_cause()),
            );
        }
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error (see controller log)",
        )
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

/// In-process callers (task discovery) carry the refusal on as an `anyhow::Error`.
impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: self.message,
            }),
        )
            .into_response()
    }
}

/// Extractor rejections keep their status (400, 413, 415, 422 ...) and text, as JSON.
macro_rules! from_rejection {
    ($($rejection:ty),*) => {$(
        impl From<$rejection> for ApiError {
            fn from(r: $rejection) -> Self {
                Self::new(r.status(), r.body_text())
            }
        }
    )*};
}
from_rejection!(
    axum::extract::rejection::JsonRejection,
    axum::extract::rejection::PathRejection,
    axum::extract::rejection::QueryRejection
);
