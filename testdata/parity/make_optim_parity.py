#!/usr/bin/python3
"""Reference values for godist's optimizer parity tests, computed by PyTorch.

Run with Debian's PyTorch 1.13:  /usr/bin/python3 make_optim_parity.py
It writes optim_parity.safetensors beside this script, in the same
hand-written safetensors format as make_parity.py. The Go tests in
optim/parity_test.go and nn/clip_test.go load it; CI needs no PyTorch.

Cases:
  adamw_groups  torch.optim.AdamW over two parameter groups (weight decay
                0.1 / 0, split by nanoGPT's rule plus embeddings by name)
                of a tiny model, four steps with given gradients.
  sched         LambdaLR with warmup_cosine below (godist's
                optim.WarmupCosine holds the same lambda): the rate after
                construction and after each step, past the end.
  clip          torch.nn.utils.clip_grad_norm_: total norm and gradients
                after, clipping and not clipping, one gradient None.
  loop          a GPT-like loop: given gradients, clip_grad_norm_(1.0),
                AdamW over two groups with their own rates, warm-up cosine
                schedule; the parameters and rates after every step.
Tensors are float32 except the rates and norms (float64, as Python keeps
them).
"""
import math
import os

import torch
import torch.nn as nn

from safetensors_io import save

torch.manual_seed(4321)
torch.set_num_threads(1)
out = {}


def put(name, t):
    out[name] = t.detach().contiguous().clone()


def f64(values):
    return torch.tensor(values, dtype=torch.float64)


def warmup_cosine(warmup, total, min_ratio):
    """HuggingFace's get_cosine_with_min_lr_schedule_with_warmup lambda
    (num_cycles 0.5), held at the floor past total. Keep in step with
    optim.WarmupCosine.Factor."""
    def factor(n):
        if n < warmup:
            return float(n) / float(max(1, warmup))
        p = min(1.0, float(n - warmup) / float(max(1, total - warmup)))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p))
    return factor


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(6, 4)
        self.fc = nn.Linear(4, 5)
        self.ln = nn.LayerNorm(5)
        self.head = nn.Linear(5, 3, bias=False)


def decay_groups(model, weight_decay):
    """The rule of optim.DecayGroups, with embeddings exempted by name."""
    decay, none = [], []
    for name, p in model.named_parameters():
        if p.dim() < 2 or name.startswith("wte."):
            none.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": none, "weight_decay": 0.0}]


def tiny(prefix):
    m = Tiny()
    with torch.no_grad():
        m.ln.weight.add_(0.1 * torch.randn(5))
        m.ln.bias.add_(0.1 * torch.randn(5))
    for k, p in m.named_parameters():
        put(f"{prefix}.init.{k}", p)
    return m


# AdamW over two groups, constant rate.
m = tiny("adamw_groups")
opt = torch.optim.AdamW(decay_groups(m, 0.1), lr=0.01, betas=(0.9, 0.95), eps=1e-8)
for step in range(4):
    for k, p in m.named_parameters():
        p.grad = torch.randn_like(p)
        put(f"adamw_groups.step{step}.grad.{k}", p.grad)
    opt.step()
    for k, p in m.named_parameters():
        put(f"adamw_groups.step{step}.after.{k}", p)

# The schedule alone: two settings, 14 steps (past total).
for name, (warmup, total, ratio) in {"sched": (3, 10, 0.1), "sched_nowarmup": (0, 5, 0.0)}.items():
    p = torch.zeros(1, requires_grad=True)
    o = torch.optim.SGD([p], lr=0.5)
    s = torch.optim.lr_scheduler.LambdaLR(o, warmup_cosine(warmup, total, ratio))
    lrs = [o.param_groups[0]["lr"]]
    for _ in range(14):
        o.step()
        s.step()
        lrs.append(o.param_groups[0]["lr"])
    put(f"{name}.lrs", f64(lrs))

# clip_grad_norm_: three parameters, the middle one without a gradient.
ps = [torch.randn(4, 3, requires_grad=True), torch.randn(5, requires_grad=True),
      torch.randn(7, requires_grad=True)]
grads = [torch.randn(4, 3), None, torch.randn(7) * 3]
for i, g in enumerate(grads):
    if g is not None:
        put(f"clip.grad{i}", g)
for case, max_norm in [("clip", 2.0), ("noclip", 100.0)]:
    for p, g in zip(ps, grads):
        p.grad = None if g is None else g.clone()
    total = torch.nn.utils.clip_grad_norm_(ps, max_norm)
    put(f"clip.{case}.total", f64([total.item()]))
    for i, p in enumerate(ps):
        if p.grad is not None:
            put(f"clip.{case}.after{i}", p.grad)

# The GPT-like loop.
m = tiny("loop")
groups = decay_groups(m, 0.1)
groups[1]["lr"] = 0.02
opt = torch.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.95), eps=1e-8)
sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(2, 6, 0.1))
norms, lrs = [], [[g["lr"] for g in opt.param_groups]]
for step in range(8):
    scale = 0.05 + 0.1 * step  # norms from below 1 to above
    for k, p in m.named_parameters():
        p.grad = torch.randn_like(p) * scale
        put(f"loop.step{step}.grad.{k}", p.grad)
    norms.append(torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0).item())
    opt.step()
    sched.step()
    lrs.append([g["lr"] for g in opt.param_groups])
    for k, p in m.named_parameters():
        put(f"loop.step{step}.after.{k}", p)
put("loop.norms", f64(norms))
put("loop.lrs", f64(lrs))


here = os.path.dirname(os.path.abspath(__file__))
save(os.path.join(here, "optim_parity.safetensors"), out,
     {"generator": "make_optim_parity.py", "torch": torch.__version__})
print(f"wrote {len(out)} tensors, torch {torch.__version__}")
