//! Throwaway servers: the one list of images, versions, credentials, ports and
//! healthchecks that docker-compose.yml and `--servers containers` share (a test checks
//! the compose file against it), and the per-server `auto` decision.

pub(crate) mod probe;
mod provide;
#[cfg(feature = "containers")]
mod start;

use std::time::Duration;

pub use counterlab_plan::ServersMode;
pub use probe::{DockerEngine, docker_engine, tcp_answers};
pub use provide::{CAN_START, PROBE_TIMEOUT, Provided, needed, provide};
#[cfg(feature = "containers")]
pub use start::{Started, start};

/// The label every container counterlab starts carries (value: the run's id, `tests`
/// for the test suite's), so containers a run aborted by a second Ctrl-C left behind
/// are found: `docker ps -a --filter label=org.counterlab.run`.
pub const LABEL: &str = "org.counterlab.run";

/// The servers counterlab runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    Postgres,
    Mariadb,
    Redis,
    Rabbitmq,
}

/// How often and how long a server's healthcheck runs (compose and containers alike).
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(1);
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
pub const HEALTH_RETRIES: u32 = 90;

/// One server as a container: everything docker-compose.yml and the containers path say
/// about it.
#[derive(Debug)]
pub struct Spec {
    pub service: Service,
    /// The server's name in messages (`SKIPPED ...: no PostgreSQL`).
    pub label: &'static str,
    /// The docker-compose.yml service name.
    pub compose_name: &'static str,
    pub image: &'static str,
    /// The version tested here (CI runs PostgreSQL 15, MariaDB 10.11, Redis 7.0, RabbitMQ 3.10).
    pub tag: &'static str,
    /// The server's port inside the container, and counterlab's default port on the host.
    pub port: u16,
    pub env: &'static [(&'static str, &'static str)],
    /// Arguments after the image's entrypoint (empty: the image's own command).
    pub command: &'static [&'static str],
    /// The healthcheck command (Docker's `CMD` form, without the `CMD`), run inside the
    /// container: it answers only once the server accepts TCP clients with counterlab's
    /// credentials (an image's init phase listens on its socket only).
    pub healthcheck: &'static [&'static str],
    /// counterlab's URL for the server, `{host}` and `{port}` filled in.
    url_template: &'static str,
}

impl Spec {
    /// counterlab's URL for this server at `host:port` (credentials as the image sets them).
    pub fn url(&self, host: &str, port: u16) -> String {
        self.url_template.replace("{host}", host).replace("{port}", &port.to_string())
    }

    /// The URL counterlab uses when none is configured: the server on its port on 127.0.0.1.
    pub fn default_url(&self) -> String {
        self.url("127.0.0.1", self.port)
    }

    /// The image reference, `name:tag`.
    pub fn image_ref(&self) -> String {
        format!("{}:{}", self.image, self.tag)
    }
}

/// Every server, in the order a run starts them.
pub const SPECS: [Spec; 4] = [
    Spec {
        service: Service::Postgres,
        label: "PostgreSQL",
        compose_name: "postgres",
        image: "postgres",
        tag: "15",
        port: 5432,
        env: &[("POSTGRES_DB", "test"), ("POSTGRES_HOST_AUTH_METHOD", "trust")],
        command: &["postgres", "-c", "max_connections=200"],
        healthcheck: &["pg_isready", "-h", "127.0.0.1", "-U", "postgres", "-d", "test"],
        url_template: "postgres://postgres@{host}:{port}/test",
    },
    Spec {
        service: Service::Mariadb,
        label: "MariaDB",
        compose_name: "mariadb",
        image: "mariadb",
        tag: "10.11",
        port: 3306,
        env: &[("MARIADB_DATABASE", "test"), ("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1")],
        command: &[],
        healthcheck: &["mariadb-admin", "ping", "-h", "127.0.0.1", "-u", "root"],
        url_template: "mysql://root@{host}:{port}/test",
    },
    Spec {
        service: Service::Redis,
        label: "Redis",
        compose_name: "redis",
        image: "redis",
        tag: "7.0",
        port: 6379,
        env: &[],
        command: &["redis-server", "--save", "", "--appendonly", "no"],
        healthcheck: &["redis-cli", "-h", "127.0.0.1", "ping"],
        url_template: "redis://{host}:{port}",
    },
    Spec {
        service: Service::Rabbitmq,
        label: "RabbitMQ",
        compose_name: "rabbitmq",
        image: "rabbitmq",
        tag: "3.10",
        port: 5672,
        env: &[],
        command: &[],
        healthcheck: &["rabbitmq-diagnostics", "-q", "check_port_connectivity"],
        url_template: "amqp://guest:guest@{host}:{port}/%2f",
    },
];

