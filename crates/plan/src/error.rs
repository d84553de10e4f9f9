//! Bad input, located: every scenario or strategy-file problem names the file and, where
//! it is about one place in it, the line and column.

use std::fmt;
use std::ops::Range;

/// A problem in a scenario, a strategy file or a flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub path: String,
    /// 1-based; None when the error is not about one place in the file (a flag, say).
    pub line_col: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line_col {
            Some((l, c)) => write!(f, "{}:{}:{}: {}", self.path, l, c, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// Where a byte of an edited text (see `edit.rs`) came from.
#[derive(Debug, PartialEq)]
pub(crate) enum Place {
    /// A byte offset of the original file.
    File(usize),
    /// The `index`th `--set` (0-based), at a 1-based column of its `path=value`.
    Set { index: usize, col: usize },
}

/// The way back from an edited text to the file and the flags.
pub(crate) trait Mapping {
    fn place(&self, pos: usize) -> Place;
    fn original(&self) -> &str;
    /// An error about the `index`th `--set`.
    fn at_set(&self, index: usize, col: usize, message: String) -> ScenarioError;
}

/// 1-based line and column (in characters) of byte `pos` of `text`.
pub(crate) fn line_col(text: &str, pos: usize) -> (usize, usize) {
    let mut pos = pos.min(text.len());
    while !text.is_char_boundary(pos) {
        pos -= 1;
    }
    let before = &text[..pos];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// A file's path and text: turns byte spans into located errors.
#[derive(Clone, Copy)]
pub(crate) struct Src<'a> {
    pub path: &'a str,
    pub text: &'a str,
    /// When `text` is the file after interpolation and `--set`: the way back to the
    /// file's own positions, or to the flag.
    pub edits: Option<&'a dyn Mapping>,
}

impl Src<'_> {
    /// The path (`--set` for a flag's text), line and column of a span's start.
    fn place(&self, span: &Range<usize>) -> (&str, (usize, usize)) {
        match self.edits.map(|e| (e, e.place(span.start))) {
            None => (self.path, line_col(self.text, span.start)),
            Some((e, Place::File(p))) => (self.path, line_col(e.original(), p)),
            Some((_, Place::Set { index, col })) => ("--set", (index + 1, col)),
        }
    }

    fn line_col(&self, span: &Range<usize>) -> (usize, usize) {
        self.place(span).1
    }

    /// An error at a span's start.
    pub fn at(&self, span: Range<usize>, message: impl Into<String>) -> ScenarioError {
        if let (Some(e), Place::Set { index, col }) =
            (self.edits, self.edits.map_or(Place::File(0), |e| e.place(span.start)))
        {
            return e.at_set(index, col, message.into());
        }
        ScenarioError { path: self.path.to_string(), line_col: Some(self.line_col(&span)), message: message.into() }
    }

    /// An error about the file as a whole, or about a flag.
    pub fn flag(&self, message: impl Into<String>) -> ScenarioError {
        ScenarioError { path: self.path.to_string(), line_col: None, message: message.into() }
    }

    /// `path:line` of a span's start.
    pub fn line_of(&self, span: Range<usize>) -> String {
        let (path, (line, _)) = self.place(&span);
        format!("{path}:{line}")
    }

    /// `path:line:col` of a span's start.
    pub fn location(&self, span: Range<usize>) -> String {
        let (path, (line, col)) = self.place(&span);
        format!("{path}:{line}:{col}")
    }

    /// A TOML syntax or shape error, located where the parser says.
    pub fn toml(&self, e: toml::de::Error) -> ScenarioError {
        let message = e.message().trim().to_string();
        match e.span() {
            Some(span) => self.at(span, message),
            None => self.flag(message),
        }
    }
}
