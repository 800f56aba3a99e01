#!/usr/bin/python3
"""PyTorch's side of `make bench`: single-thread GEMM GFLOP/s and ms per
training step, one thread, printed as one JSON object. The models are
corebench's (main.go, newTrainer), built the same way:

  mlp, lenet  the MLP and LeNet of shared/anchors/train_ddp.py, batch 64,
              cross-entropy, SGD lr 0.01 momentum 0.9;
  lstm, gru   tools/lstmbench/lstm_step.py's Classifier (1 layer,
              hidden 64, over the 28 rows of a (64, 28, 28) batch),
              cross-entropy, Adam lr 1e-3;
  block       one causal pre-LayerNorm nn.TransformerEncoderLayer (width
              128, 4 heads, GELU MLP of 512, dropout 0, batch first) on a
              (8, 128, 128) batch, MSE against a fixed random target,
              AdamW lr 1e-3 weight decay 0.01.

Usage: /usr/bin/python3 torch_step.py [--models mlp:200,lstm:50,...] [--reps R]
"""
import argparse
import json
import os
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lstmbench"))
from lstm_step import Classifier  # noqa: E402


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)


class Block(nn.Module):
    """nn.TransformerBlock(rng, 128, 4, 512, 0, true) of godist: the
    encoder layer called with a causal mask."""

    def __init__(self, width=128, heads=4, seq=128):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.0,
                                                activation="gelu", batch_first=True, norm_first=True)
        self.register_buffer("mask", causal_mask(seq))

    def forward(self, x):
        return self.layer(x, src_mask=self.mask)


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


def make_trainer(kind):
    """The optimizer and the loss function (the forward pass on a fixed
    batch) of model kind."""
    torch.manual_seed(0)
    if kind in ("mlp", "lenet"):
        net = make_model(kind)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(64, 1, 28, 28)
        y = torch.randint(0, 10, (64,))
        return opt, lambda: F.cross_entropy(net(x), y)
    if kind in ("lstm", "gru"):
        net = Classifier(kind)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        x = torch.randn(64, 28, 28)
        y = torch.randint(0, 10, (64,))
        return opt, lambda: F.cross_entropy(net(x), y)
    if kind == "block":
        net = Block()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
        x = torch.randn(8, 128, 128)
        y = torch.randn(8, 128, 128)
        return opt, lambda: F.mse_loss(net(x), y)
    raise ValueError(f"no model {kind!r}")


def step_ms(kind, steps, reps):
    opt, loss = make_trainer(kind)
    runs = []
    for r in range(reps + 1):
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss().backward()
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
    ap.add_argument("--models", default="mlp:200,lenet:200,lstm:50,gru:50,block:20",
                    help="the models to time, each with its steps per timing run")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", cfg)
    out = {
        "torch": torch.__version__,
        "blas": blas.group(1) if blas else "unknown",
        "mkldnn": torch.backends.mkldnn.is_available(),
        "gemm": {f"{m}x{k}x{n}": gemm_gflops(m, k, n, args.reps) for m, k, n in [(64, 784, 256), (256, 256, 256), (1024, 1024, 1024)]},
        "ms_per_step": {kind: step_ms(kind, int(steps), args.reps)
                        for kind, steps in (m.split(":") for m in args.models.split(","))},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
