//! File-defined ("bring your own") SQL strategies: each operation is a list of SQL steps
//! with named parameters (`:user`, `:id`, `:step.field` from an earlier step), optional
//! guards (`when = "sel.is_read == 0"`), run in one transaction or one per step, and a
//! result expression. `CustomSpec` is the textual form (from a scenario file, printed
//! into the report's plan); `compile` checks it for one dialect (parameters bound, never
//! spliced; one statement each; no schema-qualified names, so a file cannot reach data
//! outside the run's namespace) and `CustomStrategy` runs it.

use std::collections::BTreeMap;

use async_trait::async_trait;
use counterlab_core::{ErrorClass, Guarantee, NotificationId, OpError, Outcome, Strategy, StrategyInfo, UserId};
use serde::Serialize;

use crate::db::{Begin, Db, Dialect, Tx};

/// The five operations, in `OpKind` order without `mark_read_dup` (it calls mark_read).
pub const CUSTOM_OPS: [&str; 5] = ["create", "mark_read", "delete", "mark_all_read", "read_count"];

/// SQL text: one for every dialect, or one per dialect (a missing one: the strategy
/// does not run there, and the run says so).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PerDialect {
    pub postgres: Option<String>,
    pub mysql: Option<String>,
    pub sqlite: Option<String>,
}

impl PerDialect {
    pub fn all(sql: &str) -> PerDialect {
        PerDialect { postgres: Some(sql.into()), mysql: Some(sql.into()), sqlite: Some(sql.into()) }
    }

