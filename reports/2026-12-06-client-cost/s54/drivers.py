#!/usr/bin/env python3
"""The client stack without the harness: pgbench, a bare sqlx client, a bare
tokio-postgres client and counterlab on writable-cte's one statement, no TLS on any side,
alternating rounds. The bare clients are `pgexp` (its source beside this file; built
outside the workspace). CPU per op is the load's alone for every tool: pgexp reads it over
a window that opens after its clients connect, counterlab reports `client_cpu_us_per_op`,
and pgbench's is its run's minus a run of one transaction per client. Before each run of pgbench or a bare client the shared schema's
read rows are set unread again and the table vacuumed and CHECKPOINTed, so every run
starts from the same data; counterlab seeds and settles its own.

Usage: drivers.py OUT ROUNDS SECS CLIENTS   (PGEXP=path to the built `groups` binary;
DRIVERS_SSLMODE=require: TLS on every side, and tokio-postgres, built here without TLS,
left out)
"""
import json, os, subprocess, sys, tempfile

SSLMODE = os.environ.get("DRIVERS_SSLMODE", "disable")
BASE = f"postgres://postgres@127.0.0.1:5432/test?sslmode={SSLMODE}"
CL = os.environ.get("COUNTERLAB_BIN", "./target/release/counterlab")
PGEXP = os.environ["PGEXP"]
OUT, ROUNDS, SECS, CLIENTS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(OUT, exist_ok=True)
TLS = "" if SSLMODE == "disable" else "-tls"
LOG = open(os.path.join(OUT, f"drivers-c{CLIENTS}{TLS}.log"), "a")


def log(s):
    print(s, flush=True)
    LOG.write(s + "\n")
    LOG.flush()


def sh(args, env=None):
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode:
        raise SystemExit(f"{args}: {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    return r


def psql(sql):
    return sh(["psql", BASE, "-Atqc", sql]).stdout.strip()


def timed(args, env=None):
    with tempfile.NamedTemporaryFile("r") as t:
        r = sh(["/usr/bin/time", "-f", "%U %S", "-o", t.name] + args, env=env)
        return sum(map(float, open(t.name).read().split()[-2:])), r


def load():
    return open("/proc/loadavg").read().split()[0]


out = tempfile.mkdtemp(prefix="drivers-")
sh([CL, "run", "benches/pgbench/mark-read.toml", "--ops", "1", "--keep", "--quiet", "--out", out])
S = json.load(open(os.path.join(out, "report.json")))["strategies"][0]["namespace"]
URL = f"{BASE}&options=-c%20search_path%3D{S}"


def reset():
    psql(f"UPDATE {S}.notifications SET is_read = false WHERE is_read")
    psql(f"VACUUM {S}.notifications")
    psql("CHECKPOINT")


def run(tool):
    if tool == "counterlab":
        env = dict(os.environ, COUNTERLAB_POSTGRES_URL=BASE)
        o = os.path.join(out, "cl")
        sh([CL, "run", "benches/pgbench/mark-read.toml", "--quiet", "--strategy", "writable-cte", "--workers",
            str(CLIENTS), "--duration-s", str(SECS), "--out", o], env=env)
        s = json.load(open(os.path.join(o, "report.json")))["strategies"][0]
        return s["throughput_ops_per_s"], s["client_cpu_us_per_op"]
    reset()
    if tool == "pgbench":
        env = dict(os.environ, PGOPTIONS=f"-c search_path={S}")
        args = ["pgbench", "-n", "-M", "prepared", "-c", str(CLIENTS), "-j", str(min(CLIENTS, 2)), "-f",
                "benches/pgbench/mark_read_cte.sql"]
        # Its start and connections, as a 1-transaction-per-client run costs them, are
        # taken off: every figure here is the load alone.
        base, _ = timed(args + ["-t", "1", BASE], env=env)
        cpu, r = timed(args + ["-T", str(SECS), BASE], env=env)
        tps = float(r.stdout.split("tps = ")[1].split()[0])
        n = int(r.stdout.split("actually processed: ")[1].split()[0])
        return tps, (cpu - base) / (n - CLIENTS) * 1e6
    mode = {"sqlx": "one" if CLIENTS == 1 else "mt", "sqlx-groups": "groups", "tokio-postgres": "tpmt"}[tool]
    r = sh([PGEXP, mode, URL, str(SECS), str(CLIENTS)])
    w = r.stdout.split()
    return float(w[2]), float(w[w.index("cpu") + 1])


tools = ["pgbench", "sqlx"] + ([] if TLS else ["tokio-postgres"]) + ["counterlab"] + (["sqlx-groups"] if CLIENTS > 1 else [])
log(f"# {' '.join(sys.argv)}; schema {S}; load {load()}")
for rnd in range(ROUNDS):
    order = tools[rnd % len(tools):] + tools[:rnd % len(tools)]
    for t in order:
        rate, cpu = run(t)
        log(f"round {rnd + 1} c{CLIENTS} {t} {rate:.0f} ops/s {cpu:.1f} us/op load {load()}")
psql(f"DROP SCHEMA {S} CASCADE")
psql(f"DROP ROLE IF EXISTS {S}")
