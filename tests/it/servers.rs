//! Servers on demand: docker-compose.yml against the containers path's specs and
//! counterlab's defaults, `--servers` and `servers = ...` parsed and located, what a
//! plan needs, `containers` without a Docker engine refused at once, and (where an
//! engine answers) a run on throwaway containers that are removed afterwards.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use counterlab::containers::{HEALTH_INTERVAL, HEALTH_RETRIES, HEALTH_TIMEOUT, SPECS, ServersMode, Service, needed};
use counterlab::scenario::{Overrides, parse};
use serde_yaml_ng::Value;

use crate::util;

fn compose() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docker-compose.yml");
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).expect("docker-compose.yml")).expect("valid YAML")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence().map(|s| s.iter().map(|i| i.as_str().expect("a string").to_string()).collect()).unwrap_or_default()
}

fn map(v: &Value) -> BTreeMap<String, String> {
    let entries = v.as_mapping().map(|m| m.iter()).into_iter().flatten();
    entries.map(|(k, v)| (k.as_str().unwrap().to_string(), v.as_str().expect("quoted values").to_string())).collect()
}

/// Compose's duration form for whole seconds (`1s`).
fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

#[test]
fn compose_agrees_with_the_container_specs_and_counterlabs_defaults() {
    let c = compose();
    let services = c["services"].as_mapping().expect("services");
    let mut names: Vec<&str> = services.keys().map(|k| k.as_str().unwrap()).collect();
    names.sort();
    // Beside the servers: counterlab itself and the distributed phases (tests/it/deploy.rs).
    let phases = ["counterlab", "prepare", "agent", "check", "teardown"];
    let mut expected: Vec<&str> = SPECS.iter().map(|s| s.compose_name).chain(phases).collect();
    expected.sort();
    assert_eq!(names, expected);
    for spec in &SPECS {
        let s = &c["services"][spec.compose_name];
        assert_eq!(s["image"].as_str(), Some(spec.image_ref().as_str()), "{}", spec.label);
        // Published on counterlab's default address, so the default URL reaches it.
        assert_eq!(strings(&s["ports"]), [format!("127.0.0.1:{0}:{0}", spec.port)], "{}", spec.label);
        assert!(spec.default_url().contains(&format!("@127.0.0.1:{}", spec.port)) || spec.service == Service::Redis);
        let env: BTreeMap<String, String> = spec.env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(map(&s["environment"]), env, "{}: credentials and database", spec.label);
        assert_eq!(strings(&s["command"]), spec.command, "{}", spec.label);
        let h = &s["healthcheck"];
        let test: Vec<String> = ["CMD"].iter().chain(spec.healthcheck).map(|a| a.to_string()).collect();
        assert_eq!(strings(&h["test"]), test, "{}: healthcheck", spec.label);
        assert_eq!(h["interval"].as_str(), Some(secs(HEALTH_INTERVAL).as_str()), "{}", spec.label);
        assert_eq!(h["timeout"].as_str(), Some(secs(HEALTH_TIMEOUT).as_str()), "{}", spec.label);
        assert_eq!(h["retries"].as_u64(), Some(u64::from(HEALTH_RETRIES)), "{}", spec.label);
    }
    // counterlab's own service waits for every server's health and reaches each by its
    // service name with the spec's credentials.
    let me = &c["services"]["counterlab"];
    assert_eq!(me["build"].as_str(), Some("."));
    let env = map(&me["environment"]);
    for spec in &SPECS {
        assert_eq!(
            me["depends_on"][spec.compose_name]["condition"].as_str(),
            Some("service_healthy"),
            "{}",
            spec.label
        );
        let var = match spec.service {
            Service::Postgres => "COUNTERLAB_POSTGRES_URL",
            Service::Mariadb => "COUNTERLAB_MYSQL_URL",
            Service::Redis => "COUNTERLAB_REDIS_URL",
            Service::Rabbitmq => "COUNTERLAB_AMQP_URL",
        };
        assert_eq!(env.get(var), Some(&spec.url(spec.compose_name, spec.port)), "{var}");
    }
}

