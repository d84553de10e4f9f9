"""Per-op instructions of named functions (inclusive) between two callgrind runs of
different op counts: (I(big) - I(small)) / (ops(big) - ops(small)).
Usage: python3 cg_parts.py SMALL.out BIG.out OPS_SMALL OPS_BIG PATTERN..."""
import re, subprocess, sys

def inclusive(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    d = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*)$", line)
        if m:
            name = m.group(2)
            d[name] = max(d.get(name, 0), int(m.group(1).replace(",", "")))
    return d

small, big = inclusive(sys.argv[1]), inclusive(sys.argv[2])
n = int(sys.argv[4]) - int(sys.argv[3])
for pat in sys.argv[5:]:
    hits = [k for k in big if re.search(pat, k) and k.endswith("]")]
    for k in sorted(hits, key=lambda k: -big[k])[:1]:
        per = (big[k] - small.get(k, 0)) / n
        print(f"{per:8.0f}  {pat}  ({k.split(':', 1)[-1][:110]})")
