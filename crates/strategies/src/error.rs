//! Errors of backend setup (connect, schema, seed, check); per-operation errors are
//! `counterlab_core::OpError` instead, because they are results, not failures.

/// The underlying error of a failed step, kept as a `#[source]` so callers can walk the
/// chain (a driver error, an I/O error, or a sentence when there is no error value).
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("cannot connect to {backend} at {url}: {source}")]
    Connect {
        backend: &'static str,
        url: String,
        #[source]
        source: Cause,
    },
    #[error("{backend}: {step} failed in namespace {namespace}: {source}")]
    Step {
        backend: &'static str,
        step: &'static str,
        namespace: String,
        #[source]
        source: Cause,
    },
    /// The run would not start: what was refused and why.
    #[error("{0}")]
    Refused(String),
}

/// What a connect error says when nothing listens at the address (the URL, password
/// redacted, comes before it in `BackendError::Connect`).
pub const REFUSED: &str = "connection refused (nothing listens there: is the server running?)";

pub use counterlab_core::{check_url, redact_url};
