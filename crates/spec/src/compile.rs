//! The compiler of file-defined strategies: checks a `CustomSpec` for one dialect and
//! turns it into `Compiled` steps (statements with bound parameters, allowed Redis
//! commands, checked Lua scripts, parsed guards and results), or says what is wrong and
//! where (`CompileError`).

use std::fmt;
use std::sync::Arc;

use crate::ast::{Expr, Ref, parse};
use crate::expr::{Template, parse_expr, parse_value, resolve};
use crate::redis_steps::{self, Piece, TxCmd};
use crate::spec::{Action, CUSTOM_OPS, CountersSpec, CustomSpec, MAX_RETRY_ATTEMPTS, SEED, StepSpec, leak, op_name};
use crate::sql::{bind_params, check_names, words};
use counterlab_core::Dialect;

/// Which part of a step (or of the spec) a compile error is about, so a caller can point
/// at it (the guard's text, the loop's, or the step's statement).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The step itself: its statement, command or script, its parameters. `compile` also
    /// reports a step's error of any part as this, naming the op and step in `msg`.
    Step,
    /// The step's `when` guard.
    When,
    /// The step's `each` loop.
    Each,
    /// An op's result expression.
    Result,
    /// What spans an op's steps (`last_id` on PostgreSQL).
    Op,
    /// A setup statement.
    Setup,
    /// The counters query or key.
    Counters,
    /// The `group` of the op's step at this index (unknown, or its steps not consecutive).
    Group(usize),
    /// The `until` of the group whose first step is at this index.
    Until(usize),
}

/// A spec that does not compile: the part at fault and why. It prints as the errors
/// did when they were strings: `when: ` or `each: ` before the message of a guard or a
/// loop, the message alone otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError {
    pub part: Part,
    pub msg: String,
}

impl CompileError {
    fn new(part: Part, msg: impl Into<String>) -> CompileError {
        CompileError { part, msg: msg.into() }
    }

    /// A constructor for `map_err`: `.map_err(CompileError::at(Part::Setup))`.
    fn at(part: Part) -> impl Fn(String) -> CompileError {
        move |msg| CompileError { part, msg }
    }
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.part {
            Part::When => write!(f, "when: {}", self.msg),
            Part::Each => write!(f, "each: {}", self.msg),
            Part::Group(_) => write!(f, "group: {}", self.msg),
            Part::Until(_) => write!(f, "until: {}", self.msg),
            _ => f.write_str(&self.msg),
        }
    }
}

impl std::error::Error for CompileError {}

/// How a compiled step runs.
#[derive(Clone, Debug)]
pub enum Exec {
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
        /// A transaction command (WATCH, MULTI, EXEC...).
        tx: Option<TxCmd>,
    },
    Lua {
        origin: String,
        /// The script's source, shared by every clone: the runtime loads each one once.
        source: Arc<str>,
        keys: Vec<Template>,
        args: Vec<Template>,
    },
}

/// A compiled step.
#[derive(Clone, Debug)]
pub struct Step {
    pub exec: Exec,
    pub when: Option<Expr>,
    /// The earlier step whose array reply this one loops over.
    pub each: Option<usize>,
    pub commit: bool,
    /// Wait before running (ms).
    pub after_ms: Option<u64>,
    /// Number of outputs (`StepSpec::fields`).
    pub width: usize,
    /// `step <name>`, for messages.
    pub name: String,
}

/// A retry group of an op, compiled: steps `start..end` run again while `until` is false,
/// at most `max_attempts` times in all.
#[derive(Clone, Debug)]
pub struct Group {
    pub name: String,
    pub start: usize,
    pub end: usize,
    pub until: Expr,
    pub max_attempts: u32,
}