#[test]
fn the_dockerfile_builds_with_the_toolchain_the_project_declares() {
    let dockerfile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile")).unwrap();
    let from = dockerfile.lines().find(|l| l.starts_with("FROM rust:")).expect("a rust build stage");
    let tag = from.trim_start_matches("FROM rust:").split(['-', ' ']).next().unwrap();
    let version = |v: &str| v.split('.').map(|p| p.parse::<u32>().unwrap()).collect::<Vec<_>>();
    let declared = env!("CARGO_PKG_RUST_VERSION");
    assert!(version(tag) >= version(declared), "Dockerfile's rust:{tag} is older than rust-version {declared}");
    assert!(dockerfile.contains("cargo build --release --locked"), "{dockerfile}");
}

const SMALL: &str = "[data]\nusers = 10\nnotifications_per_user = 2\n[workload]\nworkers = 1\nops = 10\n[workload.mix]\nmark_read = 1\n";

#[test]
fn the_servers_mode_comes_from_the_flag_then_the_file_then_auto_and_bad_values_are_located() {
    let known = util::known();
    let with = |file: &str, flag: Option<&str>| {
        let o = Overrides { servers: flag.map(str::to_string), ..Overrides::default() };
        parse("inline.toml", &format!("{file}{SMALL}"), "inline", &o, &known, 1)
    };
    assert_eq!(with("", None).unwrap().servers, ServersMode::Auto);
    assert_eq!(with("servers = \"containers\"\n", None).unwrap().servers, ServersMode::Containers);
    assert_eq!(with("servers = \"containers\"\n", Some("local")).unwrap().servers, ServersMode::Local);
    let Err(e) = with("servers = \"docker\"\n", None) else { panic!("servers = \"docker\" accepted") };
    let e = e.to_string();
    assert!(e.contains("inline.toml:1:11: unknown servers mode \"docker\"; valid: local, containers, auto"), "{e}");
    let Err(e) = with("", Some("docker")) else { panic!("--servers docker accepted") };
    let e = e.to_string();
    assert!(e.contains("--servers docker: unknown servers mode; valid: local, containers, auto"), "{e}");
}

#[test]
fn a_plan_needs_the_servers_of_its_backends_and_strategies() {
    let plan = |head: &str| util::plan(&format!("{head}{SMALL}"));
    let opts = util::options(false, None);
    let services = |p| needed(&p, &opts).into_iter().map(|(s, _)| s).collect::<Vec<_>>();
    let all =
        "backends = [\"postgres\", \"mysql\"]\nstrategies = [\"direct-update\", \"lua-script\", \"mq-consumer\"]\n";
    assert_eq!(services(plan(all)), [Service::Postgres, Service::Mariadb, Service::Redis, Service::Rabbitmq]);
    assert_eq!(services(plan("backends = [\"sqlite\"]\nstrategies = [\"direct-update\"]\n")), []);
    // `auto` may use PostgreSQL; a configured URL is marked so (it wins over any mode).
    let auto = needed(&plan("strategies = [\"direct-update\"]\n"), &opts);
    assert_eq!(auto, [(Service::Postgres, true)]);
}

/// `--servers containers` with `DOCKER_HOST` at a closed port of this test's range.
fn containers_run(extra: &[&str]) -> std::process::Output {
    let dir = util::tempdir("servers-no-engine");
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", "scenarios/quickstart.toml", "--ops", "50", "--out", dir.to_str().unwrap()])
        .args(extra)
        .env("DOCKER_HOST", "tcp://127.0.0.1:15401")
        .env_remove("DOCKER_TLS_VERIFY")
        .env_remove("COUNTERLAB_POSTGRES_URL")
        .env_remove("DATABASE_URL")
        .output()
        .expect("spawn counterlab");
    assert!(!dir.join("report.json").exists(), "no report: the run never started");
    o
}

#[test]
fn containers_without_a_docker_engine_exit_2_at_once_naming_where_it_looked() {
    let o = containers_run(&["--servers", "containers"]);
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(2), "{out}");
    if counterlab::containers::CAN_START {
        assert!(out.contains("--servers containers: no Docker engine at tcp://127.0.0.1:15401"), "{out}");
    } else {
        assert!(out.contains("built without the `containers` feature"), "{out}");
    }
    let o = containers_run(&["--servers", "docker"]);
    let out = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("--servers docker: unknown servers mode; valid: local, containers, auto"), "{out}");
}

