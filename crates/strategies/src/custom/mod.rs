//! File-defined ("bring your own") strategies: each operation is a list of steps, each an
//! SQL statement with named parameters (`:user`, `:id`, `:step.field` from an earlier
//! step), a Redis command or a Lua script (keys templated as `u:{user}:unread`, always
//! under the run's prefix), with optional guards (`when = "sel.is_read == 0"`), loops
//! over an earlier step's array reply (`each`), SQL steps in one transaction or one per
//! step, and a result expression. `CustomSpec` is the textual form (from a scenario file,
//! printed into the report's plan); `compile` checks it for one dialect (parameters bound,
//! never spliced; one statement each; no schema-qualified names, so a file cannot reach
//! data outside the run's namespace) and `CustomStrategy` runs it.

mod redis_steps;
mod sql;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use counterlab_core::{
    CrashPoints, ErrorClass, Fault, Guarantee, NotificationId, OpError, OpKind, Outcome, Strategy, StrategyInfo, UserId,
};
use futures_util::StreamExt;
use serde::Serialize;

use crate::db::{Begin, Db, Dialect, Tx};
use crate::redis::{RedisSpace, classify_redis};
use redis_steps::Piece;
use sql::{bind_params, check_names, words};

/// The five operations, in `OpKind` order without `mark_read_dup` (it calls mark_read).
pub const CUSTOM_OPS: [&str; 5] = ["create", "mark_read", "delete", "mark_all_read", "read_count"];

/// The pseudo-operation of `redis_seed` steps (run once per user before the load).
const SEED: usize = 5;

/// Parameters of `redis_seed` steps: the seeded layout of the user (see `SeedSpec`).
const SEED_PARAMS: [&str; 4] = ["unread", "total", "read", "first_id"];

/// Most elements an `each` step loops over in one op.
pub const MAX_EACH: usize = 10_000;

fn op_name(op: usize) -> &'static str {
    CUSTOM_OPS.get(op).copied().unwrap_or("redis_seed")
}

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

/// What a step does.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// One SQL statement. Outputs: `rows` (affected, or 1 when a row came back),
    /// `last_id`, and the `returns` columns.
    Sql(PerDialect),
    /// One Redis command, sent as `command keys... args...`; every key prefixed with the
    /// run's `cl:<namespace>:`. Outputs: `value` (the reply as an integer; an array
    /// reply's length) and the `returns` names bound to an array reply's elements.
    Redis { command: String, keys: Vec<String>, args: Vec<String> },
    /// A Lua script (EVALSHA) with the step's keys (prefixed) as KEYS and args as ARGV.
    /// `origin` says where it came from (`inline` or its file). Outputs as for Redis.
    Lua { origin: String, script: String, keys: Vec<String>, args: Vec<String> },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepSpec {
    /// Referred to by later steps, guards and results (`name.rows`, `name.<column>`).
    pub name: String,
    pub action: Action,
    /// SQL: columns of the one row the statement returns (integers or booleans); Redis
    /// and Lua: names for the elements of an array reply.
    pub returns: Vec<String>,
    /// Run the step only when this holds (`<ref> <op> <ref or integer>`).
    pub when: Option<String>,
    /// Run the step once per element of this earlier Redis/Lua step's array reply,
    /// binding the element as `:each` / `{each}`. SQL outputs add up `rows`; Redis ones
    /// add up `value`; the rest are the last iteration's.
    pub each: Option<String>,
    /// With `transaction`: commit the open transaction after this step, so later steps
    /// (a Redis call, say) see it committed and later SQL steps start a new one.
    pub commit: bool,
    /// Where the step's statement or command is written (`file:line:col`), for errors
    /// found once the namespace exists.
    pub at: String,
}

impl StepSpec {
    /// The outputs a later step can read, in `vals` order.
    fn fields(&self) -> Vec<&str> {
        let base: &[&str] = match self.action {
            Action::Sql(_) => &["rows", "last_id"],
            _ => &["value"],
        };
        base.iter().copied().chain(self.returns.iter().map(|r| r.as_str())).collect()
    }

    fn is_sql(&self) -> bool {
        matches!(self.action, Action::Sql(_))
    }
}

/// Where the check reads the strategy's counter.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CountersSpec {
    /// A query returning `(user_id, counter)` for every user.
    Sql(PerDialect),
    /// A Redis key per user (`GET`), or a hash field per user (`HGET key field`); a
    /// missing key or field is a missing counter.
    Redis { key: String, field: Option<String> },
}

