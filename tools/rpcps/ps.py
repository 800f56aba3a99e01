#!/usr/bin/python3
"""PyTorch twin of examples/rpc-parameter-server: the "Implementing a
Parameter Server Using Distributed RPC Framework" tutorial's code with the
example's model and settings, to compare speed and accuracy on this machine.

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tools/rpcps/ps.py [--trainers 2] [--max-batches N]

Rank 0 ("parameter_server") holds a ParameterServer (the 784-256-128-10
MLP, torch.manual_seed(seed)); ranks 1..N ("trainer1"..) each get an RRef
to it (rpc.remote of get_parameter_server), and every batch of their
DistributedSampler shard (shuffle, seed) they run, in a
dist_autograd.context, the TrainerNet forward (rpc_sync of
ParameterServer.forward on the server's RRef), nll_loss of log_softmax
locally (= cross-entropy on the logits), dist_autograd.backward and a
DistributedOptimizer(optim.SGD, param RRefs, lr) step, asynchronously
across trainers. Batch 32, lr 0.03 (the tutorial's). One thread per
process. The server starts the trainers' loops by RPC after everyone has
loaded the data and times from there until all return (samples/s over
all trainers), then evaluates test accuracy locally. Prints one JSON line.
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

DATA = "/usr/share/datasets/fashion-mnist"


def load_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_data(torch):
    # The normalisation of godist's data.LoadFashionMNIST and train_ddp.py.
    def imgs(name):
        x = torch.from_numpy(load_idx(os.path.join(DATA, name)).copy()).float().div_(255.0)
        return ((x - 0.2860) / 0.3530).unsqueeze(1)

    def labels(name):
        return torch.from_numpy(load_idx(os.path.join(DATA, name)).copy()).long()

    return (imgs("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            imgs("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


import torch  # noqa: E402
import torch.distributed.autograd as dist_autograd  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import optim  # noqa: E402
from torch.distributed.optim import DistributedOptimizer  # noqa: E402
from torch.distributed.optim.optimizer import _LocalOptimizer  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

ARGS = None
DATASET = None


class ParameterServer(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(ARGS.seed)
        self.model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                                   nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, inp):
        # As the Go example: compute with copies of the parameters taken
        # under the local optimizers' lock (clone is differentiable, so the
        # gradients reach the parameters). The tutorial's plain
        # self.model(inp) fails with two concurrent trainers here:
        # "modified by an inplace operation" when the other trainer's step
        # lands between this forward and its backward.
        with _LocalOptimizer.global_lock:
            ps = [p.clone() for p in self.model.parameters()]
        h = torch.flatten(inp, 1)
        h = F.relu(F.linear(h, ps[0], ps[1]))
        h = F.relu(F.linear(h, ps[2], ps[3]))
        return F.linear(h, ps[4], ps[5])

    def get_param_rrefs(self):
        return [rpc.RRef(p) for p in self.model.parameters()]


param_server = None
server_lock = threading.Lock()


def get_parameter_server():
    global param_server
    with server_lock:
        if param_server is None:
            param_server = ParameterServer()
        return param_server


def call_method(method, rref, *args):
    return method(rref.local_value(), *args)


def remote_method(method, rref, *args):
    return rpc.rpc_sync(rref.owner(), call_method, args=[method, rref] + list(args))


class TrainerNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.param_server_rref = rpc.remote("parameter_server", get_parameter_server)

    def get_global_param_rrefs(self):
        return remote_method(ParameterServer.get_param_rrefs, self.param_server_rref)

    def forward(self, x):
        return remote_method(ParameterServer.forward, self.param_server_rref, x)


def run_training_loop(rank, trainers):
    xtr, ytr = DATASET[0], DATASET[1]
    net = TrainerNet()
    opt = DistributedOptimizer(optim.SGD, net.get_global_param_rrefs(), lr=ARGS.lr)
    sampler = DistributedSampler(range(len(xtr)), num_replicas=trainers, rank=rank - 1,
                                 shuffle=True, seed=ARGS.seed)
    samples = 0
    for ep in range(ARGS.epochs):
        sampler.set_epoch(ep)
        idx = torch.tensor(list(iter(sampler)), dtype=torch.long)
        for i, s in enumerate(range(0, len(idx), ARGS.batch)):
            if ARGS.max_batches and i >= ARGS.max_batches:
                break
            b = idx[s:s + ARGS.batch]
            x, y = xtr[b], ytr[b]
            with dist_autograd.context() as cid:
                out = net(x)
                loss = F.nll_loss(F.log_softmax(out, dim=1), y)
                dist_autograd.backward(cid, [loss])
                opt.step(cid)
            samples += len(b)
            if (i + 1) % 200 == 0:
                print(f"trainer{rank}: epoch {ep + 1} batch {i + 1} loss {loss.item():.4f}",
                      file=sys.stderr, flush=True)
    return samples


def worker(rank, world, port):
    global DATASET
    torch.set_num_threads(1)
    DATASET = load_data(torch)
    name = "parameter_server" if rank == 0 else f"trainer{rank}"
    opts = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}",
                                           num_worker_threads=16, rpc_timeout=600,
                                           _transports=["uv"], _channels=["basic"])  # shm fails here
    rpc.init_rpc(name, rank=rank, world_size=world, rpc_backend_options=opts)
    if rank == 0:
        trainers = world - 1
        get_parameter_server()
        t0 = time.perf_counter()
        futs = [rpc.rpc_async(f"trainer{r}", run_training_loop, args=(r, trainers), timeout=0)
                for r in range(1, world)]
        samples = sum(f.wait() for f in futs)
        wall = time.perf_counter() - t0
        xte, yte = DATASET[2], DATASET[3]
        with torch.no_grad():
            pred = param_server(xte).argmax(dim=1)
        acc = (pred == yte).float().mean().item()
        print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "epochs": ARGS.epochs,
                          "trainers": trainers, "batch": ARGS.batch, "lr": ARGS.lr,
                          "samples": samples, "wall_s": wall, "samples_per_s": samples / wall,
                          "test_accuracy": acc}), flush=True)
    rpc.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-batches", type=int, default=0)
    ARGS = p.parse_args()
    import torch.multiprocessing as mp
    mp.set_start_method("fork")
    port = free_port()
    world = ARGS.trainers + 1
    procs = [mp.Process(target=worker, args=(r, world, port)) for r in range(world)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
    sys.exit(max(abs(pr.exitcode or 0) for pr in procs))
