#!/usr/bin/env python3
"""perf (cpu-clock, whole system) over 8 s of each tool's load: writable-cte 16 clients."""
import os, re, subprocess, sys, time
sys.path.insert(0, "/work/main/benches/pgbench"); os.chdir("/work/main")
TAG = sys.argv[1]; sys.argv = ["x", "/tmp/s57/prof-rt"]
import round_trips as rt
CL = os.environ.get("COUNTERLAB_BIN", "/tmp/cl-main"); rt.CL = CL
S = os.environ.get("S", "writable-cte"); W = 16
def perf(out):
    return subprocess.Popen(["perf", "record", "-a", "-g", "-F", "499", "-o", out, "--", "sleep", "8"], stdout=open("/tmp/s57/perf.log","a"), stderr=subprocess.STDOUT)
tag = TAG
# pgbench
schema = rt.seeded_schema("prof"); rt.psql("CHECKPOINT")
env = dict(os.environ, PGOPTIONS=f"-c search_path={schema}")
args, env = rt.pgbench(rt.PEER[S], W, (14,), schema)
p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
time.sleep(3); pf = perf(f"/tmp/s57/perf-pgbench-{tag}.data"); pf.wait(); out = p.communicate()[0]; rt.drop(schema)
print("pgbench", re.search(r"tps = ([0-9.]+)", out).group(1), "tps", flush=True)
# counterlab
p = subprocess.Popen([CL, "run", rt.TOML, "--strategy", S, "--workers", str(W), "--duration-s", "14", "--out", "/tmp/s57/prof-cl"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
for line in p.stderr:
    if "| load" in line:
        time.sleep(2); pf = perf(f"/tmp/s57/perf-cl-{tag}.data"); pf.wait(); break
rest = p.stderr.read(); p.wait()
print("counterlab", re.search(r"ops at (\d+) ops/s", rest).group(1), "ops/s", flush=True)
