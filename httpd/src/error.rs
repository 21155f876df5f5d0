//! The one error answer of every API route: a status and a JSON [`ErrorBody`], never
//! axum's plain text.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rocemesh_proto::api::ErrorBody;

/// An HTTP error with a reason for the client; every handler and extractor of the API
/// answers failures with it.
#[derive(Debug)]
pub struct HttpError {
    status: StatusCode,
    message: String,
}

impl HttpError {
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

    /// 403: the caller may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    /// 404: no such resource or route.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 409: the request conflicts with the current state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// 503: the server cannot do it now; the client should retry later.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// 500: a server-side failure; the details go to the log, not the client. With the
    /// `store` feature, a failure of an unavailable database (down, refusing connections,
    /// disk full) is a 503 naming the database's own reason, so clients know to retry.
    pub fn internal(err: anyhow::Error) -> Self {
        tracing::error!(error = format!("{err:#}"), "request failed");
        #[cfg(feature = "store")]
        if rocemesh_store::is_unavailable(&err) {
            return Self::unavailable(format!("database unavailable: {}", err.root_cause()));
        }
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error (see the server log)",
        )
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The reason given to the client.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for HttpError {}

impl IntoResponse for HttpError {
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
        impl From<$rejection> for HttpError {
            fn from(r: $rejection) -> Self {
                Self::new(r.status(), r.body_text())
            }
        }
    )*};
}
from_rejection!(
    axum::extract::rejection::JsonRejection,
    axum::extract::rejection::PathRejection,
    axum::extract::rejection::QueryRejection,
    axum::extract::rejection::BytesRejection
);
