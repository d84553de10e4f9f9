//! Maps sqlx errors to counterlab's error classes and outcomes, using SQLSTATE codes.

use counterlab_core::{ErrorClass, OpError, Outcome};

/// Classifies an error from an operation. Errors the server reported mean the statement
/// (and its transaction) did not take effect; errors on the wire may have happened after
/// the commit, so their outcome is unknown.
pub fn classify(e: sqlx::Error) -> OpError {
    use sqlx::Error as E;
    let (class, outcome) = match &e {
        E::Database(db) => match db.code().as_deref() {
            Some("40001") => (ErrorClass::Serialization, Outcome::Fail),
            Some("40P01") => (ErrorClass::Deadlock, Outcome::Fail),
            Some("55P03") | Some("57014") => (ErrorClass::Timeout, Outcome::Fail),
            Some(c) if c.starts_with("08") || c.starts_with("57P") => {
                (ErrorClass::Connection, Outcome::Unknown)
            }
            _ => (ErrorClass::Other, Outcome::Fail),
        },
        E::PoolTimedOut => (ErrorClass::Timeout, Outcome::Fail),
        E::PoolClosed => (ErrorClass::Connection, Outcome::Fail),
        E::Io(_) | E::Tls(_) | E::Protocol(_) | E::WorkerCrashed => {
            (ErrorClass::Connection, Outcome::Unknown)
        }
        _ => (ErrorClass::Other, Outcome::Unknown),
    };
    OpError::new(class, outcome, e.to_string())
}
