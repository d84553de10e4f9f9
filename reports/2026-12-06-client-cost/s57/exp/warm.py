#!/usr/bin/env python3
"""writable-cte at C clients: pgbench vs counterlab default vs counterlab with a warm-up (--set workload.warmup_s=W), rotating order."""
import os, sys
ROUNDS, C, W = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, "/work/main/benches/pgbench"); os.chdir("/work/main")
sys.argv = ["x", "/tmp/s57/warm-rt"]
import round_trips as rt
rt.CL = "/tmp/cl-main"
S = "writable-cte"
def cl(extra, tag):
    out = f"/tmp/s57/warm-{tag}"
    cpu, _ = rt.timed(rt.cl_args(S, C, (10,), out, extra=extra))
    s = rt.report(out)
    return s["throughput_ops_per_s"], s.get("client_cpu_us_per_op")
for rnd in range(1, ROUNDS + 1):
    order = [["pgbench", "plain", "warm"], ["warm", "pgbench", "plain"], ["plain", "warm", "pgbench"]][rnd % 3]
    got = {}
    for v in order:
        if v == "pgbench":
            got[v] = rt.parity_pgbench(S, C, 10, f"w{rnd}")
        elif v == "plain":
            got[v] = cl((), f"p{rnd}")
        else:
            got[v] = cl(("--set", f"workload.warmup_s={W}"), f"w{rnd}")
    pg = got["pgbench"][0]
    print(f"round {rnd} c{C} order {','.join(order)} pgbench {pg:.0f} plain {got['plain'][0]:.0f} ({got['plain'][0]/pg:.3f}) "
          f"warm {got['warm'][0]:.0f} ({got['warm'][0]/pg:.3f}) load {os.getloadavg()[0]:.2f}", flush=True)
