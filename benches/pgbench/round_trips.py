#!/usr/bin/env python3
"""Issue 21's round trips and per-op client CPU: counterlab against pgbench on the same data.

  1. sendto calls per op (strace -f), 1 client: counterlab's conditional-update with the
     worker-held connection (the default) and borrowing from the pool per op (connections
     = workers: the path every op took before), writable-cte held, pgbench on
     mark_read.sql and mark_read_cte.sql. Per op = (calls at N ops - calls at 1 op) / (N-1).
  2. throughput, alternating pairs at 8 clients: conditional-update against mark_read.sql
     (the same statements), writable-cte against mark_read_cte.sql (its one statement).
  3. client CPU per op (user+sys from /usr/bin/time / ops) at 1, 4, 16, 64 clients; for
     counterlab the CPU of a 1-op run of the same data (seed, check) is subtracted.
  4. parity (issue 37): for each of 1, 16 and 64 clients (PARITY_CLIENTS) and each of
     the two strategy/script twins, one alternating pair a round of PARITY_SECS (10) each,
     throughput and client CPU per op measured in the same runs (counterlab: its run's
     CPU minus a 1-op run's, over its ops). Both start from a settled server: counterlab
     CHECKPOINTs after its seed (`settle_after_seed`), pgbench's schema is seeded by
     counterlab and CHECKPOINTed before pgbench starts.

Usage: benches/pgbench/round_trips.py OUT [ROUNDS] [SECTIONS]  (a release build; SECTIONS
a subset of "strace,pairs,cpu,parity"; `parity.py OUT` summarizes section 4). Every run seeds its own schema and drops it.
"""
import json, os, re, statistics, subprocess, sys, tempfile

URL = os.environ.get("COUNTERLAB_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
CL = os.environ.get("COUNTERLAB_BIN", "./target/release/counterlab")
TOML = "benches/pgbench/mark-read.toml"
PEER = {"conditional-update": "benches/pgbench/mark_read.sql", "writable-cte": "benches/pgbench/mark_read_cte.sql"}
OUT = sys.argv[1] if len(sys.argv) > 1 else "reports/runs/round-trips"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SECTIONS = (sys.argv[3] if len(sys.argv) > 3 else "strace,pairs,cpu").split(",")
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "raw.log"), "a")
WORK = tempfile.mkdtemp(prefix="round-trips-")  # the runs' own report folders


def log(line):
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def sh(args, env=None, check=True):
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    if check and r.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def psql(sql):
    return sh(["psql", URL, "-Atqc", sql]).stdout.strip()


def timed(args, env=None):
    """Runs args under /usr/bin/time; returns (user+sys seconds, completed process)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        r = sh(["/usr/bin/time", "-f", "%U %S", "-o", t.name] + args, env=env)
        u, s = map(float, open(t.name).read().split()[-2:])
    return u + s, r


def cl_args(strategy, workers, stop, out, held=True, extra=()):
    a = [CL, "run", TOML, "--quiet", "--strategy", strategy, "--workers", str(workers), "--out", out]
    a += ["--ops", str(stop)] if isinstance(stop, int) else ["--duration-s", str(stop[0])]
    if not held:
        a += ["--set", f"workload.connections={workers}"]
    return a + list(extra)


def report(out):
    return json.load(open(os.path.join(out, "report.json")))["strategies"][0]


def seeded_schema(tag):
    """A schema seeded by counterlab with the bench's data (1 op run, kept)."""
    out = os.path.join(WORK, f"seed-{tag}")
    sh([CL, "run", TOML, "--ops", "1", "--keep", "--quiet", "--out", out])
    return report(out)["namespace"]