/// Where the check reads the counters, compiled: a query, or a Redis read per user (GET,
/// HGET and any other read-only command, or a script) with `key` first.
#[derive(Clone, Debug)]
pub enum Counters {
    Sql(&'static str),
    Redis { read: RedisRead, key: Template, args: Vec<Template> },
}

/// How a Redis counter is read.
#[derive(Clone, Debug)]
pub enum RedisRead {
    Command(&'static str),
    /// A script's source.
    Lua(Arc<str>),
}

/// A spec compiled for one dialect.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// Per op, then the seed steps last (index `SEED`).
    pub steps: Vec<Vec<Step>>,
    /// Per op (the seed last), its retry groups in step order.
    pub groups: Vec<Vec<Group>>,
    /// Per op (the seed last): it sends WATCH or MULTI, so its Redis steps share one
    /// dedicated connection.
    pub dedicated: Vec<bool>,
    pub results: Vec<Expr>,
    pub setup: Vec<String>,
    pub counters: Option<Counters>,
}

/// A Redis counters placeholder: an expression over `user` only (`{user}`, `{user % 16}`).
fn user_only(text: &str) -> Result<Expr, String> {
    parse(text, |w| match w.parse::<i64>() {
        Ok(n) => Ok(Ref::Const(n)),
        Err(_) if w == "user" => Ok(Ref::User),
        Err(_) => Err(format!("{{{text}}}: the counters key reads only {{user}}")),
    })
}

/// Every value a compiled step reads: its SQL parameters, or its keys' and arguments'
/// placeholders, then its guard's.
fn step_refs(st: &Step) -> Vec<Ref> {
    let mut refs: Vec<Ref> = match &st.exec {
        Exec::Sql { args, .. } => args.clone(),
        Exec::Redis { keys, args, .. } | Exec::Lua { keys, args, .. } => keys
            .iter()
            .chain(args)
            .flatten()
            .flat_map(|p| match p {
                Piece::Val(e) => e.refs(),
                Piece::Lit(_) => Vec::new(),
            })
            .collect(),
    };
    refs.extend(st.when.iter().flat_map(|w| w.refs()));
    refs
}

/// A Redis or Lua step's key and argument templates, or why one is wrong.
type TemplatesResult = Result<(Vec<Template>, Vec<Template>), String>;

/// The transaction command a step sends, if any.
fn tx_of(s: &StepSpec) -> Option<TxCmd> {
    match &s.action {
        Action::Redis { command, .. } => TxCmd::of(command),
        _ => None,
    }
}

/// Where step `idx` stands in the op's MULTI ... EXEC blocks (in step order): MULTI opens
/// one that a later EXEC or DISCARD closes, and no MULTI nests; inside one, only plain
/// Redis commands (queued: no WATCH, Lua, `each`); a transaction command has no `each`.
fn check_transaction(steps: &[StepSpec], idx: usize) -> Result<(), String> {
    let in_multi = steps[..idx].iter().fold(false, |open, s| match tx_of(s) {
        Some(TxCmd::Multi) => true,
        Some(TxCmd::Exec | TxCmd::Discard) => false,
        _ => open,
    });
    let s = &steps[idx];
    let tx = tx_of(s);
    if tx.is_some() && s.each.is_some() {
        return Err("a transaction command takes no `each`".into());
    }
    match tx {
        Some(TxCmd::Multi) if in_multi => Err("MULTI inside MULTI: close the first with EXEC or DISCARD".into()),
        Some(TxCmd::Multi)
            if !steps[idx + 1..].iter().any(|s| matches!(tx_of(s), Some(TxCmd::Exec | TxCmd::Discard))) =>
        {
            Err("MULTI without a later EXEC or DISCARD".into())
        }
        Some(t @ (TxCmd::Exec | TxCmd::Discard)) if !in_multi => Err(format!("{} without an earlier MULTI", t.name())),
        Some(TxCmd::Watch | TxCmd::Unwatch) if in_multi => Err("WATCH and UNWATCH go before MULTI".into()),
        None if in_multi && matches!(s.action, Action::Lua { .. }) => {
            Err("a Lua step cannot be queued between MULTI and EXEC".into())
        }
        None if in_multi && s.each.is_some() => Err("a step between MULTI and EXEC takes no `each`".into()),
        _ => Ok(()),
    }
}

/// The step an `each` loops over: an earlier Redis or Lua step, by index.
fn each_source(steps: &[StepSpec], idx: usize, src: &str) -> Result<usize, String> {
    match steps[..idx].iter().position(|p| p.name == src) {
        Some(i) if !steps[i].is_sql() => Ok(i),
        Some(_) => Err(format!("`{src}` is an SQL step; `each` loops over a Redis or Lua array reply")),
        None => Err(format!("no earlier step named `{src}`")),
    }
}

impl CustomSpec {
    /// The first Redis or Lua step whose keys may hash to different Redis Cluster slots,
    /// located (`<file:line:col>: <op> step <name>: keys ...`): such a file runs on one
    /// Redis server, and a run on a cluster refuses it before any load.
    pub fn cross_slot(&self) -> Option<String> {
        (0..=SEED).find_map(|op| {
            self.op_steps(op).iter().find_map(|st| {
                let keys = match &st.action {
                    Action::Redis { keys, .. } | Action::Lua { keys, .. } => keys,
                    Action::Sql(_) => return None,
                };
                let why = redis_steps::one_slot(keys).err()?;
                Some(format!("{}: {} step {}: {why}", st.at, op_name(op), st.name))
            })
        })
    }

