#!/usr/bin/python3
"""bfloat16 autocast reference for a transformer block and the tiny GPT,
for models/autocast_parity_test.go.

Run with Debian's PyTorch 1.13:  /usr/bin/python3 make_autocast_block_parity.py
It writes autocast_block_parity.safetensors beside this script; CI needs
no PyTorch.

Two models, each run twice from the same weights and input: under
torch.autocast("cpu", dtype=torch.bfloat16) (forward, and the loss taken
in float32; backward outside the context, PyTorch's recipe), and in
float32, the yardstick both sides are measured against.

  block  a pre-LayerNorm torch.nn.TransformerEncoderLayer (width 32, 4
         heads, feed-forward 128, GELU, causal), LayerNorm parameters
         away from 1 and 0, input (2, 16, 32); the loss is the sum of the
         output times a fixed random tensor g.
  gpt    make_transformer_parity.py's 2-layer GPT with tied weights
         (vocabulary 256, 16 positions, width 32, 2 heads), weights
         N(0, 0.02) and vectors N(0, 0.1), 3 sequences; the loss is the
         cross-entropy of the logits.

Stored (float32): the weights under PyTorch's names, the inputs, and for
each run ("bf16", "f32") the output and every gradient.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from safetensors_io import save

torch.manual_seed(2718)
torch.set_num_threads(1)
out = {}


def put(name, t):
    out[name] = t.detach().float().contiguous().clone()


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)


def run(run_name, prefix, module, forward):
    module.zero_grad(set_to_none=True)
    if run_name == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, loss = forward()
    else:
        y, loss = forward()
    loss.backward()
    put(f"{prefix}.{run_name}.y", y)
    put(f"{prefix}.{run_name}.loss", loss.reshape(1))
    for k, p in module.named_parameters():
        put(f"{prefix}.{run_name}.grad.{k}", p.grad)
    return y


# The block.
B, T, E, H = 2, 16, 32, 4
block = nn.TransformerEncoderLayer(E, H, dim_feedforward=4 * E, dropout=0.0, activation="gelu",
                                   batch_first=True, norm_first=True)
with torch.no_grad():
    for n, p in block.named_parameters():
        if p.dim() == 1:
            p.normal_(0, 0.5)
x = torch.randn(B, T, E)
g = torch.randn(B, T, E)
for k, v in block.state_dict().items():
    put(f"block.{k}", v)
put("block.x", x)
put("block.g", g)


def block_forward():
    y = block(x, src_mask=causal_mask(T))
    return y, (y.float() * g).sum()


for r in ("bf16", "f32"):
    run(r, "block", block, block_forward)


# The GPT.
class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, dim):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(block, dim)
        self.h = nn.ModuleList([nn.TransformerEncoderLayer(dim, heads, 4 * dim, 0.0, "gelu", batch_first=True,
                                                           norm_first=True) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, idx):
        t = idx.shape[1]
        h = self.wte(idx) + self.wpe(torch.arange(t))
        mask = causal_mask(t)
        for b in self.h:
            h = b(h, src_mask=mask)
        return self.ln_f(h) @ self.wte.weight.t()


gpt = GPT(256, 16, 2, 2, 32)
with torch.no_grad():
    for n, p in gpt.named_parameters():
        p.normal_(0, 0.02 if p.dim() > 1 else 0.1)
idx = torch.randint(0, 256, (3, 16))
tgt = torch.randint(0, 256, (3, 16))
for k, v in gpt.state_dict().items():
    put(f"gpt.{k}", v)
put("gpt.idx", idx)
put("gpt.tgt", tgt)


def gpt_forward():
    logits = gpt(idx)
    return logits, F.cross_entropy(logits.float().reshape(-1, 256), tgt.reshape(-1))


for r in ("bf16", "f32"):
    run(r, "gpt", gpt, gpt_forward)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


for p in ("block", "gpt"):
    print(f"{p}: PyTorch's bfloat16 output against its float32: {rel(out[p + '.bf16.y'], out[p + '.f32.y']):.3g}; "
          f"loss {out[p + '.bf16.loss'].item():.6f} against {out[p + '.f32.loss'].item():.6f}")
    worst = max(rel(out[k], out[k.replace('.bf16.', '.f32.')]) for k in out if k.startswith(p + ".bf16.grad."))
    print(f"  its worst gradient against float32: {worst:.3g}")
here = os.path.dirname(os.path.abspath(__file__))
save(os.path.join(here, "autocast_block_parity.safetensors"), out,
     {"generator": "make_autocast_block_parity.py", "torch": torch.__version__})
print(f"wrote {len(out)} tensors, torch {torch.__version__}")
