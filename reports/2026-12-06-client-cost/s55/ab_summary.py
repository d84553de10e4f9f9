"""Summarizes ab-bins.sh's ab.log: per cell, the medians of A and B (ops/s, client CPU
per op), the per-round ratios B/A and how many rounds B won.
Usage: python3 s55/ab_summary.py OUT/ab.log"""
import re, statistics, sys
from collections import defaultdict

runs = defaultdict(dict)  # (cell, round) -> tag -> (ops, cpu)
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (\S+) ([AB]) ops_s (\d+) cpu_us_op ([\d.]+) (\S+)", line)
    if m:
        r, cell, tag, ops, cpu, verdict = m.groups()
        runs[(cell, int(r))][tag] = (float(ops), float(cpu), verdict)
cells = sorted({c for c, _ in runs}, key=lambda c: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", c)])
print("| cell | A ops/s, CPU us/op (medians) | B ops/s, CPU us/op | B/A rate (rounds) | B/A CPU (rounds) | B faster / cheaper |")
print("|---|---|---|---|---|---|")
for cell in cells:
    pairs = [runs[k] for k in sorted(runs) if k[0] == cell and len(runs[k]) == 2]
    med = lambda tag, i: statistics.median(p[tag][i] for p in pairs)
    rate = [p["B"][0] / p["A"][0] for p in pairs]
    cpu = [p["B"][1] / p["A"][1] for p in pairs]
    bad = sum(p[t][2] != "pass" for p in pairs for t in "AB")
    print(f"| {cell} | {med('A', 0):.0f}, {med('A', 1):.2f} | {med('B', 0):.0f}, {med('B', 1):.2f} "
          f"| **{statistics.median(rate):.3f}** ({', '.join(f'{x:.3f}' for x in rate)}) "
          f"| **{statistics.median(cpu):.3f}** ({', '.join(f'{x:.3f}' for x in cpu)}) "
          f"| {sum(x > 1 for x in rate)} / {sum(x < 1 for x in cpu)} of {len(pairs)}"
          + (f" ({bad} runs not pass)" if bad else "") + " |")
