//! Text edits made before a scenario is parsed: `${VAR}` / `${VAR:-default}` in its
//! string values, then each `--set path.to.field=value`. Every edit is kept as a region,
//! so an error in the edited text is reported at its place in the file, or at the flag
//! (`--set:N:COL`, N the Nth `--set`), and the parser's own validation applies unchanged.

use std::ops::Range;

use toml_edit::{ArrayOfTables, Document, Item, Table, Value};

use crate::error::{Mapping, Place, ScenarioError, line_col};

/// One edit: `new` in the edited text replaced `old` of the text before it.
struct Region {
    new: Range<usize>,
    old: Range<usize>,
    /// Made by this `--set` (index), whose value starts at `value` in the edited text.
    set: Option<(usize, usize)>,
}

/// The scenario text after interpolation and `--set`, and the way back.
pub(crate) struct Edited {
    pub text: String,
    pub original: String,
    /// One list of regions per pass (sorted by position), oldest first.
    layers: Vec<Vec<Region>>,
    pub sets: Vec<String>,
    /// Interpolated values that are URLs with a password: never shown in errors.
    secrets: Vec<String>,
}

/// Looks a variable up (the process environment, or a test's map).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

impl Edited {
    /// Interpolates `text`'s string values from `env`, then applies `sets` in order.
    pub fn new(path: &str, text: &str, sets: &[String], env: Env<'_>) -> Result<Edited, ScenarioError> {
        let mut e = Edited {
            text: text.to_string(),
            original: text.to_string(),
            layers: Vec::new(),
            sets: sets.to_vec(),
            secrets: Vec::new(),
        };
        // A text TOML cannot parse is left to the parser, which locates the error.
        let Ok(doc) = Document::parse(text) else { return Ok(e) };
        // A `--set` line added after a last header needs the line before it ended.
        if !text.ends_with('\n') {
            e.text.push('\n');
        }
        let mut strings = Vec::new();
        walk_strings(doc.as_item(), &mut strings);
        let mut regions = Vec::new();
        let mut out = String::with_capacity(text.len());
        let mut done = 0;
        for (span, value) in strings {
            let expanded = expand(&value, env).map_err(|(needle, message)| {
                let at = text[span.clone()].find(&needle).map_or(span.start, |i| span.start + i);
                e.error_at(path, at, message)
            })?;
            if expanded == value {
                continue;
            }
            e.secrets.extend(secret_urls(&value, &expanded));
            out.push_str(&text[done..span.start]);
            let start = out.len();
            out.push_str(&Value::from(expanded).to_string());
            regions.push(Region { new: start..out.len(), old: span.clone(), set: None });
            done = span.end;
        }
        out.push_str(&e.text[done..]);
        if !regions.is_empty() {
            e.text = out;
            e.layers.push(regions);
        }
        for index in 0..sets.len() {
            e.apply_set(index)?;
        }
        Ok(e)
    }

    /// Where byte `pos` of the edited text came from.
    fn place_of(&self, mut pos: usize) -> Place {
        for layer in self.layers.iter().rev() {
            let mut shift: isize = 0;
            let mut mapped = None;
            for r in layer {
                if pos < r.new.start {
                    break;
                }
                if pos < r.new.end {
                    if let Some((index, value)) = r.set {
                        let flag = &self.sets[index];
                        let value_col = flag.find('=').map_or(1, |i| i + 2);
                        let col = if pos >= value { value_col + (pos - value) } else { 1 };
                        return Place::Set { index, col: col.min(flag.chars().count().max(1)) };
                    }
                    mapped = Some(r.old.start);
                    break;
                }
                shift += r.new.len() as isize - r.old.len() as isize;
            }
            pos = mapped.unwrap_or((pos as isize - shift).max(0) as usize);
        }
        Place::File(pos)
    }

    /// An error at byte `at` of the current text, located through the edits so far.
    fn error_at(&self, path: &str, at: usize, message: String) -> ScenarioError {
        let at_set = |index: usize, col: usize| self.set_error(index, col, message.clone());
        match self.place_of(at) {
            Place::Set { index, col } => at_set(index, col),
            Place::File(p) => ScenarioError {
                path: path.to_string(),
                line_col: Some(line_col(&self.original, p)),
                message: message.clone(),
            },
        }
    }

    /// An error about the `index`th `--set`.
    fn set_error(&self, index: usize, col: usize, message: String) -> ScenarioError {
        ScenarioError {
            path: "--set".into(),
            line_col: Some((index + 1, col)),
            message: format!("{message} (in `--set {}`)", self.sets[index]),
        }
    }