def pgbench(script, clients, stop, schema, under=()):
    env = dict(os.environ, PGOPTIONS=f"-c search_path={schema}")
    a = ["pgbench", "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)), "-f", script]
    a += ["-t", str(stop)] if isinstance(stop, int) else ["-T", str(stop[0])]
    return list(under) + a + [URL], env


def drop(schema):
    psql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    psql(f"DROP ROLE IF EXISTS {schema}")


def strace_count(args, env=None):
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as t:
        sh(["strace", "-f", "-qq", "-e", "trace=sendto", "-o", t.name] + args, env=env)
        return sum(1 for line in open(t.name) if "sendto(" in line)


def section_strace(n=int(os.environ.get("STRACE_OPS", "2000"))):
    for label, strategy, held in [("counterlab conditional-update held", "conditional-update", True),
                                  ("counterlab conditional-update pool", "conditional-update", False),
                                  ("counterlab writable-cte held", "writable-cte", True)]:
        c = [strace_count(cl_args(strategy, 1, ops, os.path.join(WORK, "strace-run"), held)) for ops in (1, n + 1)]
        log(f"strace {label}: {c[0]} sendto at 1 op, {c[1]} at {n + 1}: {(c[1] - c[0]) / n:.3f} per op")
    for strategy, script in PEER.items():
        schema = seeded_schema("strace")
        c = [strace_count(*pgbench(script, 1, t, schema)) for t in (1, n + 1)]
        drop(schema)
        log(f"strace pgbench {os.path.basename(script)}: {c[0]} sendto at 1 tx, {c[1]} at {n + 1}: {(c[1] - c[0]) / n:.3f} per op")


def section_pairs(clients=8, secs=15):
    for rnd in range(1, ROUNDS + 1):
        for strategy, script in PEER.items():
            order = ["pgbench", "counterlab"] if rnd % 2 else ["counterlab", "pgbench"]
            for tool in order:
                psql("CHECKPOINT")
                if tool == "pgbench":
                    schema = seeded_schema(f"pair-{rnd}")
                    psql("CHECKPOINT")
                    _, r = timed(*pgbench(script, clients, (secs,), schema))
                    tps = float(re.search(r"tps = ([0-9.]+) \(without", r.stdout).group(1))
                    drop(schema)
                    log(f"pair {rnd} {strategy} pgbench_tps {tps:.0f}")
                else:
                    out = os.path.join(WORK, f"pair-{rnd}-{strategy}")
                    sh(cl_args(strategy, clients, (secs,), out))
                    s = report(out)
                    log(f"pair {rnd} {strategy} counterlab_ops_per_s {s['throughput_ops_per_s']:.0f} verdict {s['check']['verdict']}")


def section_cpu(ops=20000, workers=(1, 4, 16, 64)):
    for rnd in range(1, ROUNDS + 1):
        base = {}
        for strategy in PEER:
            base[strategy] = timed(cl_args(strategy, 1, 1, os.path.join(WORK, "cpu-base")))[0]
        for w in workers:
            runs = [("pgbench", s, True) for s in PEER] + [("counterlab", s, True) for s in PEER]
            runs.append(("counterlab", "conditional-update", False))
            if rnd % 2 == 0:
                runs.reverse()
            for tool, strategy, held in runs:
                if tool == "pgbench":
                    schema = seeded_schema(f"cpu-{rnd}")
                    cpu, _ = timed(*pgbench(PEER[strategy], w, ops // w, schema))
                    drop(schema)
                    n = (ops // w) * w
                    log(f"cpu {rnd} w{w} pgbench {strategy} {cpu:.2f}s {n} ops {cpu / n * 1e6:.1f} us/op")
                else:
                    out = os.path.join(WORK, "cpu-run")
                    cpu, _ = timed(cl_args(strategy, w, ops, out, held))
                    n = report(out)["ops_total"]
                    mode = "held" if held else "pool"
                    log(f"cpu {rnd} w{w} counterlab-{mode} {strategy} {cpu:.2f}s (base {base[strategy]:.2f}s) {n} ops "
                        f"{(cpu - base[strategy]) / n * 1e6:.1f} us/op")


# The pairs' own counterlab run with `--threads N` (unset: the run's default); the
# variant run (its TOKIO_WORKER_THREADS) never gets it, as `--threads` would override it.
DEFAULT_THREADS = os.environ.get("PARITY_DEFAULT_THREADS")


def parity_counterlab(strategy, clients, secs, base, tag, env=None):
    out = os.path.join(WORK, f"parity-{tag}")
    extra = ("--threads", DEFAULT_THREADS) if DEFAULT_THREADS and env is None else ()
    cpu, _ = timed(cl_args(strategy, clients, (secs,), out, extra=extra), env=env)
    s = report(out)
    n = s["ops_total"]
    # The run's own figure: its process's CPU over the measured load alone (no seed,
    # check or report), None in a report from before it was recorded.
    load_cpu = s.get("client_cpu_us_per_op")
    return s["throughput_ops_per_s"], (cpu - base) / n * 1e6, s["check"]["verdict"], load_cpu


def parity_pgbench(strategy, clients, secs, tag):
    schema = seeded_schema(tag)
    psql("CHECKPOINT")
    cpu, r = timed(*pgbench(PEER[strategy], clients, (secs,), schema))
    drop(schema)
    tps = float(re.search(r"tps = ([0-9.]+) \(without", r.stdout).group(1))
    n = int(re.search(r"number of transactions actually processed: (\d+)", r.stdout).group(1))
    return tps, cpu / n * 1e6


# A variant run right after each pair at these client counts, with TOKIO_WORKER_THREADS =
# PARITY_VARIANT_THREADS (default 1: a multi-thread runtime of one worker; the default run
# is the current-thread scheduler since 2026-12-06). PARITY_1T_AT= turns it off.
THREAD_VARIANT_AT = [int(c) for c in os.environ.get("PARITY_1T_AT", "16").split(",") if c]
VARIANT_THREADS = os.environ.get("PARITY_VARIANT_THREADS", "1")


def section_parity():
    clients = [int(c) for c in os.environ.get("PARITY_CLIENTS", "1,16,64").split(",")]
    secs = int(os.environ.get("PARITY_SECS", "10"))
    for rnd in range(1, ROUNDS + 1):
        base = {s: timed(cl_args(s, 1, 1, os.path.join(WORK, "parity-base")))[0] for s in PEER}
        # The one-thread variant's 1-op run under the same setting (its seed's CPU differs).
        env1t = dict(os.environ, TOKIO_WORKER_THREADS=VARIANT_THREADS)
        base1t = {s: timed(cl_args(s, 1, 1, os.path.join(WORK, "parity-base")), env=env1t)[0] for s in PEER}
        for c in clients:
            for strategy in PEER:
                order = ["pgbench", "counterlab"] if (rnd + c) % 2 else ["counterlab", "pgbench"]
                got = {}
                for tool in order:
                    if tool == "pgbench":
                        got[tool] = parity_pgbench(strategy, c, secs, f"parity-{rnd}")
                    else:
                        got[tool] = parity_counterlab(strategy, c, secs, base[strategy], f"{rnd}-{c}")
                (cl_rate, cl_cpu, verdict, load_cpu), (pg_rate, pg_cpu) = got["counterlab"], got["pgbench"]
                during = f" load_cpu {load_cpu:.1f} us/op load_cpu_ratio {load_cpu / pg_cpu:.3f}" if load_cpu else ""
                log(f"parity {rnd} c{c} {strategy} first {order[0]} counterlab {cl_rate:.0f} ops/s {cl_cpu:.1f} us/op "
                    f"({verdict}) pgbench {pg_rate:.0f} tps {pg_cpu:.1f} us/op ratio {cl_rate / pg_rate:.3f} "
                    f"cpu_ratio {cl_cpu / pg_cpu:.3f} load {open('/proc/loadavg').read().split()[0]}{during}")
                if c in THREAD_VARIANT_AT:
                    # The same run on one runtime thread, right after the pair (TOKIO_WORKER_THREADS).
                    rate, cpu, verdict, _ = parity_counterlab(strategy, c, secs, base1t[strategy], f"{rnd}-{c}-1t", env1t)
                    log(f"parity1t {rnd} c{c} {strategy} counterlab-{VARIANT_THREADS}-thread {rate:.0f} ops/s {cpu:.1f} us/op ({verdict}) "
                        f"ratio {rate / pg_rate:.3f} cpu_ratio {cpu / pg_cpu:.3f} load {open('/proc/loadavg').read().split()[0]}")


if __name__ == "__main__":
    log(f"# {' '.join(sys.argv)}; uptime: {sh(['uptime']).stdout.strip()}")
    if "strace" in SECTIONS:
        section_strace()
    if "pairs" in SECTIONS:
        section_pairs()
    if "cpu" in SECTIONS:
        section_cpu()
    if "parity" in SECTIONS:
        section_parity()
    log(f"# done; uptime: {sh(['uptime']).stdout.strip()}")
