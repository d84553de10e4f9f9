//! The run plan: scenario TOML and command-line overrides parsed once into `RunPlan`,
//! whose closed sets are enums and whose every value is decided (no `Default`), or a
//! `ScenarioError` located at file:line:col. Nothing downstream parses a name again.

mod bounds;
mod confined;
mod custom;
mod edit;
mod error;
mod named;
mod overrides;
mod parse;
mod raw;
mod resolve;
mod types;

pub use confined::MAX_FILE_BYTES;
pub use custom::{MAX_NAME, MAX_STEPS};
pub use edit::Env;
pub use error::ScenarioError;
pub use overrides::Overrides;
pub use parse::{load, parse, parse_with_env};
pub use types::*;
