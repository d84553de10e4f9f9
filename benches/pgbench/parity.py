#!/usr/bin/env python3
"""Summarizes round_trips.py's parity section (issue 37): per client count and twin, the
median over rounds of counterlab/pgbench throughput and of client CPU per op, each pair's
ratio, and the load averages seen.

Usage: benches/pgbench/parity.py OUT/raw.log > OUT/parity.md
"""
import re, statistics, sys
from collections import defaultdict

LINE = re.compile(r"parity (\d+) c(\d+) (\S+) first (\S+) counterlab ([0-9.]+) ops/s ([0-9.-]+) us/op \((\S+)\) "
                  r"pgbench ([0-9.]+) tps ([0-9.]+) us/op ratio ([0-9.]+) cpu_ratio ([0-9.-]+) load ([0-9.]+)")


def grouped(pattern):
    """The log's lines matching `pattern`, their fields grouped by (clients, twin)."""
    out = defaultdict(list)
    for line in open(sys.argv[1]):
        m = pattern.search(line)
        if m:
            out[(int(m.group(2)), m.group(3))].append(m.groups())
    return out


rows = grouped(LINE)
# The run's own CPU over its measured load (report.json `client_cpu_us_per_op`), where logged.
DURING = re.compile(r"parity (\d+) c(\d+) (\S+) first .* load_cpu ([0-9.]+) us/op load_cpu_ratio ([0-9.]+)")
during = grouped(DURING)
print("| clients | twin | pairs | throughput ratio, median (each) | CPU/op ratio, median (each) | "
      "counterlab ops/s, us/op | pgbench tps, us/op | verdicts | load |")
print("|---:|---|---:|---|---|---|---|---|---|")
for (c, twin), rs in sorted(rows.items()):
    ratio = [float(r[9]) for r in rs]
    cpu = [float(r[10]) for r in rs]
    med = lambda i: statistics.median(float(r[i]) for r in rs)
    print(f"| {c} | {twin} | {len(rs)} | **{statistics.median(ratio):.3f}** ({', '.join(f'{x:.2f}' for x in ratio)}) "
          f"| **{statistics.median(cpu):.3f}** ({', '.join(f'{x:.2f}' for x in cpu)}) "
          f"| {med(4):.0f}, {med(5):.1f} | {med(7):.0f}, {med(8):.1f} | {' '.join(sorted(set(r[6] for r in rs)))} "
          f"| {min(float(r[11]) for r in rs):.1f}-{max(float(r[11]) for r in rs):.1f} |")

if during:
    print("\nClient CPU per op over the measured load alone (counterlab's `client_cpu_us_per_op`: no seed, "
          "check or report) against pgbench's whole run:\n")
    print("| clients | twin | pairs | load CPU/op ratio, median (each) | counterlab load us/op, median |")
    print("|---:|---|---:|---|---|")
    for (c, twin), rs in sorted(during.items()):
        ratio = [float(r[4]) for r in rs]
        print(f"| {c} | {twin} | {len(rs)} | **{statistics.median(ratio):.3f}** ({', '.join(f'{x:.2f}' for x in ratio)}) "
              f"| {statistics.median(float(r[3]) for r in rs):.1f} |")

ONE = re.compile(r"parity1t (\d+) c(\d+) (\S+) counterlab-(\d+)-thread ([0-9.]+) ops/s ([0-9.-]+) us/op \((\S+)\) "
                 r"ratio ([0-9.]+) cpu_ratio ([0-9.-]+) load ([0-9.]+)")
one = grouped(ONE)
if one:
    threads = sorted(set(r[3] for rs in one.values() for r in rs))
    print(f"\nThe same counterlab run with `TOKIO_WORKER_THREADS={','.join(threads)}` (a multi-thread runtime), "
          "right after each pair, against that pair's pgbench run:\n")
    print("| clients | twin | runs | throughput ratio, median (each) | CPU/op ratio, median (each) | verdicts |")
    print("|---:|---|---:|---|---|---|")
    for (c, twin), rs in sorted(one.items()):
        ratio = [float(r[7]) for r in rs]
        cpu = [float(r[8]) for r in rs]
        print(f"| {c} | {twin} | {len(rs)} | **{statistics.median(ratio):.3f}** ({', '.join(f'{x:.2f}' for x in ratio)}) "
              f"| **{statistics.median(cpu):.3f}** ({', '.join(f'{x:.2f}' for x in cpu)}) | {' '.join(sorted(set(r[6] for r in rs)))} |")
