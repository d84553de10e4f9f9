//! The Redis side of file-defined strategies: which commands a step may send (keys first,
//! each one under the run's prefix), key and argument templates (`{user}`, `{id}`,
//! `{each}`, `{step.field}`), the checks a Lua script must pass before it runs (keys only
//! through `KEYS[n]`, no escape from the script sandbox), and how a reply becomes numbers.

/// Commands a Redis step may send, with whether they write. Every one takes its keys
/// first and then its arguments, so every key a step names is one the run prefixes;
/// `many` ones take only keys (`DEL k1 k2`). Anything else (KEYS, SCAN, FLUSHALL,
/// CONFIG, EVAL, RENAME...) is refused: a Lua step is how to run a script.
const COMMANDS: &[(&str, bool, bool)] = &[
    // (name, writes, takes many keys and no arguments)
    ("GET", false, false),
    ("MGET", false, true),
    ("EXISTS", false, true),
    ("SET", true, false),
    ("SETNX", true, false),
    ("GETSET", true, false),
    ("GETDEL", true, false),
    ("INCR", true, false),
    ("INCRBY", true, false),
    ("DECR", true, false),
    ("DECRBY", true, false),
    ("DEL", true, true),
    ("UNLINK", true, true),
    ("EXPIRE", true, false),
    ("PEXPIRE", true, false),
    ("TTL", false, false),
    ("HGET", false, false),
    ("HMGET", false, false),
    ("HEXISTS", false, false),
    ("HLEN", false, false),
    ("HGETALL", false, false),
    ("HKEYS", false, false),
    ("HVALS", false, false),
    ("HSET", true, false),
    ("HSETNX", true, false),
    ("HDEL", true, false),
    ("HINCRBY", true, false),
    ("ZADD", true, false),
    ("ZINCRBY", true, false),
    ("ZSCORE", false, false),
    ("ZREM", true, false),
    ("ZCARD", false, false),
    ("ZRANGE", false, false),
    ("ZRANGEBYSCORE", false, false),
    ("SADD", true, false),
    ("SREM", true, false),
    ("SCARD", false, false),
    ("SISMEMBER", false, false),
    ("SMEMBERS", false, false),
    ("LPUSH", true, false),
    ("RPUSH", true, false),
    ("LLEN", false, false),
    ("LRANGE", false, false),
    ("LPOP", true, false),
    ("RPOP", true, false),
    ("LREM", true, false),
    ("LTRIM", true, false),
];

/// A command's canonical name and whether it writes; `many`: keys only, no arguments.
#[derive(Debug)]
pub struct Command {
    pub name: &'static str,
    pub writes: bool,
    pub many: bool,
}

pub fn command(name: &str) -> Result<Command, String> {
    let upper = name.to_ascii_uppercase();
    match COMMANDS.iter().find(|(n, _, _)| *n == upper) {
        Some((n, w, m)) => Ok(Command { name: n, writes: *w, many: *m }),
        None => Err(format!(
            "Redis command `{name}` is not allowed; a step may send {} (keys first), {}, or be a Lua step",
            COMMANDS.iter().map(|c| c.0).collect::<Vec<_>>().join(" "),
            TxCmd::ALL.map(TxCmd::name).join(" ")
        )),
    }
}

/// Redis transaction commands a step may send: WATCH (keys only), then MULTI, queued
/// commands, and EXEC or DISCARD; UNWATCH. Their state lives on the connection, so an op
/// that sends any runs all its Redis steps on one dedicated connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxCmd {
    Watch,
    Unwatch,
    Multi,
    Exec,
    Discard,
}

impl TxCmd {
    pub const ALL: [TxCmd; 5] = [TxCmd::Watch, TxCmd::Unwatch, TxCmd::Multi, TxCmd::Exec, TxCmd::Discard];

    pub fn name(self) -> &'static str {
        match self {
            TxCmd::Watch => "WATCH",
            TxCmd::Unwatch => "UNWATCH",
            TxCmd::Multi => "MULTI",
            TxCmd::Exec => "EXEC",
            TxCmd::Discard => "DISCARD",
        }
    }

    /// The transaction command `name` is (any case), if it is one.
    pub fn of(name: &str) -> Option<TxCmd> {
        TxCmd::ALL.into_iter().find(|t| t.name().eq_ignore_ascii_case(name))
    }
}