/// A strategy as a scenario file describes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CustomSpec {
    pub name: String,
    pub guarantee: String,
    pub summary: String,
    /// All SQL steps of an op in one transaction (true) or each step in its own.
    pub transaction: bool,
    /// SQLite: BEGIN IMMEDIATE (the write lock up front), its stand-in for FOR UPDATE.
    pub sqlite_begin_immediate: bool,
    /// Statements run once in the namespace after the seed (extra tables, their data).
    pub setup: Vec<PerDialect>,
    /// Where the check reads the counter (None: the `unread_counts` table).
    pub counters: Option<CountersSpec>,
    /// Per op, in `CUSTOM_OPS` order.
    pub steps: Vec<Vec<StepSpec>>,
    /// Redis and Lua steps run once per user after the seed, with `user`, `unread`,
    /// `total`, `read` and `first_id` (the user's seeded notifications are ids
    /// `first_id .. first_id + total - 1`, the first `read` of them read).
    pub redis_seed: Vec<StepSpec>,
    /// Per op: create -> the new id; mark_read, delete -> changed (nonzero or a
    /// comparison); mark_all_read -> rows changed; read_count -> the badge.
    pub results: Vec<String>,
}

/// A value an expression reads: the op's user or notification id, the element of an
/// `each` loop, a seed parameter, or a step's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ref {
    User,
    Id,
    Each,
    Seed(usize),
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

type Template = Vec<Piece<Ref>>;

#[derive(Clone, Debug)]
enum Exec {
    Sql {
        sql: &'static str,
        args: Vec<Ref>,
        /// Number of returned columns (0: exec).
        returns: usize,
        /// PostgreSQL has no last-insert id: a step without `returns` whose statement
        /// says INSERT ... RETURNING reads its first column as `last_id`.
        returning_id: bool,
        /// Not a plain SELECT: committing it changes the database.
        writes: bool,
    },
    Redis {
        command: &'static str,
        keys: Vec<Template>,
        args: Vec<Template>,
        writes: bool,
    },
    Lua {
        origin: String,
        script: Arc<::redis::Script>,
        keys: Vec<Template>,
        args: Vec<Template>,
    },
}

#[derive(Clone, Debug)]
struct Step {
    exec: Exec,
    when: Option<Expr>,
    each: Option<usize>,
    commit: bool,
    /// Number of outputs (`StepSpec::fields`).
    width: usize,
    /// `step <name>`, for messages.
    name: String,
}

#[derive(Clone, Debug)]
enum Counters {
    Sql(&'static str),
    Redis { key: Template, field: Option<Template> },
}

/// A spec compiled for one dialect.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// Per op, then the seed steps last (index `SEED`).
    steps: Vec<Vec<Step>>,
    results: Vec<Expr>,
    setup: Vec<String>,
    counters: Option<Counters>,
}

/// Resolves `user`, `id`, `each`, a seed parameter, an integer, or `step.field` against
/// the steps before `upto` (`upto` = the step being compiled; `steps.len()` for results).
fn resolve(word: &str, op: usize, steps: &[StepSpec], upto: usize) -> Result<Ref, String> {
    if let Ok(n) = word.parse::<i64>() {
        return Ok(Ref::Const(n));
    }
    let name = op_name(op);
    match word {
        "user" => return Ok(Ref::User),
        "id" if name == "mark_read" || name == "delete" => return Ok(Ref::Id),
        "id" => {
            return Err(format!("`id` is not a parameter of {name} (only mark_read and delete have one)"));
        }
        "each" if steps.get(upto).is_some_and(|s| s.each.is_some()) => return Ok(Ref::Each),
        "each" => return Err("`each` is a parameter only of a step with `each = \"<step>\"`".into()),
        _ => {}
    }
    if op == SEED
        && let Some(k) = SEED_PARAMS.iter().position(|p| *p == word)
    {
        return Ok(Ref::Seed(k));
    }
    let Some((step, field)) = word.split_once('.') else {
        let seed = if op == SEED { format!(", {}", SEED_PARAMS.join(", ")) } else { String::new() };
        return Err(format!("unknown parameter `{word}`: use user, id{seed}, or <step>.<field>"));
    };
    let Some(i) = steps[..upto.min(steps.len())].iter().position(|s| s.name == step) else {
        let later = steps[upto.min(steps.len())..].iter().any(|s| s.name == step);
        return Err(if later {
            format!("`{word}` refers to step `{step}`, which runs later")
        } else {
            format!("`{word}` refers to no step named `{step}` in {name}")
        });
    };
    let fields = steps[i].fields();
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
        // A guard is read before its own step runs: `each` means nothing there.
        side.iter().step_by(2).map(|w| resolve(w, op, steps, upto).and_then(no_each)).collect()
    };
    match words.iter().position(|w| cmp(w).is_some()) {
        None => Ok(Expr { left: sum(&words)?, cmp: None }),
        Some(i) => {
            let c = cmp(words[i]).expect("found above");
            Ok(Expr { left: sum(&words[..i])?, cmp: Some((c, sum(&words[i + 1..])?)) })
        }
    }
}

