#!/usr/bin/env python3
"""Summarizes drivers.py's logs: per tool, the median ops/s and CPU per op, and the median
of its per-round CPU ratio to pgbench (each round's pgbench run is its reference).
Usage: drivers_summary.py LOG..."""
import collections, re, statistics, sys

for path in sys.argv[1:]:
    rounds, batch = collections.defaultdict(dict), 0
    for line in open(path):
        batch += line.startswith("#")
        m = re.match(r"round (\d+) c(\d+) (\S+) (\d+) ops/s ([\d.]+) us/op", line)
        if m:
            rounds[(batch, m.group(1))][m.group(3)] = (float(m.group(4)), float(m.group(5)))
    tools = sorted({t for r in rounds.values() for t in r}, key=lambda t: t != "pgbench")
    print(f"\n{path} ({len(rounds)} rounds)\n")
    print("| client | ops/s, median | CPU us/op, median | rate / pgbench (median of rounds) | CPU / pgbench (each round, batches in order) |")
    print("|---|---:|---:|---:|---|")
    for t in tools:
        got = [r[t] for r in rounds.values() if t in r and "pgbench" in r]
        rate = statistics.median(g[0] for g in got)
        cpu = statistics.median(g[1] for g in got)
        rr = statistics.median(r[t][0] / r["pgbench"][0] for r in rounds.values() if t in r)
        cr = [r[t][1] / r["pgbench"][1] for r in rounds.values() if t in r]
        each = ", ".join(f"{c:.2f}" for c in cr)
        print(f"| {t} | {rate:.0f} | {cpu:.1f} | {rr:.3f} | **{statistics.median(cr):.2f}** ({each}) |")
