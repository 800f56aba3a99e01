#!/usr/bin/python3
"""PyTorch's side of BenchmarkLSTMStep (models/bench_test.go): ms
per training step of the LSTM classifier of issue 18 at one thread.

The model: a 1-layer LSTM (input 28, hidden 64, batch_first) over the 28
rows of a batch of 64 random Fashion-MNIST-shaped images, the last step's
output through a Linear to 10 classes, cross-entropy, Adam (lr 1e-3).
Each repetition times `--steps` steps; the first warms up, and the median
of the rest is printed, with the minimum, as one JSON object.

Usage: OPENBLAS_NUM_THREADS=1 /usr/bin/python3 lstm_step.py [--steps N] [--reps R]
"""
import argparse
import json
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Classifier(nn.Module):
    """models.RecurrentClassifier: cell "lstm" (LSTMClassifier) or
    "gru" (GRUClassifier), its parameters named <cell>.* and fc.*."""

    def __init__(self, cell="lstm"):
        super().__init__()
        self.cell = cell
        self.add_module(cell, {"lstm": nn.LSTM, "gru": nn.GRU}[cell](28, 64, batch_first=True))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        out, _ = getattr(self, self.cell)(x)
        return self.fc(out[:, -1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = Classifier()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.randn(64, 28, 28)
    y = torch.randint(0, 10, (64,))
    runs = []
    for r in range(a.reps + 1):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()
        if r > 0:  # the first repetition warms up
            runs.append((time.perf_counter() - t0) * 1e3 / a.steps)
    runs.sort()
    print(json.dumps({"model": "lstm", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "ms_per_step": runs[len(runs) // 2], "min_ms_per_step": runs[0]}))


if __name__ == "__main__":
    main()
