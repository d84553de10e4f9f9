//! `counterlab clean`: finds the namespaces killed runs left on the configured servers (by
//! their markers: a schema comment, a `cl_meta` table, a `cl:<tag>:meta` key) and the
//! temporary SQLite folders they left (a `counterlab.meta` file), lists them,
//! and with `--yes` removes them with their identities (and the broker queue of each
//! removed namespace, when the broker answers). Unmarked names are never touched,
//! nor namespaces whose identity still has connections (a run going on any host) or whose
//! process still lives on this host.

use std::path::Path;

use counterlab_strategies::{
    AmqpServer, BackendError, DEFAULT_AMQP_URL, DEFAULT_MYSQL_URL, DEFAULT_REDIS_URL, Leftover, Marker, RedisServer,
    Server, is_namespace_name, queue_name,
};

use crate::run::{RunOptions, SQLITE_MARKER};

/// One leftover and what happened to it: `kept (run alive)`, `kept (younger than ...)`,
/// `would remove` (dry run), `removed`, or `failed: ...`.
pub struct Cleaned {
    pub leftover: Leftover,
    pub action: String,
}

/// Lists (and with `remove`, drops) the leftovers older than `older_than_s` seconds on
/// every server that answers; a server configured by URL must answer.
pub async fn clean(
    opts: &RunOptions,
    older_than_s: u64,
    remove: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<Cleaned>, BackendError> {
    let mut out = Vec::new();
    let t = opts.connect_timeout;
    let pg = Server::connect_postgres(opts.postgres_url.as_deref().unwrap_or(&opts.postgres_default), t).await;
    let my = Server::connect_mysql(opts.mysql_url.as_deref().unwrap_or(DEFAULT_MYSQL_URL), t).await;
    for (configured, server) in [(opts.postgres_url.is_some(), pg), (opts.mysql_url.is_some(), my)] {
        let server = match server {
            Ok(s) => s,
            Err(e) if configured => return Err(e),
            Err(e) => {
                log(&format!("skipped: {e}"));
                continue;
            }
        };
        for l in server.leftovers().await? {
            let action = decide(&l, older_than_s, remove);
            let action = if action == "remove" {
                server.remove(&l).await.map_or_else(|e| format!("failed: {e}"), |_| "removed".into())
            } else {
                action
            };
            out.push(Cleaned { leftover: l, action });
        }
    }
    for l in sqlite_leftovers(&std::env::temp_dir()) {
        let action = match decide(&l, older_than_s, remove) {
            a if a == "remove" => {
                std::fs::remove_dir_all(&l.namespace).map_or_else(|e| format!("failed: {e}"), |_| "removed".into())
            }
            a => a,
        };
        out.push(Cleaned { leftover: l, action });
    }
    let redis = RedisServer::connect(opts.redis_url.as_deref().unwrap_or(DEFAULT_REDIS_URL), t).await;
    match redis {
        Ok(r) => {
            for l in r.leftovers().await? {
                let action = match decide(&l, older_than_s, remove) {
                    a if a == "remove" => {
                        r.remove(&l).await.map_or_else(|e| format!("failed: {e}"), |n| format!("removed ({n} keys)"))
                    }
                    a => a,
                };
                out.push(Cleaned { leftover: l, action });
            }
        }
        Err(e) if opts.redis_url.is_some() => return Err(e),
        Err(e) => log(&format!("skipped: {e}")),
    }
    remove_queues(opts, &mut out, log).await?;
    Ok(out)
}

/// The broker queue (`<namespace>.deltas`) of each namespace just removed: AMQP cannot
/// list queues, so the removed namespaces name the ones to delete (deleting an absent
/// queue does nothing). Queues of a killed run's SQLite namespaces are not found this
/// way; the broker drops any run queue unused for `QUEUE_EXPIRES_MS` by itself.
async fn remove_queues(opts: &RunOptions, out: &mut [Cleaned], log: &mut dyn FnMut(&str)) -> Result<(), BackendError> {
    let removed = |c: &Cleaned| c.action.starts_with("removed") && is_namespace_name(&c.leftover.namespace);
    if !out.iter().any(removed) {
        return Ok(());
    }
    let broker =
        match AmqpServer::connect(opts.amqp_url.as_deref().unwrap_or(DEFAULT_AMQP_URL), opts.connect_timeout).await {
            Ok(b) => b,
            Err(e) if opts.amqp_url.is_some() => return Err(e),
            Err(e) => {
                log(&format!("skipped broker queues: {e}"));
                return Ok(());
            }
        };
    let mut done: Vec<String> = Vec::new();
    for c in out.iter_mut().filter(|c| removed(c)) {
        if done.contains(&c.leftover.namespace) {
            continue;
        }
        done.push(c.leftover.namespace.clone());
        match broker.remove(&c.leftover.namespace).await {
            Ok(n) => c.action += &format!("; queue {} deleted ({n} messages)", queue_name(&c.leftover.namespace)),
            Err(e) => c.action += &format!("; queue {} not deleted: {e}", queue_name(&c.leftover.namespace)),
        }
    }
    Ok(())
}

/// Most folders `clean` looks at in the temporary directory (a bound, not a hope).
const MAX_TEMP_ENTRIES: usize = 100_000;

/// The run folders (`counterlab-*`, real folders owned by this user, with a marker file)
/// in `temp`; anything else there, a folder without a marker included, is never touched.
/// A folder whose marker a run still holds locked (on any host sharing the folder) counts
/// one live session.
pub fn sqlite_leftovers(temp: &Path) -> Vec<Leftover> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(temp) else { return Vec::new() };
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    let ours = |p: &Path| {
        let m = std::fs::symlink_metadata(p);
        m.is_ok_and(|m| m.is_dir() && Some(m.uid()) == me)
    };
    let folders = entries.take(MAX_TEMP_ENTRIES).filter_map(|e| e.ok()).map(|e| e.path());
    let runs = folders.filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("counterlab-")));
    runs.filter(|p| ours(p)).filter_map(|dir| sqlite_leftover(&dir)).collect()
}

