//! Named statements from a dialect's `.sql` files: each statement follows a
//! `-- name: <id>` line (anything after the id on that line documents its arguments).

use crate::db::Dialect;

const PG_COMMON: &str = include_str!("../sql/postgres/common.sql");
const MY_COMMON: &str = include_str!("../sql/mysql/common.sql");
const LITE_COMMON: &str = include_str!("../sql/sqlite/common.sql");

pub fn common(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => PG_COMMON,
        Dialect::Mysql => MY_COMMON,
        Dialect::Sqlite => LITE_COMMON,
    }
}

/// The single-statement designs' statements: PostgreSQL only (writable CTEs).
pub fn single(dialect: Dialect) -> Option<&'static str> {
    match dialect {
        Dialect::Postgres => Some(include_str!("../sql/postgres/single.sql")),
        Dialect::Mysql | Dialect::Sqlite => None,
    }
}

/// The statistics read around a cell's load (`backend/stats.rs`): the servers only.
pub fn stats(dialect: Dialect) -> Option<&'static str> {
    match dialect {
        Dialect::Postgres => Some(include_str!("../sql/postgres/stats.sql")),
        Dialect::Mysql => Some(include_str!("../sql/mysql/stats.sql")),
        Dialect::Sqlite => None,
    }
}

pub fn schema(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => include_str!("../sql/postgres/schema.sql"),
        Dialect::Mysql => include_str!("../sql/mysql/schema.sql"),
        Dialect::Sqlite => include_str!("../sql/sqlite/schema.sql"),
    }
}

pub fn after_seed(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => include_str!("../sql/postgres/after_seed.sql"),
        Dialect::Mysql => include_str!("../sql/mysql/after_seed.sql"),
        Dialect::Sqlite => include_str!("../sql/sqlite/after_seed.sql"),
    }
}

/// Looks up statement `name` in `file`. A missing name is a bug in counterlab, found by
/// the unit test that builds every strategy on every dialect.
pub fn statement(file: &'static str, name: &str) -> &'static str {
    let marker = format!("-- name: {name}");
    let start = file
        .match_indices(&marker)
        .map(|(i, _)| i + marker.len())
        .find(|end| file[*end..].starts_with([' ', '\n']))
        .unwrap_or_else(|| panic!("statement {name:?} missing from its .sql file"));
    let line_end = file[start..].find('\n').map_or(file.len(), |i| start + i + 1);
    let rest = &file[line_end..];
    let end = rest.find("\n-- ").unwrap_or(rest.len());
    let text = rest[..end].trim();
    assert!(!text.is_empty(), "statement {name:?} is empty");
    text.strip_suffix(';').unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_statements_between_markers() {
        let file = "-- head\n\n-- name: a  (x)\nSELECT 1;\n\n-- comment\n-- name: ab\nSELECT\n  2;\n";
        assert_eq!(statement(file, "a"), "SELECT 1");
        assert_eq!(statement(file, "ab"), "SELECT\n  2");
    }

    #[test]
    fn every_dialect_has_every_statement() {
        let names: Vec<&str> = PG_COMMON
            .lines()
            .filter_map(|l| l.strip_prefix("-- name: "))
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert!(names.len() > 10);
        for d in Dialect::ALL {
            for n in &names {
                statement(common(d), n);
            }
        }
    }
}
