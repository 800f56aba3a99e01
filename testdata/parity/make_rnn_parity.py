#!/usr/bin/python3
"""Reference values for godist's GRU and bidirectional RNN parity tests,
computed by PyTorch.

Run with Debian's PyTorch 1.13:  /usr/bin/python3 make_rnn_parity.py
It writes rnn.safetensors beside this script; nn/rnn_parity_test.go loads
it, and CI needs no PyTorch. Each case stores its inputs, its weights,
upstream gradients for every output, and PyTorch's outputs and gradients
(float32).
"""
import os

import torch
import torch.nn as nn

from safetensors_io import save

torch.manual_seed(4321)
torch.set_num_threads(1)
out = {}


def put(name, t):
    out[name] = t.detach().contiguous().clone()


def case(name, module, x, states):
    """Runs module on x and the initial states, backpropagates random
    upstream gradients of every output, and stores everything."""
    for s in states:
        s.requires_grad_()
    x.requires_grad_()
    res = module(x, states[0] if len(states) == 1 else tuple(states))
    y, fin = res[0], res[1]
    fin = list(fin) if isinstance(fin, tuple) else [fin]
    outs = [y] + fin
    gs = [torch.randn_like(o) for o in outs]
    sum((o * g).sum() for o, g in zip(outs, gs)).backward()
    put(f"{name}.x", x)
    put(f"{name}.grad.x", x.grad)
    for i, s in enumerate(states):
        put(f"{name}.s{i}", s)
        put(f"{name}.grad.s{i}", s.grad)
    for i, (o, g) in enumerate(zip(outs, gs)):
        put(f"{name}.out{i}", o)
        put(f"{name}.g{i}", g)
    for k, p in module.named_parameters():
        put(f"{name}.{k}", p)
        put(f"{name}.grad.{k}", p.grad)


# GRU: 2 layers, seq 6, batch 3, input 5, hidden 4
case("gru", nn.GRU(5, 4, num_layers=2), torch.randn(6, 3, 5), [torch.randn(2, 3, 4)])
# GRU: bidirectional, batch first, 2 layers
case("gru_bi", nn.GRU(5, 4, num_layers=2, bidirectional=True, batch_first=True), torch.randn(3, 6, 5), [torch.randn(4, 3, 4)])
# LSTM: bidirectional, 2 layers
case("lstm_bi", nn.LSTM(5, 4, num_layers=2, bidirectional=True), torch.randn(6, 3, 5), [torch.randn(4, 3, 4), torch.randn(4, 3, 4)])
# RNN (tanh): bidirectional, 1 layer, no bias
case("rnn_bi", nn.RNN(5, 4, bidirectional=True, bias=False), torch.randn(6, 3, 5), [torch.randn(2, 3, 4)])

save(os.path.join(os.path.dirname(os.path.abspath(__file__)), "rnn.safetensors"), out, {"generator": "make_rnn_parity.py", "torch": torch.__version__})
print(f"wrote {len(out)} tensors to rnn.safetensors")
