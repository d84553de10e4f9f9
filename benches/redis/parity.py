#!/usr/bin/env python3
"""Issue 37's Redis parity: counterlab against redis-benchmark on the same command.

For each of GET, INCR, ZINCRBY and EVALSHA (a script doing INCR), a counterlab design in
benches/redis/parity.toml whose one measured op sends exactly that one command (a
single-op mix), against `redis-benchmark -c 16 -r 10000` on the same command over a key
space of the same size (10 000 users / members), 16 clients both, order alternating
per round (odd rounds redis-benchmark first).

  1. pairs at depth 1: throughput (counterlab's report.json `throughput_ops_per_s`, the
     load phase alone; redis-benchmark's requests per second) and client CPU per op
     (user+sys from /usr/bin/time; for counterlab the CPU of a 1-op run of the same
     design, seed and check, is subtracted: (CPU(N ops) - CPU(1 op)) / N, so the per-op
     check of the history is in it, the fixed start is not).
  2. pipelined: counterlab with 256 workers and `--set workload.redis_pipeline=16` (every
     16 workers' ops share one multiplexed connection: 16 connections, up to 16 commands
     in flight on each) against `redis-benchmark -P 16 -c 16` (16 connections, 16
     commands per write): the same 256 commands in flight on the same 16 connections.
  3. batched: counterlab with 16 workers and `--set workload.redis_batch=16` (each worker
     sends 16 ops at once as one pipeline on a connection) against the same
     `redis-benchmark -P 16 -c 16`: 16 commands per write on 16 connections both.

What the verdict of this design is: a bench, not a counter design. The write designs
promise nothing (`guarantee = "none"`: their read_count writes), so their verdict is not
the point; parity-get is `exact` and should PASS. A run whose report is missing fails
the harness; a counterlab exit code other than 0 is logged, not fatal. The per-op CPU
includes the check of each op's history entry: the write designs' counters drift by
design, so their check also runs the drift classifier (about 1% of a run's samples).

Usage: benches/redis/parity.py OUT [ROUNDS] [SECTIONS]   (SECTIONS: a subset of
"pairs,pipelined,batched"; a release build at target/release/counterlab, or COUNTERLAB_BIN).
Three rounds took 2 min 50 s at half these run lengths (PARITY_OPS=150000,
PARITY_PIPE_OPS=400000, PARITY_PIPE_RB_OPS=1500000); at the defaults about 5-6 minutes. Writes OUT/raw.log and OUT/summary.md
(medians and per-round ratios) and prints the summary.
"""
import json, os, re, statistics, subprocess, sys, tempfile, time

HOST, PORT = os.environ.get("REDIS_HOST", "127.0.0.1"), os.environ.get("REDIS_PORT", "6379")
CL = os.environ.get("COUNTERLAB_BIN", "./target/release/counterlab")
TOML = "benches/redis/parity.toml"
CLIENTS, KEYSPACE = 16, 10000
OPS = int(os.environ.get("PARITY_OPS", "300000"))  # per depth-1 run
PIPE_OPS = int(os.environ.get("PARITY_PIPE_OPS", "800000"))  # per pipelined counterlab run
PIPE_RB_OPS = int(os.environ.get("PARITY_PIPE_RB_OPS", "3000000"))  # per redis-benchmark -P 16 run
BATCH_OPS = int(os.environ.get("PARITY_BATCH_OPS", "2000000"))  # per batched counterlab run
SCRIPT = "return redis.call('INCR', KEYS[1])"
OUT = sys.argv[1] if len(sys.argv) > 1 else "reports/runs/redis-parity"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SECTIONS = (sys.argv[3] if len(sys.argv) > 3 else "pairs,pipelined").split(",")
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "raw.log"), "a")
WORK = tempfile.mkdtemp(prefix="redis-parity-")


def log(line):
    line = f"{line} at={time.strftime('%H:%M:%S', time.gmtime())}"
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def sh(args, check=True, stdin=None):
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, input=stdin)
    if check and r.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def cli(*args):
    return sh(["redis-cli", "-h", HOST, "-p", PORT] + list(args)).stdout.strip()