fn sqlite_leftover(dir: &Path) -> Option<Leftover> {
    let path = dir.join(SQLITE_MARKER);
    let marker = Marker::parse(std::fs::read_to_string(&path).ok()?.trim())?;
    let locked = std::fs::File::open(&path).ok()?.try_lock().is_err();
    let files = std::fs::read_dir(dir).map_or(0, |d| d.count());
    Some(Leftover {
        backend: "sqlite",
        namespace: dir.display().to_string(),
        marker,
        what: format!("a run's SQLite folder, {files} file(s)"),
        sessions: u64::from(locked),
    })
}

fn decide(l: &Leftover, older_than_s: u64, remove: bool) -> String {
    if l.sessions > 0 {
        format!("kept ({} live connection(s) of its identity: its run is still going)", l.sessions)
    } else if l.marker.alive_here() {
        format!("kept (its run, pid {}, is still running)", l.marker.pid)
    } else if l.marker.age_s() < older_than_s {
        format!("kept (younger than {older_than_s} s)")
    } else if remove {
        "remove".into()
    } else {
        "would remove (dry run; pass --yes)".into()
    }
}

/// `--older-than`: a number with an optional unit `s`, `m`, `h` or `d`.
pub fn parse_age(s: &str) -> Result<u64, String> {
    let (n, unit) = s.trim().split_at(s.trim().find(|c: char| !c.is_ascii_digit()).unwrap_or(s.trim().len()));
    let n: u64 = n.parse().map_err(|_| format!("--older-than {s:?}: a number with s, m, h or d (e.g. 2h)"))?;
    let k = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("--older-than {s:?}: the unit is s, m, h or d")),
    };
    n.checked_mul(k).ok_or_else(|| format!("--older-than {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn ages_parse_with_units() {
        assert_eq!(super::parse_age("90"), Ok(90));
        assert_eq!(super::parse_age("2h"), Ok(7200));
        assert!(super::parse_age("2 weeks").is_err() && super::parse_age("h").is_err());
    }
}
