//! The distributed phases' deployment, checked offline: deploy/k8s/*.yaml and the compose
//! `agents` profile against the distributed CLI contract (phases, handle, segments, output
//! folder, secrets only from a Secret, bounded Jobs, non-root), and the compose agents'
//! segment claims and prepare's guard run in a real shell with a stand-in `counterlab`.
//! No cluster and no Docker here: scripts/validate-deploy.sh checks the manifests against
//! the Kubernetes schemas; nothing here runs `kubectl` or `docker compose`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use counterlab::scenario::{Overrides, parse};
use serde::Deserialize;
use serde_yaml_ng::Value;

use crate::util;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every document of every deploy/k8s/*.yaml, keyed by `Kind/name`.
fn manifests() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/k8s"))
        .expect("deploy/k8s")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            if v.is_null() {
                continue;
            }
            let key = format!("{}/{}", s(&v["kind"]), s(&v["metadata"]["name"]));
            assert!(out.insert(key.clone(), v).is_none(), "{key} defined twice");
        }
    }
    out
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("a string, found {v:?}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence().expect("a list").iter().map(|i| s(i).to_string()).collect()
}

/// The value after `flag` in an argument list.
fn flag<'a>(args: &'a [String], flag: &str) -> &'a str {
    let i = args.iter().position(|a| a == flag).unwrap_or_else(|| panic!("{flag} missing from {args:?}"));
    &args[i + 1]
}

/// A container's plain `env` values by name (not those from a field or a Secret).
fn env(container: &Value) -> BTreeMap<String, String> {
    let list = container["env"].as_sequence().cloned().unwrap_or_default();
    list.iter().filter_map(|e| Some((s(&e["name"]).to_string(), e["value"].as_str()?.to_string()))).collect()
}

/// What every phase's Job must have: bounded, not retried blindly, non-root, limited,
/// secrets from the Secret only, the shared volume mounted.
fn check_job(name: &str, job: &Value, image: &str) -> Value {
    let spec = &job["spec"];
    assert!(spec["backoffLimit"].as_u64().is_some_and(|b| b <= 2), "{name}: backoffLimit");
    let deadline = spec["activeDeadlineSeconds"].as_u64().unwrap_or_else(|| panic!("{name}: activeDeadlineSeconds"));
    assert!((60..=7200).contains(&deadline), "{name}: activeDeadlineSeconds {deadline}");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"].as_str(), Some("Never"), "{name}");
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true), "{name}");
    assert!(pod["securityContext"]["runAsUser"].as_u64().is_some_and(|u| u > 0), "{name}: runAsUser");
    let containers = pod["containers"].as_sequence().expect("containers");
    assert_eq!(containers.len(), 1, "{name}: one container");
    let c = containers[0].clone();
    assert_eq!(s(&c["image"]), image, "{name}: one image for every phase");
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"].as_bool(), Some(false), "{name}");
    assert_eq!(strings(&c["securityContext"]["capabilities"]["drop"]), ["ALL"], "{name}");
    for part in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(!c["resources"][part][r].is_null(), "{name}: resources.{part}.{r}");
        }
    }
    assert_eq!(s(&c["envFrom"][0]["secretRef"]["name"]), "counterlab-run", "{name}: URLs and the run secret");
    for (k, v) in env(&c) {
        assert!(!v.contains("://") && !k.contains("SECRET"), "{name}: {k} belongs in the Secret");
    }
    let claim = pod["volumes"].as_sequence().unwrap().iter().find(|v| v["name"].as_str() == Some("run")).cloned();
    let claim = claim.unwrap_or_else(|| panic!("{name}: the shared volume"));
    assert_eq!(s(&claim["persistentVolumeClaim"]["claimName"]), "counterlab-run", "{name}");
    c
}

/// The folder the shared volume is mounted at in a container.
fn run_mount(c: &Value) -> String {
    let mounts = c["volumeMounts"].as_sequence().unwrap();
    s(&mounts.iter().find(|m| m["name"].as_str() == Some("run")).expect("run mounted")["mountPath"]).to_string()
}

#[test]
fn the_kubernetes_jobs_run_prepare_an_indexed_load_check_and_teardown_on_one_handle() {
    let m = manifests();
    let job = |phase: &str| m.get(&format!("Job/counterlab-{phase}")).unwrap_or_else(|| panic!("{phase} Job"));
    let image = s(&job("prepare")["spec"]["template"]["spec"]["containers"][0]["image"]).to_string();
    let [prepare, load, check, teardown] =
        ["prepare", "load", "check", "teardown"].map(|p| check_job(p, job(p), &image));
    let args = |c: &Value| strings(&c["args"]);
    for (c, phase) in [(&prepare, "prepare"), (&load, "load"), (&check, "check"), (&teardown, "teardown")] {
        assert_eq!(args(c)[0], phase, "the subcommand");
    }
    // One handle, written where every later phase reads it, on the shared volume.
    let handle = flag(&args(&prepare), "--handle").to_string();
    assert!(handle.starts_with(&format!("{}/", run_mount(&prepare))), "{handle}");
    assert_eq!(env(&load)["COUNTERLAB_HANDLE"], handle);
    assert_eq!(flag(&args(&check), "--handle"), handle);
    assert_eq!(flag(&args(&teardown), "--handle"), handle);
    // The agents write where check reads.
    let out = &env(&load)["COUNTERLAB_OUT"];
    assert!(out.starts_with(&format!("{}/", run_mount(&load))) && run_mount(&load) == run_mount(&check));
    assert_eq!(flag(&args(&check), "--from"), out);
    // Indexed: pod i is segment i+1 of N, every agent at once, never re-run.
    let spec = &job("load")["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    let n = spec["completions"].as_u64().expect("completions");
    assert!(n >= 2, "a split run");
    assert_eq!(spec["parallelism"].as_u64(), Some(n), "every agent runs at once");
    assert_eq!(env(&load)["COUNTERLAB_AGENTS"], n.to_string());
    assert_eq!(spec["backoffLimit"].as_u64(), Some(0), "a retried agent would drive its share twice");
    let index = load["env"].as_sequence().unwrap().iter().find(|e| e["name"].as_str() == Some("JOB_COMPLETION_INDEX"));
    let field = &index.expect("JOB_COMPLETION_INDEX")["valueFrom"]["fieldRef"]["fieldPath"];
    assert_eq!(s(field), "metadata.annotations['batch.kubernetes.io/job-completion-index']");
    // check, applied with the load, waits at least as long as the agents may run, and
    // within its own deadline.
    let wait: u64 = flag(&args(&check), "--wait-agents").parse().expect("seconds");
    assert!(wait >= spec["activeDeadlineSeconds"].as_u64().unwrap(), "--wait-agents {wait}");
    assert!(wait < job("check")["spec"]["activeDeadlineSeconds"].as_u64().unwrap(), "--wait-agents {wait}");
    assert_eq!(job("check")["spec"]["backoffLimit"].as_u64(), Some(0), "a verdict is never re-judged");
}

#[test]
fn the_kubernetes_volume_is_shared_and_the_configmap_holds_a_valid_scenario_and_no_secret() {
    let m = manifests();
    let pvc = &m["PersistentVolumeClaim/counterlab-run"];
    assert_eq!(strings(&pvc["spec"]["accessModes"]), ["ReadWriteMany"], "agents on several nodes");
    let cm = &m["ConfigMap/counterlab-scenario"];
    for (k, v) in cm["data"].as_mapping().unwrap() {
        let v = s(v).to_lowercase();
        assert!(!v.contains("://") && !v.contains("password") && !v.contains("secret"), "{k:?} holds a secret");
    }
    // prepare reads the scenario where the ConfigMap is mounted.
    let pod = &m["Job/counterlab-prepare"]["spec"]["template"]["spec"];
    let mounts = pod["containers"][0]["volumeMounts"].as_sequence().unwrap();
    let volume = pod["volumes"].as_sequence().unwrap().iter().find(|v| !v["configMap"].is_null()).expect("a ConfigMap");
    assert_eq!(s(&volume["configMap"]["name"]), "counterlab-scenario");
    let mount = mounts.iter().find(|x| x["name"] == volume["name"]).expect("mounted");
    let path = &strings(&pod["containers"][0]["args"])[1];
    let key = path.strip_prefix(&format!("{}/", s(&mount["mountPath"]))).expect("under the mount");
    let text = s(&cm["data"][key]);
    let plan = parse(key, text, "distributed", &Overrides::default(), &util::known(), 1);
    let plan = plan.unwrap_or_else(|e| panic!("the ConfigMap's scenario: {e}"));
    assert!(plan.strategies.len() >= 2, "{:?}", plan.strategies);
}

fn compose() -> Value {
    let text = std::fs::read_to_string(root().join("docker-compose.yml")).expect("docker-compose.yml");
    serde_yaml_ng::from_str(&text).expect("valid YAML")
}

/// Compose's escaped `$$` as the shell receives it.
fn shell_of(service: &Value) -> String {
    let entry = strings(&service["entrypoint"]);
    assert_eq!(entry[..2], ["/bin/sh", "-c"]);
    entry[2].replace("$$", "$")
}

#[test]
fn the_compose_agents_profile_runs_the_phases_on_one_volume_with_the_servers_urls() {
    let c = compose();
    let svc = |n: &str| c["services"][n].clone();
    for (name, profile) in [("prepare", "agents"), ("agent", "agents"), ("check", "agents"), ("teardown", "teardown")] {
        assert_eq!(strings(&svc(name)["profiles"]), [profile], "{name}");
        assert_eq!(svc(name)["build"].as_str(), Some("."), "{name}: the repository's image");
        let volumes = strings(&svc(name)["volumes"]);
        assert!(volumes.contains(&"counterlab-run:/run/counterlab".to_string()), "{name}: {volumes:?}");
        // The same servers as `docker compose run counterlab`, reached by service name.
        let e = &svc(name)["environment"];
        for (k, v) in svc("counterlab")["environment"].as_mapping().unwrap() {
            assert_eq!(&e[s(k)], v, "{name}: {}", s(k));
        }
        assert_eq!(s(&e["COUNTERLAB_RUN_SECRET"]), "${COUNTERLAB_RUN_SECRET:-}", "{name}: from the caller, never here");
    }
    assert!(c["volumes"].as_mapping().unwrap().contains_key("counterlab-run"), "a named volume");
    for name in ["agent", "check"] {
        let cond = &svc(name)["depends_on"]["prepare"]["condition"];
        assert_eq!(cond.as_str(), Some("service_completed_successfully"), "{name}");
    }
    let e = &svc("check")["environment"];
    let args = strings(&svc("check")["command"]);
    assert_eq!(args[0], "check");
    assert_eq!(flag(&args, "--handle"), s(&e["COUNTERLAB_HANDLE"]));
    assert_eq!(flag(&args, "--from"), s(&e["COUNTERLAB_OUT"]));
    let wait: u64 = flag(&args, "--wait-agents").parse().expect("bounded seconds");
    assert!((1..=7200).contains(&wait));
    assert!(shell_of(&svc("agent")).contains("counterlab load --handle \"$COUNTERLAB_HANDLE\" --segment \"$k/$n\""));
    assert!(shell_of(&svc("teardown")).contains("counterlab teardown --handle \"$COUNTERLAB_HANDLE\""));
}

/// Makes `bin/` in `dir` hold a stand-in `counterlab` that prints its arguments on one line: a
/// link to `echo`, not a written script (a script written while other tests fork could
/// fail to start with "text file busy").
fn stand_in(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink("/bin/echo", bin.join("counterlab")).unwrap();
}

/// Runs a compose service's shell as its container would, with the run folder in `dir`.
fn shell(script: &str, dir: &Path, agents: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script])
        .env("PATH", format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap_or_default()))
        .env("COUNTERLAB_AGENTS", agents)
        .env("COUNTERLAB_SCENARIO", "scenarios/quickstart.toml")
        .env("COUNTERLAB_HANDLE", dir.join("handle.json"))
        .env("COUNTERLAB_OUT", dir.join("out"))
        .env("COUNTERLAB_CLAIMS", dir.join("claims"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn compose_agents_claim_each_segment_once_and_a_replica_too_many_fails_naming_n() {
    let c = compose();
    let dir = util::tempdir("deploy-claims");
    let dir = dir.as_ref();
    stand_in(dir);
    let prepare = shell_of(&c["services"]["prepare"]);
    let agent = shell_of(&c["services"]["agent"]);
    let o = shell(&agent, dir, "4").output().unwrap();
    assert_eq!(o.status.code(), Some(2), "no claims folder before prepare: {:?}", text(&o));
    assert!(text(&o).1.contains("prepare has not run"), "{:?}", text(&o));
    // A leftover claim from an earlier run is cleared by prepare.
    std::fs::create_dir_all(dir.join("claims/1")).unwrap();
    let o = shell(&prepare, dir, "4").output().unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    let handle = dir.join("handle.json").display().to_string();
    assert_eq!(text(&o).0.trim_end(), format!("prepare scenarios/quickstart.toml --handle {handle}"));
    assert!(!dir.join("claims/1").exists() && dir.join("out").is_dir());
    // Five replicas started at once for four segments.
    let children: Vec<_> = (0..5).map(|_| shell(&agent, dir, "4").spawn().unwrap()).collect();
    let outputs: Vec<Output> = children.into_iter().map(|ch| ch.wait_with_output().unwrap()).collect();
    let mut segments = BTreeSet::new();
    for o in outputs.iter().filter(|o| o.status.success()) {
        let (out, _) = text(o);
        let args: Vec<String> = out.lines().nth(1).unwrap_or_default().split(' ').map(str::to_string).collect();
        assert_eq!(args[0], "load", "{out}");
        assert_eq!(flag(&args, "--handle"), handle);
        assert!(segments.insert(flag(&args, "--segment").to_string()), "segment claimed twice: {out}");
    }
    assert_eq!(segments, BTreeSet::from(["1/4", "2/4", "3/4", "4/4"].map(String::from)));
    let failed: Vec<&Output> = outputs.iter().filter(|o| !o.status.success()).collect();
    assert_eq!(failed.len(), 1, "{:?}", failed.iter().map(|o| text(o)).collect::<Vec<_>>());
    assert_eq!(failed[0].status.code(), Some(1));
    assert!(text(failed[0]).1.contains("all 4 segments are claimed: run --scale agent=4"), "{:?}", text(failed[0]));
    // A bad N is refused before any claim; a prepared run is not prepared over.
    for bad in ["four", "0", ""] {
        let o = shell(&agent, dir, bad).output().unwrap();
        assert_eq!(o.status.code(), Some(2));
        let said = format!("COUNTERLAB_AGENTS must be a positive integer, got '{bad}'");
        assert!(text(&o).1.contains(&said), "{:?}", text(&o));
    }
    std::fs::write(dir.join("handle.json"), "{}").unwrap();
    let o = shell(&prepare, dir, "4").output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).0.is_empty(), "counterlab was not run");
    assert!(text(&o).1.contains("a run is prepared already"), "{:?}", text(&o));
    assert_eq!(std::fs::read_dir(dir.join("claims")).unwrap().count(), 4, "the claims stay");
}