    /// Checks a single step (in op `op` at position `idx`; `op` 5 is `redis_seed`).
    pub fn check_step(&self, op: usize, idx: usize, dialect: Dialect) -> Result<(), CompileError> {
        self.compile_step(op, idx, dialect).map(|_| ())
    }

    fn template(&self, text: &str, key: bool, op: usize, idx: usize) -> Result<Template, String> {
        let steps = self.op_steps(op);
        redis_steps::template(text, key, |w| parse_value(w, op, steps, idx))
    }

    /// A Redis or Lua step's keys and arguments as templates, keys first.
    fn templates(&self, keys: &[String], args: &[String], op: usize, idx: usize) -> TemplatesResult {
        let keys = keys.iter().map(|k| self.template(k, true, op, idx)).collect::<Result<_, _>>()?;
        let args = args.iter().map(|a| self.template(a, false, op, idx)).collect::<Result<_, _>>()?;
        Ok((keys, args))
    }

    fn compile_step(&self, op: usize, idx: usize, dialect: Dialect) -> Result<Step, CompileError> {
        let steps = self.op_steps(op);
        let s = &steps[idx];
        if op == SEED && s.is_sql() {
            return Err(CompileError::new(
                Part::Step,
                "redis_seed steps are Redis commands or Lua scripts (SQL data comes from the seed and setup)",
            ));
        }
        let when = s
            .when
            .as_deref()
            .map(|w| parse_expr(w, op, steps, idx))
            .transpose()
            .map_err(CompileError::at(Part::When))?;
        let each = s
            .each
            .as_deref()
            .map(|src| each_source(steps, idx, src))
            .transpose()
            .map_err(CompileError::at(Part::Each))?;
        check_transaction(steps, idx).map_err(CompileError::at(Part::Step))?;
        let exec = match &s.action {
            Action::Sql(per) => self.compile_sql(per.get(dialect), op, idx, dialect),
            Action::Redis { command, keys, args } => self.compile_redis(command, keys, args, op, idx),
            Action::Lua { origin, script, keys, args } => self.compile_lua(origin, script, keys, args, op, idx),
        }
        .map_err(CompileError::at(Part::Step))?;
        let name = format!("step {}", s.name);
        Ok(Step { exec, when, each, commit: s.commit, after_ms: s.after_ms, width: s.fields().len(), name })
    }

    /// An SQL step's statement for `dialect`: checked, its parameters bound.
    fn compile_sql(&self, sql: Option<&str>, op: usize, idx: usize, dialect: Dialect) -> Result<Exec, String> {
        let steps = self.op_steps(op);
        let sql = sql.ok_or_else(|| format!("no {} statement", dialect.name()))?;
        check_names(sql, false)?;
        let (text, params) = bind_params(sql, dialect)?;
        let args = params.iter().map(|p| resolve(p, op, steps, idx)).collect::<Result<Vec<_>, _>>()?;
        if args.iter().any(|a| matches!(a, Ref::Const(_))) {
            return Err("parameters name values (user, id, step.field); write constants into the SQL".into());
        }
        let w = words(sql);
        let returning_id = dialect == Dialect::Postgres
            && steps[idx].returns.is_empty()
            && w.first().is_some_and(|f| f == "insert")
            && w.iter().any(|x| x == "returning");
        let writes = w.first().is_none_or(|f| f != "select");
        Ok(Exec::Sql { sql: leak(text), args, returns: steps[idx].returns.len(), returning_id, writes })
    }

