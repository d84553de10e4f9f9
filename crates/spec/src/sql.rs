//! The lexical rules of file-defined SQL steps (early, located errors; the servers'
//! privileges are the boundary, see `sandbox.rs`): plain ASCII, no quotes, comments or
//! foreign placeholders, one statement, no qualified names or catalog/file functions;
//! and the rewrite of `:name` parameters to the dialect's bound placeholders.

use counterlab_core::Dialect;

/// Words a statement may not contain (after lowercasing), beyond anything starting `pg_`
/// or `lo_` (PostgreSQL's advisory locks, `pg_notify`, `pg_sleep`, catalogs): catalogs,
/// files, other sessions (MariaDB/MySQL named locks, which outlive the statement and
/// block sessions outside the namespace), sleeping on a connection, sequences by name.
const DENIED: [&str; 27] = [
    "get_lock",
    "release_lock",
    "release_all_locks",
    "is_free_lock",
    "is_used_lock",
    "sleep",
    "benchmark",
    "master_pos_wait",
    "master_gtid_wait",
    "notify",
    "listen",
    "information_schema",
    "performance_schema",
    "dblink",
    "dblink_exec",
    "load_file",
    "outfile",
    "dumpfile",
    "load_extension",
    "set_config",
    "current_setting",
    "attach",
    "detach",
    "setval",
    "nextval",
    "sqlite_master",
    "sqlite_schema",
];

/// The characters a statement is written in: no quotes of any kind (so no string
/// literal can carry SQL, a file name or a schema name into a function), no comments,
/// no other placeholder syntax, one statement. A strategy's statements need numbers,
/// TRUE/FALSE, names and parameters only.
pub fn lex_check(sql: &str) -> Result<(), String> {
    if let Some(c) = sql.chars().find(|c| !c.is_ascii() || (c.is_ascii_control() && !c.is_ascii_whitespace())) {
        return Err(format!("character {c:?}: statements are plain ASCII"));
    }
    for (bad, why) in [
        ("'", "string literals are not allowed (use numbers, TRUE/FALSE and parameters)"),
        ("\"", "quoted names are not allowed: write plain names"),
        ("`", "quoted names are not allowed: write plain names"),
        ("\\", "backslashes are not allowed"),
        ("--", "SQL comments are not allowed: comment in TOML"),
        ("/*", "SQL comments are not allowed: comment in TOML"),
        ("#", "`#` is not allowed (a MySQL comment)"),
        ("$", "`$` is not allowed: name parameters :user, :id, :step.field"),
        ("?", "`?` is not allowed: name parameters :user, :id, :step.field"),
        ("@", "`@` is not allowed: name parameters :user, :id, :step.field"),
    ] {
        if sql.contains(bad) {
            return Err(why.into());
        }
    }
    if sql.trim_end().trim_end_matches(';').contains(';') {
        return Err("one statement per step: `;` separates two".into());
    }
    Ok(())
}

/// Rewrites `:name` parameters to the dialect's placeholders, returning the text and the
/// parameter words in order (`::` casts are left alone).
pub fn bind_params(sql: &str, dialect: Dialect) -> Result<(String, Vec<String>), String> {
    lex_check(sql)?;
    let sql = sql.trim_end().trim_end_matches(';');
    let (mut out, mut params) = (String::with_capacity(sql.len()), Vec::new());
    let mut rest = sql;
    while let Some(i) = rest.find(':') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix(':') {
            out.push_str("::");
            rest = tail;
        } else if after.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            let len = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(after.len());
            let word = after[..len].trim_end_matches('.');
            params.push(word.to_string());
            match dialect {
                Dialect::Postgres => out.push_str(&format!("${}", params.len())),
                Dialect::Mysql | Dialect::Sqlite => out.push('?'),
            }
            rest = &after[word.len()..];
        } else {
            out.push(':');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok((out, params))
}

