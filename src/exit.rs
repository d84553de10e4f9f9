//! The process's exit codes, each written once (docs/running.md lists them): 0 held,
//! 1 failed, 2 bad input or an unreachable server, 3 INCOMPLETE, 4 nothing to compare,
//! 128 + the signal that interrupted a run.

use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Every guarantee held (or the command did what it was asked).
    Ok,
    /// A verdict FAILed, a threshold or expectation was not met, a regression was found.
    Failed,
    /// Bad input (file:line:col said) or a server that could not be reached.
    BadInput,
    /// No verdict failed, but a check could not complete.
    Incomplete,
    /// `compare` found no row in common.
    NothingToCompare,
    /// Interrupted by signal N: 128 + N, as shells report it.
    Signal(u8),
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::BadInput => 2,
            Exit::Incomplete => 3,
            Exit::NothingToCompare => 4,
            Exit::Signal(n) => 128 + n.clamp(1, 31),
        }
    }

    /// Failed when `failed`, else Ok.
    pub fn failed_if(failed: bool) -> Exit {
        if failed { Exit::Failed } else { Exit::Ok }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}
