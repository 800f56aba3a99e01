#!/usr/bin/python3
"""Reference values for godist's parity tests, computed by PyTorch.

Run with Debian's PyTorch 1.13:  /usr/bin/python3 make_parity.py
It writes parity.safetensors beside this script (safetensors written by hand
with json + struct, so no extra Python package is needed). The Go tests in
nn/parity_test.go load it; CI needs no PyTorch.

Every case stores its inputs, its weights, an upstream gradient for the
output, and PyTorch's outputs and gradients, all float32.
"""
import json
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

from safetensors_io import save

torch.manual_seed(1234)
torch.set_num_threads(1)
out = {}


def put(name, t):
    out[name] = t.detach().contiguous().clone()


def grads(prefix, tensors):
    for k, t in tensors.items():
        put(f"{prefix}.grad.{k}", t.grad)


# Linear
x = torch.randn(4, 5, requires_grad=True)
lin = nn.Linear(5, 3)
y = lin(x)
g = torch.randn_like(y)
y.backward(g)
put("linear.x", x); put("linear.weight", lin.weight); put("linear.bias", lin.bias)
put("linear.y", y); put("linear.g", g)
grads("linear", {"x": x, "weight": lin.weight, "bias": lin.bias})

# Conv2d: padded, and strided
for name, kw in [("conv", dict(padding=2)), ("conv_s2", dict(stride=2, padding=1))]:
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    conv = nn.Conv2d(3, 4, 5 if name == "conv" else 3, **kw)
    y = conv(x)
    g = torch.randn_like(y)
    y.backward(g)
    put(f"{name}.x", x); put(f"{name}.weight", conv.weight); put(f"{name}.bias", conv.bias)
    put(f"{name}.y", y); put(f"{name}.g", g)
    grads(name, {"x": x, "weight": conv.weight, "bias": conv.bias})

# MaxPool2d
x = torch.randn(2, 3, 8, 8, requires_grad=True)
y = F.max_pool2d(x, 2)
g = torch.randn_like(y)
y.backward(g)
put("maxpool.x", x); put("maxpool.y", y); put("maxpool.g", g)
grads("maxpool", {"x": x})

# BatchNorm2d, training then evaluation
bn = nn.BatchNorm2d(3)
with torch.no_grad():
    bn.weight.copy_(torch.rand(3) + 0.5)
    bn.bias.copy_(torch.randn(3))
put("bn.weight", bn.weight); put("bn.bias", bn.bias)
x = (torch.randn(4, 3, 5, 5) * 2 + 1).requires_grad_()
y = bn(x)
g = torch.randn_like(y)
y.backward(g)
put("bn_train.x", x); put("bn_train.y", y); put("bn_train.g", g)
grads("bn_train", {"x": x, "weight": bn.weight, "bias": bn.bias})
put("bn_train.running_mean", bn.running_mean); put("bn_train.running_var", bn.running_var)
bn.weight.grad = None; bn.bias.grad = None
bn.eval()
x = torch.randn(4, 3, 5, 5, requires_grad=True)
y = bn(x)
g = torch.randn_like(y)
y.backward(g)
put("bn_eval.x", x); put("bn_eval.y", y); put("bn_eval.g", g)
grads("bn_eval", {"x": x, "weight": bn.weight, "bias": bn.bias})

# LSTM: 2 layers, seq 6, batch 3, input 5, hidden 4
lstm = nn.LSTM(5, 4, num_layers=2)
x = torch.randn(6, 3, 5, requires_grad=True)
h0 = torch.randn(2, 3, 4, requires_grad=True)
c0 = torch.randn(2, 3, 4, requires_grad=True)
o, (hn, cn) = lstm(x, (h0, c0))
go, gh, gc = torch.randn_like(o), torch.randn_like(hn), torch.randn_like(cn)
((o * go).sum() + (hn * gh).sum() + (cn * gc).sum()).backward()
put("lstm.x", x); put("lstm.h0", h0); put("lstm.c0", c0)
for k, p in lstm.named_parameters():
    put(f"lstm.{k}", p)
    put(f"lstm.grad.{k}", p.grad)
put("lstm.out", o); put("lstm.hn", hn); put("lstm.cn", cn)
put("lstm.g_out", go); put("lstm.g_hn", gh); put("lstm.g_cn", gc)
grads("lstm", {"x": x, "h0": h0, "c0": c0})

# CrossEntropy
logits = (torch.randn(8, 10) * 3).requires_grad_()
target = torch.randint(0, 10, (8,))
loss = F.cross_entropy(logits, target)
loss.backward()
put("ce.logits", logits); put("ce.target", target); put("ce.loss", loss)
grads("ce", {"logits": logits})


# A whole LeNet step (the anchor's CNN): forward, loss, backward, and three
# SGD steps (lr 0.01, momentum 0.9) on fixed batches.
def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


net = lenet()
for k, v in net.state_dict().items():
    put(f"lenet.init.{k}", v)
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
for step in range(3):
    x = torch.randn(16, 1, 28, 28)
    y = torch.randint(0, 10, (16,))
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    put(f"lenet.step{step}.x", x); put(f"lenet.step{step}.y", y); put(f"lenet.step{step}.loss", loss)
    if step == 0:
        for k, p in net.named_parameters():
            put(f"lenet.step0.grad.{k}", p.grad)
    opt.step()
for k, v in net.state_dict().items():
    put(f"lenet.final.{k}", v)

# Optimizers: four steps on a fixed parameter with fixed gradients.
p0 = torch.randn(10)
gs = [torch.randn(10) for _ in range(4)]
put("optim.p0", p0)
for i, gi in enumerate(gs):
    put(f"optim.g{i}", gi)
configs = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "adam": (torch.optim.Adam, dict(lr=0.01, weight_decay=0.01)),
    "adam_amsgrad": (torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), amsgrad=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
}
for name, (cls, kw) in configs.items():
    p = p0.clone().requires_grad_()
    o = cls([p], **kw)
    for i, gi in enumerate(gs):
        p.grad = gi.clone()
        o.step()
        put(f"optim.{name}.after{i}", p)

# StepLR
p = torch.zeros(1, requires_grad=True)
o = torch.optim.SGD([p], lr=1.0)
sched = torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)
lrs = []
for _ in range(5):
    o.step()
    sched.step()
    lrs.append(o.param_groups[0]["lr"])
put("steplr.lrs", torch.tensor(lrs, dtype=torch.float64))

# Default initialisation after torch.manual_seed(0): the anchor's models.
def anchor_model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                             nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    return lenet()


for kind in ["mlp", "lenet"]:
    torch.manual_seed(0)
    for k, v in anchor_model(kind).state_dict().items():
        put(f"init0.{kind}.{k}", v)
g = torch.Generator()
g.manual_seed(3)
put("randperm.seed3", torch.randperm(1000, generator=g))


here = os.path.dirname(os.path.abspath(__file__))
save(os.path.join(here, "parity.safetensors"), out,
     {"generator": "make_parity.py", "torch": torch.__version__})
print(f"wrote {len(out)} tensors, torch {torch.__version__}")
