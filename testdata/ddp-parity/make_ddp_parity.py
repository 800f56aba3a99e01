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
  lenet_syncbn  2-rank DDP, the same LeNet with every BatchNorm2d running
             PyTorch's own SyncBatchNorm autograd function
             (torch.nn.modules._functions.SyncBatchNorm: statistics
             all-gathered over gloo in forward, sum_dy and sum_dy_xmu
             all-reduced in backward). torch 1.13 refuses SyncBatchNorm on
             CPU (DDP's constructor: "ValueError: SyncBatchNorm layers only
             work with GPU modules"; SyncBatchNorm.forward: "SyncBatchNorm
             expected input tensor to be on GPU"), and the five kernels that
             function calls (torch.batch_norm_stats,
             batch_norm_gather_stats_with_counts, batch_norm_elemt,
             batch_norm_backward_reduce, batch_norm_backward_elemt) exist only
             for CUDA. So this script gives those five names CPU
             implementations (cpu_sync_bn_kernels below: the CUDA kernels'
             formulas in torch ops) and wraps each BatchNorm2d in a module
             whose forward is SyncBatchNorm.forward without the GPU check;
             everything else, the autograd function, DDP and gloo, is
             PyTorch's.
  lenet_syncbn_joined  a cross-check of the above, not stored: one process
             running plain BatchNorm on the concatenation of both ranks'
             batches (128 examples), whose gradient, that of the mean of
             the two ranks' losses, is what 2-rank SyncBatchNorm computes.
             In float64 its losses must match lenet_syncbn's within 1e-9
             relative, or the script fails.

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


def cpu_sync_bn_kernels(torch):
    """CPU versions of the CUDA-only kernels SyncBatchNorm's autograd
    function calls, with the CUDA kernels' formulas (per channel, over the
    batch and spatial dimensions)."""

    def dims(x):
        return [0] + list(range(2, x.dim()))

    def shape(x, v):
        return v.view([1, -1] + [1] * (x.dim() - 2))

    def stats(x, eps):
        mean = x.mean(dims(x))
        var = (x - shape(x, mean)).pow(2).mean(dims(x))  # biased
        return mean, (var + eps).rsqrt()

    def gather_stats_with_counts(x, mean_all, invstd_all, running_mean, running_var, momentum, eps, counts):
        # Chan et al.'s parallel combination of the ranks' (count, mean, M2).
        counts = counts.to(mean_all.dtype).view(-1, 1)
        n = counts.sum(0)
        mean = (counts * mean_all).sum(0) / n
        var_all = invstd_all.pow(-2) - eps
        m2 = (counts * (var_all + (mean_all - mean).pow(2))).sum(0)
        var = m2 / n
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(momentum * mean)
        if running_var is not None:
            running_var.mul_(1 - momentum).add_(momentum * m2 / (n - 1))
        return mean, (var + eps).rsqrt()

    def elemt(x, weight, bias, mean, invstd, eps):
        y = (x - shape(x, mean)) * shape(x, invstd)
        if weight is not None:
            y = y * shape(x, weight)
        if bias is not None:
            y = y + shape(x, bias)
        return y

    def backward_reduce(dy, x, mean, invstd, weight, input_g, weight_g, bias_g):
        sum_dy = dy.sum(dims(x))
        sum_dy_xmu = (dy * (x - shape(x, mean))).sum(dims(x))
        gw = sum_dy_xmu * invstd if weight_g else None
        gb = sum_dy if bias_g else None
        return sum_dy, sum_dy_xmu, gw, gb

    def backward_elemt(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
        n = count.sum().to(x.dtype)
        mean_dy = sum_dy / n
        mean_dy_xmu = sum_dy_xmu / n
        k = shape(x, mean_dy_xmu * invstd * invstd)
        g = invstd if weight is None else invstd * weight
        return (dy - shape(x, mean_dy) - (x - shape(x, mean)) * k) * shape(x, g)

    torch.batch_norm_stats = stats
    torch.batch_norm_gather_stats_with_counts = gather_stats_with_counts
    torch.batch_norm_elemt = elemt
    torch.batch_norm_backward_reduce = backward_reduce
    torch.batch_norm_backward_elemt = backward_elemt
    torch.cuda.is_current_stream_capturing = lambda: False


def cpu_sync_batchnorm(torch, nn, model):
    """Replaces every BatchNorm2d of model (in place, keeping its
    parameters and buffers) by one that trains through PyTorch's
    SyncBatchNorm autograd function: nn.SyncBatchNorm.forward for the
    training case, without its GPU check. It is not an nn.SyncBatchNorm
    instance, which DDP would refuse on CPU."""
    import torch.distributed as dist
    from torch.nn.modules._functions import SyncBatchNorm as sync_batch_norm

    class CPUSyncBatchNorm2d(nn.BatchNorm2d):
        def forward(self, x):
            assert self.training and self.track_running_stats and self.momentum is not None
            self.num_batches_tracked.add_(1)
            return sync_batch_norm.apply(x, self.weight, self.bias, self.running_mean, self.running_var,
                                         self.eps, self.momentum, dist.group.WORLD, dist.get_world_size())

    for name, m in list(model.named_children()):
        if isinstance(m, nn.BatchNorm2d):
            s = CPUSyncBatchNorm2d(m.num_features, m.eps, m.momentum)
            s.load_state_dict(m.state_dict())
            s = s.to(m.weight.dtype)
            setattr(model, name, s)
    return model


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
    model = make_model(nn, "lenet_bn" if kind == "lenet_syncbn" else kind)
    if f64:  # the same initial weights and data, in float64
        model, xtr = model.double(), xtr.double()
    if kind == "lenet_syncbn":
        cpu_sync_bn_kernels(torch)
        model = cpu_sync_batchnorm(torch, nn, model)
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
    """lenet_syncbn_joined: one process, BatchNorm over both ranks' batches."""
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
                out[f"lenet_syncbn_joined.step0.grad{suffix(f64)}.{k}"] = p.grad.detach().float().clone().numpy()
        opt.step()
        for r in range(WORLD):
            losses[r].append(per[r].item())
    for r in range(WORLD):
        out[f"lenet_syncbn_joined.loss{suffix(f64)}.rank{r}"] = np.array(losses[r], dtype=np.float64 if f64 else np.float32)
    for k, v in model.named_buffers():
        out[f"lenet_syncbn_joined.final{suffix(f64)}.{k}"] = v.detach().clone().numpy()
    return out


def check_syncbn(out):
    """The 2-rank SyncBatchNorm run must train as BatchNorm over the joined
    batch (float64, where round-off stays far below the tolerance), and its
    ranks' buffers must agree; then the joined run's entries are dropped
    and rank 0's buffers kept as lenet_syncbn.final[_f64].{buffer}."""
    for r in range(WORLD):
        a, b = out[f"lenet_syncbn.loss_f64.rank{r}"], out[f"lenet_syncbn_joined.loss_f64.rank{r}"]
        rel = float(np.max(np.abs(a - b) / np.abs(b)))
        print(f"lenet_syncbn rank {r}: float64 losses vs the joined batch: max rel {rel:.2e}")
        assert rel < 1e-9, "the CPU SyncBatchNorm kernels do not train as BatchNorm over the joined batch"
    for k in [k for k in out if k.startswith("lenet_syncbn.final")]:
        pre, name = k.split(".rank", 1)
        r, buf = name.split(".", 1)
        if r == "0":
            other = out[f"{pre}.rank1.{buf}"]
            assert np.array_equal(out[k], other) or np.allclose(out[k], other, rtol=1e-6, atol=0), k
            out[f"{pre}.{buf}"] = out[k]
    for k in [k for k in out if k.startswith("lenet_syncbn_joined.") or
              (k.startswith("lenet_syncbn.final") and ".rank" in k)]:
        del out[k]


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
        out.update(run_ddp("lenet_syncbn", f64))
        out.update(run_global_batch(f64))
    check_syncbn(out)
    meta = {"generator": "make_ddp_parity.py", "torch": torch.__version__, "world": str(WORLD),
            "steps": str(STEPS), "batch_per_rank": str(BS), "examples": str(N)}
    save(os.path.join(HERE, "ddp_parity.safetensors"), out, meta)
    for k in sorted(out):
        if ".loss" in k:
            print(k, "first", out[k][0], "last", out[k][-1])
    print(f"wrote {len(out)} tensors, torch {torch.__version__}")


if __name__ == "__main__":
    main()
