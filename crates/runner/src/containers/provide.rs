//! The servers a plan needs, provided by the chosen mode before the run: a configured
//! URL or the local default as they are, or a throwaway container (its URL put into the
//! run options), removed after the run, also after Ctrl-C or SIGTERM (the run ends
//! normally and `Provided::remove` runs).

use std::time::Duration;

use counterlab_plan::{Backend, RunPlan, ServersMode};

use super::{Choice, Service, choose, docker_engine, spec, tcp_answers};
use crate::run::RunOptions;
use crate::run::servers::{uses_amqp, uses_redis};

/// The local probe's bound: a server that does not accept within it is not there.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

/// The containers started for a run (none unless a server was chosen to be one).
#[derive(Default)]
pub struct Provided {
    #[cfg(feature = "containers")]
    started: Vec<super::start::Started>,
}

impl Provided {
    /// Whether any container was started.
    pub fn is_empty(&self) -> bool {
        #[cfg(feature = "containers")]
        return self.started.is_empty();
        #[cfg(not(feature = "containers"))]
        true
    }

    /// Removes every container started, logging each; failures are logged, not fatal
    /// (the label names the leftovers).
    pub async fn remove(self, log: &mut dyn FnMut(&str)) {
        #[cfg(feature = "containers")]
        for s in self.started {
            let label = spec(s.service).label;
            match s.remove().await {
                Ok(()) => log(&format!("servers: removed the {label} container")),
                Err(e) => log(&format!(
                    "servers: {e}; remove it with `docker rm -f $(docker ps -aq --filter label={})`",
                    super::LABEL
                )),
            }
        }
        #[cfg(not(feature = "containers"))]
        let _ = log;
    }
}

/// The servers `plan` needs, each with whether its URL is configured.
pub fn needed(plan: &RunPlan, opts: &RunOptions) -> Vec<(Service, bool)> {
    let sql = |b: Backend| plan.backends.contains(&b);
    let mut out = Vec::new();
    if sql(Backend::Postgres) || sql(Backend::Auto) {
        out.push((Service::Postgres, opts.postgres_url.is_some()));
    }
    if sql(Backend::Mysql) {
        out.push((Service::Mariadb, opts.mysql_url.is_some()));
    }
    if plan.strategies.iter().any(|s| uses_redis(plan, opts, s)) {
        out.push((Service::Redis, opts.redis_url.is_some()));
    }
    if plan.strategies.iter().any(|s| uses_amqp(plan, opts, s)) {
        out.push((Service::Rabbitmq, opts.amqp_url.is_some()));
    }
    out
}

/// Whether this build can start containers (the `containers` feature).
pub const CAN_START: bool = cfg!(feature = "containers");

/// Decides, for each server the plan needs, where it comes from (probing the local
/// server and the Docker engine only in `auto`, the engine once), and starts the
/// containers chosen, writing their URLs into `opts`. On an error every container
/// started so far is removed.
pub async fn provide(
    mode: ServersMode,
    plan: &RunPlan,
    opts: &mut RunOptions,
    run: &str,
    log: &mut dyn FnMut(&str),
) -> Result<Provided, String> {
    let mut engine = None;
    let mut wanted = Vec::new();
    for (service, configured) in needed(plan, opts) {
        let s = spec(service);
        let local = mode == ServersMode::Auto && !configured && tcp_answers("127.0.0.1", s.port, PROBE_TIMEOUT);
        let probe_engine = mode == ServersMode::Containers || (mode == ServersMode::Auto && !configured && !local);
        let engine_ok = probe_engine && engine.get_or_insert_with(|| docker_engine(PROBE_TIMEOUT)).answers();
        match choose(mode, configured, local, engine_ok && CAN_START) {
            Choice::Container => wanted.push(service),
            Choice::Configured | Choice::Local if mode == ServersMode::Auto && !configured && !local => {
                let why = match &engine {
                    Some(e) if e.answers() => "this build has no `containers` feature".to_string(),
                    Some(e) => e.describe(),
                    None => "no engine probed".to_string(),
                };
                log(&format!("servers: no {} at 127.0.0.1:{} and no container ({why})", s.label, s.port));
            }
            Choice::Configured | Choice::Local => {}
        }
    }
    if wanted.is_empty() {
        return Ok(Provided::default());
    }
    let engine = engine.unwrap_or_else(|| docker_engine(PROBE_TIMEOUT));
    if !CAN_START {
        return Err("--servers containers: this counterlab was built without the `containers` feature \
                    (cargo build --release --features containers)"
            .into());
    }
    if !engine.answers() {
        return Err(format!(
            "--servers containers: {}; start Docker (or set DOCKER_HOST), or use --servers local",
            engine.describe()
        ));
    }
    start_all(&wanted, opts, run, log).await
}

/// Starts each wanted server in turn, stopping early when the run is cancelled.
#[cfg(feature = "containers")]
async fn start_all(
    wanted: &[Service],
    opts: &mut RunOptions,
    run: &str,
    log: &mut dyn FnMut(&str),
) -> Result<Provided, String> {
    let mut provided = Provided::default();
    for &service in wanted {
        let s = spec(service);
        log(&format!("servers: starting {} ({}) in a container", s.label, s.image_ref()));
        let cancel = opts.cancel.clone();
        let cancelled = async move {
            // Bounded by the run: polls the Ctrl-C flag until it is set.
            while !cancel.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let started = tokio::select! {
            r = super::start::start(s, run) => r,
            () = cancelled => Err(format!("interrupted while starting {}", s.label)),
        };
        match started {
            Ok(c) => {
                log(&format!("servers: {} ready (healthcheck passed) at {}", s.label, redact(&c.url)));
                let url = Some(c.url.clone());
                match service {
                    Service::Postgres => opts.postgres_url = url,
                    Service::Mariadb => opts.mysql_url = url,
                    Service::Redis => opts.redis_url = url,
                    Service::Rabbitmq => opts.amqp_url = url,
                }
                provided.started.push(c);
            }
            Err(e) => {
                provided.remove(log).await;
                return Err(e);
            }
        }
    }
    Ok(provided)
}

#[cfg(not(feature = "containers"))]
async fn start_all(_: &[Service], _: &mut RunOptions, _: &str, _: &mut dyn FnMut(&str)) -> Result<Provided, String> {
    Err("this counterlab was built without the `containers` feature".into())
}

/// A URL without its password, for the log.
#[cfg_attr(not(feature = "containers"), allow(dead_code))]
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_url_never_shows_the_password() {
        assert_eq!(redact("amqp://guest:guest@127.0.0.1:49160/%2f"), "amqp://guest:***@127.0.0.1:49160/%2f");
        assert_eq!(redact("postgres://postgres@127.0.0.1:5432/test"), "postgres://postgres@127.0.0.1:5432/test");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
