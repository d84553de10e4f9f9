//! Run ids and namespace names: unique per run, valid identifiers everywhere, and short
//! enough for every server's limits.

use counterlab_strategies::{Dialect, Isolation};

use crate::clock;

/// The marker file of a run's temporary SQLite folder (`clean` looks for it).
pub const SQLITE_MARKER: &str = "counterlab.meta";

/// A run id: UTC time plus 16 random-enough bits, a valid identifier fragment.
pub fn new_run_id() -> String {
    let (s, nanos) = clock::now_unix();
    let salt = (nanos ^ std::process::id().wrapping_mul(2_654_435_761)) & 0xffff;
    format!("{}_{salt:04x}", clock::compact(s))
}

/// The namespace one strategy run lives in: `cl_<run id>_<strategy>`, with the backend
/// and isolation level in between when given.
pub fn namespace_name(run_id: &str, strategy: &str) -> String {
    fit_name(format!("cl_{run_id}_{}", strategy.replace('-', "_")))
}

/// Names must stay within 64 once every `_` is escaped (MariaDB's limit on the database
/// name of a GRANT, where `_` is written `\_`); a longer one keeps its start and gets
/// a hash of the whole name, so names stay unique.
fn fit_name(name: String) -> String {
    let cost = |s: &str| s.len() + s.matches('_').count();
    if cost(&name) <= 64 {
        return name;
    }
    let h = counterlab_strategies::stable_hash(&name);
    let mut head = name;
    while cost(&head) + 10 > 64 {
        head.pop();
    }
    format!("{}_{h:08x}", head.trim_end_matches('_'))
}

/// The namespace of one cell: run, backend, level and strategy.
pub(super) fn scoped_namespace(run_id: &str, dialect: Dialect, isolation: Isolation, strategy: &str) -> String {
    let b = match dialect {
        Dialect::Postgres => "pg",
        Dialect::Mysql => "my",
        Dialect::Sqlite => "lt",
    };
    let i = match isolation {
        Isolation::ReadCommitted => "rc",
        Isolation::RepeatableRead => "rr",
        Isolation::Serializable => "sr",
    };
    namespace_name(run_id, &format!("{b}_{i}_{strategy}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_fit_an_escaped_grant_and_stay_unique() {
        let run = "20261201t132049_0c24";
        let a = scoped_namespace(run, Dialect::Mysql, Isolation::ReadCommitted, "conditional-update-unguarded");
        let b = scoped_namespace(run, Dialect::Mysql, Isolation::ReadCommitted, "conditional-update-unguardee");
        for n in [&a, &b] {
            assert!(n.len() + n.matches('_').count() <= 64 && n.len() <= 63, "{n}");
        }
        assert_ne!(a, b);
        assert_eq!(namespace_name(run, "x"), "cl_20261201t132049_0c24_x");
    }
}
