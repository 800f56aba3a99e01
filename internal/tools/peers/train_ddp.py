#!/usr/bin/python3
"""PyTorch's side of godist's training comparisons: DistributedDataParallel
over gloo on Fashion-MNIST with the models, batch, optimizer and data
scaling of examples/ddp-fashion-mnist, so the two can be run side by side
(internal/tools/hostcmp --train).

  * the models: mlp (784-256-128-10, ReLU) and lenet (conv 1->6 5x5 pad 2,
    max pool, conv 6->16 5x5, max pool, 400-120-84-10, ReLU), as
    internal/models builds them;
  * the data: the IDX files of Fashion-MNIST (gzipped or not), x/255 then
    (x - 0.2860) / 0.3530, float32;
  * DistributedSampler (shuffled, seeded), --batch samples per rank and
    step, SGD with momentum, cross-entropy;
  * the timing: barrier; t0; the epoch's steps (or --max-steps); barrier;
    samples/s = steps x batch x world / time, as the Go example counts.

Run under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the
launcher); rank 0 prints one JSON line: model, world, samples_per_s,
ms_per_step, last_loss, test_acc.
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    """Reads an IDX file (gzipped when its name ends in .gz) as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        sys.exit(f"train_ddp.py: {path}: not an IDX file of unsigned bytes")
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def find(directory, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(directory, name)
        if os.path.exists(p):
            return p
    sys.exit(f"train_ddp.py: no {stem} (or {stem}.gz) in {directory}")


def load(directory, train):
    pre = "train" if train else "t10k"
    x = read_idx(find(directory, f"{pre}-images-idx3-ubyte"))
    y = read_idx(find(directory, f"{pre}-labels-idx1-ubyte"))
    x = torch.from_numpy(x.copy()).float().div_(255.0).sub_(MEAN).div_(STD).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    sys.exit(f"train_ddp.py: unknown model {name!r} (want mlp or lenet)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--data", default=os.environ.get("GODIST_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="stop each epoch after this many steps (0: the whole epoch)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bucket-cap-mb", type=float, default=25)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    xtr, ytr = load(args.data, True)
    xte, yte = load(args.data, False)
    net = DDP(model(args.model), bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    sampler = DistributedSampler(range(len(xtr)), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    steps, train_time, last = 0, 0.0, float("nan")
    for ep in range(args.epochs):
        sampler.set_epoch(ep)
        idx = torch.tensor(list(iter(sampler)))
        nb = (len(idx) + args.batch - 1) // args.batch
        if args.max_steps > 0:
            nb = min(nb, args.max_steps)
        net.train()
        dist.barrier()
        t0 = time.perf_counter()
        for s in range(nb):
            b = idx[s * args.batch:(s + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(xtr[b]), ytr[b])
            loss.backward()
            opt.step()
            steps += 1
            last = loss.item()
        dist.barrier()
        train_time += time.perf_counter() - t0
    acc = 0.0
    if rank == 0:
        net.eval()
        with torch.no_grad():
            acc = (net.module(xte).argmax(1) == yte).float().mean().item()
        print(json.dumps({"backend": "gloo", "model": args.model, "world": world, "steps": steps,
                          "samples_per_s": steps * args.batch * world / train_time,
                          "ms_per_step": train_time * 1e3 / steps, "last_loss": last, "test_acc": acc}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
