#!/usr/bin/python3
"""PyTorch DDP reference trajectories for parallel/ddp/parity_test.go.

Run with Debian's PyTorch 1.13:  /usr/bin/python3 make_ddp_parity.py
It writes ddp_parity.safetensors beside this script (safetensors written by
hand with json + struct, as testdata/parity/make_parity.py does). The Go test
reads it; CI needs neither PyTorch nor the full dataset.

Setup, as shared/anchors/train_ddp.py: the first 3000 Fashion-MNIST training
examples (exactly the subset in testdata/fashion-mnist), normalised with
mean 0.2860 / std 0.3530 in float32; torch.manual_seed(0) on every rank
before the model is built; DistributedSampler(shuffle=True, seed=0,
set_epoch(e)); batch 64 per rank sliced straight from the tensors;
SGD(lr=0.01, momentum=0.9); CrossEntropyLoss; torch.set_num_threads(1);
gloo on CPU. 3000/2 = 1500 examples per rank make 24 steps an epoch (23 of
64 and one of 28), so 100 steps run through epochs 0..4 (set_epoch each).

Cases:
  mlp        2-rank DDP, the anchor's MLP.
  lenet_bn   2-rank DDP, the anchor's LeNet with nn.BatchNorm2d after each
             Conv2d; each rank normalises with its own batch's statistics
             and DDP (broadcast_buffers=True, the default) broadcasts rank
             0's buffers before every forward.
  lenet_syncbn  the same LeNet with BatchNorm, as SyncBatchNorm would train
             it. torch 1.13 refuses SyncBatchNorm on CPU (DDP's constructor:
             "ValueError: SyncBatchNorm layers only work with GPU modules";
             SyncBatchNorm.forward itself: "ValueError: SyncBatchNorm
             expected input tensor to be on GPU"), so this case is one
             process running a plain BatchNorm model on the concatenation of
             rank 0's and rank 1's batches (128 examples): the statistics
             SyncBatchNorm would all-reduce. Its gradient, that of the mean
             of the two ranks' losses, is what 2-rank DDP with SyncBatchNorm
             averages. "loss.rank{r}" is the loss over rank r's half.

Stored (float32 unless said): {case}.loss.rank0 / .rank1 (one per step),
{case}.step0.grad.{param} (rank 0's averaged gradients after the first
backward), and for the BatchNorm cases {case}.final[.rank{r}].{buffer} (the
buffers after the last step; int64 for num_batches_tracked).

Every case is also run in float64 (the same initial weights and data,
converted with .double()): {case}.loss_f64.rank{r} (float64) and, for the
LeNet cases, {case}.step0.grad_f64.{param} (rounded to float32) and
{case}.final_f64[.rank{r}].{buffer} (float64). They are the
exact-arithmetic yardstick: LeNet with BatchNorm amplifies float32 round-off
roughly tenfold every ten steps, so PyTorch's own float32 trajectory drifts
from its float64 one (and from itself under a mere change of summation
order) by about 1e-2 relative after 100 steps; the Go test uses them to tell
round-off from a real difference.
"""
import gzip
import json
import os
import socket
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "fashion-mnist")
N = 3000
STEPS = 100
BS = 64
WORLD = 2


