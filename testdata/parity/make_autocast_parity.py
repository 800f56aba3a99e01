#!/usr/bin/python3
"""bfloat16 autocast reference for autograd/autocast_test.go.

Run with Debian's PyTorch 1.13:  /usr/bin/python3 make_autocast_parity.py
It writes autocast_parity.safetensors beside this script; CI needs no
PyTorch.

A two-layer perceptron, Linear(20, 32) -> GELU -> Linear(32, 10), on a
4 x 6 x 20 input, run forward under torch.autocast("cpu",
dtype=torch.bfloat16) with float32 parameters; the loss is the mean
square of the output taken in float32, and backward runs outside the
context, as in PyTorch's autocast recipe. Stored (float32): the input
x, the parameters w1 b1 w2 b2, the first layer's output h and the
output y (bfloat16, widened), the
loss, and the parameters' gradients g_w1 g_b1 g_w2 g_b2.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from safetensors_io import save

torch.manual_seed(1)
torch.set_num_threads(1)
l1, l2 = nn.Linear(20, 32), nn.Linear(32, 10)
x = torch.randn(4, 6, 20)
with torch.autocast("cpu", dtype=torch.bfloat16):
    h = l1(x)
    y = l2(F.gelu(h))
assert y.dtype == torch.bfloat16, y.dtype
loss = y.float().square().mean()
loss.backward()
out = {"x": x, "w1": l1.weight.detach(), "b1": l1.bias.detach(), "w2": l2.weight.detach(), "b2": l2.bias.detach(),
       "h": h.detach().float(), "y": y.detach().float(), "loss": loss.detach().reshape(1),
       "g_w1": l1.weight.grad, "g_b1": l1.bias.grad, "g_w2": l2.weight.grad, "g_b2": l2.bias.grad}
save(os.path.join(os.path.dirname(os.path.abspath(__file__)), "autocast_parity.safetensors"), out,
     {"torch": torch.__version__, "script": "make_autocast_parity.py"})
