#!/usr/bin/python3
"""PyTorch's TCPStore under the rendezvous' load, as tools/storeload puts
it on godist's store: N clients connected at once, every round each one
sets its key, adds to a counter, the last one sets "go", every one gets
"go" (a barrier) and then waits for its neighbour's key (there already).

The server is TCPStore(is_master=True) in a process of its own; the
clients are threads spread over --procs processes (Python's best
configuration: threads release the GIL inside the store's calls, and
several processes use every core). Prints one JSON line with the same
fields as storeload's godist side.

    python3 store_load.py --clients 10000 --rounds 3 --procs 8
"""

import argparse
import datetime
import json
import multiprocessing as mp
import os
import queue
import resource
import subprocess
import sys
import threading
import time


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def raise_file_limit(want):
    """Raises RLIMIT_NOFILE to want where allowed (the hard limit too as
    root), as a server of many clients must."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


def cpu_s(pid):
    """The CPU time (user and system) a process has used, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_proc(port, first, count, total, rounds, ready, start, out):
    import torch.distributed as dist

    raise_file_limit(count + 256)

    threading.stack_size(256 << 10)
    timeout = datetime.timedelta(seconds=600)
    stores = [None] * count
    errors = []

    def connect(j):
        try:
            stores[j] = dist.TCPStore("127.0.0.1", port, None, False, timeout)
        except Exception as e:  # reported below
            errors.append(repr(e))

    t0 = time.time()
    # Connect in waves, as many at once as the listen queue takes.
    for lo in range(0, count, 256):
        ts = [threading.Thread(target=connect, args=(j,)) for j in range(lo, min(lo + 256, count))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    ready.put((time.time() - t0, errors[:3]))
    if errors:
        return
    start.wait()
    lats = []
    barrier = []
    lock = threading.Lock()

    def work(j):
        s, i = stores[j], first + j
        mine, wait = [], []
        for r in range(rounds):
            p = f"r{r}/"
            t = time.perf_counter()
            s.set(p + f"rank{i}", b"10.0.0.1:29500 pid 12345 host-a")
            t1 = time.perf_counter()
            n = s.add(p + "count", 1)
            t2 = time.perf_counter()
            mine += [t1 - t, t2 - t1]
            if n == total:
                s.set(p + "go", b"1")
            t3 = time.perf_counter()
            s.get(p + "go")
            t4 = time.perf_counter()
            s.wait([p + f"rank{(i + 1) % total}"])
            t5 = time.perf_counter()
            mine.append(t5 - t4)
            wait.append(t4 - t3)
        with lock:
            lats.extend(mine)
            barrier.extend(wait)

    ts = [threading.Thread(target=work, args=(j,)) for j in range(count)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((time.time(), lats, barrier))


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--procs", type=int, default=8)
    a = ap.parse_args()
    import torch.distributed  # noqa: F401  (once, before the clients fork)

    server = subprocess.Popen(
        [sys.executable, "-c",
         "import datetime, resource, sys, time, torch.distributed as d\n"
         f"want = {2 * a.clients + 1024}\n"
         "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
         "try:\n"
         "    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))\n"
         "except (ValueError, OSError):\n"
         "    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))\n"
         "s = d.TCPStore('127.0.0.1', 0, None, True, datetime.timedelta(seconds=600), wait_for_workers=False)\n"
         "print(s.port, flush=True)\n"
         "sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        port = int(server.stdout.readline())
        time.sleep(0.2)
        rss0 = rss_kb(server.pid)

        ctx = mp.get_context("fork")
        ready, out, start = ctx.Queue(), ctx.Queue(), ctx.Event()
        per = [a.clients // a.procs + (1 if k < a.clients % a.procs else 0) for k in range(a.procs)]
        procs, first = [], 0
        t0 = time.time()
        for k in range(a.procs):
            p = ctx.Process(target=client_proc, args=(port, first, per[k], a.clients, a.rounds, ready, start, out))
            p.start()
            procs.append(p)
            first += per[k]
        def get(q):
            # A server that dies leaves its clients waiting for ever.
            while True:
                try:
                    return q.get(timeout=1)
                except queue.Empty:
                    if server.poll() is not None:
                        raise SystemExit(f"store_load: the TCPStore server exited ({server.returncode})")

        for _ in procs:
            _, errs = get(ready)
            if errs:
                raise SystemExit(f"store_load: connecting: {errs}")
        connect_s = time.time() - t0
        rss1 = rss_kb(server.pid)
        fds = len(os.listdir(f"/proc/{server.pid}/fd"))
        cpu0 = cpu_s(server.pid)
        begin = time.time()
        start.set()
        lats, barrier, end = [], [], begin
        for _ in procs:
            t, l, b = get(out)
            end, lats, barrier = max(end, t), lats + l, barrier + b
        for p in procs:
            p.join()
        wall = end - begin
        cpu = cpu_s(server.pid) - cpu0
        ops = a.clients * a.rounds * 4 + a.rounds
        print(json.dumps({
            "store": "torch", "clients": a.clients, "rounds": a.rounds,
            "connect_s": connect_s, "wall_s": wall, "ops": ops, "ops_per_s": ops / wall,
            "p50_ms": pct(lats, 0.5) * 1e3, "p99_ms": pct(lats, 0.99) * 1e3,
            "barrier_p50_ms": pct(barrier, 0.5) * 1e3, "barrier_p99_ms": pct(barrier, 0.99) * 1e3,
            "server_rss_mb": rss1 / 1024, "rss_per_client_kb": (rss1 - rss0) / a.clients,
            "server_fds": fds, "server_cpu_us_per_op": cpu / ops * 1e6,
        }), flush=True)
    finally:
        server.stdin.close()
        server.kill()
        for p in mp.active_children():
            p.kill()


if __name__ == "__main__":
    main()
