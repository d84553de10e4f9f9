//! Each namespace's own least-privilege identity: the PostgreSQL role, MariaDB/MySQL user
//! and Redis ACL user a namespace's operations run as (created with it, dropped with it),
//! and SQLite's authorizer. The servers enforce the boundary; the lexical checks of
//! strategy files only give earlier, friendlier errors.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::NonNull;
use std::time::Duration;

/// Who a namespace's operations (and the check's reads inside it) run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// A role, user or ACL user made for this namespace alone and dropped with it.
    /// `caveat` says what it can still reach beyond the namespace (None: nothing found).
    Own { kind: &'static str, name: String, caveat: Option<String> },
    /// SQLite: every connection of the namespace carries an authorizer (no ATTACH, no
    /// PRAGMA, no extension loading, nothing outside the namespace's file).
    Authorizer,
    /// The configured account itself, because the server would not create one.
    Shared { why: String },
}

impl Identity {
    /// True when the server confines the namespace's operations to the namespace.
    pub fn isolated(&self) -> bool {
        matches!(self, Identity::Own { caveat: None, .. } | Identity::Authorizer)
    }

    /// One line for the report and the log.
    pub fn describe(&self) -> String {
        match self {
            Identity::Own { kind, name, caveat: None } => format!("{kind} {name} (this namespace only)"),
            Identity::Own { kind, name, caveat: Some(c) } => format!("{kind} {name} (NOT isolated: {c})"),
            Identity::Authorizer => "SQLite authorizer (this file only, no ATTACH or PRAGMA)".into(),
            Identity::Shared { why } => format!("the configured account ({why})"),
        }
    }
}

/// A fresh random password (48 hex digits from the OS's generator).
pub fn random_password() -> String {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).expect("the OS random generator answers");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A name for probing whether the configured account can create identities.
pub fn probe_name() -> String {
    format!("cl_probe_{}", &random_password()[..16])
}

/// MySQL 5.7+ allows 32 characters in a user name (MariaDB 80): longer namespace names
/// keep their start and get a hash of the whole name, so they stay unique.
pub fn mysql_user(namespace: &str) -> String {
    if namespace.len() <= 32 {
        return namespace.to_string();
    }
    format!("{}_{:08x}", &namespace[..23], stable_hash(namespace))
}

/// The prefix of every Redis key of namespace `ns`: `cl:<run><space>:`, 6 hex digits of
/// a hash of the run id (the 20 characters after `cl_`) and 10 of the whole name. Short,
/// so that a design's keys stay near their production length: a Redis string of more than
/// 44 bytes takes two allocations instead of one, and with the namespace name itself in
/// every key (`cl:cl_20261206t145301_abcd_lt_rc_parity_get:`) a batched GET cost the
/// server 0.825 us per op against 0.710 (reports/2026-12-06-client-cost, "Short prefixes").
/// The name is in the marker key's value, for `counterlab clean`.
pub fn redis_prefix(ns: &str) -> String {
    let run = run_of(ns).unwrap_or(ns);
    format!("cl:{:06x}{:010x}:", fnv64(run) & 0xff_ffff, fnv64(ns) & 0xff_ffff_ffff)
}

/// The pattern of every Redis key of run `run_id` (`cl:<run>*`).
pub fn redis_run_pattern(run_id: &str) -> String {
    format!("cl:{:06x}*", fnv64(run_id) & 0xff_ffff)
}

/// The run id in a namespace name `cl_<YYYYMMDD>t<HHMMSS>_<salt>_...`.
fn run_of(ns: &str) -> Option<&str> {
    let run = ns.strip_prefix("cl_")?.get(..20)?;
    let tail = ns.as_bytes().get(23);
    (run.as_bytes()[8] == b't' && run.as_bytes()[15] == b'_' && tail.is_none_or(|&b| b == b'_')).then_some(run)
}

