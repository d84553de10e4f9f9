#!/usr/bin/env python3
"""Server CPU per op, writable-cte at 16 clients: counterlab (run minus a 1-op run) against pgbench (seeded by counterlab, CHECKPOINTed)."""
import os, re, subprocess, sys, json, time
sys.path.insert(0, "/work/main/benches/pgbench")
os.chdir("/work/main")
sys.argv = ["x", "/tmp/s57/srv-rt"]
import round_trips as rt
sys.path.insert(0, "/tmp/s57"); import srvcpu
PM = int(open("/var/run/postgresql/15-main.pid").readline())
CL = os.environ.get("COUNTERLAB_BIN", "/tmp/cl-main")
rt.CL = CL
W, SECS, ROUNDS = int(os.environ.get("C", "16")), 10, int(os.environ.get("ROUNDS", "4"))
S = os.environ.get("S", "writable-cte")
extra = os.environ.get("EXTRA", "").split()
def srv(): return srvcpu.total(PM)
def cl(ops_or_secs, tag):
    out = f"/tmp/s57/srv-{tag}"
    a0 = srv()
    cpu, _ = rt.timed(rt.cl_args(S, W, ops_or_secs, out, extra=extra))
    a1 = srv()
    r = rt.report(out)
    return a1 - a0, r["throughput_ops_per_s"], sum(v["count"] for v in r["ops"].values()) if isinstance(r.get("ops"), dict) else None, r
base = cl(1, "base")[0]
print(f"1-op run server cpu {base:.2f}s", flush=True)
for rnd in range(1, ROUNDS + 1):
    for tool in (["pgbench", "cl"] if rnd % 2 else ["cl", "pgbench"]):
        if tool == "cl":
            s, rate, n, r = cl((SECS,), f"r{rnd}")
            ops = rate * SECS
            print(f"r{rnd} counterlab {rate:.0f} ops/s server {(s - base):.2f}s {(s - base) / ops * 1e6:.1f} us/op (whole {s:.2f}) load {open('/proc/loadavg').read().split()[0]}", flush=True)
        else:
            schema = rt.seeded_schema(f"srv{rnd}")
            rt.psql("CHECKPOINT")
            a0 = srv()
            cpu, p = rt.timed(*rt.pgbench(rt.PEER[S], W, (SECS,), schema))
            a1 = srv()
            rt.drop(schema)
            tps = float(re.search(r"tps = ([0-9.]+) \(without", p.stdout).group(1))
            n = int(re.search(r"processed: (\d+)", p.stdout).group(1))
            print(f"r{rnd} pgbench {tps:.0f} tps server {a1 - a0:.2f}s {(a1 - a0) / n * 1e6:.1f} us/op load {open('/proc/loadavg').read().split()[0]}", flush=True)