    /// The error with every interpolated URL password replaced by `***`.
    pub fn scrub(&self, mut e: ScenarioError) -> ScenarioError {
        for s in &self.secrets {
            e.message = e.message.replace(s.as_str(), &counterlab_core::redact_url(s));
        }
        e
    }

    /// Applies the `index`th `--set` to the current text.
    fn apply_set(&mut self, index: usize) -> Result<(), ScenarioError> {
        let flag = self.sets[index].clone();
        let bad = |col: usize, m: &str| self.set_error(index, col, m.to_string());
        let Some((path, raw)) = flag.split_once('=') else {
            return Err(bad(1, "expected `path.to.field=value`"));
        };
        let keys: Vec<&str> = path.trim().split('.').map(str::trim).collect();
        if keys.iter().any(|k| k.is_empty()) {
            return Err(bad(1, "expected a dotted path of field names, such as `workload.workers`"));
        }
        // A value TOML reads (a number, a boolean, a quoted string, an array) is taken as
        // such; anything else is a string, so `--set name=my run` needs no quotes.
        let value: Value = raw.trim().parse().unwrap_or_else(|_| Value::from(raw.trim()));
        let doc = Document::parse(self.text.as_str()).map_err(|e| bad(1, &format!("the scenario is not TOML: {e}")))?;
        let edit = find_edit(&self.text, doc.as_item(), &keys, &value.to_string()).map_err(|m| bad(1, &m))?;
        let mut text = String::with_capacity(self.text.len() + edit.insert.len());
        text.push_str(&self.text[..edit.replace.start]);
        let start = text.len();
        text.push_str(&edit.insert);
        let region =
            Region { new: start..text.len(), old: edit.replace.clone(), set: Some((index, start + edit.value_at)) };
        text.push_str(&self.text[edit.replace.end..]);
        self.text = text;
        self.layers.push(vec![region]);
        Ok(())
    }
}

impl Mapping for Edited {
    fn place(&self, pos: usize) -> Place {
        self.place_of(pos)
    }

    fn original(&self) -> &str {
        &self.original
    }

    fn at_set(&self, index: usize, col: usize, message: String) -> ScenarioError {
        self.set_error(index, col, message)
    }
}

/// Every string value (in tables, arrays of tables, arrays and inline tables) that holds
/// a `$`, with its span and decoded text.
fn walk_strings(item: &Item, out: &mut Vec<(Range<usize>, String)>) {
    match item {
        Item::None => {}
        Item::Value(v) => walk_value(v, out),
        Item::Table(t) => t.iter().for_each(|(_, i)| walk_strings(i, out)),
        Item::ArrayOfTables(a) => a.iter().for_each(|t| t.iter().for_each(|(_, i)| walk_strings(i, out))),
    }
    out.sort_by_key(|(span, _)| span.start);
}

fn walk_value(v: &Value, out: &mut Vec<(Range<usize>, String)>) {
    match v {
        Value::String(s) if s.value().contains('$') => {
            if let Some(span) = s.span() {
                out.push((span, s.value().clone()));
            }
        }
        Value::Array(a) => a.iter().for_each(|v| walk_value(v, out)),
        Value::InlineTable(t) => t.iter().for_each(|(_, v)| walk_value(v, out)),
        _ => {}
    }
}