fn fnv64(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// FNV-1a of `s`, folded to 32 bits: stable across versions and platforms (unlike std's
/// hasher), for shortening generated names without making them collide.
pub fn stable_hash(s: &str) -> u32 {
    fnv64(s) as u32
}

/// PostgreSQL: the role, its pinned search_path and the schema it owns.
pub fn pg_create(ns: &str, password: &str, conn_limit: u32) -> String {
    format!(
        "CREATE ROLE \"{ns}\" LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT \
         NOREPLICATION NOBYPASSRLS CONNECTION LIMIT {conn_limit};\n\
         ALTER ROLE \"{ns}\" SET search_path = \"{ns}\";\n\
         CREATE SCHEMA \"{ns}\" AUTHORIZATION \"{ns}\";"
    )
}

/// What the server lets one statement of a namespace's identity spend, set on the role or
/// user when it is created (so it holds whatever the client does): the op timeout for
/// its time and its lock waits, and on PostgreSQL a temp-file and a sort-memory cap. The
/// tool's own long statements (seed, indexes, the check) lift the time bound to
/// `PHASE_STATEMENT` for their transaction or session only; a strategy file cannot (it
/// has no SET).
pub const TEMP_FILE_LIMIT: &str = "2GB";
pub const WORK_MEM: &str = "64MB";
/// The bound on one statement of the tool's own phases (seed, indexes, the check).
pub const PHASE_STATEMENT: Duration = Duration::from_secs(600);

/// PostgreSQL: the role's bounds (see `TEMP_FILE_LIMIT`). `superuser`: the configured
/// account may set `temp_file_limit` (a superuser-only setting the role cannot change);
/// `check_interval`: the server has `client_connection_check_interval` (14+), so a query
/// whose client went away ends within 250 ms instead of running on.
pub fn pg_bounds(ns: &str, statement: Duration, superuser: bool, check_interval: bool) -> String {
    let ms = statement.as_millis().max(1);
    let mut out = format!(
        "ALTER ROLE \"{ns}\" SET statement_timeout = '{ms}ms';\n\
         ALTER ROLE \"{ns}\" SET lock_timeout = '{ms}ms';\n\
         ALTER ROLE \"{ns}\" SET idle_in_transaction_session_timeout = '{}ms';\n\
         ALTER ROLE \"{ns}\" SET work_mem = '{WORK_MEM}';",
        ms + 1000
    );
    if superuser {
        out += &format!("\nALTER ROLE \"{ns}\" SET temp_file_limit = '{TEMP_FILE_LIMIT}';");
    }
    if check_interval {
        out += &format!("\nALTER ROLE \"{ns}\" SET client_connection_check_interval = '250ms';");
    }
    out
}

/// PostgreSQL: ends every session of the role (a stuck query cannot block the DROP).
pub const PG_TERMINATE: &str =
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1 AND pid <> pg_backend_pid()";

/// PostgreSQL: a statement that lifts the time bound for the tool's own transaction.
pub fn pg_phase_local() -> String {
    format!("SET LOCAL statement_timeout = '{}s'", PHASE_STATEMENT.as_secs())
}

/// PostgreSQL: the schema's marker (see `leftover`), so `counterlab clean` can find it.
pub fn pg_mark(ns: &str, marker: &str) -> String {
    format!("COMMENT ON SCHEMA \"{ns}\" IS '{marker}';")
}

/// PostgreSQL: what `role` can reach beyond its schema through grants to PUBLIC or
/// settings (the server's defaults give it nothing). Returns at most a few names.
pub const PG_AUDIT: &str = "SELECT concat_ws('; ',
  (SELECT 'CREATE on schemas ' || string_agg(nspname, ', ') FROM pg_namespace
    WHERE nspname <> $1 AND nspname NOT LIKE 'pg_temp%' AND nspname NOT LIKE 'pg_toast_temp%'
      AND has_schema_privilege($1, oid, 'CREATE')),
  (SELECT 'rights on tables ' || string_agg(t, ', ') FROM (SELECT c.oid::regclass::text AS t
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname NOT IN ($1, 'pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_t%'
      AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
      AND has_table_privilege($1, c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE') LIMIT 5) x),
  (SELECT 'lo_compat_privileges is on (every large object is readable and writable)'
    WHERE current_setting('lo_compat_privileges') = 'on'),
  (SELECT 'member of ' || string_agg(rolname, ', ') FROM pg_roles
    WHERE rolname <> $1 AND pg_has_role($1, oid, 'USAGE')))";

/// PostgreSQL: removes the role with everything it owns (its schema, large objects).
pub fn pg_drop(ns: &str) -> String {
    format!(
        "SET LOCAL lock_timeout = '10s';\nDROP SCHEMA IF EXISTS \"{ns}\" CASCADE;\nDROP OWNED BY \"{ns}\";\nDROP ROLE \"{ns}\";"
    )
}

/// PostgreSQL `--keep`: the data stays, owned by the role, which can no longer log in.
/// (Handing it to the configured account would make a strategy's SECURITY DEFINER
/// function or view run with that account's rights.) The marker becomes a note, so
/// `counterlab clean` leaves a kept namespace alone.
pub fn pg_keep(ns: &str) -> String {
    format!(
        "ALTER ROLE \"{ns}\" NOLOGIN PASSWORD NULL;\n\
         COMMENT ON SCHEMA \"{ns}\" IS 'kept by counterlab --keep: DROP SCHEMA \"{ns}\" CASCADE; DROP ROLE \"{ns}\"';"
    )
}

/// MariaDB/MySQL: the user and its rights on the namespace's database alone (no FILE,
/// PROCESS, SUPER or any global right). `statement`: MariaDB's per-user
/// `MAX_STATEMENT_TIME` (None on MySQL, which has no such limit).
pub fn mysql_create(ns: &str, password: &str, conn_limit: u32, statement: Option<Duration>) -> Vec<String> {
    let user = mysql_user(ns);
    let time = statement.map_or(String::new(), |d| format!(" MAX_STATEMENT_TIME {:.3}", d.as_secs_f64()));
    vec![
        format!("CREATE USER '{user}'@'%' IDENTIFIED BY '{password}' WITH MAX_USER_CONNECTIONS {conn_limit}{time}"),
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, CREATE TEMPORARY TABLES, \
             LOCK TABLES, CREATE VIEW, SHOW VIEW, TRIGGER, REFERENCES ON `{}`.* TO '{user}'@'%'",
            // In a GRANT's database name `_` is a wildcard: escaped, it names this one.
            ns.replace('_', "\\_")
        ),
    ]
}

/// MariaDB: the session statements that lift the user's time bound for the tool's own
/// long statements, and put it back.
pub fn mysql_phase(statement: Duration) -> (String, String) {
    (
        format!("SET SESSION max_statement_time = {}", PHASE_STATEMENT.as_secs()),
        format!("SET SESSION max_statement_time = {:.3}", statement.as_secs_f64()),
    )
}

/// MariaDB/MySQL: the ids of the user's sessions (each then ended with `KILL CONNECTION`).
pub const MYSQL_SESSIONS: &str = "SELECT id FROM information_schema.processlist WHERE user = ?";

pub fn mysql_drop_user(ns: &str) -> String {
    format!("DROP USER IF EXISTS '{}'@'%'", mysql_user(ns))
}

/// Redis: an ACL user that reaches only its namespace's keys (`redis_prefix`), with data commands,
/// MULTI/EXEC and scripts, but no admin, dangerous, keyspace-wide or pub/sub command.
/// Redis applies the same rules to commands a script calls. The first list is one
/// `ACL SETUSER`; each rule of the second is sent on its own, and one naming a command
/// this Redis version does not have is skipped (an absent command cannot be called). On
/// a cluster the user may also read the topology (`CLUSTER SLOTS`, `SHARDS`, `NODES`,
/// `MYID`), which a cluster client needs to route.
pub fn redis_acl_rules(ns: &str, password: &str, select_db: bool, cluster: bool) -> (Vec<String>, Vec<String>) {
    let base = format!(
        "reset on >{password} ~{}* resetchannels -@all +@read +@write +@transaction \
         -@dangerous -@admin -@pubsub -@blocking",
        redis_prefix(ns)
    );
    // @write also holds keyless commands that reach the whole server (FUNCTION FLUSH,
    // SWAPDB) or move keys to another database (MOVE, COPY ... DB): all taken away.
    let mut more = "-function -move -copy -swapdb -migrate -restore -pfdebug -pfselftest \
                    -scan -randomkey -dbsize -keys -sort -sort_ro -lolwut -object -memory -touch \
                    +eval +evalsha +eval_ro +evalsha_ro +script|load +script|exists +ping +echo +client|id"
        .to_string();
    if select_db {
        more += " +select";
    }
    if cluster {
        more += " +cluster|slots +cluster|shards +cluster|nodes +cluster|myid +readonly +readwrite";
    }
    (base.split_whitespace().map(String::from).collect(), more.split_whitespace().map(String::from).collect())
}

/// SQLite: installs the namespace's authorizer and defensive mode on a connection.
///
/// # Safety
/// `db` must be an open connection handle that no other thread uses during the call
/// (sqlx's `LockedSqliteHandle` guarantees both).
pub unsafe fn install_authorizer(db: NonNull<libsqlite3_sys::sqlite3>) -> Result<(), String> {
    use libsqlite3_sys as ffi;
    let db = db.as_ptr();
    // SAFETY: `db` is open and ours for the call; the callback is a plain function with
    // no user data, valid for the program's life.
    let rc = unsafe { ffi::sqlite3_set_authorizer(db, Some(authorize), std::ptr::null_mut()) };
    if rc != ffi::SQLITE_OK {
        return Err(format!("sqlite3_set_authorizer returned {rc}"));
    }
    let mut on: c_int = 0;
    // SAFETY: SQLITE_DBCONFIG_DEFENSIVE takes (int, int*), as passed.
    let rc = unsafe { ffi::sqlite3_db_config(db, ffi::SQLITE_DBCONFIG_DEFENSIVE, 1 as c_int, &mut on as *mut c_int) };
    if rc != ffi::SQLITE_OK || on != 1 {
        return Err(format!("SQLITE_DBCONFIG_DEFENSIVE returned {rc} (on = {on})"));
    }
    Ok(())
}

/// SQLite: the progress handler's state for one connection, interrupting a statement
/// that has run longer than the namespace's bound (`limit`, ms; an SQLite statement has
/// no server to end it: a recursive CTE would run forever). A statement run is told
/// apart from the next run of the same prepared statement by its run count.
pub struct StatementWatch {
    db: usize,
    limit: std::sync::Arc<std::sync::atomic::AtomicU64>,
    run: Option<(usize, c_int)>,
    since: std::time::Instant,
}

impl StatementWatch {
    /// The instructions between two calls of the handler (a few ms of work).
    pub const EVERY: i32 = 100_000;

    /// # Safety
    /// `db` must be the connection the handler is installed on (the handler runs on its
    /// thread, inside its `sqlite3_step`, and dies with it).
    pub unsafe fn new(
        db: NonNull<libsqlite3_sys::sqlite3>,
        limit: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        StatementWatch { db: db.as_ptr() as usize, limit, run: None, since: std::time::Instant::now() }
    }

    /// The handler: false (interrupt) once the busy statement's run has lasted past the limit.
    pub fn tick(&mut self) -> bool {
        use libsqlite3_sys as ffi;
        let db = self.db as *mut ffi::sqlite3;
        // SAFETY: `db` is open (see `new`); reading the statement list and its counters
        // does not modify the connection.
        let run = unsafe {
            let mut stmt = ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
            while !stmt.is_null() && ffi::sqlite3_stmt_busy(stmt) == 0 {
                stmt = ffi::sqlite3_next_stmt(db, stmt);
            }
            (!stmt.is_null()).then(|| (stmt as usize, ffi::sqlite3_stmt_status(stmt, ffi::SQLITE_STMTSTATUS_RUN, 0)))
        };
        if run.is_none() || run != self.run {
            (self.run, self.since) = (run, std::time::Instant::now());
            return true;
        }
        let limit = self.limit.load(std::sync::atomic::Ordering::Relaxed);
        self.since.elapsed() < Duration::from_millis(limit)
    }
}

unsafe extern "C" fn authorize(
    _: *mut c_void,
    action: c_int,
    a: *const c_char,
    b: *const c_char,
    db: *const c_char,
    _trigger: *const c_char,
) -> c_int {
    // SAFETY: SQLite passes NULL or a NUL-terminated string valid for the call.
    let s = |p: *const c_char| if p.is_null() { "" } else { unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("?") };
    authorize_action(action, s(a), s(b), s(db))
}

/// The authorizer's rule: statements on the namespace's own file (`main`, and `temp`)
/// only; no ATTACH/DETACH (other files), no PRAGMA (file settings, `writable_schema`),
/// no virtual tables, no extension loading; any action not listed is denied.
pub fn authorize_action(action: c_int, a: &str, b: &str, db: &str) -> c_int {
    use libsqlite3_sys as ffi;
    let own_db = matches!(db, "" | "main" | "temp");
    let allowed = match action {
        ffi::SQLITE_SELECT | ffi::SQLITE_TRANSACTION | ffi::SQLITE_SAVEPOINT | ffi::SQLITE_RECURSIVE => true,
        ffi::SQLITE_FUNCTION => !matches!(b.to_ascii_lowercase().as_str(), "load_extension" | "fts3_tokenizer"),
        ffi::SQLITE_READ | ffi::SQLITE_INSERT | ffi::SQLITE_UPDATE | ffi::SQLITE_DELETE => own_db,
        ffi::SQLITE_CREATE_INDEX
        | ffi::SQLITE_CREATE_TABLE
        | ffi::SQLITE_CREATE_TEMP_INDEX
        | ffi::SQLITE_CREATE_TEMP_TABLE
        | ffi::SQLITE_CREATE_TEMP_TRIGGER
        | ffi::SQLITE_CREATE_TEMP_VIEW
        | ffi::SQLITE_CREATE_TRIGGER
        | ffi::SQLITE_CREATE_VIEW
        | ffi::SQLITE_DROP_INDEX
        | ffi::SQLITE_DROP_TABLE
        | ffi::SQLITE_DROP_TEMP_INDEX
        | ffi::SQLITE_DROP_TEMP_TABLE
        | ffi::SQLITE_DROP_TEMP_TRIGGER
        | ffi::SQLITE_DROP_TEMP_VIEW
        | ffi::SQLITE_DROP_TRIGGER
        | ffi::SQLITE_DROP_VIEW
        | ffi::SQLITE_ALTER_TABLE
        | ffi::SQLITE_REINDEX
        | ffi::SQLITE_ANALYZE => own_db && !a.eq_ignore_ascii_case("sqlite_master"),
        _ => false,
    };
    if allowed { ffi::SQLITE_OK } else { ffi::SQLITE_DENY }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libsqlite3_sys as ffi;

    #[test]
    fn the_authorizer_allows_the_namespace_and_nothing_around_it() {
        assert_eq!(authorize_action(ffi::SQLITE_INSERT, "notifications", "", "main"), ffi::SQLITE_OK);
        assert_eq!(authorize_action(ffi::SQLITE_READ, "t", "c", "other"), ffi::SQLITE_DENY);
        assert_eq!(authorize_action(ffi::SQLITE_ATTACH, "/tmp/x", "", ""), ffi::SQLITE_DENY);
        assert_eq!(authorize_action(ffi::SQLITE_PRAGMA, "writable_schema", "1", ""), ffi::SQLITE_DENY);
        assert_eq!(authorize_action(ffi::SQLITE_FUNCTION, "", "load_extension", ""), ffi::SQLITE_DENY);
        assert_eq!(authorize_action(ffi::SQLITE_FUNCTION, "", "count", ""), ffi::SQLITE_OK);
        assert_eq!(authorize_action(ffi::SQLITE_CREATE_VTABLE, "v", "fts5", "main"), ffi::SQLITE_DENY);
        assert_eq!(authorize_action(9999, "", "", ""), ffi::SQLITE_DENY);
    }

    #[test]
    fn long_mysql_user_names_stay_unique_and_short() {
        let a = mysql_user("cl_20261201t120000_ab12_mysql_rc_conditional_update");
        let b = mysql_user("cl_20261201t120000_ab12_mysql_rc_conditional_updatf");
        assert!(a.len() <= 32 && b.len() <= 32 && a != b, "{a} {b}");
        assert_eq!(mysql_user("cl_short"), "cl_short");
        assert_eq!(random_password().len(), 48);
        assert_ne!(random_password(), random_password());
    }

    #[test]
    fn redis_prefixes_are_short_per_namespace_and_share_their_run() {
        let run = "20261201t120000_ab12";
        let a = redis_prefix(&format!("cl_{run}_lt_rc_conditional_update"));
        let b = redis_prefix(&format!("cl_{run}_lt_rc_conditional_updatf"));
        let c = redis_prefix("cl_20261201t120000_ab13_lt_rc_conditional_update");
        assert_eq!((a.len(), a.matches(':').count()), (20, 2), "{a}");
        assert!(a.bytes().skip(3).take(16).all(|b| b.is_ascii_hexdigit()), "{a}: no glob character");
        assert_ne!(a, b);
        assert_eq!(a[..9], b[..9], "one run, one start");
        assert_ne!(a[..9], c[..9], "another run");
        let pattern = redis_run_pattern(run);
        assert!(a.starts_with(pattern.trim_end_matches('*')) && !c.starts_with(pattern.trim_end_matches('*')));
        assert_eq!(redis_prefix("bench"), redis_prefix("bench"), "any name: stable");
        assert_ne!(redis_prefix(&format!("cl_{run}")), redis_prefix(&format!("cl_{run}x")), "the run's end is checked");
    }
}
