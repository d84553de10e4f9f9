//! Where the servers are: each backend's URL from its flag, else its `COUNTERLAB_*`
//! variable, else the conventional variables other tools read (`REDIS_URL`,
//! `MYSQL_URL`/`MARIADB_URL`, `AMQP_URL`, and `DATABASE_URL` routed by its scheme),
//! else None (the local default).

use std::path::{Path, PathBuf};

/// The servers' flags as given: spelled once here, flattened into every subcommand that
/// reaches a server (`ServerArgs` in main.rs).
#[derive(Clone, Default, clap::Args)]
pub struct Flags {
    /// PostgreSQL URL; else COUNTERLAB_POSTGRES_URL, else DATABASE_URL when postgres(ql):// (DATABASE_URL goes to the server its scheme names), else postgres://postgres@127.0.0.1:5432/test.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// MySQL/MariaDB URL; else COUNTERLAB_MYSQL_URL, MYSQL_URL, MARIADB_URL, DATABASE_URL when mysql:// or mariadb://, else mysql://root@127.0.0.1:3306/test.
    #[arg(long, value_name = "URL")]
    pub mysql: Option<String>,
    /// Redis URL for the Redis strategies; else COUNTERLAB_REDIS_URL, else REDIS_URL, else redis://127.0.0.1:6379.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// AMQP URL of the broker (RabbitMQ) for the mq-consumer strategies; else COUNTERLAB_AMQP_URL, else AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/%2f.
    #[arg(long, value_name = "URL")]
    pub amqp: Option<String>,
    /// A hot standby of the PostgreSQL server, for `[replica] read_from` (scripts/topologies/pg-standby.sh); else COUNTERLAB_POSTGRES_REPLICA_URL.
    #[arg(long, value_name = "URL")]
    pub postgres_replica: Option<String>,
    /// A replica of the Redis server, for `[replica] read_from` (scripts/topologies/redis-replica.sh); else COUNTERLAB_REDIS_REPLICA_URL.
    #[arg(long, value_name = "URL")]
    pub redis_replica: Option<String>,
    /// Directory for SQLite namespace files, which must exist; else DATABASE_URL when sqlite:PATH (PATH's folder) [default: a temporary directory, removed after the run].
    #[arg(long, value_name = "DIR")]
    pub sqlite: Option<PathBuf>,
}

/// Each backend's configured URL (or SQLite folder) and where it came from.
#[derive(Debug, Default, PartialEq)]
pub struct Resolved {
    pub postgres: Option<(String, String)>,
    pub mysql: Option<(String, String)>,
    pub redis: Option<(String, String)>,
    pub amqp: Option<(String, String)>,
    pub sqlite: Option<(PathBuf, String)>,
    pub postgres_replica: Option<(String, String)>,
    pub redis_replica: Option<(String, String)>,
    /// Variables that were set but not used, and why (for the log).
    pub warnings: Vec<String>,
}

/// Where `DATABASE_URL` goes, by its scheme.
#[derive(Debug, PartialEq)]
enum Routed {
    Postgres(String),
    Mysql(String),
    Sqlite(PathBuf),
    Unknown(String),
}

/// `postgres(ql)://` -> PostgreSQL, `mysql://`/`mariadb://` -> MariaDB/MySQL,
/// `sqlite:PATH` -> the SQLite folder (PATH if it is a folder, else the folder holding
/// it: counterlab makes one file per namespace there).
fn route(url: &str) -> Routed {
    let scheme = url.split_once(':').map_or("", |(s, _)| s).to_ascii_lowercase();
    match scheme.as_str() {
        "postgres" | "postgresql" => Routed::Postgres(url.to_string()),
        "mysql" | "mariadb" => Routed::Mysql(url.to_string()),
        "sqlite" => {
            let rest = &url["sqlite:".len()..];
            let path = rest.strip_prefix("//").unwrap_or(rest);
            let path = path.split(['?', '#']).next().unwrap_or_default();
            if path.is_empty() || path == ":memory:" {
                return Routed::Unknown("sqlite: needs a file or folder path".into());
            }
            let path = Path::new(path);
            let dir = match path.is_dir() {
                true => path.to_path_buf(),
                false => path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf(),
            };
            Routed::Sqlite(dir)
        }
        other => Routed::Unknown(format!("scheme `{other}:` is none of postgres, postgresql, mysql, mariadb, sqlite")),
    }
}

/// The first of `vars` that is set and not empty, with its name.
fn first(env: &dyn Fn(&str) -> Option<String>, vars: &[&str]) -> Option<(String, String)> {
    vars.iter().find_map(|v| env(v).filter(|u| !u.is_empty()).map(|u| (u, v.to_string())))
}

