#!/usr/bin/python3
"""float16 training with PyTorch's GradScaler, reference for
optim/gradscaler_parity_test.go.

Run with Debian's PyTorch 1.13:  /usr/bin/python3 make_gradscaler_parity.py
It writes gradscaler_parity.safetensors beside this script; CI needs no
PyTorch.

PyTorch 1.13 on a CPU has neither float16 products nor float16 autocast,
and its GradScaler (torch.cuda.amp) wants CUDA. So:

- The float16 products are emulated as godist's autograd.Autocast(
  tensor.Float16, ...) defines them (and as a float16 GEMM with float32
  sums computes them): each of a Linear's operands rounded to float16,
  the float32 product, the result rounded to float16 once; in backward
  the output's gradient is rounded to float16 before the product's
  backward and each operand's gradient is rounded to float16 after it
  (Half below: a rounding with a gradient that rounds).
- The scaler is torch.cuda.amp.GradScaler's own Python (scale, unscale_,
  step, update and their per-optimizer bookkeeping) with its two CUDA
  kernels, _amp_foreach_non_finite_check_and_unscale_ and
  _amp_update_scale_, written below in Python to their CUDA code's
  arithmetic, and its CUDA asserts lifted.

The model: Linear(20, 32) -> GELU -> Linear(32, 10), float32 parameters
(torch.manual_seed(3)), cross-entropy in float32 on fixed batches of 24
(x normal, labels a random linear teacher's), SGD lr 0.05 momentum 0.9, 40 steps. The
scaler starts at 2^24, so that the first steps' gradients overflow
float16 and it backs off, and grows every 4 steps without one, so that
it overflows again: a saw-tooth. The script checks that no step's
largest gradient before its rounding to float16 lies within 1% of
float16's overflow (65,520), so that summing in another order cannot
change which steps overflow.

Stored (float32): x (40, 24, 20), labels (40, 24) as floats, the initial
parameters w1 b1 w2 b2, per step the scale used, whether the step was
skipped (1) and the loss (unscaled), and the final parameters f_w1 f_b1
f_w2 f_b2.
"""
import os
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.cuda.amp import grad_scaler

from safetensors_io import save

F16_OVERFLOW = 65520.0  # the least float32 that rounds to float16's infinity
largest = [0.0]  # the largest magnitude rounded to float16 in this step


class Half(torch.autograd.Function):
    """x rounded to float16 (kept in float32); the gradient likewise."""

    @staticmethod
    def forward(ctx, x):
        largest[0] = max(largest[0], x.abs().max().item())
        return x.half().float()

    @staticmethod
    def backward(ctx, g):
        largest[0] = max(largest[0], g.abs().max().item())
        return g.half().float()


def linear16(x, layer):
    return Half.apply(F.linear(Half.apply(x), Half.apply(layer.weight), Half.apply(layer.bias)))


def unscale_kernel(grads, found_inf, inv_scale):
    # amp_foreach_non_finite_check_and_unscale_cuda's arithmetic.
    for g in grads:
        if not torch.isfinite(g).all():
            found_inf.fill_(1.0)
        if inv_scale.item() != 1.0:
            g.mul_(inv_scale)


def update_kernel(scale, tracker, found_inf, growth_factor, backoff_factor, interval):
    # amp_update_scale_cuda_kernel's arithmetic: the scale is a float,
    # the factors doubles.
    if found_inf.item():
        scale.fill_(float(torch.tensor(scale.item() * backoff_factor, dtype=torch.float32)))
        tracker.fill_(0)
    else:
        successful = tracker.item() + 1
        if successful == interval:
            grown = torch.tensor(scale.item() * growth_factor, dtype=torch.float32)
            if torch.isfinite(grown):
                scale.fill_(grown.item())
            tracker.fill_(0)
        else:
            tracker.fill_(successful)
    return scale


class CPUGradScaler(grad_scaler.GradScaler):
    def __init__(self, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            super().__init__(enabled=False)
        # The enabled branch of GradScaler.__init__, which a machine
        # without CUDA skips.
        self._enabled = True
        self._init_scale = kw["init_scale"]
        self._scale = None
        self._growth_factor = kw["growth_factor"]
        self._backoff_factor = kw["backoff_factor"]
        self._growth_interval = kw["growth_interval"]
        self._init_growth_tracker = 0
        self._growth_tracker = None
        self._per_optimizer_states = grad_scaler.defaultdict(grad_scaler._refresh_per_optimizer_state)

    def scale(self, outputs):
        if self._scale is None:
            self._lazy_init_scale_growth_tracker(outputs.device)
        return outputs * self._scale


class Replicator:
    """_MultiDeviceReplicator without its CUDA assert."""

    def __init__(self, master):
        self.master = master
        self._per_device_tensors = {}

    def get(self, device):
        t = self._per_device_tensors.get(device)
        if t is None:
            t = self.master.to(device=device, copy=True)
            self._per_device_tensors[device] = t
        return t


grad_scaler._MultiDeviceReplicator = Replicator
torch._amp_foreach_non_finite_check_and_unscale_ = unscale_kernel
torch._amp_update_scale_ = update_kernel

STEPS, BATCH = 40, 24
torch.manual_seed(3)
torch.set_num_threads(1)
l1, l2 = nn.Linear(20, 32), nn.Linear(32, 10)
init = {"w1": l1.weight.detach().clone(), "b1": l1.bias.detach().clone(),
        "w2": l2.weight.detach().clone(), "b2": l2.bias.detach().clone()}
xs = torch.randn(STEPS, BATCH, 20)
labels = (xs @ torch.randn(20, 10)).argmax(-1)  # a linear teacher's: learnable
params = list(l1.parameters()) + list(l2.parameters())
opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
scaler = CPUGradScaler(init_scale=2.0 ** 24, growth_factor=2.0, backoff_factor=0.5, growth_interval=4)

scales, skipped, losses = [], [], []
for s in range(STEPS):
    opt.zero_grad(set_to_none=True)
    largest[0] = 0.0
    h = F.gelu(linear16(xs[s], l1))
    y = linear16(h, l2)
    loss = F.cross_entropy(y, labels[s])
    used = scaler.get_scale()
    scaler.scale(loss).backward()
    margin = largest[0] / F16_OVERFLOW
    assert not 0.99 < margin < 1.01, f"step {s}: largest {largest[0]} is within 1% of float16's overflow"
    before = [p.detach().clone() for p in params]
    scaler.step(opt)
    scaler.update()
    skip = all(torch.equal(b, p.detach()) for b, p in zip(before, params))
    scales.append(used)
    skipped.append(1.0 if skip else 0.0)
    losses.append(loss.item())
    print(f"step {s:2d} scale {used:10.0f} {'skipped' if skip else 'stepped'} loss {loss.item():.5f} "
          f"largest/overflow {margin:.3g}")

assert 3 <= sum(skipped) < STEPS - 10, f"{sum(skipped)} steps skipped: the case shows no saw-tooth"
out = dict(init)
out.update({"x": xs, "labels": labels.float(),
            "scale": torch.tensor(scales, dtype=torch.float32),
            "skipped": torch.tensor(skipped, dtype=torch.float32),
            "loss": torch.tensor(losses, dtype=torch.float32),
            "f_w1": l1.weight.detach(), "f_b1": l1.bias.detach(),
            "f_w2": l2.weight.detach(), "f_b2": l2.bias.detach()})
save(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gradscaler_parity.safetensors"), out,
     {"torch": torch.__version__, "script": "make_gradscaler_parity.py"})
