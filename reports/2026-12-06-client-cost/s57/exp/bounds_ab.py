#!/usr/bin/env python3
"""A/B: pgbench with and without the sandbox role's per-statement settings (as PGOPTIONS), same seeded data."""
import os, re, subprocess, sys
ROUNDS = int(sys.argv[1]); S = sys.argv[2]; C = int(sys.argv[3]); SECS = int(os.environ.get("SECS", "8"))
sys.path.insert(0, "/work/main/benches/pgbench"); os.chdir("/work/main")
sys.argv = ["x", "/tmp/s57/bounds-rt"]
import round_trips as rt
rt.CL = "/tmp/cl-main"
sys.path.insert(0, "/tmp/s57"); import srvcpu
PM = int(open("/var/run/postgresql/15-main.pid").readline())
BOUNDS = ("-c statement_timeout=10000ms -c lock_timeout=10000ms -c idle_in_transaction_session_timeout=11000ms "
          "-c work_mem=64MB -c temp_file_limit=2GB -c client_connection_check_interval=250ms")
for rnd in range(1, ROUNDS + 1):
    for v in (["plain", "bounds"] if rnd % 2 else ["bounds", "plain"]):
        schema = rt.seeded_schema(f"b{rnd}"); rt.psql("CHECKPOINT")
        args, env = rt.pgbench(rt.PEER[S], C, (SECS,), schema)
        if v == "bounds":
            env["PGOPTIONS"] += " " + BOUNDS
        a0 = srvcpu.total(PM)
        cpu, r = rt.timed(args, env=env)
        a1 = srvcpu.total(PM)
        rt.drop(schema)
        tps = float(re.search(r"tps = ([0-9.]+) \(without", r.stdout).group(1))
        n = int(re.search(r"processed: (\d+)", r.stdout).group(1))
        print(f"round {rnd} {S} c{C} {v} tps {tps:.0f} server_us_op {(a1 - a0) / n * 1e6:.1f} client_us_op {cpu / n * 1e6:.1f} load {os.getloadavg()[0]:.2f}", flush=True)