    pub fn get(&self, d: Dialect) -> Option<&str> {
        match d {
            Dialect::Postgres => self.postgres.as_deref(),
            Dialect::Mysql => self.mysql.as_deref(),
            Dialect::Sqlite => self.sqlite.as_deref(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepSpec {
    /// Referred to by later steps, guards and results (`name.rows`, `name.<column>`).
    pub name: String,
    pub sql: PerDialect,
    /// Columns of the one row the statement returns (integers or booleans); empty: the
    /// statement's outputs are `rows` (affected) and `last_id` (the new row's id: MySQL's
    /// and SQLite's last insert id; on PostgreSQL the first column of `RETURNING`).
    pub returns: Vec<String>,
    /// Run the step only when this holds (`<ref> <op> <ref or integer>`).
    pub when: Option<String>,
}

/// A strategy as a scenario file describes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CustomSpec {
    pub name: String,
    pub guarantee: String,
    pub summary: String,
    /// All steps of an op in one transaction (true) or each step in its own.
    pub transaction: bool,
    /// SQLite: BEGIN IMMEDIATE (the write lock up front), its stand-in for FOR UPDATE.
    pub sqlite_begin_immediate: bool,
    /// Statements run once in the namespace after the seed (extra tables, their data).
    pub setup: Vec<PerDialect>,
    /// A query returning `(user_id, counter)` for every user: where the check reads the
    /// strategy's counter (None: the `unread_counts` table).
    pub counters: Option<PerDialect>,
    /// Per op, in `CUSTOM_OPS` order.
    pub steps: Vec<Vec<StepSpec>>,
    /// Per op: create -> the new id; mark_read, delete -> changed (nonzero or a
    /// comparison); mark_all_read -> rows changed; read_count -> the badge.
    pub results: Vec<String>,
}

/// A value an expression reads: the op's user or notification id, or a step's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ref {
    User,
    Id,
    Field { step: usize, field: usize },
    Const(i64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// `left` alone (nonzero is true), or `left <cmp> right`; each side a sum of values.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Expr {
    left: Vec<Ref>,
    cmp: Option<(Cmp, Vec<Ref>)>,
}

impl Expr {
    fn refs(&self) -> impl Iterator<Item = Ref> + '_ {
        self.left.iter().chain(self.cmp.iter().flat_map(|(_, r)| r.iter())).copied()
    }
}

#[derive(Clone, Debug)]
struct Step {
    sql: &'static str,
    args: Vec<Ref>,
    /// Number of returned columns (0: exec).
    returns: usize,
    /// PostgreSQL has no last-insert id: a step without `returns` whose statement says
    /// RETURNING reads its first column as `last_id`.
    returning_id: bool,
    when: Option<Expr>,
}

/// A spec compiled for one dialect.
#[derive(Clone, Debug)]
pub struct Compiled {
    steps: Vec<Vec<Step>>,
    results: Vec<Expr>,
    setup: Vec<String>,
    counters: Option<&'static str>,
}

/// Outputs every step has before its own columns.
const BASE_FIELDS: [&str; 2] = ["rows", "last_id"];

/// Resolves `user`, `id`, an integer, or `step.field` against the steps before `upto`.
fn resolve(word: &str, op: usize, steps: &[StepSpec], upto: usize) -> Result<Ref, String> {
    if let Ok(n) = word.parse::<i64>() {
        return Ok(Ref::Const(n));
    }
    match word {
        "user" => return Ok(Ref::User),
        "id" if CUSTOM_OPS[op] == "mark_read" || CUSTOM_OPS[op] == "delete" => return Ok(Ref::Id),
        "id" => {
            return Err(format!("`id` is not a parameter of {} (only mark_read and delete have one)", CUSTOM_OPS[op]));
        }
        _ => {}
    }
    let Some((step, field)) = word.split_once('.') else {
        return Err(format!("unknown parameter `{word}`: use user, id, or <step>.<field>"));
    };
    let Some(i) = steps[..upto].iter().position(|s| s.name == step) else {
        let later = steps[upto..].iter().any(|s| s.name == step);
        return Err(if later {
            format!("`{word}` refers to step `{step}`, which runs later")
        } else {
            format!("`{word}` refers to no step named `{step}` in {}", CUSTOM_OPS[op])
        });
    };
    let s = &steps[i];
    let fields: Vec<&str> = BASE_FIELDS.iter().copied().chain(s.returns.iter().map(|r| r.as_str())).collect();
    match fields.iter().position(|f| *f == field) {
        Some(f) => Ok(Ref::Field { step: i, field: f }),
        None => Err(format!("step `{step}` has no output `{field}`; it has {}", fields.join(", "))),
    }
}

/// `a`, `a + b ...`, or either compared with another: `a <op> b`.
fn parse_expr(text: &str, op: usize, steps: &[StepSpec], upto: usize) -> Result<Expr, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let cmp = |w: &str| match w {
        "==" => Some(Cmp::Eq),
        "!=" => Some(Cmp::Ne),
        "<" => Some(Cmp::Lt),
        "<=" => Some(Cmp::Le),
        ">" => Some(Cmp::Gt),
        ">=" => Some(Cmp::Ge),
        _ => None,
    };
    let sum = |side: &[&str]| -> Result<Vec<Ref>, String> {
        if side.is_empty() || side.len().is_multiple_of(2) || side.iter().skip(1).step_by(2).any(|w| *w != "+") {
            return Err(format!(
                "cannot read `{text}`: write values joined by ` + `, optionally compared (== != < <= > >=) with another"
            ));
        }
        side.iter().step_by(2).map(|w| resolve(w, op, steps, upto)).collect()
    };
    match words.iter().position(|w| cmp(w).is_some()) {
        None => Ok(Expr { left: sum(&words)?, cmp: None }),
        Some(i) => {
            let c = cmp(words[i]).expect("found above");
            Ok(Expr { left: sum(&words[..i])?, cmp: Some((c, sum(&words[i + 1..])?)) })
        }
    }
}

/// Words a statement may not contain (after lowercasing), beyond anything starting `pg_`
/// or `lo_`: catalogs, files, other sessions, sequences by name.
const DENIED: [&str; 16] = [
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
fn lex_check(sql: &str) -> Result<(), String> {
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
fn bind_params(sql: &str, dialect: Dialect) -> Result<(String, Vec<String>), String> {
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
fn words(sql: &str) -> Vec<String> {
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
fn check_names(sql: &str, ddl: bool) -> Result<(), String> {
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

/// A leaked statement: sqlx takes `&'static str`; a run compiles each spec once per
/// namespace, so the leak is bounded by the plan's size.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl CustomSpec {
    pub fn guarantee(&self) -> Guarantee {
        match self.guarantee.as_str() {
            "exact" => Guarantee::Exact,
            "eventual" => Guarantee::Eventual,
            _ => Guarantee::None,
        }
    }

    /// Its static description (the strings are leaked once per call: a run asks once
    /// per strategy).
    pub fn info(&self) -> StrategyInfo {
        StrategyInfo { name: leak(self.name.clone()), guarantee: self.guarantee(), summary: leak(self.summary.clone()) }
    }

    /// Which dialects every statement of the spec is written for.
    pub fn dialects(&self) -> Vec<Dialect> {
        Dialect::ALL
            .into_iter()
            .filter(|d| {
                self.steps.iter().flatten().all(|s| s.sql.get(*d).is_some())
                    && self.setup.iter().all(|s| s.get(*d).is_some())
                    && self.counters.as_ref().is_none_or(|c| c.get(*d).is_some())
            })
            .collect()
    }

    /// Checks a single statement (a step's, in op `op` at position `idx`) for `dialect`.
    pub fn check_step(&self, op: usize, idx: usize, dialect: Dialect) -> Result<(), String> {
        self.compile_step(op, idx, dialect).map(|_| ())
    }

    fn compile_step(&self, op: usize, idx: usize, dialect: Dialect) -> Result<Step, String> {
        let steps = &self.steps[op];
        let s = &steps[idx];
        let sql = s.sql.get(dialect).ok_or_else(|| format!("no {} statement", dialect.name()))?;
        check_names(sql, false)?;
        let (text, params) = bind_params(sql, dialect)?;
        let args = params.iter().map(|p| resolve(p, op, steps, idx)).collect::<Result<Vec<_>, _>>()?;
        if args.iter().any(|a| matches!(a, Ref::Const(_))) {
            return Err("parameters name values (user, id, step.field); write constants into the SQL".into());
        }
        let when =
            s.when.as_deref().map(|w| parse_expr(w, op, steps, idx)).transpose().map_err(|e| format!("when: {e}"))?;
        let w = words(sql);
        let returning_id = dialect == Dialect::Postgres
            && s.returns.is_empty()
            && w.first().is_some_and(|f| f == "insert")
            && w.iter().any(|x| x == "returning");
        Ok(Step { sql: leak(text), args, returns: s.returns.len(), returning_id, when })
    }

    /// Checks one op's result expression.
    pub fn check_result(&self, op: usize) -> Result<(), String> {
        parse_expr(&self.results[op], op, &self.steps[op], self.steps[op].len()).map(|_| ())
    }

    /// Checks a setup statement or the counters query for `dialect`.
    pub fn check_aux(sql: &str, setup: bool) -> Result<(), String> {
        if setup {
            check_names(sql, true)?;
            match bind_params(sql, Dialect::Postgres)?.1.first() {
                Some(p) => Err(format!("setup statements take no parameters, found :{p}")),
                None => Ok(()),
            }
        } else {
            check_names(sql, false)?;
            match bind_params(sql, Dialect::Postgres)?.1.first() {
                Some(p) => Err(format!("the counters query takes no parameters, found :{p}")),
                None => Ok(()),
            }
        }
    }

    /// Everything compiled for `dialect`; the first problem otherwise.
    pub fn compile(&self, dialect: Dialect) -> Result<Compiled, String> {
        let mut steps = Vec::new();
        for (op, name) in CUSTOM_OPS.iter().enumerate() {
            let mut v = Vec::new();
            for i in 0..self.steps[op].len() {
                v.push(self.compile_step(op, i, dialect).map_err(|e| format!("{name} step {}: {e}", i + 1))?);
            }
            steps.push(v);
        }
        // PostgreSQL reports no last-insert id: `last_id` there needs INSERT ... RETURNING.
        if dialect == Dialect::Postgres {
            for (op, list) in steps.iter().enumerate() {
                let used = |r: &Ref| matches!(r, Ref::Field { step, field: 1 } if !list[*step].returning_id);
                let in_steps = list.iter().any(|st: &Step| {
                    st.args.iter().any(used) || st.when.as_ref().is_some_and(|w| w.refs().any(|r| used(&r)))
                });
                let result = parse_expr(&self.results[op], op, &self.steps[op], self.steps[op].len())?;
                if in_steps || result.refs().any(|r| used(&r)) {
                    return Err(format!(
                        "{}: `last_id` on PostgreSQL needs the step to be an INSERT ... RETURNING id",
                        CUSTOM_OPS[op]
                    ));
                }
            }
        }
        let results = (0..CUSTOM_OPS.len())
            .map(|op| parse_expr(&self.results[op], op, &self.steps[op], self.steps[op].len()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut setup = Vec::new();
        for s in &self.setup {
            let sql = s.get(dialect).ok_or_else(|| format!("no {} setup statement", dialect.name()))?;
            Self::check_aux(sql, true)?;
            setup.push(sql.to_string());
        }
        let counters = match &self.counters {
            None => None,
            Some(c) => {
                let sql = c.get(dialect).ok_or_else(|| format!("no {} counters query", dialect.name()))?;
                Self::check_aux(sql, false)?;
                Some(leak(sql.to_string()))
            }
        };
        Ok(Compiled { steps, results, setup, counters })
    }
}

fn eval_ref(r: Ref, user: i64, id: i64, vals: &[Vec<i64>]) -> i64 {
    match r {
        Ref::User => user,
        Ref::Id => id,
        Ref::Const(c) => c,
        Ref::Field { step, field } => vals[step][field],
    }
}

fn eval(e: &Expr, user: i64, id: i64, vals: &[Vec<i64>]) -> i64 {
    let sum = |side: &[Ref]| side.iter().fold(0i64, |acc, r| acc.saturating_add(eval_ref(*r, user, id, vals)));
    let a = sum(&e.left);
    match &e.cmp {
        None => a,
        Some((c, right)) => {
            let b = sum(right);
            (match c {
                Cmp::Eq => a == b,
                Cmp::Ne => a != b,
                Cmp::Lt => a < b,
                Cmp::Le => a <= b,
                Cmp::Gt => a > b,
                Cmp::Ge => a >= b,
            }) as i64
        }
    }
}

/// A file-defined strategy running on one namespace.
pub struct CustomStrategy {
    info: StrategyInfo,
    db: Db,
    c: Compiled,
    transaction: bool,
    begin: Begin,
}

impl CustomStrategy {
    /// Compiles `spec` for the namespace's dialect (checked at load, so an error here is
    /// a dialect the spec does not cover) and runs its setup statements.
    pub async fn build(spec: &CustomSpec, db: Db) -> Result<CustomStrategy, OpError> {
        let other = |m: String| OpError::new(ErrorClass::Other, Outcome::Fail, m);
        let c = spec.compile(db.dialect()).map_err(|e| other(format!("{}: {e}", spec.name)))?;
        for sql in &c.setup {
            let mut tx = db.begin(Begin::Plain).await?;
            tx.exec(leak(sql.clone()), &[]).await?;
            tx.commit().await?;
        }
        let info = StrategyInfo {
            name: leak(spec.name.clone()),
            guarantee: spec.guarantee(),
            summary: leak(spec.summary.clone()),
        };
        let begin = if spec.sqlite_begin_immediate { Begin::Locking } else { Begin::Plain };
        Ok(CustomStrategy { info, db, c, transaction: spec.transaction, begin })
    }

    async fn step(tx: &mut Tx, s: &Step, args: &[i64]) -> Result<Vec<i64>, OpError> {
        if s.returning_id {
            let row = tx.row_i64(s.sql, args, 1).await?;
            Ok(vec![row.is_some() as i64, row.map_or(0, |r| r[0])])
        } else if s.returns == 0 {
            let (rows, last_id) = tx.exec_full(s.sql, args).await?;
            Ok(vec![rows as i64, last_id])
        } else {
            let row = tx.row_i64(s.sql, args, s.returns).await?;
            let mut v = vec![row.is_some() as i64, 0];
            v.extend(row.unwrap_or_else(|| vec![0; s.returns]));
            Ok(v)
        }
    }

    /// Runs op `op`'s steps and returns its result.
    async fn run(&self, op: usize, user: i64, id: i64) -> Result<i64, OpError> {
        let steps = &self.c.steps[op];
        let mut vals: Vec<Vec<i64>> = steps.iter().map(|s| vec![0; BASE_FIELDS.len() + s.returns]).collect();
        let mut open: Option<Tx> = None;
        for (i, s) in steps.iter().enumerate() {
            if s.when.as_ref().is_some_and(|w| eval(w, user, id, &vals) == 0) {
                continue;
            }
            let args: Vec<i64> = s.args.iter().map(|a| eval_ref(*a, user, id, &vals)).collect();
            let tx = match &mut open {
                Some(tx) => tx,
                None => open.insert(self.db.begin(self.begin).await?),
            };
            vals[i] = Self::step(tx, s, &args).await?;
            if !self.transaction {
                open.take().expect("just used").commit().await?;
            }
        }
        if let Some(tx) = open {
            tx.commit().await?;
        }
        Ok(eval(&self.c.results[op], user, id, &vals))
    }
}

#[async_trait]
impl Strategy for CustomStrategy {
    fn info(&self) -> StrategyInfo {
        self.info
    }
    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        self.run(0, user, 0).await
    }
    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        Ok(self.run(1, user, id).await? != 0)
    }
    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        Ok(self.run(2, user, id).await? != 0)
    }
    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        Ok(self.run(3, user, 0).await?.max(0) as u64)
    }
    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        self.run(4, user, 0).await
    }
    async fn counters(&self, n_users: u64) -> Result<Option<Vec<Option<i64>>>, OpError> {
        let Some(sql) = self.c.counters else { return Ok(None) };
        let rows: Vec<(i64, i64)> = self.db.rows(sql, &[]).await?;
        let by_user: BTreeMap<i64, i64> = rows.into_iter().collect();
        Ok(Some((1..=n_users as i64).map(|u| by_user.get(&u).copied()).collect()))
    }
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
}