/// Words of the statement, lowercased, with `.` kept inside names.
pub fn words(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in sql.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            cur.push(c.to_ascii_lowercase());
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Checks the statement's kind and names: no qualified name anywhere (every table
/// resolves inside the run's namespace), nothing from the denied list.
pub fn check_names(sql: &str, ddl: bool) -> Result<(), String> {
    // Parameters (`:step.field` looks like a qualified name) are read as a plain 0.
    let w = words(&bind_params(sql, Dialect::Mysql)?.0.replace('?', " 0 "));
    let first = w.first().map(|s| s.as_str()).unwrap_or("");
    let allowed: &[&str] =
        if ddl { &["create", "insert", "update", "delete"] } else { &["select", "insert", "update", "delete", "with"] };
    if !allowed.contains(&first) {
        return Err(format!(
            "a {} must start with {}, not `{first}`",
            if ddl { "setup statement" } else { "step" },
            allowed.join(", ")
        ));
    }
    if ddl && first == "create" && !matches!(w.get(1).map(|s| s.as_str()), Some("table" | "index" | "unique")) {
        return Err("setup may create tables and indexes only".into());
    }
    if let Some(bad) = w.iter().find(|x| x.starts_with("pg_") || x.starts_with("lo_") || DENIED.contains(&x.as_str())) {
        return Err(format!(
            "`{bad}` reaches outside the run's namespace (catalogs, files, other sessions): not allowed"
        ));
    }
    // `excluded.col` is the ON CONFLICT row (PostgreSQL, SQLite), not a schema.
    if let Some(q) = w.iter().find(|x| x.contains('.') && x.parse::<f64>().is_err() && !x.starts_with("excluded.")) {
        return Err(format!(
            "`{q}`: qualified names are not allowed (a schema, database or alias); write plain table and column names"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_become_placeholders_and_casts_stay() {
        let (pg, p) = bind_params("UPDATE t SET b = c::int WHERE id = :id AND u = :user;", Dialect::Postgres).unwrap();
        assert_eq!(pg, "UPDATE t SET b = c::int WHERE id = $1 AND u = $2");
        assert_eq!(p, ["id", "user"]);
        let (my, _) = bind_params("SELECT a FROM t WHERE u = :sel.a", Dialect::Mysql).unwrap();
        assert_eq!(my, "SELECT a FROM t WHERE u = ?");
        assert!(bind_params("SELECT 1; DROP TABLE t", Dialect::Sqlite).is_err());
    }

    #[test]
    fn quotes_comments_and_other_placeholders_are_refused() {
        for sql in [
            "SELECT a FROM t WHERE b = 'x'",
            "SELECT a FROM t -- note",
            "SELECT a /* x */ FROM t",
            "SELECT a FROM t # x",
            "SELECT a FROM t WHERE b = $1",
            "SELECT a FROM t WHERE b = ?",
            "SELECT a FROM t WHERE b = @x",
            "SELECT a FROM \"t\"",
            "SELECT größe FROM t",
            "UPDATE t SET a = 1; COMMIT; ATTACH DATABASE x AS o",
        ] {
            assert!(bind_params(sql, Dialect::Postgres).is_err(), "{sql}");
        }
    }

    #[test]
    fn names_outside_the_namespace_are_refused() {
        assert!(check_names("SELECT id FROM notifications WHERE user_id = 1", false).is_ok());
        assert!(check_names("SELECT n.id FROM notifications n", false).unwrap_err().contains("qualified names"));
        assert!(
            check_names("SELECT unread FROM public.unread_counts", false).unwrap_err().contains("public.unread_counts")
        );
        assert!(check_names("UPDATE ONLY public.accounts SET balance = 0", false).is_err());
        assert!(check_names("UPDATE other_db.t SET a = 1", false).is_err());
        assert!(check_names("DROP TABLE t", true).is_err());
        assert!(check_names("CREATE TABLE slots (user_id bigint)", true).is_ok());
        assert!(check_names("CREATE INDEX i ON public.t (a)", true).is_err());
        assert!(check_names("SELECT pg_read_file(1)", false).unwrap_err().contains("pg_read_file"));
        assert!(check_names("SELECT COUNT(*) FROM pg_stat_activity", false).is_err());
        assert!(check_names("SELECT lo_unlink(16390)", false).is_err());
        assert!(check_names("SELECT setval(16390, 1)", false).is_err());
        assert!(
            check_names("INSERT INTO c (u, n) VALUES (1, 1) ON CONFLICT (u) DO UPDATE SET n = excluded.n + 1", false)
                .is_ok()
        );
    }

    #[test]
    fn what_reaches_other_sessions_or_sleeps_is_refused() {
        for sql in [
            "SELECT GET_LOCK(1, 10)",
            "SELECT release_all_locks()",
            "SELECT IS_USED_LOCK(1)",
            "SELECT SLEEP(100)",
            "SELECT BENCHMARK(100000000, 1)",
            "SELECT pg_advisory_lock(1)",
            "SELECT pg_try_advisory_xact_lock(1)",
            "SELECT pg_notify(1, 2)",
            "SELECT pg_sleep(100)",
            "SELECT relname FROM pg_class",
            "SELECT rolname FROM pg_roles",
        ] {
            let e = check_names(sql, false).unwrap_err();
            assert!(e.contains("reaches outside"), "{sql}: {e}");
        }
        assert!(check_names("NOTIFY chan", false).unwrap_err().contains("must start with"));
        assert!(check_names("LISTEN chan", false).unwrap_err().contains("must start with"));
    }
}
