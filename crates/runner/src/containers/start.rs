//! Starting one server from its `Spec` with testcontainers (image, tag, environment,
//! command and the same healthcheck as docker-compose.yml, waited for), and removing it.

use std::time::Duration;

use testcontainers::core::{Healthcheck, IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::{HEALTH_INTERVAL, HEALTH_RETRIES, HEALTH_TIMEOUT, LABEL, Service, Spec};

/// How long a server may take to become healthy once its image is there.
const STARTUP: Duration = Duration::from_secs(300);

/// A running server container and counterlab's URL for it.
pub struct Started {
    pub service: Service,
    pub url: String,
    container: ContainerAsync<GenericImage>,
}

impl Started {
    /// Stops and removes the container (and its anonymous volumes).
    pub async fn remove(self) -> Result<(), String> {
        let id = self.container.id().to_string();
        self.container.rm().await.map_err(|e| format!("cannot remove container {id}: {e}"))
    }
}

/// Starts `spec`'s server, labelled with `run`, and waits until its healthcheck passes.
pub async fn start(spec: &Spec, run: &str) -> Result<Started, String> {
    let failed = |what: &str, e: testcontainers::TestcontainersError| {
        format!("{}: cannot {what} a {} container: {e}", spec.label, spec.image_ref())
    };
    let health = Healthcheck::cmd(spec.healthcheck.iter().copied())
        .with_interval(HEALTH_INTERVAL)
        .with_timeout(HEALTH_TIMEOUT)
        .with_retries(HEALTH_RETRIES);
    let mut request = GenericImage::new(spec.image, spec.tag)
        .with_exposed_port(spec.port.tcp())
        .with_wait_for(WaitFor::healthcheck())
        .with_health_check(health)
        .with_label(LABEL, run)
        .with_startup_timeout(STARTUP);
    for (k, v) in spec.env {
        request = request.with_env_var(*k, *v);
    }
    if !spec.command.is_empty() {
        request = request.with_cmd(spec.command.iter().copied());
    }
    let container = request.start().await.map_err(|e| failed("start", e))?;
    let port = container.get_host_port_ipv4(spec.port).await.map_err(|e| failed("map the port of", e))?;
    let host = container.get_host().await.map_err(|e| failed("find the host of", e))?.to_string();
    // The port is published on IPv4: `localhost` could resolve to ::1 first.
    let host = if host == "localhost" { "127.0.0.1".to_string() } else { host };
    Ok(Started { service: spec.service, url: spec.url(&host, port), container })
}
