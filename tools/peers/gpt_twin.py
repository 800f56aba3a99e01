#!/usr/bin/python3
"""The PyTorch twin of examples/tinygpt: the same GPT (pre-LayerNorm
torch.nn.TransformerEncoderLayer blocks with GELU, tied embeddings), the
same initial weights, the same batches in the same order, AdamW with the
same parameter groups, the same warm-up + cosine schedule and the same
clipping, so that godist's numbers can be compared with PyTorch's.

  tinygpt --dump DIR ...            # writes config, data, weights, batches
  /usr/bin/python3 gpt_twin.py DIR [--world 2] [--steps N] [--eval-every N]
  torchrun ... gpt_twin.py DIR      # one rank per process, across hosts

DIR holds what `tinygpt --dump` wrote: config.json, train.bin, val.bin
(the two splits of data.TextCorpus), init.safetensors (the initial
weights under PyTorch's names) and batches.bin (int64 offsets into
train.bin of each step's global batch of world×batch windows; rank r takes
rows r·batch..(r+1)·batch). One thread per rank; --world 2 runs DDP over
gloo on loopback in processes of its own; under torchrun (RANK and
WORLD_SIZE in the environment) each process is one rank of DDP over gloo,
joined through torchrun's env:// rendezvous (hostcmp --train gpt runs it
so across hosts). The last line (rank 0's) is one JSON object: val_loss,
val_bits_per_byte, tokens_per_s, ms_per_step, the first losses, world.
"""
import argparse
import json
import math
import os
import socket
import struct
import sys
import time


def read_safetensors(path, torch):
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    kinds = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        arr = np.frombuffer(raw[base + a:base + b], dtype=kinds[v["dtype"]]).reshape(v["shape"])
        out[k] = torch.from_numpy(arr.copy())
    return out


def build(torch, cfg):
    nn = torch.nn

    def causal_mask(t):
        return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            d = cfg["dim"]
            self.wte = nn.Embedding(256, d)
            self.wpe = nn.Embedding(cfg["block"], d)
            self.drop = nn.Dropout(cfg["dropout"])
            self.h = nn.ModuleList([nn.TransformerEncoderLayer(d, cfg["heads"], 4 * d, cfg["dropout"], "gelu",
                                                               batch_first=True, norm_first=True)
                                    for _ in range(cfg["layers"])])
            self.ln_f = nn.LayerNorm(d)
            self.mask = causal_mask(cfg["block"])

        def forward(self, idx):
            t = idx.shape[1]
            h = self.drop(self.wte(idx) + self.wpe(torch.arange(t)))
            mask = self.mask[:t, :t]
            for b in self.h:
                h = b(h, src_mask=mask)
            return self.ln_f(h) @ self.wte.weight.t()

    return GPT()


def warmup_cosine(warmup, total, min_ratio):
    """optim.WarmupCosine's factor of the base rate after n steps."""
    def factor(n):
        if n < warmup:
            return n / max(1, warmup)
        p = min(1.0, (n - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p))
    return factor


