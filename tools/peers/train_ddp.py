#!/usr/bin/python3
"""PyTorch's side of godist's training comparisons: DistributedDataParallel
over gloo on Fashion-MNIST with the models, batch, optimizer and data
scaling of examples/ddp-fashion-mnist, so the two can be run side by side
(tools/hostcmp --train).

  * the models: mlp (784-256-128-10, ReLU), lenet (conv 1->6 5x5 pad 2,
    max pool, conv 6->16 5x5, max pool, 400-120-84-10, ReLU), and lstm and
    gru (a 1-layer LSTM or GRU, input 28, hidden 64, batch first, over the
    28 rows of each image, the last step's output through a Linear to 10),
    as models builds them;
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


class Rows(nn.Module):
    """models.RecurrentClassifier: cell "lstm" (LSTMClassifier) or
    "gru" (GRUClassifier) over the rows of (N, 1, 28, 28) images, its
    parameters named <cell>.* and fc.*."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell
        self.add_module(cell, {"lstm": nn.LSTM, "gru": nn.GRU}[cell](28, 64, batch_first=True))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        out, _ = getattr(self, self.cell)(x.reshape(x.size(0), 28, 28))
        return self.fc(out[:, -1])


def model(name):
    if name in ("lstm", "gru"):
        return Rows(name)
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    sys.exit(f"train_ddp.py: unknown model {name!r} (want mlp, lenet, lstm or gru)")


class Replica(nn.Module):
    """A model without DDP, with DDP's .module, for --no-ddp."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x)


def register_hook(net, name):
    """Registers the DDP communication hook --comm-hook names."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    kind, _, arg = name.partition(":")
    if kind == "allreduce":
        return
    if kind == "fp16":
        net.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif kind == "bf16":
        net.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=int(arg or 1),
                                            start_powerSGD_iter=10)
        net.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        sys.exit(f"train_ddp.py: --comm-hook {name!r}: want allreduce, fp16, bf16 or powersgd[:R]")


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
    ap.add_argument("--comm-hook", default="allreduce",
                    help="allreduce, fp16, bf16 or powersgd:R (rank R, 1 by default, after 10 plain steps), "
                         "as examples/ddp-fashion-mnist's --comm-hook")
    ap.add_argument("--target-acc", type=float, default=0,
                    help="stop once rank 0's test accuracy, taken every --eval-every steps (outside the timed "
                         "training), reaches this (0: train the epochs)")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--no-ddp", action="store_true",
                    help="independent replicas, gradients never reduced: the step's compute alone "
                         "(as examples/ddp-fashion-mnist --unsynced)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    xtr, ytr = load(args.data, True)
    xte, yte = load(args.data, False)
    if args.no_ddp:
        net = Replica(model(args.model))
    else:
        net = DDP(model(args.model), bucket_cap_mb=args.bucket_cap_mb)
        register_hook(net, args.comm_hook)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    sampler = DistributedSampler(range(len(xtr)), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    steps, train_time, last = 0, 0.0, float("nan")
    target = None  # (steps, seconds) when --target-acc was reached

    def reached():
        """Rank 0's test accuracy against --target-acc, told to every rank."""
        flag = torch.zeros(1, dtype=torch.float64)
        if rank == 0:
            with torch.no_grad():
                flag[0] = (net.module(xte).argmax(1) == yte).float().mean().item()
        dist.broadcast(flag, src=0)
        return flag.item() >= args.target_acc

    for ep in range(args.epochs):
        if target:
            break
        sampler.set_epoch(ep)
        idx = torch.tensor(list(iter(sampler)))
        nb = (len(idx) + args.batch - 1) // args.batch
        if args.max_steps > 0:
            nb = min(nb, args.max_steps)
        net.train()
        dist.barrier()
        t0 = time.perf_counter()
        eval_time = 0.0
        for s in range(nb):
            b = idx[s * args.batch:(s + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(xtr[b]), ytr[b])
            loss.backward()
            opt.step()
            steps += 1
            last = loss.item()
            if args.target_acc > 0 and steps % args.eval_every == 0:
                e0 = time.perf_counter()
                ok = reached()
                eval_time += time.perf_counter() - e0
                if ok:
                    target = (steps, train_time + time.perf_counter() - t0 - eval_time)
                    break
        dist.barrier()
        train_time += time.perf_counter() - t0 - eval_time
    acc = 0.0
    if rank == 0:
        net.eval()
        with torch.no_grad():
            acc = (net.module(xte).argmax(1) == yte).float().mean().item()
        extra = {}
        if target:
            extra = {"reached": True, "target_steps": target[0], "target_s": target[1]}
        print(json.dumps({**extra, "backend": "gloo", "model": args.model, "world": world, "steps": steps,
                          "comm_hook": args.comm_hook,
                          "samples_per_s": steps * args.batch * world / train_time,
                          "ms_per_step": train_time * 1e3 / steps, "last_loss": last, "test_acc": acc}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
