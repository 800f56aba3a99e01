#!/usr/bin/env python3
"""Skew between two DDP ranks, from the example's --step-log files.

    python3 tools/ddpcmp/skew.py PREFIX

Each line of PREFIX.rank0 / PREFIX.rank1: step, and the Unix ns times
backward began, backward ended and the gradients were reduced. Prints
percentiles (first 50 steps skipped) of: the step; the time from the end
of the previous step's reduction to the end of backward on each rank (the
compute between synchronisations); |skew|, how far apart the ranks ended
backward; and the shorter of the two ranks' waits, which is the reduction
itself once both have arrived.
"""
import sys

def load(p):
    return [list(map(int, l.split())) for l in open(p)]

def pct(xs):
    xs = sorted(xs)
    n = len(xs)
    return "p10 %6.0f  p50 %6.0f  p90 %6.0f  mean %6.0f" % (xs[n // 10], xs[n // 2], xs[9 * n // 10], sum(xs) / n)

a, b = load(sys.argv[1] + ".rank0"), load(sys.argv[1] + ".rank1")
n = min(len(a), len(b))
rng = range(51, n)
us = 1e3
print("step us          ", pct([(a[i][1] - a[i - 1][1]) / us for i in rng]))
for name, x in (("rank 0", a), ("rank 1", b)):
    print("compute %s us " % name, pct([(x[i][2] - x[i - 1][3]) / us for i in rng]))
print("|skew| us        ", pct([abs(a[i][2] - b[i][2]) / us for i in rng]))
print("shorter wait us  ", pct([min(a[i][3] - a[i][2], b[i][3] - b[i][2]) / us for i in rng]))
