//! `[strategy.<name>]` tables (in a scenario, or in files it lists in `strategy_files`):
//! their raw TOML shape and the check that turns them into `CustomSpec`s, every problem
//! located at file:line:column before any load starts.

use std::collections::BTreeMap;
use std::ops::Range;

use counterlab_core::Dialect;
use counterlab_spec::{
    Action, CUSTOM_OPS, CompileError, CountersSpec, CustomSpec, DEFAULT_RETRY_ATTEMPTS, MAX_AFTER_MS,
    MAX_RETRY_ATTEMPTS, Part as CompilePart, PerDialect, RetrySpec, StepSpec,
};
use serde::Deserialize;
use toml::Spanned;

use crate::error::{ScenarioError, Src};

/// Longest name: the namespace `cl_<run id>_<backend>_<level>_<name>` must stay within 63.
pub const MAX_NAME: usize = 28;
pub const MAX_STEPS: usize = 32;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStrategyFile {
    strategy: BTreeMap<String, Spanned<RawStrategy>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStrategy {
    guarantee: Spanned<String>,
    summary: Option<String>,
    transaction: Option<bool>,
    sqlite_begin_immediate: Option<bool>,
    /// Reads come from a cache allowed to lag this long (ms).
    read_lag_ms: Option<Spanned<u64>>,
    /// Levels it runs at unless the scenario's `strategy_isolation` names it.
    pub(crate) isolation: Option<Vec<Spanned<String>>>,
    setup: Option<Vec<Spanned<RawSql>>>,
    counters: Option<Spanned<RawSql>>,
    redis_counters: Option<Spanned<RawRedisCounters>>,
    redis_seed: Option<Spanned<Vec<Spanned<RawStep>>>>,
    create: Spanned<Vec<Spanned<RawStep>>>,
    mark_read: Spanned<Vec<Spanned<RawStep>>>,
    delete: Spanned<Vec<Spanned<RawStep>>>,
    mark_all_read: Spanned<Vec<Spanned<RawStep>>>,
    read_count: Spanned<Vec<Spanned<RawStep>>>,
    result: Spanned<RawResults>,
    /// Retry groups by name: `[strategy.<name>.retry.<group>]`.
    retry: Option<BTreeMap<String, Spanned<RawRetry>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    until: Spanned<String>,
    max_attempts: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    name: Option<Spanned<String>>,
    sql: Option<Spanned<RawSql>>,
    redis: Option<Spanned<String>>,
    lua: Option<Spanned<String>>,
    lua_file: Option<Spanned<String>>,
    keys: Option<Vec<String>>,
    args: Option<Vec<String>>,
    returns: Option<Vec<Spanned<String>>>,
    when: Option<Spanned<String>>,
    each: Option<Spanned<String>>,
    commit: Option<bool>,
    after_ms: Option<Spanned<u64>>,
    group: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedisCounters {
    key: Spanned<String>,
    field: Option<Spanned<String>>,
    command: Option<Spanned<String>>,
    lua: Option<Spanned<String>>,
    args: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawSql {
    All(String),
    Each(Dialects),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Dialects {
    postgres: Option<String>,
    mysql: Option<String>,
    sqlite: Option<String>,
}

impl RawSql {
    fn per_dialect(&self) -> PerDialect {
        match self {
            RawSql::All(s) => PerDialect::all(s),
            RawSql::Each(d) => {
                PerDialect { postgres: d.postgres.clone(), mysql: d.mysql.clone(), sqlite: d.sqlite.clone() }
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResults {
    create: Spanned<String>,
    mark_read: Spanned<String>,
    delete: Spanned<String>,
    mark_all_read: Spanned<String>,
    read_count: Spanned<String>,
}

/// Reads a strategy file listed in `strategy_files` (relative to the scenario's folder;
/// not confined to it: zoo scenarios list `../strategies/*.toml`).
pub(crate) fn load_file(
    scenario_path: &str,
    listed: &Spanned<String>,
    cx: &Src<'_>,
) -> Result<(String, String), ScenarioError> {
    let base = std::path::Path::new(scenario_path).parent().unwrap_or(std::path::Path::new(""));
    let path = base.join(listed.get_ref());
    let text = std::fs::read_to_string(&path)
        .map_err(|e| cx.at(listed.span(), format!("cannot read strategy file {}: {e}", path.display())))?;
    Ok((path.display().to_string(), text))
}

/// Parses a strategy file's text.
pub(crate) fn parse_file(src: &Src<'_>) -> Result<BTreeMap<String, Spanned<RawStrategy>>, ScenarioError> {
    let raw: RawStrategyFile = toml::from_str(src.text).map_err(|e| src.toml(e))?;
    Ok(raw.strategy)
}

/// Turns one op's raw steps into specs (names, outputs, the action with its Lua file
/// read), checking what needs no compiling.
fn raw_steps(op: &str, list: &Spanned<Vec<Spanned<RawStep>>>, src: &Src<'_>) -> Result<Vec<StepSpec>, ScenarioError> {
    if list.get_ref().is_empty() || list.get_ref().len() > MAX_STEPS {
        return Err(src.at(list.span(), format!("{op} needs 1..={MAX_STEPS} steps")));
    }
    let mut v: Vec<StepSpec> = Vec::new();
    for (i, raw) in list.get_ref().iter().enumerate() {
        let st = raw.get_ref();
        let step_name = step_name(op, raw, i, &v, src)?;
        let given = [st.sql.is_some(), st.redis.is_some(), st.lua.is_some(), st.lua_file.is_some()];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(
                src.at(raw.span(), format!("{op} step {step_name}: give exactly one of sql, redis, lua, lua_file"))
            );
        }
        if st.commit.is_some() && st.sql.is_none() {
            return Err(src.at(raw.span(), format!("{op} step {step_name}: `commit` belongs to SQL steps")));
        }
        v.push(StepSpec {
            action: action(op, &step_name, raw, src)?,
            returns: returns(st, src)?,
            name: step_name,
            when: st.when.as_ref().map(|w| w.get_ref().clone()),
            each: st.each.as_ref().map(|w| w.get_ref().clone()),
            commit: st.commit.unwrap_or(false),
            after_ms: match &st.after_ms {
                Some(ms) => Some(crate::bounds::within_at(src, ms, "after_ms", 1..=MAX_AFTER_MS)?),
                None => None,
            },
            group: st.group.as_ref().map(|g| g.get_ref().clone()),
            at: src.location(step_span(raw, None)),
        });
    }
    Ok(v)
}

/// A step's given name (checked, unique in its op) or `s<N>`.
fn step_name(
    op: &str,
    raw: &Spanned<RawStep>,
    i: usize,
    earlier: &[StepSpec],
    src: &Src<'_>,
) -> Result<String, ScenarioError> {
    let step_name = match &raw.get_ref().name {
        Some(n) => {
            let ok = n.get_ref().chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && n.get_ref().starts_with(|c: char| c.is_ascii_alphabetic());
            if !ok || ["user", "id", "each"].contains(&n.get_ref().as_str()) {
                return Err(src.at(
                    n.span(),
                    format!("step name {:?}: a letter, then letters, digits or _; not user, id or each", n.get_ref()),
                ));
            }
            if earlier.iter().any(|s| s.name == *n.get_ref()) {
                return Err(src.at(n.span(), format!("two steps of {op} are named {:?}", n.get_ref())));
            }
            n.get_ref().clone()
        }
        None => format!("s{}", i + 1),
    };
    if earlier.iter().any(|s| s.name == step_name) {
        return Err(
            src.at(raw.span(), format!("two steps of {op} are named {step_name:?} (unnamed steps are s1, s2, ...)"))
        );
    }
    Ok(step_name)
}

/// What a step does: SQL, a Redis command, or a Lua script (inline or read from a file
/// in this file's folder or below).
fn action(op: &str, step_name: &str, raw: &Spanned<RawStep>, src: &Src<'_>) -> Result<Action, ScenarioError> {
    let st = raw.get_ref();
    let keys = st.keys.clone().unwrap_or_default();
    let args = st.args.clone().unwrap_or_default();
    Ok(match (&st.sql, &st.redis, &st.lua, &st.lua_file) {
        (Some(_), ..) if st.keys.is_some() || st.args.is_some() => {
            return Err(src.at(
                raw.span(),
                format!("{op} step {step_name}: keys and args belong to redis and lua steps; SQL takes :params"),
            ));
        }
        (Some(sql), ..) => Action::Sql(sql.get_ref().per_dialect()),
        (None, Some(cmd), ..) => Action::Redis { command: cmd.get_ref().clone(), keys, args },
        (None, None, Some(code), _) => Action::Lua {
            origin: format!("inline at {}", src.line_of(code.span())),
            script: code.get_ref().clone(),
            keys,
            args,
        },
        (None, None, None, file) => {
            let Some(f) = file else { return Err(src.at(raw.span(), format!("{op} step {step_name}: no action"))) };
            // Confined to this file's folder, checked before a byte is read; `origin` is
            // the path as given (relative to that folder), not one that shows the home.
            let file = crate::confined::read(src.path, f.get_ref(), "Lua file").map_err(|e| src.at(f.span(), e))?;
            Action::Lua { origin: f.get_ref().clone(), script: file.text, keys, args }
        }
    })
}

/// The columns a step returns: plain names other than the built-in outputs.
fn returns(st: &RawStep, src: &Src<'_>) -> Result<Vec<String>, ScenarioError> {
    let mut returns = Vec::new();
    for c in st.returns.iter().flatten() {
        let c_ok = c.get_ref().chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_') && !c.get_ref().is_empty();
        if !c_ok || ["rows", "last_id", "value"].contains(&c.get_ref().as_str()) {
            return Err(src.at(
                c.span(),
                format!("returned column {:?}: a plain name other than rows, last_id, value", c.get_ref()),
            ));
        }
        returns.push(c.get_ref().clone());
    }
    Ok(returns)
}

/// Where a step's compile error points: its guard, its loop, or the step itself.
fn step_span(st: &Spanned<RawStep>, e: Option<&CompileError>) -> Range<usize> {
    let r = st.get_ref();
    let guard = match e.map(|e| e.part) {
        Some(CompilePart::When) => r.when.as_ref().map(|w| w.span()),
        Some(CompilePart::Each) => r.each.as_ref().map(|w| w.span()),
        _ => None,
    };
    guard
        .or_else(|| r.sql.as_ref().map(|s| s.span()))
        .or_else(|| r.redis.as_ref().map(|s| s.span()))
        .or_else(|| r.lua.as_ref().map(|s| s.span()))
        .or_else(|| r.lua_file.as_ref().map(|s| s.span()))
        .unwrap_or_else(|| st.span())
}

/// Checks one `[strategy.<name>]` table and returns its spec.
pub(crate) fn check(
    name: &str,
    raw: &Spanned<RawStrategy>,
    builtin: &[&str],
    src: &Src<'_>,
) -> Result<CustomSpec, ScenarioError> {
    let here = raw.span();
    let r = raw.get_ref();
    check_name(name, builtin, here.clone(), src)?;
    let guarantee = r.guarantee.get_ref();
    if !["exact", "eventual", "none"].contains(&guarantee.as_str()) {
        return Err(
            src.at(r.guarantee.span(), format!("unknown guarantee {guarantee:?}; valid: exact, eventual, none"))
        );
    }
    let mut steps = Vec::new();
    for (op, list) in op_lists(r).iter().enumerate() {
        steps.push(raw_steps(CUSTOM_OPS[op], list, src)?);
    }
    let redis_seed = match &r.redis_seed {
        Some(list) => raw_steps("redis_seed", list, src)?,
        None => Vec::new(),
    };
    let res = r.result.get_ref();
    let spec = CustomSpec {
        name: name.to_string(),
        guarantee: guarantee.clone(),
        summary: r.summary.clone().unwrap_or_else(|| "defined in a scenario file".into()),
        read_lag_ms: match &r.read_lag_ms {
            Some(ms) => Some(crate::bounds::within_at(src, ms, "read_lag_ms", 1..=MAX_AFTER_MS)?),
            None => None,
        },
        transaction: r.transaction.unwrap_or(true),
        sqlite_begin_immediate: r.sqlite_begin_immediate.unwrap_or(false),
        setup: r.setup.iter().flatten().map(|s| s.get_ref().per_dialect()).collect(),
        counters: counters_spec(r, src)?,
        steps,
        redis_seed,
        results: result_spans(res).iter().map(|s| s.get_ref().clone()).collect(),
        retries: retries(r, src)?,
    };
    // Every statement, guard and result, for every dialect the spec covers.
    let dialects = spec.dialects();
    if dialects.is_empty() {
        return Err(
            src.at(here, "no backend has every statement: give `sql` as one string, or postgres/mysql/sqlite each")
        );
    }
    check_steps(&spec, r, &dialects, src)?;
    check_groups(&spec, r, src)?;
    check_aux_sql(r, &dialects, src)?;
    // What spans steps (e.g. `last_id` on PostgreSQL needs INSERT ... RETURNING).
    for d in &dialects {
        spec.compile(*d).map_err(|e| src.at(here.clone(), format!("{name} ({}): {e}", dialect_name(*d))))?;
    }
    Ok(spec)
}

/// The retry groups: each used by some op's steps, with 1..=MAX_RETRY_ATTEMPTS attempts.
fn retries(r: &RawStrategy, src: &Src<'_>) -> Result<BTreeMap<String, RetrySpec>, ScenarioError> {
    let mut out = BTreeMap::new();
    for (name, raw) in r.retry.iter().flatten() {
        let used = op_lists(r)
            .into_iter()
            .chain(r.redis_seed.as_ref())
            .flat_map(|l| l.get_ref())
            .any(|st| st.get_ref().group.as_ref().is_some_and(|g| g.get_ref() == name));
        if !used {
            return Err(src.at(raw.span(), format!("retry.{name}: no step has group = {name:?}")));
        }
        let max_attempts = match &raw.get_ref().max_attempts {
            Some(m) if !(1..=MAX_RETRY_ATTEMPTS).contains(m.get_ref()) => {
                return Err(src.at(m.span(), format!("retry.{name}.max_attempts: 1..={MAX_RETRY_ATTEMPTS}")));
            }
            Some(m) => *m.get_ref(),
            None => DEFAULT_RETRY_ATTEMPTS,
        };
        out.insert(name.clone(), RetrySpec { until: raw.get_ref().until.get_ref().clone(), max_attempts });
    }
    Ok(out)
}

/// Every op's retry groups, an error located at the step's `group` or the table's `until`.
fn check_groups(spec: &CustomSpec, r: &RawStrategy, src: &Src<'_>) -> Result<(), ScenarioError> {
    let seed = r.redis_seed.iter();
    for (op, list) in op_lists(r).into_iter().chain(seed).enumerate() {
        let op_name = CUSTOM_OPS.get(op).copied().unwrap_or("redis_seed");
        let Err(e) = spec.check_groups(op) else { continue };
        let (CompilePart::Group(i) | CompilePart::Until(i)) = e.part else { return Err(src.at(list.span(), e.msg)) };
        let step = &list.get_ref()[i];
        let group = step.get_ref().group.as_ref().expect("a grouped step");
        let span = match e.part {
            CompilePart::Until(_) => {
                r.retry.as_ref().and_then(|t| t.get(group.get_ref())).map(|t| t.get_ref().until.span())
            }
            _ => None,
        };
        return Err(src.at(span.unwrap_or_else(|| group.span()), format!("{op_name} step {}: {e}", i + 1)));
    }
    Ok(())
}

fn check_name(name: &str, builtin: &[&str], here: Range<usize>, src: &Src<'_>) -> Result<(), ScenarioError> {
    let valid_name = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid_name {
        return Err(src.at(here, format!("strategy name {name:?}: use 1..={MAX_NAME} of a-z, 0-9 and -")));
    }
    if builtin.contains(&name) {
        return Err(src.at(here, format!("strategy name {name:?} is a built-in strategy's; pick another")));
    }
    Ok(())
}

/// The five ops' step lists, in `CUSTOM_OPS` order.
fn op_lists(r: &RawStrategy) -> [&Spanned<Vec<Spanned<RawStep>>>; 5] {
    [&r.create, &r.mark_read, &r.delete, &r.mark_all_read, &r.read_count]
}

fn result_spans(res: &RawResults) -> [&Spanned<String>; 5] {
    [&res.create, &res.mark_read, &res.delete, &res.mark_all_read, &res.read_count]
}

/// Where the counters are read from: an SQL query, or a Redis key (and hash field).
fn counters_spec(r: &RawStrategy, src: &Src<'_>) -> Result<Option<CountersSpec>, ScenarioError> {
    Ok(match (&r.counters, &r.redis_counters) {
        (Some(_), Some(c)) => {
            return Err(src.at(c.span(), "give counters (an SQL query) or redis_counters, not both"));
        }
        (Some(c), None) => Some(CountersSpec::Sql(c.get_ref().per_dialect())),
        (None, Some(c)) => Some(redis_counters(c, src)?),
        (None, None) => None,
    })
}

/// `redis_counters`: `{ key }` (GET), `{ key, field }` (HGET), `{ command, key, args }`
/// (a read-only command) or `{ lua, key, args }` (a script reading KEYS[1]).
fn redis_counters(raw: &Spanned<RawRedisCounters>, src: &Src<'_>) -> Result<CountersSpec, ScenarioError> {
    let c = raw.get_ref();
    let templates =
        c.args.iter().flatten().map(|a| (a, false, "args")).chain(c.field.iter().map(|f| (f, false, "field")));
    for (t, key, what) in std::iter::once((&c.key, true, "key")).chain(templates) {
        CustomSpec::check_counter_template(t.get_ref(), key)
            .map_err(|e| src.at(t.span(), format!("redis_counters.{what}: {e}")))?;
    }
    let args: Vec<String> = c.args.iter().flatten().map(|a| a.get_ref().clone()).collect();
    let key = c.key.get_ref().clone();
    match (&c.field, &c.command, &c.lua) {
        (None, None, None) if c.args.is_some() => {
            Err(src.at(raw.span(), "redis_counters: `args` go with `command` or `lua`"))
        }
        (field, None, None) => Ok(CountersSpec::Redis { key, field: field.as_ref().map(|f| f.get_ref().clone()) }),
        (None, Some(cmd), None) => {
            CustomSpec::check_counter_read(Some(cmd.get_ref()), None)
                .map_err(|e| src.at(cmd.span(), format!("redis_counters.command: {e}")))?;
            Ok(CountersSpec::RedisCommand { command: cmd.get_ref().clone(), key, args })
        }
        (None, None, Some(lua)) => {
            CustomSpec::check_counter_read(None, Some(lua.get_ref()))
                .map_err(|e| src.at(lua.span(), format!("redis_counters.lua: {e}")))?;
            Ok(CountersSpec::RedisLua { script: lua.get_ref().clone(), key, args })
        }
        _ => Err(src.at(raw.span(), "redis_counters: give at most one of field, command, lua")),
    }
}

/// Every step of every op (and the Redis seed) on every dialect, and every op's result.
fn check_steps(spec: &CustomSpec, r: &RawStrategy, dialects: &[Dialect], src: &Src<'_>) -> Result<(), ScenarioError> {
    let seed_list = r.redis_seed.as_ref().map(|l| l.get_ref().as_slice()).unwrap_or(&[]);
    let lists: Vec<&[Spanned<RawStep>]> =
        op_lists(r).iter().map(|l| l.get_ref().as_slice()).chain(std::iter::once(seed_list)).collect();
    let results = result_spans(r.result.get_ref());
    for (op, list) in lists.iter().enumerate() {
        let op_name = CUSTOM_OPS.get(op).copied().unwrap_or("redis_seed");
        for (i, st) in list.iter().enumerate() {
            for d in dialects {
                if let Err(e) = spec.check_step(op, i, *d) {
                    let step = if op < CUSTOM_OPS.len() { &spec.steps[op][i] } else { &spec.redis_seed[i] };
                    let on = if step_is_sql(step) { format!(" ({})", dialect_name(*d)) } else { String::new() };
                    return Err(src.at(step_span(st, Some(&e)), format!("{op_name} step {}{on}: {e}", step.name)));
                }
            }
        }
        if op < CUSTOM_OPS.len() {
            spec.check_result(op).map_err(|e| src.at(results[op].span(), format!("result.{}: {e}", CUSTOM_OPS[op])))?;
        }
    }
    Ok(())
}

/// The setup statements and the counters query, on every dialect.
fn check_aux_sql(r: &RawStrategy, dialects: &[Dialect], src: &Src<'_>) -> Result<(), ScenarioError> {
    let setup = r.setup.iter().flatten().map(|s| (s, true, "setup"));
    for (s, is_setup, what) in setup.chain(r.counters.iter().map(|c| (c, false, "counters"))) {
        for d in dialects {
            if let Some(sql) = s.get_ref().per_dialect().get(*d) {
                CustomSpec::check_aux(sql, is_setup)
                    .map_err(|e| src.at(s.span(), format!("{what} ({}): {e}", dialect_name(*d))))?;
            }
        }
    }
    Ok(())
}

fn step_is_sql(s: &StepSpec) -> bool {
    matches!(s.action, Action::Sql(_))
}

fn dialect_name(d: Dialect) -> &'static str {
    d.name()
}
