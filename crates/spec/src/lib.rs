//! Strategy files as data: a file-defined strategy's textual form (`CustomSpec`), its
//! expressions (`ast.rs` a precedence-climbing parser, `expr.rs` guards, results and
//! templates), the lexical checks of its SQL (`sql.rs`) and Redis steps (`redis_steps.rs`)
//! and its compile for one dialect (`compile.rs`, typed `CompileError`s). No I/O: the
//! scenario parser checks a file with it at load, and `counterlab-strategies` runs the
//! compiled steps.

pub mod ast;
pub mod compile;
pub mod expr;
pub mod redis_steps;
pub mod spec;
pub mod sql;

pub use compile::{CompileError, Compiled, Part};
pub use spec::{
    Action, CUSTOM_OPS, CountersSpec, CustomSpec, DEFAULT_RETRY_ATTEMPTS, MAX_AFTER_MS, MAX_EACH, MAX_RETRY_ATTEMPTS,
    PerDialect, RetrySpec, StepSpec,
};
