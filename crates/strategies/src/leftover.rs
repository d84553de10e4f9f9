//! Markers that register each namespace where it lives (a PostgreSQL schema comment, a
//! `cl_meta` table in a MariaDB database, a `cl:<tag>:meta` Redis key), and finding
//! and removing what a killed run left behind. Nothing without a marker is ever touched.

use std::time::{SystemTime, UNIX_EPOCH};

/// How long a Redis namespace's marker key lives (a killed run's marker goes by itself).
pub const REDIS_MARKER_TTL_S: u64 = 7 * 24 * 3600;

/// What a marker says: the process that made the namespace, where and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    pub host: String,
    pub pid: u32,
    pub started_unix: u64,
}

impl Marker {
    /// This process, now.
    pub fn now() -> Marker {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let host: String = host.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.')).collect();
        let started_unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Marker { host, pid: std::process::id(), started_unix }
    }

    /// `counterlab host=<h> pid=<p> started=<unix s>`: plain ASCII, safe inside SQL quotes.
    pub fn text(&self) -> String {
        format!("counterlab host={} pid={} started={}", self.host, self.pid, self.started_unix)
    }

    /// Reads a marker; None for anything that is not one (and is then left alone).
    pub fn parse(s: &str) -> Option<Marker> {
        let rest = s.strip_prefix("counterlab ")?;
        let field = |k: &str| rest.split(' ').find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='));
        Some(Marker {
            host: field("host")?.to_string(),
            pid: field("pid")?.parse().ok()?,
            started_unix: field("started")?.parse().ok()?,
        })
    }

    /// True when the process that made it still runs on this host.
    pub fn alive_here(&self) -> bool {
        self.host == Marker::now().host && std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
    }

    pub fn age_s(&self) -> u64 {
        Marker::now().started_unix.saturating_sub(self.started_unix)
    }
}

/// A namespace a run left behind, on one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    /// `postgres`, `mysql` or `redis`.
    pub backend: &'static str,
    pub namespace: String,
    pub marker: Marker,
    /// What removing it drops, in words.
    pub what: String,
    /// Live connections of its identity on the server: a run still going, wherever it is.
    pub sessions: u64,
}

/// Namespace names are generated: `cl_` then `[a-z0-9_]`, at most 63 bytes.
pub fn is_namespace_name(s: &str) -> bool {
    s.starts_with("cl_")
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_nothing_else_parses() {
        let m = Marker { host: "h-1".into(), pid: 42, started_unix: 1_700_000_000 };
        assert_eq!(Marker::parse(&m.text()), Some(m));
        assert_eq!(Marker::parse("a comment someone wrote"), None);
        assert_eq!(Marker::parse("counterlab host=x pid=notanumber started=1"), None);
        assert!(Marker::now().alive_here());
        assert!(is_namespace_name("cl_20261201t120000_ab12_pg_rc_x") && !is_namespace_name("cl_X; DROP"));
    }
}
