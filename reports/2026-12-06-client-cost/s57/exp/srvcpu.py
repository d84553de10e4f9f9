#!/usr/bin/env python3
"""Total CPU seconds of a server process tree: the parent's own + reaped children's + live children's."""
import os, sys
def ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return [int(x) for x in f[11:15]]  # utime stime cutime cstime
def total(ppid):
    u, s, cu, cs = ticks(ppid)
    t = u + s + cu + cs
    for p in os.listdir("/proc"):
        if not p.isdigit(): continue
        try:
            st = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            if int(st[1]) == ppid:
                t += int(st[11]) + int(st[12])
        except OSError:
            pass
    return t / os.sysconf("SC_CLK_TCK")
if __name__ == "__main__":
    print(f"{total(int(sys.argv[1])):.2f}")
