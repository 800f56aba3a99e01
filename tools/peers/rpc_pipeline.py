#!/usr/bin/python3
"""PyTorch twin of examples/rpc-pipeline: the "Distributed Pipeline
Parallelism Using RPC" tutorial's code with the example's model and
settings, to compare speed and accuracy on this machine.

  /usr/bin/python3 tools/peers/rpc_pipeline.py [--max-steps N] [--micro-batches 4]

Three processes (forked here, as tools/rpcps/ps.py does): "master" (rank
0) creates the two shards on "worker1" and "worker2" with rpc.remote and
keeps RRefs to them; shard 1 is conv(1->8, 5) ReLU maxpool(2) conv(8->16,
5) ReLU maxpool(2), built after torch.manual_seed(seed + 1); shard 2 is
flatten, linear(256->120) ReLU linear(120->10), after torch.manual_seed(seed
+ 2) (godist's tensor.NewTorchRNG draws the same weights). Each step, in a
dist_autograd.context, the master splits the batch with
xs.split(ceil(n / micro_batches)), and for each micro-batch: x_rref =
RRef(x), y_rref = p1_rref.remote().forward(x_rref), z_fut =
p2_rref.rpc_async().forward(y_rref); each shard's forward fetches its input
with to_here() and runs under its lock. The outputs are gathered with
torch.futures.wait_all and concatenated, the loss is the cross entropy of
the whole batch, then dist_autograd.backward and a
DistributedOptimizer(optim.SGD, parameter RRefs, lr) step. The batches are
DistributedSampler's (one replica, shuffle, seed), which godist's
data.NewDistributedSampler draws alike. One thread per process. The master
times the training loop, then fetches the shards' weights and evaluates
test accuracy locally. Prints one JSON line.
"""
import argparse
import gzip
import json
import os
import socket
import sys
import threading
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed.autograd as dist_autograd  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import optim  # noqa: E402
from torch.distributed.optim import DistributedOptimizer  # noqa: E402
from torch.distributed.rpc import RRef  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

ARGS = None


def load_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_data(d):
    # The normalisation of godist's data.LoadFashionMNIST.
    def imgs(name):
        x = torch.from_numpy(load_idx(os.path.join(d, name)).copy()).float().div_(255.0)
        return ((x - 0.2860) / 0.3530).unsqueeze(1)

    def labels(name):
        return torch.from_numpy(load_idx(os.path.join(d, name)).copy()).long()

    return (imgs("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            imgs("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


def build(index, seed):
    torch.manual_seed(seed + index)
    if index == 1:
        return nn.Sequential(nn.Conv2d(1, 8, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
    return nn.Sequential(nn.Flatten(), nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 10))


class Shard(nn.Module):
    """The tutorial's ResNetShard1 / ResNetShard2."""

    def __init__(self, index, seed):
        super().__init__()
        self._lock = threading.Lock()
        self.seq = build(index, seed)

    def forward(self, x_rref):
        x = x_rref.to_here()
        with self._lock:
            out = self.seq(x)
        return out

    def parameter_rrefs(self):
        return [RRef(p) for p in self.parameters()]

    def weights(self):
        return [p.detach().clone() for p in self.parameters()]


class DistNet(nn.Module):
    """The tutorial's DistResNet50: RRefs to the shards on two workers."""

    def __init__(self, micro_batches, workers, seed):
        super().__init__()
        self.micro_batches = micro_batches
        self.p1_rref = rpc.remote(workers[0], Shard, args=(1, seed))
        self.p2_rref = rpc.remote(workers[1], Shard, args=(2, seed))

    def forward(self, xs):
        size = -(-xs.size(0) // self.micro_batches)
        out_futures = []
        for x in iter(xs.split(size, dim=0)):
            x_rref = RRef(x)
            y_rref = self.p1_rref.remote().forward(x_rref)
            z_fut = self.p2_rref.rpc_async().forward(y_rref)
            out_futures.append(z_fut)
        return torch.cat(torch.futures.wait_all(out_futures))

    def parameter_rrefs(self):
        remote_params = []
        remote_params.extend(self.p1_rref.remote().parameter_rrefs().to_here())
        remote_params.extend(self.p2_rref.remote().parameter_rrefs().to_here())
        return remote_params


def run_master():
    xtr, ytr, xte, yte = load_data(ARGS.data)
    model = DistNet(ARGS.micro_batches, ["worker1", "worker2"], ARGS.seed)
    opt = DistributedOptimizer(optim.SGD, model.parameter_rrefs(), lr=ARGS.lr)
    sampler = DistributedSampler(range(len(xtr)), num_replicas=1, rank=0, shuffle=True, seed=ARGS.seed)
    samples, steps, losses = 0, 0, []
    t0 = time.perf_counter()
    for ep in range(ARGS.epochs):
        sampler.set_epoch(ep)
        idx = torch.tensor(list(iter(sampler)), dtype=torch.long)
        nb = -(-len(idx) // ARGS.batch)
        if ARGS.max_steps:
            nb = min(nb, ARGS.max_steps)
        for b in range(nb):
            i = idx[b * ARGS.batch:(b + 1) * ARGS.batch]
            inputs, labels = xtr[i], ytr[i]
            with dist_autograd.context() as context_id:
                outputs = model(inputs)
                loss = F.cross_entropy(outputs, labels)
                dist_autograd.backward(context_id, [loss])
                opt.step(context_id)
            losses.append(loss.item())
            samples += len(i)
            steps += 1
            if ARGS.log_interval and (b + 1) % ARGS.log_interval == 0:
                print(f"epoch {ep + 1} step {b + 1}/{nb}\tloss {losses[-1]:.4f}", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    w = model.p1_rref.rpc_sync().weights() + model.p2_rref.rpc_sync().weights()
    s1, s2 = build(1, ARGS.seed), build(2, ARGS.seed)
    with torch.no_grad():
        for p, v in zip(list(s1.parameters()) + list(s2.parameters()), w):
            p.copy_(v)
        pred = torch.cat([s2(s1(xte[i:i + 1000])).argmax(dim=1) for i in range(0, len(xte), 1000)])
    acc = (pred == yte).float().mean().item()
    print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "epochs": ARGS.epochs, "steps": steps,
                      "batch": ARGS.batch, "micro_batches": ARGS.micro_batches, "lr": ARGS.lr,
                      "samples": samples, "wall_s": wall, "samples_per_s": samples / wall,
                      "loss_first": losses[0], "loss_last": losses[-1], "test_accuracy": acc}), flush=True)


def worker(rank, port):
    torch.set_num_threads(ARGS.threads)
    name = "master" if rank == 0 else f"worker{rank}"
    opts = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}",
                                           num_worker_threads=16, rpc_timeout=600,
                                           _transports=["uv"], _channels=["basic"])  # shm fails here
    rpc.init_rpc(name, rank=rank, world_size=3, rpc_backend_options=opts)
    if rank == 0:
        run_master()
    rpc.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="stop each epoch after this many steps (0: all)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=os.environ.get("GODIST_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"))
    p.add_argument("--log-interval", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    ARGS = p.parse_args()
    import torch.multiprocessing as mp
    mp.set_start_method("fork")
    port = free_port()
    procs = [mp.Process(target=worker, args=(r, port)) for r in range(3)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
    sys.exit(max(abs(pr.exitcode or 0) for pr in procs))