/// A command the check may send to read a counter: one that does not write.
pub fn read_only(name: &str) -> Result<Command, String> {
    match command(name) {
        Ok(c) if !c.writes => Ok(c),
        _ => Err(format!(
            "`{name}` is not a read-only command; a counter is read with {}",
            COMMANDS.iter().filter(|c| !c.1).map(|c| c.0).collect::<Vec<_>>().join(" ")
        )),
    }
}

/// A piece of a key or argument template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece<R> {
    Lit(String),
    Val(R),
}

/// Splits `u:{user}:unread` into literal text and `{...}` placeholders, resolving each
/// placeholder's text (an expression: `{user % 16}`) with `resolve`. `{{` and `}}` are a
/// literal brace, so `{{u:{user}}}:unread` is the key `{u:42}:unread`, whose hash tag
/// `u:42` puts it in one Redis Cluster slot with the user's other keys. Keys and
/// arguments are printable ASCII, spaces only inside a placeholder; a lone brace that
/// opens no placeholder is an error.
pub fn template<R>(
    text: &str,
    key: bool,
    mut resolve: impl FnMut(&str) -> Result<R, String>,
) -> Result<Vec<Piece<R>>, String> {
    let what = if key { "key" } else { "argument" };
    if key && text.is_empty() {
        return Err("empty key".into());
    }
    let literal = |lit: &str| match lit.chars().find(|c| !c.is_ascii_graphic()) {
        Some(c) => Err(format!("{what} {text:?}: character {c:?} (keys and arguments are printable ASCII, no spaces)")),
        None => Ok(Piece::Lit(lit.to_string())),
    };
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find(['{', '}']) {
        if open > 0 {
            out.push(literal(&rest[..open])?);
        }
        let brace = &rest[open..open + 1];
        if rest[open + 1..].starts_with(brace) {
            // `{{` or `}}`: a literal brace (a hash tag's).
            out.push(Piece::Lit(brace.to_string()));
            rest = &rest[open + 2..];
            continue;
        }
        if brace == "}" {
            return Err(format!("{what} {text:?}: `}}` without `{{` (a literal brace is written `}}}}`)"));
        }
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| format!("{what} {text:?}: `{{` without `}}`"))?;
        let word = &after[..close];
        if word.trim().is_empty() || word.contains('{') || word.chars().any(|c| !(c.is_ascii_graphic() || c == ' ')) {
            return Err(format!(
                "{what} {text:?}: write placeholders as {{user}}, {{id}}, {{step.field}}, {{user % 16}}"
            ));
        }
        out.push(Piece::Val(resolve(word)?));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        out.push(literal(rest)?);
    }
    Ok(out)
}

/// The part of a key template Redis Cluster hashes: the text of its first hash tag
/// (`{{u:{user}}}:unread` -> `u:{user}`), else the whole key (also when the first tag
/// is empty, `{{}}`, as Redis does).
pub fn hash_tag(text: &str) -> &str {
    let b = text.as_bytes();
    let (mut i, mut start) = (0, None);
    while i < b.len() {
        match (b[i], b.get(i + 1), start) {
            (b'{', Some(b'{'), None) => {
                start = Some(i + 2);
                i += 2;
            }
            (b'}', Some(b'}'), Some(s)) if s == i => return text,
            (b'}', Some(b'}'), Some(s)) => return &text[s..i],
            (b'{', _, _) => i += text[i..].find('}').unwrap_or(text.len() - i) + 1,
            _ => i += 1,
        }
    }
    text
}

/// On Redis Cluster a step's keys must share a hash slot (a script's or command's keys are
/// one slot's): the same hash tag in each, or the same key. Checked when a run targets a
/// cluster (`CustomSpec::cross_slot`); on one server any keys do.
pub fn one_slot(keys: &[String]) -> Result<(), String> {
    let Some(first) = keys.first() else { return Ok(()) };
    match keys.iter().find(|k| hash_tag(k) != hash_tag(first)) {
        None => Ok(()),
        Some(other) => Err(format!(
            "keys {first:?} and {other:?} may hash to different Redis Cluster slots; give them one hash tag, e.g. \
             \"{{{{u:{{user}}}}}}:a\" and \"{{{{u:{{user}}}}}}:b\" (docs/strategy-files.md)"
        )),
    }
}

/// Identifiers a script may not use: what loads code, reaches globals or the host, or
/// builds a command name at run time.
const LUA_DENIED: &[&str] = &[
    "load",
    "loadstring",
    "dofile",
    "loadfile",
    "require",
    "getfenv",
    "setfenv",
    "rawset",
    "rawget",
    "rawequal",
    "setmetatable",
    "getmetatable",
    "_G",
    "os",
    "io",
    "debug",
    "module",
    "package",
];