    /// A Redis step: an allowed command, its keys and arguments within bounds.
    fn compile_redis(
        &self,
        command: &str,
        keys: &[String],
        args: &[String],
        op: usize,
        idx: usize,
    ) -> Result<Exec, String> {
        if let Some(tx) = TxCmd::of(command) {
            let keys_ok = if tx == TxCmd::Watch { (1..=16).contains(&keys.len()) } else { keys.is_empty() };
            if !keys_ok || !args.is_empty() {
                let takes = if tx == TxCmd::Watch { "1..=16 keys and no args" } else { "no keys and no args" };
                return Err(format!("{} takes {takes}", tx.name()));
            }
            let (keys, _) = self.templates(keys, &[], op, idx)?;
            return Ok(Exec::Redis { command: tx.name(), keys, args: Vec::new(), writes: false, tx: Some(tx) });
        }
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
        let (keys, args) = self.templates(keys, args, op, idx)?;
        Ok(Exec::Redis { command: c.name, keys, args, writes: c.writes, tx: None })
    }

    /// A Lua step: a script that passes `check_lua`, its keys and arguments within bounds.
    fn compile_lua(
        &self,
        origin: &str,
        script: &str,
        keys: &[String],
        args: &[String],
        op: usize,
        idx: usize,
    ) -> Result<Exec, String> {
        if keys.len() > 16 || args.len() > 64 {
            return Err("a Lua step takes at most 16 keys and 64 args".into());
        }
        redis_steps::check_lua(script, keys.len()).map_err(|e| format!("Lua script ({origin}) {e}"))?;
        let (keys, args) = self.templates(keys, args, op, idx)?;
        Ok(Exec::Lua { origin: origin.into(), source: Arc::from(script), keys, args })
    }

    /// An op's result expression, read after all its steps.
    fn result(&self, op: usize) -> Result<Expr, CompileError> {
        parse_expr(&self.results[op], op, &self.steps[op], self.steps[op].len()).map_err(CompileError::at(Part::Result))
    }

    /// Checks one op's result expression.
    pub fn check_result(&self, op: usize) -> Result<(), CompileError> {
        self.result(op).map(|_| ())
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
        redis_steps::template(text, key, user_only).map(|_| ())
    }

    /// Checks a Redis counters read: a read-only command, or a script calling only those.
    pub fn check_counter_read(command: Option<&str>, lua: Option<&str>) -> Result<(), String> {
        if let Some(c) = command {
            redis_steps::read_only(c)?;
        }
        if let Some(l) = lua {
            redis_steps::check_read_lua(l, 1)?;
        }
        Ok(())
    }

    /// Everything compiled for `dialect`; the first problem otherwise.
    pub fn compile(&self, dialect: Dialect) -> Result<Compiled, CompileError> {
        let mut steps = Vec::new();
        for op in 0..=SEED {
            let mut v = Vec::new();
            for i in 0..self.op_steps(op).len() {
                let step = self
                    .compile_step(op, i, dialect)
                    .map_err(|e| CompileError::new(Part::Step, format!("{} step {}: {e}", op_name(op), i + 1)))?;
                v.push(step);
            }
            steps.push(v);
        }
        if dialect == Dialect::Postgres {
            self.check_last_id(&steps)?;
        }
        let dedicated = steps
            .iter()
            .map(|list| {
                list.iter().any(|s| matches!(s.exec, Exec::Redis { tx: Some(TxCmd::Watch | TxCmd::Multi), .. }))
            })
            .collect();
        let groups = (0..=SEED)
            .map(|op| self.groups(op).map_err(|e| CompileError::new(e.part, format!("{}: {}", op_name(op), e.msg))))
            .collect::<Result<Vec<_>, _>>()?;
        let results = (0..CUSTOM_OPS.len()).map(|op| self.result(op)).collect::<Result<Vec<_>, _>>()?;
        let mut setup = Vec::new();
        for s in &self.setup {
            let sql = s
                .get(dialect)
                .ok_or_else(|| CompileError::new(Part::Setup, format!("no {} setup statement", dialect.name())))?;
            Self::check_aux(sql, true).map_err(CompileError::at(Part::Setup))?;
            setup.push(sql.to_string());
        }
        let counters = self.compile_counters(dialect)?;
        Ok(Compiled { steps, groups, dedicated, results, setup, counters })
    }