def worker(rank, world, init_method, args, q):
    """Trains as rank of world, DDP joined at init_method (a
    torch.distributed init method) when world > 1; puts (rank, result) on q."""
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if init_method.startswith("tcp://127.0.0.1:"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    d = args.dir
    cfg = json.load(open(os.path.join(d, "config.json")))
    steps = args.steps or cfg["steps"]
    eval_every = args.eval_every or cfg["eval_every"]
    b, block = cfg["batch"], cfg["block"]
    if cfg["world"] != world:
        # The batches were drawn for cfg["world"]×batch windows a step; a
        # different world splits the same global batch differently.
        if (cfg["world"] * b) % world:
            raise SystemExit(f"world {world} cannot split global batches of {cfg['world'] * b}")
        b = cfg["world"] * b // world
    train = torch.from_numpy(np.fromfile(os.path.join(d, "train.bin"), dtype=np.uint8).astype(np.int64))
    val = torch.from_numpy(np.fromfile(os.path.join(d, "val.bin"), dtype=np.uint8).astype(np.int64))
    starts = np.fromfile(os.path.join(d, "batches.bin"), dtype=np.int64).reshape(cfg["steps"], -1)
    if steps > len(starts):
        raise SystemExit(f"--steps {steps}: batches.bin has {len(starts)}")

    model = build(torch, cfg)
    init = read_safetensors(os.path.join(d, "init.safetensors"), torch)
    missing, unexpected = model.load_state_dict(init, strict=False)
    if unexpected or [k for k in missing if k != "mask"]:
        raise SystemExit(f"init weights: missing {missing}, unexpected {unexpected}")
    if world > 1:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
        net = DDP(model, bucket_cap_mb=args.bucket_cap_mb) if args.bucket_cap_mb > 0 else DDP(model)
    else:
        net = model
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.dim() < 2 or n in ("wte.weight", "wpe.weight") else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(0.9, cfg["beta2"]), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(cfg["warmup"], cfg["steps"], cfg["min_lr"] / cfg["lr"]))

    def windows(src, offs):
        idx = torch.from_numpy(offs).unsqueeze(1) + torch.arange(block + 1)
        w = src[idx]
        return w[:, :-1], w[:, 1:]

    def evaluate():
        # data.EvalWindows: window j starts at j·block; global batches of
        # world×batch windows, at most eval_batches of them.
        model.eval()
        n = (len(val) - 1) // block // (world * b)
        if cfg["eval_batches"]:
            n = min(n, cfg["eval_batches"])
        tot = 0.0
        with torch.no_grad():
            for i in range(n):
                first = (i * world + rank) * b
                offs = np.arange(first, first + b, dtype=np.int64) * block
                x, y = windows(val, offs)
                tot += torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)).item()
        model.train()
        t = torch.tensor([tot, float(n)], dtype=torch.float64)
        if world > 1:
            torch.distributed.all_reduce(t)
        return (t[0] / t[1]).item()

    losses, elapsed, val_loss = [], 0.0, float("nan")
    for step in range(steps):
        t0 = time.perf_counter()
        x, y = windows(train, starts[step][rank * b:(rank + 1) * b])
        opt.zero_grad(set_to_none=True)
        if args.autocast:
            # tinygpt --autocast bf16's twin: the forward pass and the loss
            # under CPU autocast, backward outside it (PyTorch's recipe).
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(net(x).reshape(-1, 256), y.reshape(-1))
        else:
            loss = torch.nn.functional.cross_entropy(net(x).reshape(-1, 256), y.reshape(-1))
        loss.backward()
        if cfg["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
        opt.step()
        sched.step()
        elapsed += time.perf_counter() - t0
        losses.append(loss.item())
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            val_loss = evaluate()
            if rank == 0:
                print(f"step {step + 1}: train loss {losses[-1]:.4f}, validation loss {val_loss:.4f} "
                      f"({val_loss / math.log(2):.3f} bits per byte)", file=sys.stderr, flush=True)
    res = {"world": world, "steps": steps, "val_loss": val_loss, "val_bits_per_byte": val_loss / math.log(2),
           "ms_per_step": elapsed * 1e3 / steps, "tokens_per_s": steps * b * block * world / elapsed,
           "losses": losses[:50], "torch": torch.__version__, "autocast": args.autocast}
    if world > 1 and init_method == "env://":
        # Under torchrun the process leaves through os._exit after a
        # barrier (main): in hostcmp's runs across hosts a rank three times
        # never returned from destroy_process_group (gloo, torch 1.13),
        # and without it the exit aborts in gloo's destructors.
        torch.distributed.barrier()
    elif world > 1:
        torch.distributed.destroy_process_group()
    q.put((rank, res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for each rank")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (default: the config's)")
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--bucket-cap-mb", type=float, default=0, help="DDP's bucket cap (default: PyTorch's, 25)")
    ap.add_argument("--autocast", choices=["bf16"], default=None,
                    help="train with torch.autocast('cpu', dtype=torch.bfloat16) around the forward pass and the loss")
    args = ap.parse_args()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        # Under torchrun: this process is one rank.
        import queue
        q = queue.Queue()
        rank = int(os.environ["RANK"])
        worker(rank, int(os.environ["WORLD_SIZE"]), "env://", args, q)
        if rank == 0:
            print(json.dumps(q.get()[1]), flush=True)
        sys.stderr.flush()
        os._exit(0)
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if args.world == 1:
        import queue
        q = queue.Queue()
        worker(0, 1, f"tcp://127.0.0.1:{port}", args, q)
        res = q.get()[1]
    else:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        ps = [ctx.Process(target=worker, args=(r, args.world, f"tcp://127.0.0.1:{port}", args, q)) for r in range(args.world)]
        for p in ps:
            p.start()
        out = dict(q.get() for _ in ps)
        for p in ps:
            p.join()
        res = out[0]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
