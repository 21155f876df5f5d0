//! Why a change to the controller's state was refused or failed; the API answers each
//! kind with its HTTP status, in-process callers (task discovery) log it.

/// A refused or failed change to the controller's state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The request is invalid; nothing was changed.
    #[error("{0}")]
    Invalid(String),
    /// No such host, task or task endpoint.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with the current state (a taken name, a stale epoch).
    #[error("{0}")]
    Conflict(String),
    /// The database (or another server-side part) failed.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}