/// `docker ps -a` ids of containers labelled by `run`.
fn labelled(label: &str) -> Vec<String> {
    let o = Command::new("docker").args(["ps", "-aq", "--filter", &format!("label={label}")]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect()
}

#[test]
fn a_run_on_throwaway_containers_uses_them_and_removes_them() {
    if !util::docker_available("servers::a_run_on_throwaway_containers_uses_them_and_removes_them") {
        return;
    }
    let before = labelled(counterlab::containers::LABEL);
    let dir = util::tempdir("servers-containers");
    let o = Command::new(env!("CARGO_BIN_EXE_counterlab"))
        .args(["run", "scenarios/quickstart.toml", "--servers", "containers", "--backend", "postgres"])
        .args(["--strategy", "conditional-update", "--ops", "200", "--out", dir.to_str().unwrap()])
        .env_remove("COUNTERLAB_POSTGRES_URL")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("servers: PostgreSQL ready (healthcheck passed)"), "{out}");
    assert!(out.contains("servers: removed the PostgreSQL container"), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let url = json["servers"][0]["url"].as_str().unwrap_or_default().to_string();
    assert!(!url.contains(":5432/"), "a container's mapped port, not the local server: {url}");
    let left: Vec<String> =
        labelled(counterlab::containers::LABEL).into_iter().filter(|c| !before.contains(c)).collect();
    assert!(left.is_empty(), "containers outlived their run: {left:?}");
}

/// docs/ci/github-actions.yml, the workflow example: its service containers are the
/// containers' specs (image, credentials, port, health check), its URLs counterlab's for
/// them, and every counterlab command it runs names a subcommand and flags the CLI has.
#[test]
fn the_github_actions_example_agrees_with_the_specs_and_the_cli() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ci/github-actions.yml");
    let wf: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).expect("valid YAML");
    let job = &wf["jobs"]["counterlab"];
    let env = map(&job["env"]);
    for spec in &SPECS {
        let s = &job["services"][spec.compose_name];
        assert_eq!(s["image"].as_str(), Some(spec.image_ref().as_str()), "{}", spec.label);
        let want: BTreeMap<String, String> = spec.env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(map(&s["env"]), want, "{}: credentials and database", spec.label);
        assert_eq!(strings(&s["ports"]), [format!("{0}:{0}", spec.port)], "{}", spec.label);
        let health = format!("--health-cmd \"{}\"", spec.healthcheck.join(" "));
        assert!(s["options"].as_str().unwrap().contains(&health), "{}: {health}", spec.label);
        let var = match spec.service {
            Service::Postgres => "COUNTERLAB_POSTGRES_URL",
            Service::Mariadb => "COUNTERLAB_MYSQL_URL",
            Service::Redis => "COUNTERLAB_REDIS_URL",
            Service::Rabbitmq => "COUNTERLAB_AMQP_URL",
        };
        assert_eq!(env.get(var), Some(&spec.default_url()), "{var}");
    }
    let runs: Vec<&str> = job["steps"].as_sequence().unwrap().iter().filter_map(|s| s["run"].as_str()).collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for run in runs {
        let args: Vec<&str> =
            run.split_once(" -- ").expect("cargo run ... -- <command>").1.split_whitespace().collect();
        let help = Command::new(env!("CARGO_BIN_EXE_counterlab")).args([args[0], "--help"]).output().unwrap();
        assert!(help.status.success(), "{}: no such subcommand", args[0]);
        let help = String::from_utf8(help.stdout).unwrap();
        for flag in args.iter().filter(|a| a.starts_with("--")) {
            assert!(help.contains(&format!("  {flag} ")), "`{}` has no {flag}", args[0]);
        }
        for file in args.iter().filter(|a| a.ends_with(".toml")) {
            assert!(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file).is_file(), "{file}");
        }
    }
}