/// What `redis.` may be followed by in a script.
const LUA_REDIS_FNS: &[&str] = &["call", "pcall", "error_reply", "status_reply", "sha1hex", "log"];

/// Checks a script's text so that every key it touches is one of its `KEYS` (which the
/// run prefixes) and it cannot leave the sandbox: every `redis.call`/`redis.pcall` names
/// an allowed command as a quoted literal and passes `KEYS[...]` (or an expression
/// starting with it, still under the prefix) as the key; no `KEYS[n]` beyond the step's
/// keys. Line numbers in errors are the script's own.
pub fn check_lua(src: &str, n_keys: usize) -> Result<(), String> {
    check_script(src, n_keys, command)
}

/// `check_lua` for a script that reads a counter: every command it calls is read-only.
pub fn check_read_lua(src: &str, n_keys: usize) -> Result<(), String> {
    check_script(src, n_keys, read_only)
}

/// `check_lua`, with `allowed` deciding which commands the script may call.
fn check_script(src: &str, n_keys: usize, allowed: fn(&str) -> Result<Command, String>) -> Result<(), String> {
    if src.trim().is_empty() {
        return Err("the Lua script is empty".into());
    }
    if src.len() > 64 * 1024 {
        return Err("the Lua script is over 64 KiB".into());
    }
    let line_of = |at: usize| src[..at].matches('\n').count() + 1;
    let bytes = src.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == b'.')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        let word = &src[start..i];
        if LUA_DENIED.contains(&word) {
            return Err(format!("line {}: `{word}` is not allowed in a strategy's script", line_of(start)));
        }
        if word == "KEYS" {
            let rest = src[i..].trim_start();
            if let Some(idx) = rest.strip_prefix('[') {
                let digits: String = idx.trim_start().chars().take_while(|c| c.is_ascii_digit()).collect();
                if let Ok(n) = digits.parse::<usize>()
                    && (n == 0 || n > n_keys)
                {
                    return Err(format!(
                        "line {}: KEYS[{n}], but the step passes {n_keys} key{}",
                        line_of(start),
                        if n_keys == 1 { "" } else { "s" }
                    ));
                }
            }
        }
        if word == "redis" {
            let rest = &src[i..];
            let Some(after_dot) = rest.strip_prefix('.') else {
                return Err(format!("line {}: use `redis` only as redis.call(...) and friends", line_of(start)));
            };
            let f: String = after_dot.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if f.starts_with("LOG_") {
                continue;
            }
            if !LUA_REDIS_FNS.contains(&f.as_str()) {
                return Err(format!("line {}: redis.{f} is not allowed", line_of(start)));
            }
            if f == "call" || f == "pcall" {
                check_call(after_dot[f.len()..].trim_start(), allowed)
                    .map_err(|e| format!("line {}: {e}", line_of(start)))?;
            }
        }
    }
    Ok(())
}