/// `${VAR}`, `${VAR:-default}` (the default when VAR is unset or empty) and `$${` (a
/// literal `${`) expanded; an error names the text to locate and what is wrong.
fn expand(s: &str, env: Env<'_>) -> Result<String, (String, String)> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let here = &rest[i..];
        if let Some(after) = here.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
            continue;
        }
        let Some(inner) = here.strip_prefix("${") else {
            out.push('$');
            rest = &here[1..];
            continue;
        };
        let Some(end) = inner.find('}') else {
            return Err(("${".into(), "`${` without a closing `}` (write `$${` for a literal `${`)".into()));
        };
        let (name, default) = match inner[..end].split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (&inner[..end], None),
        };
        let needle = format!("${{{}", &inner[..end]);
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err((needle, format!("`${{{}}}`: `{name}` is not a variable name", &inner[..end])));
        }
        match (env(name), default) {
            (Some(v), Some(d)) if v.is_empty() => out.push_str(d),
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                let m = format!("environment variable {name} is not set (give a default: `${{{name}:-value}}`)");
                return Err((needle, m));
            }
        }
        rest = &inner[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The URLs with a password in `expanded` that the file did not spell out itself.
fn secret_urls(template: &str, expanded: &str) -> Vec<String> {
    expanded
        .split_whitespace()
        .filter(|w| !template.contains(*w))
        .filter(|w| counterlab_core::redact_url(w) != *w)
        .map(str::to_string)
        .collect()
}

/// What one `--set` changes: the bytes `replace` of the text become `insert`, whose
/// value starts `value_at` bytes in.
struct Edit {
    replace: Range<usize>,
    insert: String,
    value_at: usize,
}

/// A place in the document while a `--set` path is walked.
enum Node<'a> {
    Table(&'a Table),
    Tables(&'a ArrayOfTables),
    Value(&'a Value),
}

impl Node<'_> {
    fn of(item: &Item) -> Option<Node<'_>> {
        match item {
            Item::Table(t) => Some(Node::Table(t)),
            Item::ArrayOfTables(a) => Some(Node::Tables(a)),
            Item::Value(v) => Some(Node::Value(v)),
            Item::None => None,
        }
    }
}

/// The edit that sets `keys` to `value` in the document of `text`.
fn find_edit(text: &str, root: &Item, keys: &[&str], value: &str) -> Result<Edit, String> {
    let mut node = Node::of(root).ok_or("the scenario is empty")?;
    // A missing key goes on a new line after the header of the innermost table that has
    // one (the top of the file for the root), with the path from that table.
    let (mut start, mut from) = (0, 0);
    for (i, key) in keys.iter().enumerate() {
        let shown = keys[..=i].join(".");
        node = match node {
            Node::Table(t) => {
                if let Some(h) = header_end(text, t).filter(|_| i > 0) {
                    (start, from) = (h, i);
                }
                match t.get(key) {
                    Some(item) => Node::of(item).ok_or_else(|| format!("`{shown}` is empty"))?,
                    None => {
                        if let Some(n) = keys[i..].iter().position(|k| k.parse::<usize>().is_ok()) {
                            let array = keys[..i + n].join(".");
                            return Err(format!("`{array}` is not in the file: add it there to set its entries"));
                        }
                        let lead = format!("{} = ", keys[from..].join("."));
                        return Ok(Edit {
                            replace: start..start,
                            insert: format!("{lead}{value}\n"),
                            value_at: lead.len(),
                        });
                    }
                }
            }
            Node::Tables(a) => Node::Table(a.get(index(key, a.len(), &shown)?).ok_or("no such entry")?),
            Node::Value(v) => return edit_value(text, v, &keys[..i], &keys[i..], value),
        };
    }
    match node {
        Node::Value(v) => replace_value(v, value, &keys.join(".")),
        _ => Err(format!("`{}` is a table: set one of its fields", keys.join("."))),
    }
}

/// Below an inline value: `keys` into inline tables and arrays (`done` already walked).
fn edit_value(text: &str, v: &Value, done: &[&str], keys: &[&str], value: &str) -> Result<Edit, String> {
    let shown = |n: usize| done.iter().chain(&keys[..n]).copied().collect::<Vec<_>>().join(".");
    let Some((key, rest)) = keys.split_first() else {
        return replace_value(v, value, &shown(0));
    };
    match v {
        Value::InlineTable(t) => match t.get(key) {
            Some(n) => edit_value(text, n, &[done, &[*key]].concat(), rest, value),
            None => {
                let span = t.span().ok_or("an inline table without a place")?;
                let close = text[..span.end].rfind('}').ok_or("an inline table without `}`")?;
                let sep = if t.is_empty() { " " } else { ", " };
                let lead = format!("{sep}{} = ", keys.join("."));
                Ok(Edit { replace: close..close, insert: format!("{lead}{value} "), value_at: lead.len() })
            }
        },
        Value::Array(a) => {
            let n = index(key, a.len(), &shown(1))?;
            edit_value(text, a.get(n).ok_or("no entry")?, &[done, &[*key]].concat(), rest, value)
        }
        _ => Err(format!("`{}` is a value, not a table: `{}` cannot be below it", shown(0), keys.join("."))),
    }
}

/// Replaces an existing value.
fn replace_value(v: &Value, value: &str, shown: &str) -> Result<Edit, String> {
    let span = v.span().ok_or_else(|| format!("`{shown}` has no place in the file"))?;
    Ok(Edit { replace: span, insert: value.to_string(), value_at: 0 })
}

/// The start of the line after table `t`'s header, or None for the root and dotted or
/// implicit tables (which have no header).
fn header_end(text: &str, t: &Table) -> Option<usize> {
    let span = t.span().filter(|_| !t.is_dotted() && !t.is_implicit())?;
    let end = span.end.min(text.len());
    Some(text[end..].find('\n').map_or(text.len(), |i| end + i + 1))
}

/// An array index `key` below `len`.
fn index(key: &str, len: usize, shown: &str) -> Result<usize, String> {
    let n: usize = key.parse().map_err(|_| format!("`{shown}`: expected an entry number (0 to {})", len.max(1) - 1))?;
    if n >= len {
        return Err(format!("`{shown}`: the file has {len} entries (numbered from 0)"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCENARIO: &str = "name = \"a\"\n[data]\nusers = 5\n\n[workload]\nworkers = 2\nmix = { create = 1 }\n\n[[workload.stages]]\nduration_s = 1.0\nrate = 5.0\n\n[[workload.stages]]\nduration_s = 2.0\n";

    fn edited(sets: &[&str]) -> Result<Edited, ScenarioError> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Edited::new("s.toml", SCENARIO, &sets, &|_| None)
    }

    #[test]
    fn sets_replace_and_insert_fields_anywhere() {
        let e = edited(&[
            "workload.workers=7",
            "data.notifications_per_user=3",
            "workload.stages.1.rate=9.5",
            "workload.mix.read_count=2",
            "seed=4",
            "name=my run",
        ])
        .unwrap();
        let v: toml::Value = toml::from_str(&e.text).unwrap();
        assert_eq!(v["workload"]["workers"].as_integer(), Some(7));
        assert_eq!(v["data"]["notifications_per_user"].as_integer(), Some(3));
        assert_eq!(v["workload"]["stages"][1]["rate"].as_float(), Some(9.5));
        assert_eq!(v["workload"]["stages"][0]["rate"].as_float(), Some(5.0));
        assert_eq!(v["workload"]["mix"]["read_count"].as_integer(), Some(2));
        assert_eq!(v["seed"].as_integer(), Some(4));
        assert_eq!(v["name"].as_str(), Some("my run"));
        // The file's own lines are still found where they are in the file.
        let users = e.text.find("users = 5").unwrap();
        assert_eq!(e.place_of(users), Place::File(SCENARIO.find("users = 5").unwrap()));
        let workers = e.text.find("workers = 7").unwrap() + "workers = ".len();
        assert_eq!(e.place_of(workers), Place::Set { index: 0, col: 18 });
    }

    #[test]
    fn bad_sets_name_the_flag() {
        let err = |s: &str| edited(&["seed=1", s]).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(err("workload"), "--set:2:1: expected `path.to.field=value` (in `--set workload`)");
        assert!(
            err("workload.stages.2.rate=1").contains("the file has 2 entries"),
            "{}",
            err("workload.stages.2.rate=1")
        );
        assert!(err("workload.stages.x.rate=1").contains("expected an entry number"));
        assert!(err("workload=3").contains("`workload` is a table"));
        assert!(err("data.users.x=3").contains("`data.users` is a value"));
        assert!(err("a..b=3").starts_with("--set:2:1: expected a dotted path"));
        assert!(err("faults.0.at_ms=3").contains("`faults` is not in the file"), "{}", err("faults.0.at_ms=3"));
    }

    #[test]
    fn interpolation_expands_defaults_and_escapes() {
        let env = |k: &str| match k {
            "WHO" => Some("bob".to_string()),
            "EMPTY" => Some(String::new()),
            "DB" => Some("postgres://u:s3cret@h/db".to_string()),
            _ => None,
        };
        assert_eq!(expand("x${WHO}y", &env).unwrap(), "xboby");
        assert_eq!(expand("${NOPE:-d} ${EMPTY:-e} ${EMPTY}.", &env).unwrap(), "d e .");
        assert_eq!(expand("$${WHO} $5 $", &env).unwrap(), "${WHO} $5 $");
        assert!(expand("${NOPE}", &env).unwrap_err().1.contains("NOPE is not set"));
        assert!(expand("${1A}", &env).unwrap_err().1.contains("not a variable name"));
        let text = "name = \"n\"\n[workload]\nskew = \"${NOPE}\"\n";
        let e = Edited::new("f.toml", text, &[], &env).err().unwrap();
        assert_eq!(e.line_col, Some((3, 9)), "{e}");
        assert!(e.to_string().starts_with("f.toml:3:9: environment variable NOPE is not set"), "{e}");
        let text = "name = \"${DB}\"\nseed = 1\n";
        let e = Edited::new("f.toml", text, &["seed=x".into()], &env).unwrap();
        assert_eq!(e.secrets, vec!["postgres://u:s3cret@h/db".to_string()]);
        let seed = e.text.find("seed = ").unwrap();
        assert_eq!(e.place_of(seed + 2), Place::File(text.find("seed").unwrap() + 2));
        let scrubbed = e.scrub(ScenarioError { path: "f".into(), line_col: None, message: e.text.clone() });
        assert!(!scrubbed.message.contains("s3cret") && scrubbed.message.contains("u:***@h"), "{scrubbed}");
    }
}