    /// Op `op`'s retry groups: each a run of consecutive steps naming a `retry` table,
    /// its `until` read after the group's last step.
    pub fn groups(&self, op: usize) -> Result<Vec<Group>, CompileError> {
        let steps = self.op_steps(op);
        let mut out: Vec<Group> = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            let Some(g) = &s.group else { continue };
            let Some(spec) = self.retries.get(g) else {
                let known = self.retries.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
                return Err(CompileError::new(
                    Part::Group(i),
                    format!(
                        "no [retry.{g}] table (the strategy has: {})",
                        if known.is_empty() { "none" } else { &known }
                    ),
                ));
            };
            if let Some(last) = out.last_mut()
                && last.name == *g
                && last.end == i
            {
                last.end = i + 1;
                continue;
            }
            if out.iter().any(|o| o.name == *g) {
                return Err(CompileError::new(Part::Group(i), format!("the steps of group `{g}` must be consecutive")));
            }
            out.push(Group {
                name: g.clone(),
                start: i,
                end: i + 1,
                until: Expr::Val(Ref::Const(1)),
                max_attempts: spec.max_attempts.clamp(1, MAX_RETRY_ATTEMPTS),
            });
        }
        for g in &mut out {
            g.until = parse_expr(&self.retries[&g.name].until, op, steps, g.end)
                .map_err(|m| CompileError::new(Part::Until(g.start), m))?;
        }
        Ok(out)
    }

    /// Checks op `op`'s retry groups (`Part::Group`/`Part::Until` say which step's).
    pub fn check_groups(&self, op: usize) -> Result<(), CompileError> {
        self.groups(op).map(|_| ())
    }

    /// A Redis counters read with its key and argument templates (`{user}` only).
    fn redis_counters(read: RedisRead, key: &str, args: &[String]) -> Result<Counters, String> {
        if args.len() > 16 {
            return Err("redis_counters takes at most 16 args".into());
        }
        let key = redis_steps::template(key, true, user_only)?;
        let args = args.iter().map(|a| redis_steps::template(a, false, user_only)).collect::<Result<_, _>>()?;
        Ok(Counters::Redis { read, key, args })
    }