/// The spec of one server.
pub fn spec(service: Service) -> &'static Spec {
    SPECS.iter().find(|s| s.service == service).expect("every service has a spec")
}

/// Where one server of a run comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// A URL given by a flag or variable: used as it is (it must answer).
    Configured,
    /// The local default address, as without `--servers` (SQL `auto` still falls back
    /// to SQLite, Redis and broker strategies are skipped when it does not answer).
    Local,
    /// A throwaway container, removed after the run.
    Container,
}

/// The decision for one server: a configured URL always wins; `local` never starts a
/// container; `containers` always does; `auto` starts one only when nothing answers
/// locally and a Docker engine does.
pub fn choose(mode: ServersMode, configured: bool, local_answers: bool, engine_answers: bool) -> Choice {
    match mode {
        _ if configured => Choice::Configured,
        ServersMode::Local => Choice::Local,
        ServersMode::Containers => Choice::Container,
        ServersMode::Auto if !local_answers && engine_answers => Choice::Container,
        ServersMode::Auto => Choice::Local,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use counterlab_strategies::{DEFAULT_AMQP_URL, DEFAULT_MYSQL_URL, DEFAULT_POSTGRES_URL, DEFAULT_REDIS_URL};

    #[test]
    fn the_specs_default_urls_are_counterlabs_defaults() {
        assert_eq!(spec(Service::Postgres).default_url(), DEFAULT_POSTGRES_URL);
        assert_eq!(spec(Service::Mariadb).default_url(), DEFAULT_MYSQL_URL);
        assert_eq!(spec(Service::Redis).default_url(), DEFAULT_REDIS_URL);
        assert_eq!(spec(Service::Rabbitmq).default_url(), DEFAULT_AMQP_URL);
        assert_eq!(spec(Service::Postgres).url("docker.host", 49153), "postgres://postgres@docker.host:49153/test");
    }

    #[test]
    fn the_specs_pin_the_versions_tested_here() {
        let refs: Vec<String> = SPECS.iter().map(Spec::image_ref).collect();
        assert_eq!(refs, ["postgres:15", "mariadb:10.11", "redis:7.0", "rabbitmq:3.10"]);
        for s in &SPECS {
            assert_eq!(spec(s.service).compose_name, s.compose_name);
            assert!(!s.healthcheck.is_empty(), "{} has no healthcheck", s.label);
            // Each healthcheck goes over TCP (127.0.0.1), not the init phase's socket.
            let tcp = s.healthcheck.contains(&"127.0.0.1") || s.service == Service::Rabbitmq;
            assert!(tcp, "{}: {:?}", s.label, s.healthcheck);
        }
    }

    #[test]
    fn a_configured_url_always_wins() {
        for mode in ServersMode::ALL {
            for (local, engine) in [(false, false), (true, true), (false, true)] {
                assert_eq!(choose(mode, true, local, engine), Choice::Configured, "{mode} {local} {engine}");
            }
        }
    }

    #[test]
    fn local_never_starts_a_container_and_containers_always_does() {
        for (local, engine) in [(false, false), (true, true), (false, true), (true, false)] {
            assert_eq!(choose(ServersMode::Local, false, local, engine), Choice::Local);
            assert_eq!(choose(ServersMode::Containers, false, local, engine), Choice::Container);
        }
    }

    #[test]
    fn auto_prefers_the_local_server_then_a_container_then_the_fallback() {
        assert_eq!(choose(ServersMode::Auto, false, true, true), Choice::Local);
        assert_eq!(choose(ServersMode::Auto, false, true, false), Choice::Local);
        assert_eq!(choose(ServersMode::Auto, false, false, true), Choice::Container);
        // Nothing answers and no engine: the run's own fallback (SQLite, or skipped rows).
        assert_eq!(choose(ServersMode::Auto, false, false, false), Choice::Local);
    }
}