def timed(args, check=True):
    """Runs args under /usr/bin/time; returns (user+sys seconds, completed process)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        r = sh(["/usr/bin/time", "-f", "%U %S", "-o", t.name] + args, check=check)
        u, s = map(float, open(t.name).read().split()[-2:])
    return u + s, r


def loadavg():
    return open("/proc/loadavg").read().split()[0]


# The redis-benchmark side: its keys (`__rand_int__` is a 12-digit number below -r).
SHA = None


def rb_command(cmd):
    return {
        "get": ["GET", "clbench:c:__rand_int__"],
        "incr": ["INCR", "clbench:c:__rand_int__"],
        "zincrby": ["ZINCRBY", "clbench:z", "1", "__rand_int__"],
        "evalsha": ["EVALSHA", SHA, "1", "clbench:e:__rand_int__"],
    }[cmd]


def rb_keys_reset(cmd):
    """Deletes the bench's keys; for GET, sets every key of the space (as counterlab's seed)."""
    keys = sh(["redis-cli", "-h", HOST, "-p", PORT, "--scan", "--pattern", "clbench:*"]).stdout.split()
    lines = [f"UNLINK {' '.join(keys[i:i + 500])}" for i in range(0, len(keys), 500)]
    if cmd == "get":
        lines += [f"SET clbench:c:{i:012d} 1" for i in range(KEYSPACE)]
    if lines:
        sh(["redis-cli", "-h", HOST, "-p", PORT], stdin="\n".join(lines) + "\n")


def redis_benchmark(cmd, n, pipeline=1):
    rb_keys_reset(cmd)
    args = ["redis-benchmark", "-h", HOST, "-p", PORT, "-c", str(CLIENTS), "-n", str(n), "-r", str(KEYSPACE), "-q"]
    if pipeline > 1:
        args += ["-P", str(pipeline)]
    cpu, r = timed(args + rb_command(cmd))
    text = r.stdout.replace("\r", "\n")
    rps = float(re.findall(r"([0-9.]+) requests per second", text)[-1])
    rb_keys_reset("none")
    return rps, cpu / n * 1e6


def counterlab(cmd, n, extra=(), workers=CLIENTS):
    """(ops/s of the load, client CPU seconds, ops, verdict, the run's own CPU per op over
    its measured load: report.json `client_cpu_us_per_op`, None before it was recorded)."""
    out = os.path.join(WORK, f"cl-{cmd}")
    args = [CL, "run", TOML, "--quiet", "--strategy", f"parity-{cmd}", "--workers", str(workers),
            "--ops", str(n), "--out", out] + list(extra)
    cpu, r = timed(args, check=False)
    path = os.path.join(out, "report.json")
    if not os.path.exists(path):
        raise SystemExit(f"{' '.join(args)}: no report (exit {r.returncode})\n{r.stderr[-2000:]}")
    s = json.load(open(path))["strategies"][0]
    if r.returncode != 0:
        log(f"  (counterlab exit {r.returncode}, verdict {s['check']['verdict']})")
    os.remove(path)
    return s["throughput_ops_per_s"], cpu, s["ops_total"], s["check"]["verdict"], s.get("client_cpu_us_per_op")


def cl_measure(cmd, n, extra=(), workers=CLIENTS):
    _, base, _, _, _ = counterlab(cmd, 1, extra, workers)
    tput, cpu, ops, verdict, during = counterlab(cmd, n, extra, workers)
    return tput, (cpu - base) / ops * 1e6, verdict, during


def section(name, cmds, rb_n, cl_n, pipeline, batch=False):
    """Depth 1, or redis-benchmark -P `pipeline` against counterlab's shared connections
    (`redis_pipeline`, CLIENTS * pipeline workers) or its batches (`redis_batch`,
    CLIENTS workers each sending `pipeline` ops as one pipeline)."""
    key = "redis_batch" if batch else "redis_pipeline"
    extra = ["--set", f"workload.{key}={pipeline}"] if pipeline > 1 else []
    workers = CLIENTS if batch else CLIENTS * pipeline
    for rnd in range(1, ROUNDS + 1):
        for cmd in cmds:
            order = ["redis-benchmark", "counterlab"] if rnd % 2 else ["counterlab", "redis-benchmark"]
            for tool in order:
                if tool == "redis-benchmark":
                    rps, us = redis_benchmark(cmd, rb_n, pipeline)
                    log(f"{name} {rnd} {cmd} redis-benchmark rps={rps:.0f} cpu_us_per_op={us:.2f} load={loadavg()}")
                else:
                    tput, us, verdict, during = cl_measure(cmd, cl_n, extra, workers)
                    load_cpu = f" load_cpu_us_per_op={during:.2f}" if during else ""
                    log(f"{name} {rnd} {cmd} counterlab rps={tput:.0f} cpu_us_per_op={us:.2f} "
                        f"verdict={verdict} load={loadavg()}{load_cpu}")


def summary():
    rows = {}
    for line in open(os.path.join(OUT, "raw.log")):
        m = re.match(r"(\S+) (\d+) (\S+) (\S+) rps=([0-9.]+) cpu_us_per_op=([-0-9.]+)", line)
        if m:
            sec, rnd, cmd, tool, rps, us = m.groups()
            during = re.search(r"load_cpu_us_per_op=([0-9.]+)", line)
            during = float(during.group(1)) if during else None
            rows.setdefault((sec, cmd), {}).setdefault(int(rnd), {})[tool] = (float(rps), float(us), during)
    loads = re.findall(r"load=([0-9.]+)", open(os.path.join(OUT, "raw.log")).read())
    out = [f"# Redis parity: counterlab / redis-benchmark, {CLIENTS} clients, key space {KEYSPACE}", "",
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average during the runs "
           f"{min(loads, default='?')}-{max(loads, default='?')}; {ROUNDS} rounds, order alternating.", "",
           "| section | command | cl ops/s | rb ops/s | throughput ratio (rounds) | cl us/op | rb us/op | CPU ratio (rounds) "
           "| load-only CPU ratio (rounds) |",
           "|---|---|---:|---:|---|---:|---:|---|---|"]
    for (sec, cmd), by_round in rows.items():
        pairs = [v for _, v in sorted(by_round.items()) if "counterlab" in v and "redis-benchmark" in v]
        if not pairs:
            continue
        t = [p["counterlab"][0] / p["redis-benchmark"][0] for p in pairs]
        c = [p["counterlab"][1] / p["redis-benchmark"][1] for p in pairs]
        med = lambda tool, i: statistics.median(p[tool][i] for p in pairs)
        # counterlab's own CPU over its measured load alone, against redis-benchmark's run.
        d = [p["counterlab"][2] / p["redis-benchmark"][1] for p in pairs if p["counterlab"][2]]
        during = f"**{statistics.median(d):.3f}** ({', '.join(f'{x:.3f}' for x in d)})" if d else "-"
        out.append(f"| {sec} | {cmd} | {med('counterlab', 0):.0f} | {med('redis-benchmark', 0):.0f} | "
                   f"**{statistics.median(t):.3f}** ({', '.join(f'{x:.3f}' for x in t)}) | "
                   f"{med('counterlab', 1):.2f} | {med('redis-benchmark', 1):.2f} | "
                   f"**{statistics.median(c):.3f}** ({', '.join(f'{x:.3f}' for x in c)}) | {during} |")
    text = "\n".join(out) + "\n"
    open(os.path.join(OUT, "summary.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    SHA = cli("SCRIPT", "LOAD", SCRIPT)
    log(f"# start {time.strftime('%H:%M:%S', time.gmtime())} load={loadavg()} bin={CL} rounds={ROUNDS}")
    cmds = ["get", "incr", "zincrby", "evalsha"]
    if "pairs" in SECTIONS:
        section("depth1", cmds, OPS, OPS, 1)
    if "pipelined" in SECTIONS:
        section("pipelined16", cmds, PIPE_RB_OPS, PIPE_OPS, 16)
    if "batched" in SECTIONS:
        section("batched16", cmds, PIPE_RB_OPS, BATCH_OPS, 16, batch=True)
    summary()
