#!/usr/bin/python3
"""PyTorch's side of `make bench`: single-thread GEMM GFLOP/s and ms per
training step (MLP and LeNet of shared/anchors/train_ddp.py, batch 64,
SGD lr 0.01 momentum 0.9, one thread), printed as one JSON object.

Usage: /usr/bin/python3 torch_step.py [--steps N]
"""
import argparse
import json
import re
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                             nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def step_ms(kind, steps, reps):
    torch.manual_seed(0)
    net = make_model(kind)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 1, 28, 28)
    y = torch.randint(0, 10, (64,))
    runs = []
    for r in range(reps + 1):
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()
        if r > 0:  # the first run warms up
            runs.append((time.perf_counter() - t0) * 1e3 / steps)
    return median(runs)


def gemm_gflops(m, k, n, reps):
    a, b = torch.randn(m, k), torch.randn(k, n)
    iters = max(1, int(2e8 / (2 * m * n * k)))
    runs = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.mm(a, b)
        runs.append(2 * m * n * k * iters / (time.perf_counter() - t0) / 1e9)
    return median(runs[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", cfg)
    out = {
        "torch": torch.__version__,
        "blas": blas.group(1) if blas else "unknown",
        "mkldnn": torch.backends.mkldnn.is_available(),
        "gemm": {f"{m}x{k}x{n}": gemm_gflops(m, k, n, args.reps) for m, k, n in [(64, 784, 256), (256, 256, 256), (1024, 1024, 1024)]},
        "ms_per_step": {kind: step_ms(kind, args.steps, args.reps) for kind in ["mlp", "lenet"]},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
