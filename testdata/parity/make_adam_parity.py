#!/usr/bin/python3
"""Long-run Adam and AdamW references for optim/adam_parity_test.go.

Run with Debian's PyTorch 1.13:  /usr/bin/python3 make_adam_parity.py
It writes adam_parity.safetensors beside this script (safetensors written by
hand, as make_parity.py does); CI needs no PyTorch.

Two kinds of case, all float32 with torch.set_num_threads(1) and
foreach=False (PyTorch 1.13's CPU default):

  optimizer alone  1,000 steps of torch.optim.Adam / AdamW on two
                   parameters, w (13x21: the vector kernels' body and tail)
                   and b (7: the tail alone), with given gradients. The
                   gradients and initial values come from a counter-based
                   generator (splitmix64 of case, step and index, below)
                   that godist's test computes exactly as this script does,
                   so they need not be stored. Every value is a 24-bit
                   integer over a power of two, exact in float32. Stored:
                   {case}.step{1,10,100,1000}.{w,b} and the state after the
                   last step, {case}.state.{exp_avg,exp_avg_sq,
                   max_exp_avg_sq}.{w,b}.
  training         the 784-256-128-10 MLP of make_ddp_parity.py
                   (torch.manual_seed(0) weights), on one process, over the
                   first 3,000 Fashion-MNIST training examples in order,
                   batch 64 (step s takes batch s mod 46), 100 steps.
                   Stored: {case}.loss (float64 of the float32 loss, one a
                   step) and {case}.loss_f64 (the same run in float64, the
                   exact-arithmetic yardstick).

The script also prints, for every case, how far PyTorch's float32 run is
from its own float64 run: the yardstick for what rounding alone does.
"""
import os

import numpy as np
import torch
import torch.nn as nn

from safetensors_io import save

HERE = os.path.dirname(os.path.abspath(__file__))
torch.set_num_threads(1)
STEPS = 1000
SAVED = (1, 10, 100, 1000)

# name: (decoupled, lr, beta1, beta2, eps, weight_decay, amsgrad)
ALONE = {
    "adam": (False, 1e-3, 0.9, 0.999, 1e-8, 0.0, False),
    "adam_amsgrad": (False, 1e-3, 0.9, 0.999, 1e-8, 0.0, True),
    "adam_l2": (False, 1e-3, 0.9, 0.999, 1e-8, 0.01, False),
    "adam_l2_amsgrad": (False, 1e-3, 0.9, 0.999, 1e-8, 0.01, True),
    "adamw": (True, 1e-3, 0.9, 0.999, 1e-8, 0.01, False),
    "adamw_amsgrad": (True, 1e-3, 0.9, 0.999, 1e-8, 0.01, True),
    "adamw_gpt": (True, 6e-4, 0.9, 0.95, 1e-8, 0.1, False),
}
SHAPES = {"w": (13, 21), "b": (7,)}
M64 = (1 << 64) - 1


def splitmix64(x):
    """splitmix64's finaliser on Python ints (mod 2^64)."""
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def generated(case, param, step, n):
    """Value i of parameter param (0: w, 1: b) of case number case at step
    (0: the initial value, s >= 1: the gradient of step s): a 24-bit
    integer k from splitmix64, centred, shifted by a per-index drift (so
    that the parameters move), over 2^23 and a power of two between 1 and
    2^-5 (so that magnitudes differ). Keep in step with adamGenerated in
    optim/adam_parity_test.go."""
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        k = splitmix64((case << 56) | (param << 52) | (step << 24) | i) >> 40
        drift = ((i % 5) - 2) << 21 if step > 0 else 0
        out[i] = float(k - (1 << 23) + drift) / float(1 << 23) / float(1 << (i % 6))
    return torch.from_numpy(out)


def run_alone(ci, name, cfg, dtype):
    decoupled, lr, b1, b2, eps, wd, ams = cfg
    params = {}
    for pi, (pn, shape) in enumerate(SHAPES.items()):
        n = int(np.prod(shape))
        params[pn] = generated(ci, pi, 0, n).reshape(shape).to(dtype).requires_grad_()
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = cls(list(params.values()), lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd,
              amsgrad=ams, foreach=False)
    saved = {}
    for s in range(1, STEPS + 1):
        for pi, (pn, p) in enumerate(params.items()):
            p.grad = generated(ci, pi, s, p.numel()).reshape(p.shape).to(dtype)
        opt.step()
        if s in SAVED:
            for pn, p in params.items():
                saved[f"{name}.step{s}.{pn}"] = p.detach().clone()
    for pn, p in params.items():
        st = opt.state[p]
        for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            if k in st:
                saved[f"{name}.state.{k}.{pn}"] = st[k].detach().clone()
    return saved


def load_data():
    import gzip
    data = os.path.join(HERE, "..", "fashion-mnist")

    def idx(path):
        with gzip.open(path, "rb") as f:
            raw = f.read()
        ndim = raw[3]
        dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
        return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)

    x = torch.from_numpy(idx(os.path.join(data, "train-images-idx3-ubyte.gz"))[:3000].copy()).float().div_(255.0)
    x = ((x - 0.2860) / 0.3530).unsqueeze(1)
    y = torch.from_numpy(idx(os.path.join(data, "train-labels-idx1-ubyte.gz"))[:3000].copy()).long()
    return x, y


def run_mlp(decoupled, x, y, dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                          nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)).to(dtype)
    if decoupled:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=False)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = x.to(dtype)
    losses = []
    for s in range(100):
        b = (s % 46) * 64
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x[b:b + 64]), y[b:b + 64])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def main():
    out = {}
    for ci, (name, cfg) in enumerate(ALONE.items()):
        f32 = run_alone(ci, name, cfg, torch.float32)
        f64 = run_alone(ci, name, cfg, torch.float64)
        worst = 0.0
        for k, v in f32.items():
            if ".step" in k:
                d = ((v.double() - f64[k]).abs() / f64[k].abs().clamp_min(1e-3)).max().item()
                worst = max(worst, d)
        print(f"{name}: float32 against float64, largest relative difference {worst:.2e}")
        out.update(f32)
    x, y = load_data()
    for name, decoupled in (("mlp_adam", False), ("mlp_adamw", True)):
        l32 = run_mlp(decoupled, x, y, torch.float32)
        l64 = run_mlp(decoupled, x, y, torch.float64)
        out[f"{name}.loss"] = l32
        out[f"{name}.loss_f64"] = l64
        print(f"{name}: loss {l32[0]:.4f} -> {l32[-1]:.4f}; float32 against float64: "
              f"{(l32 - l64).abs().max().item():.2e} at most")
    save(os.path.join(HERE, "adam_parity.safetensors"), out,
         {"torch": torch.__version__, "steps": str(STEPS), "script": "make_adam_parity.py"})


if __name__ == "__main__":
    main()
