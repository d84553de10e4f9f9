//! Counter strategies and the backends they run on. Each strategy is one module behind
//! `counterlab_core::Strategy`; SQL lives in `sql/<dialect>/*.sql`, not in Rust strings.

mod error;
pub mod postgres;
mod sqlfile;

use std::sync::Arc;

use counterlab_core::{Guarantee, Strategy, StrategyInfo};

pub use error::BackendError;

/// Every strategy counterlab ships, in the order `counterlab list` shows them.
pub const CATALOG: &[StrategyInfo] = &[
    StrategyInfo {
        name: "direct-update",
        guarantee: Guarantee::None,
        summary: "reads is_read in the app, writes the row, then unread = unread - 1; no locks: concurrent mark_reads double-decrement",
    },
    StrategyInfo {
        name: "select-for-update",
        guarantee: Guarantee::Exact,
        summary: "one transaction per op that locks the notification row(s) with SELECT ... FOR UPDATE before deciding",
    },
    StrategyInfo {
        name: "conditional-update",
        guarantee: Guarantee::Exact,
        summary: "UPDATE ... WHERE id = $1 AND NOT is_read; the counter moves by the rows really changed, same transaction",
    },
];

pub fn find(name: &str) -> Option<&'static StrategyInfo> {
    CATALOG.iter().find(|s| s.name == name)
}

/// Builds a strategy over a PostgreSQL namespace's pool. None for an unknown name.
pub fn build_postgres(name: &str, pool: sqlx::PgPool) -> Option<Arc<dyn Strategy>> {
    use postgres::strategies as s;
    Some(match name {
        "direct-update" => Arc::new(s::DirectUpdate::new(pool)),
        "select-for-update" => Arc::new(s::SelectForUpdate::new(pool)),
        "conditional-update" => Arc::new(s::ConditionalUpdate::new(pool)),
        _ => return None,
    })
}
