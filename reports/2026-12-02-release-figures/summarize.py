#!/usr/bin/env python3
"""Tables from benches/pgbench/round_trips.py's raw.log: throughput pairs (per-round
ratio counterlab/pgbench and its median) and client CPU per op (median over rounds, and
the ratio counterlab-held/pgbench on the same statements).
Usage: summarize.py RAW_LOG"""
import re, statistics, sys
from collections import defaultdict

pairs = defaultdict(dict)   # (round, strategy) -> tool -> ops/s
cpu = defaultdict(dict)     # (workers, tool, strategy) -> round -> us/op
for line in open(sys.argv[1]):
    m = re.match(r"pair (\d+) (\S+) (pgbench_tps|counterlab_ops_per_s) (\d+)", line)
    if m:
        pairs[(int(m[1]), m[2])]["pgbench" if m[3] == "pgbench_tps" else "counterlab"] = int(m[4])
    m = re.match(r"cpu (\d+) w(\d+) (\S+) (\S+) .* ([0-9.]+) us/op", line)
    if m:
        cpu[(int(m[2]), m[3], m[4])][int(m[1])] = float(m[5])

print("| strategy | round | pgbench ops/s | counterlab ops/s | ratio |")
print("|---|---:|---:|---:|---:|")
ratios = defaultdict(list)
for (rnd, strat), t in sorted(pairs.items(), key=lambda x: (x[0][1], x[0][0])):
    if len(t) == 2:
        r = t["counterlab"] / t["pgbench"]
        ratios[strat].append(r)
        print(f"| {strat} | {rnd} | {t['pgbench']} | {t['counterlab']} | {r:.3f} |")
for strat, rs in ratios.items():
    print(f"\n{strat}: median ratio counterlab/pgbench {statistics.median(rs):.3f}")

print("\n| workers | strategy | pgbench us/op | counterlab held us/op | held / pgbench per round | median | counterlab pool us/op |")
print("|---:|---|---:|---:|---|---:|---:|")
for w in sorted({k[0] for k in cpu}):
    for strat in ("conditional-update", "writable-cte"):
        pg = cpu.get((w, "pgbench", strat))
        held = cpu.get((w, "counterlab-held", strat))
        pool = cpu.get((w, "counterlab-pool", strat))
        if pg and held:
            p, h = statistics.median(pg.values()), statistics.median(held.values())
            per = [held[r] / pg[r] for r in sorted(pg) if r in held]
            pl = f"{statistics.median(pool.values()):.1f}" if pool else "-"
            rs = ", ".join(f"{x:.2f}" for x in per)
            print(f"| {w} | {strat} | {p:.1f} | {h:.1f} | {rs} | {statistics.median(per):.2f} | {pl} |")
print("\n(us/op: medians over the rounds; ratios: per round, each pair run back to back;")
print("counterlab's CPU is minus a 1-op run of the same data)")