    /// PostgreSQL reports no last-insert id: `last_id` there needs INSERT ... RETURNING,
    /// whether a later step, a guard or the result reads it.
    fn check_last_id(&self, steps: &[Vec<Step>]) -> Result<(), CompileError> {
        for (op, list) in steps.iter().enumerate().take(CUSTOM_OPS.len()) {
            let used = |r: &Ref| {
                matches!(r, Ref::Field { step, field: 1 }
                    if matches!(list[*step].exec, Exec::Sql { returning_id: false, .. }))
            };
            let in_steps = list.iter().any(|st| step_refs(st).iter().any(used));
            let result = self.result(op)?;
            if in_steps || result.refs().iter().any(used) {
                return Err(CompileError::new(
                    Part::Op,
                    format!(
                        "{}: `last_id` on PostgreSQL needs the step to be an INSERT ... RETURNING id",
                        CUSTOM_OPS[op]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Where the check reads the counters, for `dialect`.
    fn compile_counters(&self, dialect: Dialect) -> Result<Option<Counters>, CompileError> {
        let at = CompileError::at(Part::Counters);
        Ok(match &self.counters {
            None => None,
            Some(CountersSpec::Sql(c)) => {
                let sql = c.get(dialect).ok_or_else(|| format!("no {} counters query", dialect.name())).map_err(&at)?;
                Self::check_aux(sql, false).map_err(&at)?;
                Some(Counters::Sql(leak(sql.to_string())))
            }
            Some(CountersSpec::Redis { key, field }) => {
                let (command, args) = match field {
                    None => ("GET", Vec::new()),
                    Some(f) => ("HGET", vec![f.clone()]),
                };
                Some(Self::redis_counters(RedisRead::Command(command), key, &args).map_err(&at)?)
            }
            Some(CountersSpec::RedisCommand { command, key, args }) => {
                let c = redis_steps::read_only(command).map_err(&at)?;
                Some(Self::redis_counters(RedisRead::Command(c.name), key, args).map_err(&at)?)
            }
            Some(CountersSpec::RedisLua { script, key, args }) => {
                redis_steps::check_read_lua(script, 1).map_err(|e| at(format!("redis_counters.lua: {e}")))?;
                let read = RedisRead::Lua(Arc::from(script.as_str()));
                Some(Self::redis_counters(read, key, args).map_err(&at)?)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::PerDialect;
    use crate::spec::fixtures::{redis_step, spec, sql_step};

    fn err(part: Part, msg: &str) -> CompileError {
        CompileError::new(part, msg)
    }

    #[test]
    fn errors_print_as_the_strings_did() {
        assert_eq!(err(Part::When, "x").to_string(), "when: x");
        assert_eq!(err(Part::Each, "x").to_string(), "each: x");
        for part in [Part::Step, Part::Result, Part::Op, Part::Setup, Part::Counters] {
            assert_eq!(err(part, "x").to_string(), "x", "{part:?}");
        }
    }

    #[test]
    fn guard_errors_are_when_errors() {
        let mut guarded = redis_step("b", "GET", &["k"], &[]);
        guarded.when = Some("nope.value == 1".into());
        let s = spec(vec![redis_step("a", "GET", &["k"], &[]), guarded], "0");
        let e = s.check_step(0, 1, Dialect::Sqlite).unwrap_err();
        assert_eq!(e, err(Part::When, "`nope.value` refers to no step named `nope` in create"));
        assert_eq!(e.to_string(), "when: `nope.value` refers to no step named `nope` in create");
    }

    #[test]
    fn loops_run_over_an_earlier_redis_or_lua_step() {
        let looping = |over: &str| StepSpec { each: Some(over.into()), ..redis_step("del", "DEL", &["k:{each}"], &[]) };
        let sel = sql_step("sel", "select 1", &[]);
        let list = redis_step("list", "SMEMBERS", &["s"], &[]);
        let s = spec(vec![sel.clone(), list.clone(), looping("list")], "0");
        s.check_step(0, 2, Dialect::Sqlite).unwrap();
        let s = spec(vec![sel.clone(), list.clone(), looping("sel")], "0");
        let e = s.check_step(0, 2, Dialect::Sqlite).unwrap_err();
        assert_eq!(e, err(Part::Each, "`sel` is an SQL step; `each` loops over a Redis or Lua array reply"));
        let s = spec(vec![looping("list"), list], "0");
        let e = s.check_step(0, 0, Dialect::Sqlite).unwrap_err();
        assert_eq!(e.to_string(), "each: no earlier step named `list`");
        assert_eq!(e.part, Part::Each);
    }

    #[test]
    fn statement_command_and_script_errors_are_step_errors() {
        let flush = spec(vec![redis_step("f", "FLUSHALL", &["k"], &[])], "0");
        let e = flush.check_step(0, 0, Dialect::Sqlite).unwrap_err();
        assert_eq!(e.part, Part::Step);
        assert!(e.msg.starts_with("Redis command `FLUSHALL` is not allowed"), "{e}");
        let many = spec(vec![redis_step("d", "DEL", &[], &[])], "0");
        assert_eq!(many.check_step(0, 0, Dialect::Sqlite), Err(err(Part::Step, "DEL needs 1..=16 keys")));
        let mut pg_only = sql_step("u", "update t set n = 1", &[]);
        pg_only.action =
            Action::Sql(PerDialect { postgres: Some("update t set n = 1".into()), mysql: None, sqlite: None });
        let pg_only = spec(vec![pg_only], "0");
        assert_eq!(pg_only.check_step(0, 0, Dialect::Sqlite), Err(err(Part::Step, "no sqlite statement")));
        pg_only.check_step(0, 0, Dialect::Postgres).unwrap();
        let lua = StepSpec {
            action: Action::Lua { origin: "inline".into(), script: String::new(), keys: Vec::new(), args: Vec::new() },
            ..redis_step("l", "GET", &[], &[])
        };
        assert_eq!(
            spec(vec![lua], "0").check_step(0, 0, Dialect::Sqlite),
            Err(err(Part::Step, "Lua script (inline) the Lua script is empty"))
        );
        let mut seed = spec(Vec::new(), "0");
        seed.redis_seed.push(sql_step("s", "select 1", &[]));
        let e = seed.check_step(SEED, 0, Dialect::Sqlite).unwrap_err();
        assert_eq!(e.part, Part::Step);
        assert!(e.msg.starts_with("redis_seed steps are Redis commands or Lua scripts"), "{e}");
    }

    #[test]
    fn result_errors_are_result_errors() {
        let s = spec(Vec::new(), "sel.rows");
        assert_eq!(s.check_result(0), Err(err(Part::Result, "`sel.rows` refers to no step named `sel` in create")));
        s.check_result(1).unwrap();
    }

    #[test]
    fn compile_names_the_op_and_step_of_a_step_error() {
        let mut guarded = redis_step("b", "GET", &["k"], &[]);
        guarded.when = Some("a.nope == 1".into());
        let s = spec(vec![redis_step("a", "GET", &["k"], &[]), guarded], "0");
        let e = s.compile(Dialect::Sqlite).unwrap_err();
        assert_eq!(e, err(Part::Step, "create step 2: when: step `a` has no output `nope`; it has value"));
    }

    fn grouped(name: &str, g: &str) -> StepSpec {
        StepSpec { group: Some(g.into()), ..redis_step(name, "GET", &["k"], &[]) }
    }

    fn retry(until: &str, max_attempts: u32) -> crate::spec::RetrySpec {
        crate::spec::RetrySpec { until: until.into(), max_attempts }
    }

    #[test]
    fn retry_groups_are_consecutive_steps_with_a_table() {
        let mut s = spec(
            vec![redis_step("a", "GET", &["k"], &[]), grouped("b", "g"), grouped("c", "g"), grouped("d", "h")],
            "0",
        );
        s.retries.insert("g".into(), retry("c.value != 0 and b.value > 0", 5));
        s.retries.insert("h".into(), retry("d.value == 1", 5000));
        let gs = s.groups(0).unwrap();
        assert_eq!(
            gs.iter().map(|g| (g.name.as_str(), g.start, g.end)).collect::<Vec<_>>(),
            [("g", 1, 3), ("h", 3, 4)]
        );
        assert_eq!(gs[1].max_attempts, MAX_RETRY_ATTEMPTS);
        s.retries.remove("h");
        assert_eq!(s.check_groups(0), Err(err(Part::Group(3), "no [retry.h] table (the strategy has: g)")));
        s.steps[0][3].group = Some("g".into());
        s.steps[0][2].group = None;
        assert_eq!(s.check_groups(0), Err(err(Part::Group(3), "the steps of group `g` must be consecutive")));
        assert_eq!(err(Part::Group(3), "x").to_string(), "group: x");
    }

    #[test]
    fn until_reads_the_group_and_the_steps_before_it() {
        let mut s = spec(vec![grouped("a", "g"), redis_step("b", "GET", &["k"], &[])], "0");
        s.retries.insert("g".into(), retry("b.value == 1", 3));
        assert_eq!(s.check_groups(0), Err(err(Part::Until(0), "`b.value` refers to step `b`, which runs later")));
        s.retries.insert("g".into(), retry("a.value = 1", 3));
        assert!(s.check_groups(0).unwrap_err().msg.starts_with("cannot read `a.value = 1`"));
        let e = s.compile(Dialect::Sqlite).unwrap_err();
        assert_eq!(
            e.to_string(),
            "until: create: cannot read `a.value = 1`: `=` is not an operator: compare with `==`"
        );
    }

    #[test]
    fn transactions_open_with_multi_and_close_with_exec_or_discard() {
        let r = |name: &str, cmd: &str, keys: &[&str]| redis_step(name, cmd, keys, &[]);
        let ok = spec(
            vec![
                r("w", "WATCH", &["c"]),
                r("g", "GET", &["c"]),
                r("m", "multi", &[]),
                r("s", "SET", &["c"]),
                r("x", "EXEC", &[]),
            ],
            "x.nil + x.value",
        );
        let c = ok.compile(Dialect::Sqlite).unwrap();
        assert_eq!(c.dedicated, [true, false, false, false, false, false]);
        let Exec::Redis { tx: Some(TxCmd::Multi), command: "MULTI", .. } = c.steps[0][2].exec else { panic!() };
        assert_eq!(ok.steps[0][4].fields(), ["value", "nil"]);
        for (steps, at, msg) in [
            (vec![r("x", "EXEC", &[])], 0, "EXEC without an earlier MULTI"),
            (vec![r("m", "MULTI", &[])], 0, "MULTI without a later EXEC or DISCARD"),
            (vec![r("m", "MULTI", &[]), r("n", "MULTI", &[]), r("x", "EXEC", &[])], 1, "MULTI inside MULTI"),
            (
                vec![r("m", "MULTI", &[]), r("w", "WATCH", &["c"]), r("x", "EXEC", &[])],
                1,
                "WATCH and UNWATCH go before",
            ),
            (vec![r("w", "WATCH", &[])], 0, "WATCH takes 1..=16 keys and no args"),
            (vec![r("m", "MULTI", &["c"]), r("x", "EXEC", &[])], 0, "MULTI takes no keys and no args"),
        ] {
            let e = spec(steps, "0").check_step(0, at, Dialect::Sqlite).unwrap_err();
            assert!(e.part == Part::Step && e.msg.starts_with(msg), "{msg}: {e}");
        }
        let lua = StepSpec {
            action: Action::Lua {
                origin: "inline".into(),
                script: "return 1".into(),
                keys: Vec::new(),
                args: Vec::new(),
            },
            ..r("l", "GET", &[])
        };
        let e = spec(vec![r("m", "MULTI", &[]), lua, r("x", "EXEC", &[])], "0").check_step(0, 1, Dialect::Sqlite);
        assert_eq!(e, Err(err(Part::Step, "a Lua step cannot be queued between MULTI and EXEC")));
    }

    #[test]
    fn last_id_on_postgres_needs_insert_returning() {
        let insert = sql_step("ins", "insert into notifications (user_id) values (:user)", &[]);
        let s = spec(vec![insert], "ins.last_id");
        s.compile(Dialect::Sqlite).unwrap();
        s.compile(Dialect::Mysql).unwrap();
        assert_eq!(
            s.compile(Dialect::Postgres).unwrap_err(),
            err(Part::Op, "create: `last_id` on PostgreSQL needs the step to be an INSERT ... RETURNING id")
        );
        let returning = sql_step("ins", "insert into notifications (user_id) values (:user) returning id", &[]);
        spec(vec![returning], "ins.last_id").compile(Dialect::Postgres).unwrap();
    }

    #[test]
    fn setup_and_counters_errors_say_so() {
        let mut s = spec(Vec::new(), "0");
        s.setup.push(PerDialect { postgres: Some("create table x (a int)".into()), mysql: None, sqlite: None });
        assert_eq!(s.compile(Dialect::Sqlite).unwrap_err(), err(Part::Setup, "no sqlite setup statement"));
        s.setup = vec![PerDialect::all("drop table notifications")];
        assert_eq!(s.compile(Dialect::Sqlite).unwrap_err().part, Part::Setup);
        s.setup.clear();
        s.counters = Some(CountersSpec::Redis { key: "c:{id}".into(), field: None });
        assert_eq!(
            s.compile(Dialect::Sqlite).unwrap_err(),
            err(Part::Counters, "{id}: the counters key reads only {user}")
        );
        s.counters = Some(CountersSpec::Sql(PerDialect { postgres: None, mysql: None, sqlite: None }));
        assert_eq!(s.compile(Dialect::Sqlite).unwrap_err(), err(Part::Counters, "no sqlite counters query"));
        s.counters = Some(CountersSpec::Redis { key: "c:{user}".into(), field: Some("f".into()) });
        s.compile(Dialect::Sqlite).unwrap();
    }

    #[test]
    fn redis_counters_read_with_any_read_only_command_or_script() {
        let mut s = spec(Vec::new(), "0");
        let cmd = |command: &str, args: &[&str]| CountersSpec::RedisCommand {
            command: command.into(),
            key: "s:{user % 4}".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        s.counters = Some(cmd("scard", &[]));
        let Some(Counters::Redis { read: RedisRead::Command("SCARD"), .. }) =
            s.compile(Dialect::Sqlite).unwrap().counters
        else {
            panic!("SCARD")
        };
        s.counters = Some(cmd("ZSCORE", &["{user}"]));
        s.compile(Dialect::Sqlite).unwrap();
        s.counters = Some(cmd("ZSCORE", &["{id}"]));
        assert_eq!(s.compile(Dialect::Sqlite).unwrap_err().msg, "{id}: the counters key reads only {user}");
        s.counters = Some(cmd("SADD", &["1"]));
        let e = s.compile(Dialect::Sqlite).unwrap_err();
        assert!(e.part == Part::Counters && e.msg.starts_with("`SADD` is not a read-only command"), "{e}");
        let lua = |script: &str| CountersSpec::RedisLua { script: script.into(), key: "s:{user}".into(), args: vec![] };
        s.counters = Some(lua("return redis.call('SCARD', KEYS[1])"));
        s.compile(Dialect::Sqlite).unwrap();
        s.counters = Some(lua("return redis.call('DEL', KEYS[1])"));
        let e = s.compile(Dialect::Sqlite).unwrap_err();
        assert!(e.msg.starts_with("redis_counters.lua: line 1: `DEL` is not a read-only command"), "{e}");
        assert!(s.needs_redis());
    }
}
