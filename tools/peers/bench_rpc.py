#!/usr/bin/python3
"""PyTorch's RPC framework (TensorPipe) timed the way `godist bench --rpc`
times godist's rpc package, for tools/rpccmp: two processes on
this host, worker0 calling worker1.

Each case runs 5 untimed calls, then one call whose time sets how many
fit in --target seconds (between the case's least and most), then that
many calls each timed alone; a latency case reports the median, a burst
case (calls in flight at once, "in flight" in its name) its throughput
from the median burst. The case names are godist bench --rpc's:

  rpc_sync add(2 floats)               x + y on a 2-float tensor and a number
  remote(make 2 floats).to_here()      a remote reference made, then fetched
  rpc_sync echo N B                    a tensor of N bytes there and back
  rpc_async echo 1 MiB x64 in flight   64 echoes of 1 MiB at once
  rpc_async add x256 in flight         256 small adds at once

  /usr/bin/python3 bench_rpc.py [--target SECONDS] [--port P] [--out FILE]

It prints (and writes to --out) one JSON object: backend, torch, results.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


# The remote functions (module level: TensorPipe sends them by name).
def echo(x):
    return x


def add(x, y):
    return x + y


def make(n):
    return torch.ones(n)


def timed(call, target, least, most):
    """Per-call times (seconds) of call, sized to target as godist bench does."""
    for _ in range(5):
        call()
    t0 = time.perf_counter()
    call()
    n = int(min(most, max(least, target / max(time.perf_counter() - t0, 1e-7))))
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def cases(target):
    """The cases as (name, call, least, most, report), report mapping the
    per-call times to the case's result fields."""
    small = torch.ones(2)
    peer = "worker1"

    def latency(ts):
        s = sorted(ts)
        return {"iters": len(ts), "lat_us_median": statistics.median(ts) * 1e6,
                "lat_us_p10": s[len(s) // 10] * 1e6, "lat_us_p90": s[9 * len(s) // 10] * 1e6}

    out = [
        ("rpc_sync add(2 floats)", lambda: rpc.rpc_sync(peer, add, args=(small, 3)), 20, 20000, latency),
        ("remote(make 2 floats).to_here()", lambda: rpc.remote(peer, make, args=(2,)).to_here(), 20, 20000, latency),
    ]
    for n in (1 << 10, 1 << 20, 16 << 20):
        t = torch.ones(n // 4)

        def each_way(ts, n=n):
            return {**latency(ts), "bytes": n, "GBps_each_way": n / statistics.median(ts) / 1e9}
        out.append((f"rpc_sync echo {n} B", lambda t=t: rpc.rpc_sync(peer, echo, args=(t,)), 5, 20000, each_way))

    mib = torch.ones((1 << 20) // 4)

    def echoes():
        torch.futures.wait_all([rpc.rpc_async(peer, echo, args=(mib,)) for _ in range(64)])

    def adds():
        torch.futures.wait_all([rpc.rpc_async(peer, add, args=(small, 1)) for _ in range(256)])

    out.append(("rpc_async echo 1 MiB x64 in flight", echoes, 3, 200,
                lambda ts: {"iters": len(ts), "ms_median": statistics.median(ts) * 1e3,
                            "calls_per_s": 64 / statistics.median(ts),
                            "GBps_each_way": 64 * (1 << 20) / statistics.median(ts) / 1e9}))
    out.append(("rpc_async add x256 in flight", adds, 3, 2000,
                lambda ts: {"iters": len(ts), "calls_per_s": 256 / statistics.median(ts)}))
    return out


def worker(rank, args, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=60)
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
    if rank == 0:
        results = []
        for name, call, least, most, report in cases(args.target):
            results.append({"case": name, **report(timed(call, args.target, least, most))})
        q.put(results)
    rpc.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", type=float, default=2.0, help="seconds of calls per case")
    ap.add_argument("--port", type=int, default=29555)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, args, q)) for r in range(2)]
    for p in ps:
        p.start()
    results = q.get()
    for p in ps:
        p.join()
    out = {"backend": "pytorch-rpc-tensorpipe", "torch": torch.__version__, "results": results}
    print(json.dumps(out, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
