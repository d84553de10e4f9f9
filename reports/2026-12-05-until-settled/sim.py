# The sequential stopping rule of the decision (crates/report/src/decision/evidence.rs
# settle_p) simulated: how often two equal designs are called settled, and how often a
# faster one is settled the right way, at a fixed 3 runs a side and repeated until
# settled up to 6. Run: python3 sim.py (about a minute). reports/2026-12-05-until-settled.
import random, statistics as st
from functools import lru_cache
@lru_cache(None)
def f(n,m,u):
    if u<0: return 0
    if n==0 or m==0: return 1 if u==0 else 0
    return f(n-1,m,u-m)+f(n,m-1,u)
def p_greater(a,b):
    n,m=len(a),len(b)
    u=sum(1 for x in a for y in b if x>y)+0.5*sum(1 for x in a for y in b if x==y)
    import math
    tot=math.comb(n+m,n)
    from math import ceil
    return sum(f(n,m,k) for k in range(ceil(u),n*m+1))/tot
def settle_p(n): return 0.05/(max(n-3,0)+1)
def trial(maxn, rng):
    a=[rng.gauss(0,1) for _ in range(3)]; b=[rng.gauss(0,1) for _ in range(3)]
    while True:
        hi,lo=(a,b) if st.median(a)>=st.median(b) else (b,a)
        n=min(len(a),len(b))
        if p_greater(hi,lo)<=settle_p(n)+1e-9: return True
        if n>=maxn: return False
        a.append(rng.gauss(0,1)); b.append(rng.gauss(0,1))
rng=random.Random(7)
for maxn in (3,6):
    N=20000
    s=sum(trial(maxn,rng) for _ in range(N))
    print(maxn, s/N)
def trial2(maxn, rng, d):
    a=[rng.gauss(d,1) for _ in range(3)]; b=[rng.gauss(0,1) for _ in range(3)]
    while True:
        n=min(len(a),len(b))
        if st.median(a)>=st.median(b) and p_greater(a,b)<=settle_p(n)+1e-9: return 1
        if st.median(b)>st.median(a) and p_greater(b,a)<=settle_p(n)+1e-9: return -1
        if n>=maxn: return 0
        a.append(rng.gauss(d,1)); b.append(rng.gauss(0,1))
for d in (1.0,2.0):
    for maxn in (3,6):
        N=10000; r=[trial2(maxn,rng,d) for _ in range(N)]
        print("d",d,"maxn",maxn,"right",r.count(1)/N,"wrong",r.count(-1)/N)