/// The text after `redis.call`: `('CMD', KEYS[...]...`.
fn check_call(rest: &str, allowed: fn(&str) -> Result<Command, String>) -> Result<(), String> {
    let shape = "write redis.call('COMMAND', KEYS[n], ...) with the command quoted and a KEYS entry as the key";
    let rest = rest.strip_prefix('(').ok_or(shape)?.trim_start();
    let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"').ok_or(shape)?;
    let body = &rest[1..];
    let end = body.find(quote).ok_or(shape)?;
    let c = allowed(&body[..end])?;
    let after = body[end + 1..].trim_start();
    let after = after.strip_prefix(',').ok_or(shape)?.trim_start();
    if !after.starts_with("KEYS[") {
        return Err(format!("{} must name its key as KEYS[...], so it stays under the run's prefix", c.name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_hash_tag_hashes_the_whole_key() {
        assert_eq!(hash_tag("{{}}:a"), "{{}}:a");
        assert!(one_slot(&["{{}}:a".into(), "{{}}:b".into()]).is_err(), "Redis hashes both whole keys");
        assert!(one_slot(&["{{u:{user}}}:a".into(), "{{u:{user}}}:b".into()]).is_ok());
    }

    #[test]
    fn templates_split_into_text_and_values() {
        let t = template("u:{user}:state", true, |w| Ok(w.to_string())).unwrap();
        assert_eq!(t, [Piece::Lit("u:".into()), Piece::Val("user".into()), Piece::Lit(":state".into())]);
        assert!(template("u:{user", true, |w| Ok(w.to_string())).is_err());
        assert!(template("u}", true, |w| Ok(w.to_string())).is_err());
        assert!(template("a b", true, |w| Ok(w.to_string())).is_err());
        assert!(template("a{ }", true, |w| Ok(w.to_string())).is_err());
        let t = template("{{u:{user}}}:x", true, |w| Ok(w.to_string())).unwrap();
        let lits: Vec<String> = t
            .iter()
            .map(|p| match p {
                Piece::Lit(l) => l.clone(),
                Piece::Val(v) => format!("<{v}>"),
            })
            .collect();
        assert_eq!(lits, ["{", "u:", "<user>", "}", ":x"]);
        assert_eq!(hash_tag("{{u:{user}}}:x"), "u:{user}");
        assert_eq!(hash_tag("u:{user}:x"), "u:{user}:x");
        assert!(one_slot(&["{{u:{user}}}:a".into(), "{{u:{user}}}:b".into()]).is_ok());
        let e = one_slot(&["u:{user}:a".into(), "u:{user}:b".into()]).unwrap_err();
        assert!(e.contains("different Redis Cluster slots"), "{e}");
        let t = template("s:{user % 16}", true, |w| Ok(w.to_string())).unwrap();
        assert_eq!(t, [Piece::Lit("s:".into()), Piece::Val("user % 16".into())]);
        assert!(template("", true, |w| Ok(w.to_string())).is_err());
        assert!(template("{nope}", true, |w| Err::<String, _>(format!("unknown {w}"))).unwrap_err().contains("nope"));
    }

    #[test]
    fn only_listed_commands_pass() {
        assert!(command("incrby").unwrap().writes);
        assert!(!command("GET").unwrap().writes);
        // AUTH and HELLO would log the connection in as another user (scripts cannot
        // call them: Redis flags them noscript).
        for bad in ["FLUSHALL", "KEYS", "EVAL", "CONFIG", "RENAME", "SCAN", "AUTH", "HELLO", "SELECT", "CLIENT"] {
            assert!(command(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn scripts_touch_keys_only_through_keys() {
        let ok = "local s = redis.call('HGET', KEYS[2], ARGV[1])\nif s == '0' then redis.call(\"DECR\", KEYS[1]) end\nreturn redis.status_reply('OK')";
        check_lua(ok, 2).unwrap();
        for (src, words) in [
            ("return redis.call('GET', 'other:key')", "KEYS["),
            ("return redis.call('GET', ARGV[1])", "KEYS["),
            ("local k = KEYS[1]\nreturn redis.call('GET', k)", "KEYS["),
            ("return redis.call('FLUSHALL')", "not allowed"),
            ("local c = redis.call\nreturn c('GET', 'x')", "redis.call("),
            ("local f = 'GET'\nreturn redis.call(f, KEYS[1])", "quoted"),
            ("return redis.call('GET', KEYS[3])", "KEYS[3]"),
            ("return loadstring('x')()", "loadstring"),
            ("return _G['redis']", "_G"),
            ("return redis.setresp(3)", "redis.setresp"),
            ("return redis['call']('GET', 'x')", "redis"),
            ("", "empty"),
        ] {
            let e = check_lua(src, 2).unwrap_err();
            assert!(e.contains(words), "{src:?}: {e}");
        }
        assert!(check_lua("\n\nreturn redis.call('GET', 'x')", 1).unwrap_err().starts_with("line 3"));
    }

    #[test]
    fn counters_read_with_read_only_commands_and_scripts() {
        assert_eq!(read_only("scard").unwrap().name, "SCARD");
        let e = read_only("INCR").unwrap_err();
        assert!(e.starts_with("`INCR` is not a read-only command; a counter is read with GET MGET"), "{e}");
        assert!(e.contains("ZSCORE") && !e.contains("SADD"), "{e}");
        assert!(read_only("FLUSHALL").is_err());
        check_read_lua("return redis.call('SCARD', KEYS[1])", 1).unwrap();
        let e = check_read_lua("redis.call('SADD', KEYS[1], 1)\nreturn 1", 1).unwrap_err();
        assert!(e.starts_with("line 1: `SADD` is not a read-only command"), "{e}");
        assert!(check_read_lua("return redis.call('GET', KEYS[2])", 1).unwrap_err().contains("KEYS[2]"));
    }
}
