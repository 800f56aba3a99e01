"""A PyTorch DDP script written for torchrun, unchanged: env:// init over
gloo, a few DDP steps of a tiny model, rank 0 prints the final loss.

    torchrun --standalone --nproc-per-node 2 ddp_torchrun.py
    godist run --standalone --nproc-per-node 2 /usr/bin/python3 ddp_torchrun.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"]), "WORLD_SIZE mismatch"
    assert int(os.environ["LOCAL_RANK"]) == rank % int(os.environ["LOCAL_WORLD_SIZE"])
    for k in ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "GROUP_RANK", "ROLE_WORLD_SIZE"):
        assert k in os.environ, k + " is not set"
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1 + rank)
    x = torch.randn(32, 8, generator=g)
    y = x.sum(dim=1, keepdim=True)
    loss = None
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    # DDP keeps the replicas equal: check it.
    p = torch.cat([q.detach().flatten() for q in model.parameters()])
    ps = [torch.zeros_like(p) for _ in range(world)]
    dist.all_gather(ps, p)
    assert all(torch.equal(ps[0], q) for q in ps), "replicas differ"
    t = loss.detach().clone()
    dist.all_reduce(t)
    if rank == 0:
        print("FINAL_LOSS %.6f WORLD_SIZE %d" % (t.item() / world, world), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
