#!/usr/bin/python3
"""One rank of tools/initscale's PyTorch side: import torch, say "ready",
wait for the start time the tool sends every rank on stdin (seconds since
the epoch, so that the imports' time is not counted), init_process_group("gloo") from
the env:// variables, three all-reduces of 8 floats, and one JSON line:
the seconds from the start time to the end of init, to the end of the
all-reduces, and the process's sockets and shared-memory mappings then."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def count_fds(kind):
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + fd).startswith(kind):
                n += 1
        except OSError:
            pass
    return n


def count_shm_maps():
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "/dev/shm/" in line)


def main():
    print("ready", flush=True)
    t0 = float(sys.stdin.readline())
    while time.time() < t0:
        time.sleep(min(0.01, max(0.0, t0 - time.time())))
    dist.init_process_group("gloo")
    init_s = time.time() - t0
    x = torch.ones(8)
    for _ in range(3):
        dist.all_reduce(x)
    done_s = time.time() - t0
    ok = bool(x[0].item() == float(dist.get_world_size() ** 3))
    print(json.dumps({"side": "gloo", "rank": dist.get_rank(), "init_s": init_s, "done_s": done_s,
                      "sockets": count_fds("socket:"), "shm_maps": count_shm_maps(), "ok": ok}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
