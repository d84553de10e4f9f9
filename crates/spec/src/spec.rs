//! The textual form of a file-defined strategy: `CustomSpec` and its steps as a scenario
//! file gives them (and the report's plan prints them), before any checking.

use std::collections::BTreeMap;

use counterlab_core::{Guarantee, StrategyInfo};
use serde::Serialize;

use counterlab_core::Dialect;

/// The five operations, in `OpKind` order without `mark_read_dup` (it calls mark_read).
pub const CUSTOM_OPS: [&str; 5] = ["create", "mark_read", "delete", "mark_all_read", "read_count"];

/// The pseudo-operation of `redis_seed` steps (run once per user before the load).
pub const SEED: usize = 5;

/// Parameters of `redis_seed` steps: the seeded layout of the user (see `SeedSpec`).
pub const SEED_PARAMS: [&str; 4] = ["unread", "total", "read", "first_id"];

/// Longest wait a step's `after_ms` may ask for.
pub const MAX_AFTER_MS: u64 = 10_000;

/// Most elements an `each` step loops over in one op.
pub const MAX_EACH: usize = 10_000;

/// An op's name in messages (`redis_seed` for the seed steps).
pub fn op_name(op: usize) -> &'static str {
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
    /// run's `cl:<tag>:`. Outputs: `value` (the reply as an integer; an array
    /// reply's length) and the `returns` names bound to an array reply's elements.
    Redis { command: String, keys: Vec<String>, args: Vec<String> },
    /// A Lua script (EVALSHA) with the step's keys (prefixed) as KEYS and args as ARGV.
    /// `origin` says where it came from (`inline` or its file). Outputs as for Redis.
    Lua { origin: String, script: String, keys: Vec<String>, args: Vec<String> },
}

/// One step of an op, as the scenario file writes it.
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
    /// Wait this many milliseconds (at most `MAX_AFTER_MS`) before running the step
    /// (when its guard holds): a delayed second delete, say.
    pub after_ms: Option<u64>,
    pub commit: bool,
    /// The retry group (a `retry.<group>` table) this step belongs to: the group's steps
    /// are consecutive and run again while its `until` is false.
    pub group: Option<String>,
    /// Where the step's statement or command is written (`file:line:col`), for errors
    /// found once the namespace exists.
    pub at: String,
}

impl StepSpec {
    /// The outputs a later step can read, in `vals` order.
    pub fn fields(&self) -> Vec<&str> {
        let base: &[&str] = match &self.action {
            Action::Sql(_) => &["rows", "last_id"],
            // EXEC: `nil` is 1 when the transaction was aborted (a WATCHed key changed).
            Action::Redis { command, .. } if command.eq_ignore_ascii_case("EXEC") => &["value", "nil"],
            _ => &["value"],
        };
        base.iter().copied().chain(self.returns.iter().map(|r| r.as_str())).collect()
    }

    /// Whether the step is an SQL statement (not a Redis command or a Lua script).
    pub fn is_sql(&self) -> bool {
        matches!(self.action, Action::Sql(_))
    }
}

/// Most attempts a retry group may have (`max_attempts`), and the default.
pub const MAX_RETRY_ATTEMPTS: u32 = 1000;
pub const DEFAULT_RETRY_ATTEMPTS: u32 = 16;

/// A retry group: its steps run again, from the first, until `until` holds (read after
/// the group's last step), at most `max_attempts` times in all.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RetrySpec {
    pub until: String,
    pub max_attempts: u32,
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
    /// A read-only command per user (`SCARD s:{user}`, `ZSCORE z {user}`), its reply read
    /// as an integer (nil: a missing counter).
    RedisCommand { command: String, key: String, args: Vec<String> },
    /// A Lua script per user, reading with read-only commands; KEYS[1] is `key`.
    RedisLua { script: String, key: String, args: Vec<String> },
}

/// A strategy as a scenario file describes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CustomSpec {
    pub name: String,
    pub guarantee: String,
    pub summary: String,
    /// All SQL steps of an op in one transaction (true) or each step in its own.
    /// Reads come from a cache that may lag the counter this long by design (see
    /// `Strategy::read_lag`); None: reads see the counter.
    pub read_lag_ms: Option<u64>,
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
    /// Retry groups by name (steps name theirs with `group`).
    pub retries: BTreeMap<String, RetrySpec>,
}

/// A leaked statement: sqlx takes `&'static str`; a run compiles each spec once per
/// namespace, so the leak is bounded by the plan's size.
pub fn leak(s: String) -> &'static str {
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

    /// The steps of op `op` (`SEED`: the `redis_seed` steps).
    pub fn op_steps(&self, op: usize) -> &[StepSpec] {
        if op == SEED { &self.redis_seed } else { &self.steps[op] }
    }

    fn all_steps(&self) -> impl Iterator<Item = &StepSpec> {
        self.steps.iter().flatten().chain(&self.redis_seed)
    }

    /// Whether any step, the seed or the counters talk to Redis.
    pub fn needs_redis(&self) -> bool {
        self.all_steps().any(|s| !s.is_sql())
            || self.counters.as_ref().is_some_and(|c| !matches!(c, CountersSpec::Sql(_)))
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
}

/// Specs for the unit tests of the expression language and the compiler.
#[cfg(test)]
pub mod fixtures {
    use super::*;

    /// An SQL step running `sql` on every dialect.
    pub fn sql_step(name: &str, sql: &str, returns: &[&str]) -> StepSpec {
        StepSpec {
            name: name.into(),
            action: Action::Sql(PerDialect::all(sql)),
            returns: returns.iter().map(|r| r.to_string()).collect(),
            when: None,
            each: None,
            commit: false,
            after_ms: None,
            group: None,
            at: String::new(),
        }
    }

    /// A Redis step sending `command` with `keys`.
    pub fn redis_step(name: &str, command: &str, keys: &[&str], returns: &[&str]) -> StepSpec {
        StepSpec {
            action: Action::Redis {
                command: command.into(),
                keys: keys.iter().map(|k| k.to_string()).collect(),
                args: Vec::new(),
            },
            ..sql_step(name, "", returns)
        }
    }

    /// A spec whose create op runs `create` and returns `result`; the other ops have no
    /// steps and return 0.
    pub fn spec(create: Vec<StepSpec>, result: &str) -> CustomSpec {
        CustomSpec {
            name: "t".into(),
            guarantee: "exact".into(),
            summary: String::new(),
            read_lag_ms: None,
            transaction: true,
            sqlite_begin_immediate: false,
            setup: Vec::new(),
            counters: None,
            steps: vec![create, Vec::new(), Vec::new(), Vec::new(), Vec::new()],
            redis_seed: Vec::new(),
            results: [result, "0", "0", "0", "0"].map(String::from).to_vec(),
            retries: BTreeMap::new(),
        }
    }
}