def load_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_data(torch):
    # The anchor's normalisation, on the first N training examples.
    x = torch.from_numpy(load_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz"))[:N].copy()).float().div_(255.0)
    x = ((x - 0.2860) / 0.3530).unsqueeze(1)  # N,1,28,28
    y = torch.from_numpy(load_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz"))[:N].copy()).long()
    assert len(x) == N and len(y) == N
    return x, y


def make_model(nn, kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                             nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    if kind == "lenet_bn":  # the anchor's LeNet, BatchNorm2d after each Conv2d
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    raise ValueError(kind)


def batches(torch, sampler):
    """Yields (epoch, step, index tensor) for STEPS steps."""
    step, ep = 0, 0
    while True:
        sampler.set_epoch(ep)
        idx = torch.tensor(list(iter(sampler)), dtype=torch.long)
        for s in range(0, len(idx), BS):
            yield ep, step, idx[s:s + BS]
            step += 1
            if step == STEPS:
                return
        ep += 1


def worker(rank, port, kind, f64, q):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    xtr, ytr = load_data(torch)
    model = make_model(nn, kind)
    if f64:  # the same initial weights and data, in float64
        model, xtr = model.double(), xtr.double()
    net = DDP(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    sampler = DistributedSampler(range(N), num_replicas=WORLD, rank=rank, shuffle=True, seed=0)
    net.train()
    out = {}
    losses = []
    for _, step, b in batches(torch, sampler):
        x, y = xtr[b], ytr[b]
        opt.zero_grad(set_to_none=True)
        loss = lossf(net(x), y)
        loss.backward()
        if step == 0 and rank == 0 and (not f64 or kind != "mlp"):
            for k, p in model.named_parameters():
                out[f"{kind}.step0.grad{suffix(f64)}.{k}"] = p.grad.detach().float().clone().numpy()
        opt.step()
        losses.append(loss.item())
    out[f"{kind}.loss{suffix(f64)}.rank{rank}"] = np.array(losses, dtype=np.float64 if f64 else np.float32)
    if kind != "mlp":
        for k, v in model.named_buffers():
            out[f"{kind}.final{suffix(f64)}.rank{rank}.{k}"] = v.detach().clone().numpy()
    dist.barrier()
    dist.destroy_process_group()
    q.put(out)


def suffix(f64):
    return "_f64" if f64 else ""


def run_ddp(kind, f64=False):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = [ctx.Process(target=worker, args=(r, port, kind, f64, q)) for r in range(WORLD)]
    for p in procs:
        p.start()
    out = {}
    for _ in procs:
        out.update(q.get())
    for p in procs:
        p.join()
        assert p.exitcode == 0, f"{kind}: a rank failed"
    return out


def run_global_batch(f64=False):
    """lenet_syncbn: one process, BatchNorm over both ranks' batches."""
    import torch
    import torch.nn as nn
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(1)
    torch.manual_seed(0)
    xtr, ytr = load_data(torch)
    model = make_model(nn, "lenet_bn")
    if f64:
        model, xtr = model.double(), xtr.double()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    samplers = [DistributedSampler(range(N), num_replicas=WORLD, rank=r, shuffle=True, seed=0) for r in range(WORLD)]
    streams = [batches(torch, s) for s in samplers]
    model.train()
    out = {}
    losses = [[] for _ in range(WORLD)]
    for parts in zip(*streams):
        step = parts[0][1]
        idx = [b for _, _, b in parts]
        sizes = [len(b) for b in idx]
        assert len(set(sizes)) == 1  # equal halves: mean of means = mean over all
        b = torch.cat(idx)
        opt.zero_grad(set_to_none=True)
        logits = model(xtr[b])
        per = [lossf(logits[r * sizes[0]:(r + 1) * sizes[0]], ytr[idx[r]]) for r in range(WORLD)]
        loss = sum(per) / WORLD  # what DDP's averaged gradient is the gradient of
        loss.backward()
        if step == 0:
            for k, p in model.named_parameters():
                out[f"lenet_syncbn.step0.grad{suffix(f64)}.{k}"] = p.grad.detach().float().clone().numpy()
        opt.step()
        for r in range(WORLD):
            losses[r].append(per[r].item())
    for r in range(WORLD):
        out[f"lenet_syncbn.loss{suffix(f64)}.rank{r}"] = np.array(losses[r], dtype=np.float64 if f64 else np.float32)
    for k, v in model.named_buffers():
        out[f"lenet_syncbn.final{suffix(f64)}.{k}"] = v.detach().clone().numpy()
    return out


def save(path, arrays, metadata):
    dt = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}
    header, blobs, off = {}, [], 0
    for k in sorted(arrays):
        a = np.asarray(arrays[k])  # (np.ascontiguousarray would make a 0-d array 1-d)
        b = a.tobytes(order="C")
        header[k] = {"dtype": dt[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    import torch
    out = {}
    for f64 in (False, True):
        out.update(run_ddp("mlp", f64))
        out.update(run_ddp("lenet_bn", f64))
        out.update(run_global_batch(f64))
    meta = {"generator": "make_ddp_parity.py", "torch": torch.__version__, "world": str(WORLD),
            "steps": str(STEPS), "batch_per_rank": str(BS), "examples": str(N)}
    save(os.path.join(HERE, "ddp_parity.safetensors"), out, meta)
    for k in sorted(out):
        if ".loss" in k:
            print(k, "first", out[k][0], "last", out[k][-1])
    print(f"wrote {len(out)} tensors, torch {torch.__version__}")


if __name__ == "__main__":
    main()