fn no_each(r: Ref) -> Result<Ref, String> {
    match r {
        Ref::Each => Err("`each` can be used in the step's statement, keys and arguments, not in a guard".into()),
        r => Ok(r),
    }
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

    fn op_steps(&self, op: usize) -> &[StepSpec] {
        if op == SEED { &self.redis_seed } else { &self.steps[op] }
    }

    fn all_steps(&self) -> impl Iterator<Item = &StepSpec> {
        self.steps.iter().flatten().chain(&self.redis_seed)
    }

    /// Whether any step, the seed or the counters talk to Redis.
    pub fn needs_redis(&self) -> bool {
        self.all_steps().any(|s| !s.is_sql()) || matches!(self.counters, Some(CountersSpec::Redis { .. }))
    }

    /// Which dialects every SQL statement of the spec is written for.
    pub fn dialects(&self) -> Vec<Dialect> {
        Dialect::ALL
            .into_iter()
            .filter(|d| {
                self.all_steps().all(|s| match &s.action {
                    Action::Sql(p) => p.get(*d).is_some(),
                    _ => true,
                }) && self.setup.iter().all(|s| s.get(*d).is_some())
                    && match &self.counters {
                        Some(CountersSpec::Sql(c)) => c.get(*d).is_some(),
                        _ => true,
                    }
            })
            .collect()
    }

    /// Checks a single step (in op `op` at position `idx`; `op` 5 is `redis_seed`).
    pub fn check_step(&self, op: usize, idx: usize, dialect: Dialect) -> Result<(), String> {
        self.compile_step(op, idx, dialect).map(|_| ())
    }

    fn template(&self, text: &str, key: bool, op: usize, idx: usize) -> Result<Template, String> {
        let steps = self.op_steps(op);
        redis_steps::template(text, key, |w| resolve(w, op, steps, idx))
    }

    fn compile_step(&self, op: usize, idx: usize, dialect: Dialect) -> Result<Step, String> {
        let steps = self.op_steps(op);
        let s = &steps[idx];
        if op == SEED && s.is_sql() {
            return Err(
                "redis_seed steps are Redis commands or Lua scripts (SQL data comes from the seed and setup)".into()
            );
        }
        let when =
            s.when.as_deref().map(|w| parse_expr(w, op, steps, idx)).transpose().map_err(|e| format!("when: {e}"))?;
        let each = match &s.each {
            None => None,
            Some(src) => match steps[..idx].iter().position(|p| p.name == *src) {
                Some(i) if !steps[i].is_sql() => Some(i),
                Some(_) => {
                    return Err(format!("each: `{src}` is an SQL step; `each` loops over a Redis or Lua array reply"));
                }
                None => return Err(format!("each: no earlier step named `{src}`")),
            },
        };
        let exec = match &s.action {
            Action::Sql(per) => {
                let sql = per.get(dialect).ok_or_else(|| format!("no {} statement", dialect.name()))?;
                check_names(sql, false)?;
                let (text, params) = bind_params(sql, dialect)?;
                let args = params.iter().map(|p| resolve(p, op, steps, idx)).collect::<Result<Vec<_>, _>>()?;
                if args.iter().any(|a| matches!(a, Ref::Const(_))) {
                    return Err("parameters name values (user, id, step.field); write constants into the SQL".into());
                }
                let w = words(sql);
                let returning_id = dialect == Dialect::Postgres
                    && s.returns.is_empty()
                    && w.first().is_some_and(|f| f == "insert")
                    && w.iter().any(|x| x == "returning");
                let writes = w.first().is_none_or(|f| f != "select");
                Exec::Sql { sql: leak(text), args, returns: s.returns.len(), returning_id, writes }
            }
            Action::Redis { command, keys, args } => {
                let c = redis_steps::command(command)?;
                if keys.is_empty() || keys.len() > 16 {
                    return Err(format!("{} needs 1..=16 keys", c.name));
                }
                if c.many && !args.is_empty() {
                    return Err(format!("{} takes keys only, no args", c.name));
                }
                if args.len() > 64 {
                    return Err("at most 64 args".into());
                }
                Exec::Redis {
                    command: c.name,
                    keys: keys.iter().map(|k| self.template(k, true, op, idx)).collect::<Result<_, _>>()?,
                    args: args.iter().map(|a| self.template(a, false, op, idx)).collect::<Result<_, _>>()?,
                    writes: c.writes,
                }
            }
            Action::Lua { origin, script, keys, args } => {
                if keys.len() > 16 || args.len() > 64 {
                    return Err("a Lua step takes at most 16 keys and 64 args".into());
                }
                redis_steps::check_lua(script, keys.len()).map_err(|e| format!("Lua script ({origin}) {e}"))?;
                Exec::Lua {
                    origin: origin.clone(),
                    script: Arc::new(::redis::Script::new(script)),
                    keys: keys.iter().map(|k| self.template(k, true, op, idx)).collect::<Result<_, _>>()?,
                    args: args.iter().map(|a| self.template(a, false, op, idx)).collect::<Result<_, _>>()?,
                }
            }
        };
        Ok(Step { exec, when, each, commit: s.commit, width: s.fields().len(), name: format!("step {}", s.name) })
    }

    /// Checks one op's result expression.
    pub fn check_result(&self, op: usize) -> Result<(), String> {
        parse_expr(&self.results[op], op, &self.steps[op], self.steps[op].len()).map(|_| ())
    }

    /// Checks a setup statement or the counters query for `dialect`.
    pub fn check_aux(sql: &str, setup: bool) -> Result<(), String> {
        check_names(sql, setup)?;
        let what = if setup { "setup statements take" } else { "the counters query takes" };
        match bind_params(sql, Dialect::Postgres)?.1.first() {
            Some(p) => Err(format!("{what} no parameters, found :{p}")),
            None => Ok(()),
        }
    }

    /// Checks a Redis counters key or field template (`{user}` only).
    pub fn check_counter_template(text: &str, key: bool) -> Result<(), String> {
        redis_steps::template(text, key, |w| {
            if w == "user" { Ok(Ref::User) } else { Err(format!("the counters key takes only {{user}}, not {{{w}}}")) }
        })
        .map(|_| ())
    }

    /// Everything compiled for `dialect`; the first problem otherwise.
    pub fn compile(&self, dialect: Dialect) -> Result<Compiled, String> {
        let mut steps = Vec::new();
        for op in 0..=SEED {
            let mut v = Vec::new();
            for i in 0..self.op_steps(op).len() {
                v.push(self.compile_step(op, i, dialect).map_err(|e| format!("{} step {}: {e}", op_name(op), i + 1))?);
            }
            steps.push(v);
        }
        // PostgreSQL reports no last-insert id: `last_id` there needs INSERT ... RETURNING.
        if dialect == Dialect::Postgres {
            for (op, list) in steps.iter().enumerate().take(CUSTOM_OPS.len()) {
                let used = |r: &Ref| {
                    matches!(r, Ref::Field { step, field: 1 }
                        if matches!(list[*step].exec, Exec::Sql { returning_id: false, .. }))
                };
                let in_steps = list.iter().any(|st: &Step| {
                    let args: Vec<Ref> = match &st.exec {
                        Exec::Sql { args, .. } => args.clone(),
                        Exec::Redis { keys, args, .. } | Exec::Lua { keys, args, .. } => keys
                            .iter()
                            .chain(args)
                            .flatten()
                            .filter_map(|p| match p {
                                Piece::Val(r) => Some(*r),
                                Piece::Lit(_) => None,
                            })
                            .collect(),
                    };
                    args.iter().any(used) || st.when.as_ref().is_some_and(|w| w.refs().any(|r| used(&r)))
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
            Some(CountersSpec::Sql(c)) => {
                let sql = c.get(dialect).ok_or_else(|| format!("no {} counters query", dialect.name()))?;
                Self::check_aux(sql, false)?;
                Some(Counters::Sql(leak(sql.to_string())))
            }
            Some(CountersSpec::Redis { key, field }) => {
                let user_only =
                    |w: &str| if w == "user" { Ok(Ref::User) } else { Err(format!("{{{w}}}: only {{user}}")) };
                Some(Counters::Redis {
                    key: redis_steps::template(key, true, user_only)?,
                    field: field.as_deref().map(|f| redis_steps::template(f, false, user_only)).transpose()?,
                })
            }
        };
        Ok(Compiled { steps, results, setup, counters })
    }
}

/// The values an op's expressions can read besides step outputs.
#[derive(Clone, Copy, Default)]
struct Env {
    user: i64,
    id: i64,
    each: i64,
    seed: [i64; 4],
}

fn eval_ref(r: Ref, env: &Env, vals: &[Vec<i64>]) -> i64 {
    match r {
        Ref::User => env.user,
        Ref::Id => env.id,
        Ref::Each => env.each,
        Ref::Seed(k) => env.seed[k],
        Ref::Const(c) => c,
        Ref::Field { step, field } => vals[step][field],
    }
}

fn eval(e: &Expr, env: &Env, vals: &[Vec<i64>]) -> i64 {
    let sum = |side: &[Ref]| side.iter().fold(0i64, |acc, r| acc.saturating_add(eval_ref(*r, env, vals)));
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

/// A template's text: the literal pieces and the values, with `prefix` in front (keys).
fn expand(t: &Template, prefix: &str, env: &Env, vals: &[Vec<i64>]) -> String {
    let mut s = String::from(prefix);
    for p in t {
        match p {
            Piece::Lit(l) => s.push_str(l),
            Piece::Val(r) => s.push_str(&eval_ref(*r, env, vals).to_string()),
        }
    }
    s
}

fn other(m: String) -> OpError {
    OpError::new(ErrorClass::Other, Outcome::Fail, m)
}

/// An error after an earlier step took effect (a committed write, a Redis write): the op
/// is half applied, so its outcome is unknown and it is never retried as a whole.
fn half_applied(e: OpError) -> OpError {
    if e.outcome == Outcome::Fail {
        OpError::new(e.class, Outcome::Unknown, format!("after an earlier step took effect: {}", e.message))
    } else {
        e
    }
}

/// A file-defined strategy running on one namespace (and, when it uses Redis, the run's
/// key space).
pub struct CustomStrategy {
    info: StrategyInfo,
    db: Db,
    redis: Option<RedisSpace>,
    c: Compiled,
    transaction: bool,
    begin: Begin,
    /// Armed `redis_timeout` faults: the next Redis writes run and lose their replies.
    replies_to_lose: AtomicU64,
    lost_replies: AtomicU64,
    /// Armed `crash_after_commit` faults, and the ops they stopped.
    crashes: CrashPoints,
    /// Armed `error_before_commit` faults.
    errors: CrashPoints,
}

/// An op's progress through its steps.
struct Run {
    vals: Vec<Vec<i64>>,
    lists: Vec<Option<Vec<i64>>>,
    open: Option<Tx>,
    open_writes: bool,
    /// Something this op did is already visible (committed SQL write, Redis write).
    effects: bool,
    /// The op being run (None: the Redis seed).
    kind: Option<OpKind>,
}

impl CustomStrategy {
    /// Compiles `spec` for the namespace's dialect (checked at load, so an error here is
    /// a dialect the spec does not cover), runs its setup statements and loads its Lua
    /// scripts (a script that does not compile fails here, naming its origin).
    pub async fn build(spec: &CustomSpec, db: Db, redis: Option<RedisSpace>) -> Result<CustomStrategy, OpError> {
        let c = spec.compile(db.dialect()).map_err(|e| other(format!("{}: {e}", spec.name)))?;
        if spec.needs_redis() && redis.is_none() {
            return Err(other(format!("{} uses Redis and the run has none", spec.name)));
        }
        for sql in &c.setup {
            let mut tx = db.begin(Begin::Plain).await?;
            tx.exec(leak(sql.clone()), &[]).await?;
            tx.commit().await?;
        }
        Self::prepare_all(spec, &c, &db).await?;
        if let Some(space) = &redis {
            let mut conn = space.conn();
            for step in c.steps.iter().flatten() {
                if let Exec::Lua { origin, script, .. } = &step.exec {
                    script.prepare_invoke().load_async(&mut conn).await.map_err(|e| {
                        other(format!("{}: Lua script ({origin}) was refused by Redis: {e}", spec.name))
                    })?;
                }
            }
        }
        let begin = if spec.sqlite_begin_immediate { Begin::Locking } else { Begin::Plain };
        Ok(CustomStrategy {
            info: spec.info(),
            db,
            redis,
            c,
            transaction: spec.transaction,
            begin,
            replies_to_lose: AtomicU64::new(0),
            lost_replies: AtomicU64::new(0),
            crashes: CrashPoints::default(),
            errors: CrashPoints::default(),
        })
    }

    /// Prepares every SQL step (after `setup`, in the fresh namespace, as its identity) so
    /// a misspelt table, a syntax error or a missing right stops the run before the load,
    /// naming the step's file:line:col.
    async fn prepare_all(spec: &CustomSpec, c: &Compiled, db: &Db) -> Result<(), OpError> {
        for (op, steps) in c.steps.iter().enumerate().take(SEED) {
            for (idx, step) in steps.iter().enumerate() {
                if let Exec::Sql { sql, args, .. } = &step.exec {
                    db.prepare(sql, args.len()).await.map_err(|e| {
                        let at = &spec.op_steps(op)[idx].at;
                        other(format!("{at}: {} {}: {}", op_name(op), step.name, e.message))
                    })?;
                }
            }
        }
        if let Some(Counters::Sql(sql)) = &c.counters {
            db.prepare(sql, 0).await.map_err(|e| other(format!("{}: the counters query: {}", spec.name, e.message)))?;
        }
        Ok(())
    }

    /// Runs the `redis_seed` steps for users 1..=n_users (16 users at a time).
    pub async fn seed_redis(&self, n_users: u64, per_user: u64, read_per_user: u64) -> Result<(), OpError> {
        if self.c.steps[SEED].is_empty() {
            return Ok(());
        }
        let results: Vec<Result<i64, OpError>> = futures_util::stream::iter(1..=n_users as i64)
            .map(|user| {
                let env = Env {
                    user,
                    seed: [
                        (per_user - read_per_user) as i64,
                        per_user as i64,
                        read_per_user as i64,
                        (user - 1) * per_user as i64 + 1,
                    ],
                    ..Env::default()
                };
                async move { self.run_env(SEED, env).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().find_map(|r| r.err()).map_or(Ok(()), Err)
    }

    async fn sql_step(
        tx: &mut Tx,
        sql: &'static str,
        returns: usize,
        returning_id: bool,
        args: &[i64],
    ) -> Result<Vec<i64>, OpError> {
        if returning_id {
            let row = tx.row_i64(sql, args, 1).await?;
            Ok(vec![row.is_some() as i64, row.map_or(0, |r| r[0])])
        } else if returns == 0 {
            let (rows, last_id) = tx.exec_full(sql, args).await?;
            Ok(vec![rows as i64, last_id])
        } else {
            let row = tx.row_i64(sql, args, returns).await?;
            let mut v = vec![row.is_some() as i64, 0];
            v.extend(row.unwrap_or_else(|| vec![0; returns]));
            Ok(v)
        }
    }

    /// One Redis or Lua call; returns the reply's value and elements.
    async fn redis_call(
        &self,
        exec: &Exec,
        env: &Env,
        vals: &[Vec<i64>],
    ) -> Result<(i64, Option<Vec<i64>>, bool), OpError> {
        let space = self.redis.as_ref().expect("checked at build");
        let prefix = space.prefix();
        let mut conn = space.conn();
        let (reply, writes): (::redis::Value, bool) = match exec {
            Exec::Redis { command, keys, args, writes } => {
                let mut cmd = ::redis::cmd(command);
                for k in keys {
                    cmd.arg(expand(k, prefix, env, vals));
                }
                for a in args {
                    cmd.arg(expand(a, "", env, vals));
                }
                (cmd.query_async(&mut conn).await.map_err(classify_redis)?, *writes)
            }
            Exec::Lua { script, keys, args, .. } => {
                let mut inv = script.prepare_invoke();
                for k in keys {
                    inv.key(expand(k, prefix, env, vals));
                }
                for a in args {
                    inv.arg(expand(a, "", env, vals));
                }
                (inv.invoke_async(&mut conn).await.map_err(classify_redis)?, true)
            }
            Exec::Sql { .. } => unreachable!("not a Redis step"),
        };
        let (value, list) = redis_steps::decode(&reply)
            .map_err(|e| OpError::new(ErrorClass::Other, if writes { Outcome::Unknown } else { Outcome::Fail }, e))?;
        Ok((value, list, writes))
    }

    /// Runs op `op`'s steps and returns its result.
    async fn run(&self, op: usize, user: i64, id: i64) -> Result<i64, OpError> {
        self.run_env(op, Env { user, id, ..Env::default() }).await
    }

    async fn run_env(&self, op: usize, env: Env) -> Result<i64, OpError> {
        let steps = &self.c.steps[op];
        let mut st = Run {
            vals: steps.iter().map(|s| vec![0; s.width]).collect(),
            lists: vec![None; steps.len()],
            open: None,
            open_writes: false,
            effects: false,
            kind: [OpKind::Create, OpKind::MarkRead, OpKind::Delete, OpKind::MarkAllRead, OpKind::ReadCount]
                .get(op)
                .copied(),
        };
        let r = self.steps(steps, env, &mut st).await;
        match r {
            Ok(()) => Ok(if op == SEED { 0 } else { eval(&self.c.results[op], &env, &st.vals) }),
            Err(e) if st.effects => Err(half_applied(e)),
            Err(e) => Err(e),
        }
    }

    async fn steps(&self, steps: &[Step], env: Env, st: &mut Run) -> Result<(), OpError> {
        for (i, s) in steps.iter().enumerate() {
            if s.when.as_ref().is_some_and(|w| eval(w, &env, &st.vals) == 0) {
                continue;
            }
            let elements: Vec<Option<i64>> = match s.each {
                None => vec![None],
                Some(src) => {
                    let list = st.lists[src].clone().unwrap_or_default();
                    if list.len() > MAX_EACH {
                        return Err(other(format!("`each` over {} elements (at most {MAX_EACH})", list.len())));
                    }
                    list.into_iter().map(Some).collect()
                }
            };
            let mut out = vec![0i64; s.width];
            for e in elements {
                let env = Env { each: e.unwrap_or(0), ..env };
                match &s.exec {
                    Exec::Sql { sql, args, returns, returning_id, writes } => {
                        let args: Vec<i64> = args.iter().map(|a| eval_ref(*a, &env, &st.vals)).collect();
                        let tx = match &mut st.open {
                            Some(tx) => tx,
                            None => st.open.insert(self.db.begin(self.begin).await?),
                        };
                        let v = Self::sql_step(tx, sql, *returns, *returning_id, &args).await?;
                        st.open_writes |= *writes;
                        if !self.transaction {
                            // After the last step a crash would only lose the reply.
                            self.commit_open(st, &s.name, i + 1 < steps.len()).await?;
                        }
                        out[0] = out[0].saturating_add(v[0]);
                        out[1..].copy_from_slice(&v[1..]);
                    }
                    exec => {
                        let (value, list, writes) = self.redis_call(exec, &env, &st.vals).await?;
                        st.effects |= writes;
                        if writes
                            && self
                                .replies_to_lose
                                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                                .is_ok()
                        {
                            self.lost_replies.fetch_add(1, Ordering::Relaxed);
                            return Err(OpError::new(
                                ErrorClass::Timeout,
                                Outcome::Unknown,
                                "redis: reply lost after the command ran (injected)",
                            ));
                        }
                        out[0] = out[0].saturating_add(value);
                        for (slot, v) in out[1..].iter_mut().zip(list.iter().flatten().chain(std::iter::repeat(&0))) {
                            *slot = *v;
                        }
                        st.lists[i] = list;
                    }
                }
            }
            st.vals[i] = out;
            if s.commit {
                self.commit_open(st, &s.name, true).await?;
            }
        }
        self.commit_open(st, "the last step", true).await
    }

    /// Commits the op's open transaction, if any, through the two commit fault points.
    async fn commit_open(&self, st: &mut Run, step: &str, may_crash: bool) -> Result<(), OpError> {
        let Some(tx) = st.open.take() else { return Ok(()) };
        if let Err(e) = self.committing(st) {
            drop(tx); // rolled back
            return Err(e);
        }
        tx.commit().await?;
        self.committed(st, step, may_crash)
    }

    /// Before a commit of writes: an armed `error_before_commit` fails the op here (the
    /// open transaction is dropped, so it rolls back).
    fn committing(&self, st: &Run) -> Result<(), OpError> {
        if st.open_writes && st.kind.is_some_and(|k| self.errors.fire(k)) {
            return Err(other("error before the commit (injected)".into()));
        }
        Ok(())
    }

    /// After a commit: its writes are visible; an armed `crash_after_commit` stops the
    /// op here when they were writes and `may_crash`.
    fn committed(&self, st: &mut Run, step: &str, may_crash: bool) -> Result<(), OpError> {
        if !std::mem::take(&mut st.open_writes) {
            return Ok(());
        }
        st.effects = true;
        if may_crash && st.kind.is_some_and(|k| self.crashes.fire(k)) {
            return Err(OpError::new(
                ErrorClass::Connection,
                Outcome::Unknown,
                format!("crashed after the commit of {step} (injected)"),
            ));
        }
        Ok(())
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
        match &self.c.counters {
            None => Ok(None),
            Some(Counters::Sql(sql)) => {
                let rows: Vec<(i64, i64)> = self.db.rows(sql, &[]).await?;
                let by_user: BTreeMap<i64, i64> = rows.into_iter().collect();
                Ok(Some((1..=n_users as i64).map(|u| by_user.get(&u).copied()).collect()))
            }
            Some(Counters::Redis { key, field }) => {
                let space = self.redis.as_ref().expect("checked at build");
                let mut conn = space.conn();
                let mut out = Vec::with_capacity(n_users as usize);
                for chunk in (1..=n_users as i64).collect::<Vec<_>>().chunks(1000) {
                    let mut pipe = ::redis::pipe();
                    for u in chunk {
                        let env = Env { user: *u, ..Env::default() };
                        let k = expand(key, space.prefix(), &env, &[]);
                        match field {
                            None => pipe.get(k),
                            Some(f) => pipe.hget(k, expand(f, "", &env, &[])),
                        };
                    }
                    let vals: Vec<::redis::Value> = pipe.query_async(&mut conn).await.map_err(classify_redis)?;
                    for v in vals {
                        out.push(match v {
                            ::redis::Value::Nil => None,
                            v => Some(redis_steps::decode(&v).map_err(other)?.0),
                        });
                    }
                }
                Ok(Some(out))
            }
        }
    }
    async fn inject(&self, fault: Fault) -> Result<String, OpError> {
        let which = |op: Option<OpKind>| op.map_or("op".to_string(), |k| k.name().to_string());
        if let Fault::CrashAfterCommit { op } = fault {
            self.crashes.arm(op);
            return Ok(format!("the next {} that commits a write stops after that commit", which(op)));
        }
        if let Fault::ErrorBeforeCommit { op } = fault {
            self.errors.arm(op);
            return Ok(format!("the next {} about to commit a write rolls back and fails", which(op)));
        }
        let Some(space) = &self.redis else {
            return Err(other(format!("{} uses no Redis: {} does not apply", self.info.name, fault.name())));
        };
        match fault {
            Fault::RedisDataLoss => Ok(format!("deleted {} keys", space.delete_all().await?)),
            Fault::RedisDisconnect => Ok(format!("killed {} connections", space.kill_connections().await?)),
            Fault::RedisTimeout => {
                self.replies_to_lose.fetch_add(1, Ordering::Relaxed);
                Ok("the next Redis write loses its reply".into())
            }
            Fault::FlusherCrash => Err(other(format!("{} has no flusher", self.info.name))),
            Fault::CrashAfterCommit { .. } | Fault::ErrorBeforeCommit { .. } | Fault::Pause { .. } => {
                Err(other(format!("{} cannot inject {} here", self.info.name, fault.name())))
            }
        }
    }
    fn figures(&self) -> Vec<(&'static str, f64)> {
        let mut v = Vec::new();
        if let Some(n) = self.crashes.figure() {
            v.push(("crashes_after_commit", n));
        }
        if let Some(n) = self.errors.figure() {
            v.push(("errors_before_commit", n));
        }
        if self.redis.is_some() {
            v.push(("lost_replies", self.lost_replies.load(Ordering::Relaxed) as f64));
        }
        v
    }
    async fn teardown(&self) -> Result<(), OpError> {
        if let Some(space) = &self.redis {
            space.delete_all().await?;
            space.release().await?;
        }
        Ok(())
    }
}