/// Resolves every backend: flag > `COUNTERLAB_*` > conventional variables > None.
pub fn resolve(flags: Flags, env: &dyn Fn(&str) -> Option<String>) -> Resolved {
    let flag = |v: Option<String>, name: &str| v.map(|u| (u, name.to_string()));
    let mut r = Resolved {
        postgres: flag(flags.postgres, "--postgres").or_else(|| first(env, &["COUNTERLAB_POSTGRES_URL"])),
        mysql: flag(flags.mysql, "--mysql")
            .or_else(|| first(env, &["COUNTERLAB_MYSQL_URL", "MYSQL_URL", "MARIADB_URL"])),
        redis: flag(flags.redis, "--redis").or_else(|| first(env, &["COUNTERLAB_REDIS_URL", "REDIS_URL"])),
        amqp: flag(flags.amqp, "--amqp").or_else(|| first(env, &["COUNTERLAB_AMQP_URL", "AMQP_URL"])),
        sqlite: flags.sqlite.map(|d| (d, "--sqlite".to_string())),
        postgres_replica: flag(flags.postgres_replica, "--postgres-replica")
            .or_else(|| first(env, &["COUNTERLAB_POSTGRES_REPLICA_URL"])),
        redis_replica: flag(flags.redis_replica, "--redis-replica")
            .or_else(|| first(env, &["COUNTERLAB_REDIS_REPLICA_URL"])),
        warnings: Vec::new(),
    };
    let Some((url, _)) = first(env, &["DATABASE_URL"]) else { return r };
    let from = || "DATABASE_URL".to_string();
    match route(&url) {
        Routed::Postgres(u) if r.postgres.is_none() => r.postgres = Some((u, from())),
        Routed::Mysql(u) if r.mysql.is_none() => r.mysql = Some((u, from())),
        Routed::Sqlite(d) if r.sqlite.is_none() => r.sqlite = Some((d, from())),
        Routed::Unknown(why) => r.warnings.push(format!("DATABASE_URL ignored: {why}")),
        _ => {}
    }
    r
}

