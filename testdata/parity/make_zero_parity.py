#!/usr/bin/python3
"""Reference values for parallel/zero's parity test, computed by PyTorch.

Run with Debian's PyTorch 1.13:  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 make_zero_parity.py
It writes zero_parity.safetensors beside this script (the hand-written
safetensors of safetensors_io.py); parallel/zero/parity_test.go loads it,
so CI needs no PyTorch.

The job: world 2 over gloo on CPU (torch.multiprocessing.spawn), the model
Linear(6, 8) -> Tanh -> Linear(8, 4) with the initial weights below on
every rank, MSE loss on fixed per-rank data (the same batch every step),
gradients averaged by DistributedDataParallel, and
ZeroRedundancyOptimizer(Adam, lr=1e-2) (parameters_as_bucket_view off, the
default) for 50 steps.

Tensors (float32 unless said):
  init.<name>        the initial parameters (PyTorch's names: 0.weight, ...)
  x.rank<R>, y.rank<R>  rank R's batch
  final.<name>       the parameters after 50 steps (rank 0's; rank 1's are
                     checked equal here)
  owner              int64, owner[i] = the rank that updates parameter i
                     (model.parameters() order)
  loss.rank<R>       float64, rank R's loss at each step
"""
import os
import socket

import torch
import torch.multiprocessing as mp

from safetensors_io import save

WORLD, STEPS, BATCH = 2, 50, 5
HERE = os.path.dirname(os.path.abspath(__file__))


def make_model(nn):
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 4))


def inputs():
    g = torch.Generator().manual_seed(1234)
    model = make_model(torch.nn)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    data = [(torch.randn(BATCH, 6, generator=g), torch.randn(BATCH, 4, generator=g)) for _ in range(WORLD)]
    return init, data


def worker(rank, port, init, data, q):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    model = make_model(nn)
    model.load_state_dict(init)
    params = list(model.parameters())
    ddp = DDP(model)
    opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, lr=1e-2)
    owner = [-1] * len(params)
    for r, groups in enumerate(opt._partition_parameters()):
        for group in groups:
            for p in group["params"]:
                owner[[id(q_) for q_ in params].index(id(p))] = r
    x, y = data[rank]
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    final = {k: v.detach().clone() for k, v in model.state_dict().items()}
    q.put((rank, owner, losses, final))
    dist.barrier()
    dist.destroy_process_group()


def main():
    init, data = inputs()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, port, init, data, q)) for r in range(WORLD)]
    for p in procs:
        p.start()
    results = dict((r, (o, l, f)) for r, o, l, f in (q.get() for _ in range(WORLD)))
    for p in procs:
        p.join()
        assert p.exitcode == 0
    out = {}
    for k, v in init.items():
        out["init." + k] = v
    for r, (x, y) in enumerate(data):
        out[f"x.rank{r}"] = x
        out[f"y.rank{r}"] = y
        out[f"loss.rank{r}"] = torch.tensor(results[r][1], dtype=torch.float64)
    assert results[0][0] == results[1][0]
    out["owner"] = torch.tensor(results[0][0], dtype=torch.int64)
    for k, v in results[0][2].items():
        assert torch.equal(v, results[1][2][k]), k
        out["final." + k] = v
    save(os.path.join(HERE, "zero_parity.safetensors"), out,
         {"source": "make_zero_parity.py", "torch": torch.__version__})
    print("owner", results[0][0], "loss", results[0][1][0], "->", results[0][1][-1])


if __name__ == "__main__":
    main()