impl Resolved {
    /// The SQLite folder, when one is configured, must be a folder that exists:
    /// counterlab creates no folder it was pointed at (a typo would put the namespace
    /// files somewhere nobody looks). The error names the flag or variable and the path.
    pub fn check_sqlite(&self) -> Result<(), String> {
        let Some((dir, from)) = &self.sqlite else { return Ok(()) };
        let why = match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => "is not a directory".to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!(
                "does not exist (counterlab does not create it: make it first, or leave {from} out for a temporary folder)"
            ),
            Err(e) => format!("cannot be read: {e}"),
        };
        Err(format!("{from}: the SQLite folder {} {why}", dir.display()))
    }

    /// `postgres URL from --postgres; mysql URL from the local default; ...`
    pub fn sources(&self) -> String {
        let from = |c: Option<&String>| c.map_or("the local default".to_string(), |s| s.clone());
        let mut parts = vec![
            format!("postgres URL from {}", from(self.postgres.as_ref().map(|c| &c.1))),
            format!("mysql URL from {}", from(self.mysql.as_ref().map(|c| &c.1))),
            format!("redis URL from {}", from(self.redis.as_ref().map(|c| &c.1))),
            format!("amqp URL from {}", from(self.amqp.as_ref().map(|c| &c.1))),
        ];
        if let Some((_, from)) = &self.sqlite {
            parts.push(format!("sqlite folder from {from}"));
        }
        for (what, c) in [("postgres standby", &self.postgres_replica), ("redis replica", &self.redis_replica)] {
            if let Some((_, from)) = c {
                parts.push(format!("{what} URL from {from}"));
            }
        }
        parts.extend(self.warnings.iter().cloned());
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    fn src(c: &Option<(String, String)>) -> Option<(&str, &str)> {
        c.as_ref().map(|(u, s)| (u.as_str(), s.as_str()))
    }

    #[test]
    fn database_url_is_routed_by_its_scheme() {
        let r = resolve(Flags::default(), &env(&[("DATABASE_URL", "postgresql://u@db/x")]));
        assert_eq!(src(&r.postgres), Some(("postgresql://u@db/x", "DATABASE_URL")));
        assert_eq!(r.mysql, None);
        let r = resolve(Flags::default(), &env(&[("DATABASE_URL", "mariadb://root@db/x")]));
        assert_eq!(src(&r.mysql), Some(("mariadb://root@db/x", "DATABASE_URL")));
        assert_eq!(r.postgres, None);
        let r = resolve(Flags::default(), &env(&[("DATABASE_URL", "mysql://root@db/x")]));
        assert_eq!(src(&r.mysql), Some(("mysql://root@db/x", "DATABASE_URL")));
        let r = resolve(Flags::default(), &env(&[("DATABASE_URL", "sqlite:///var/lib/cl/run.db")]));
        assert_eq!(r.sqlite, Some((PathBuf::from("/var/lib/cl"), "DATABASE_URL".into())));
        let r = resolve(Flags::default(), &env(&[("DATABASE_URL", "sqlite:run.db")]));
        assert_eq!(r.sqlite, Some((PathBuf::from("."), "DATABASE_URL".into())));
        let r = resolve(Flags::default(), &env(&[("DATABASE_URL", "sqlite:///tmp")]));
        assert_eq!(r.sqlite, Some((PathBuf::from("/tmp"), "DATABASE_URL".into())));
        let r = resolve(Flags::default(), &env(&[("DATABASE_URL", "redis://h")]));
        assert_eq!((&r.postgres, &r.mysql, &r.sqlite), (&None, &None, &None));
        assert!(r.warnings[0].contains("`redis:`"), "{:?}", r.warnings);
        assert!(r.sources().contains("DATABASE_URL ignored"));
    }

    #[test]
    fn a_missing_sqlite_folder_is_refused_naming_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let flags = Flags { sqlite: Some(missing.clone()), ..Flags::default() };
        let e = resolve(flags, &env(&[])).check_sqlite().unwrap_err();
        assert!(e.starts_with(&format!("--sqlite: the SQLite folder {} does not exist", missing.display())), "{e}");
        assert!(!missing.exists(), "it was created");
        let file = dir.path().join("f.db");
        std::fs::write(&file, "").unwrap();
        let e = resolve(Flags { sqlite: Some(file.clone()), ..Flags::default() }, &env(&[])).check_sqlite();
        assert_eq!(e.unwrap_err(), format!("--sqlite: the SQLite folder {} is not a directory", file.display()));
        let url = format!("sqlite://{}/run.db", missing.display());
        let r = resolve(Flags::default(), &|k| (k == "DATABASE_URL").then(|| url.clone()));
        assert!(r.check_sqlite().unwrap_err().starts_with("DATABASE_URL: the SQLite folder"));
        let ok = Flags { sqlite: Some(dir.path().to_path_buf()), ..Flags::default() };
        assert_eq!(resolve(ok, &env(&[])).check_sqlite(), Ok(()));
        assert_eq!(resolve(Flags::default(), &env(&[])).check_sqlite(), Ok(()));
    }

    #[test]
    fn flag_beats_counterlab_variable_beats_conventional_ones() {
        let all: &[(&str, &str)] = &[
            ("COUNTERLAB_MYSQL_URL", "mysql://a@h/x"),
            ("MYSQL_URL", "mysql://b@h/x"),
            ("MARIADB_URL", "mysql://c@h/x"),
            ("COUNTERLAB_REDIS_URL", "redis://a"),
            ("REDIS_URL", "redis://b"),
            ("COUNTERLAB_POSTGRES_URL", "postgres://a@h/x"),
            ("DATABASE_URL", "postgres://b@h/x"),
        ];
        let r = resolve(Flags::default(), &env(&[]));
        assert_eq!(r, Resolved::default());
        let flags = Flags { mysql: Some("mysql://f@h/x".into()), redis: Some("redis://f".into()), ..Flags::default() };
        let r = resolve(flags, &|k| all.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()));
        assert_eq!(src(&r.mysql), Some(("mysql://f@h/x", "--mysql")));
        assert_eq!(src(&r.redis), Some(("redis://f", "--redis")));
        assert_eq!(src(&r.postgres), Some(("postgres://a@h/x", "COUNTERLAB_POSTGRES_URL")));
        let r = resolve(Flags::default(), &|k| all.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()));
        assert_eq!(src(&r.mysql), Some(("mysql://a@h/x", "COUNTERLAB_MYSQL_URL")));
        assert_eq!(src(&r.redis), Some(("redis://a", "COUNTERLAB_REDIS_URL")));
        let conventional = env(&[("MARIADB_URL", "mysql://c@h/x"), ("REDIS_URL", "redis://b"), ("MYSQL_URL", "")]);
        let r = resolve(Flags::default(), &conventional);
        assert_eq!(src(&r.mysql), Some(("mysql://c@h/x", "MARIADB_URL")), "an empty MYSQL_URL is not set");
        assert_eq!(src(&r.redis), Some(("redis://b", "REDIS_URL")));
        // DATABASE_URL never replaces a backend configured otherwise.
        let r = resolve(Flags::default(), &env(&[("MYSQL_URL", "mysql://m@h/x"), ("DATABASE_URL", "mysql://d@h/x")]));
        assert_eq!(src(&r.mysql), Some(("mysql://m@h/x", "MYSQL_URL")));
    }
}
