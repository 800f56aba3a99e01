#!/usr/bin/python3
"""Reference values for godist's transformer parity tests, computed by
PyTorch 1.13: causal torch.nn.MultiheadAttention, a pre-LayerNorm
torch.nn.TransformerEncoderLayer (GELU), and a 2-layer GPT with tied
weights (models.GPT's twin), forward and every gradient.

Run with Debian's PyTorch:  /usr/bin/python3 make_transformer_parity.py
It writes transformer.safetensors beside this script; the Go tests in
nn/transformer_parity_test.go and models load it, so CI needs no
PyTorch. All float32.
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


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)


def record(prefix, module, x, y, g):
    put(f"{prefix}.x", x)
    put(f"{prefix}.y", y)
    put(f"{prefix}.g", g)
    put(f"{prefix}.grad.x", x.grad)
    for k, v in module.state_dict().items():
        put(f"{prefix}.{k}", v)
    for k, p in module.named_parameters():
        put(f"{prefix}.grad.{k}", p.grad)


# Causal multi-head self-attention, batch first: 2 sequences of 7 tokens,
# width 12, 3 heads; random biases so that every parameter matters.
B, T, E, H = 2, 7, 12, 3
mha = nn.MultiheadAttention(E, H, batch_first=True)
with torch.no_grad():
    mha.in_proj_bias.normal_()
    mha.out_proj.bias.normal_()
x = torch.randn(B, T, E, requires_grad=True)
y, _ = mha(x, x, x, attn_mask=causal_mask(T), need_weights=False)
g = torch.randn_like(y)
y.backward(g)
record("mha", mha, x, y, g)

# The same without a mask.
mha2 = nn.MultiheadAttention(E, H, batch_first=True)
x = torch.randn(B, T, E, requires_grad=True)
y, _ = mha2(x, x, x, need_weights=False)
g = torch.randn_like(y)
y.backward(g)
record("mha_full", mha2, x, y, g)

# A pre-LayerNorm block with a GELU MLP, causal.
block = nn.TransformerEncoderLayer(E, H, dim_feedforward=4 * E, dropout=0.0, activation="gelu",
                                   batch_first=True, norm_first=True)
with torch.no_grad():
    for n, p in block.named_parameters():
        if p.dim() == 1:
            p.normal_(0, 0.5)  # LayerNorm weights and biases away from 1 and 0
x = torch.randn(B, T, E, requires_grad=True)
y = block(x, src_mask=causal_mask(T))
g = torch.randn_like(y)
y.backward(g)
record("block", block, x, y, g)


# A 2-layer GPT with tied weights: models.GPT's twin.
class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, dim):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(block, dim)
        self.drop = nn.Dropout(0.0)
        self.h = nn.ModuleList([nn.TransformerEncoderLayer(dim, heads, 4 * dim, 0.0, "gelu", batch_first=True,
                                                           norm_first=True) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, idx):
        t = idx.shape[1]
        h = self.drop(self.wte(idx) + self.wpe(torch.arange(t)))
        mask = causal_mask(t)
        for b in self.h:
            h = b(h, src_mask=mask)
        return self.ln_f(h) @ self.wte.weight.t()


gpt = GPT(256, 16, 2, 2, 16)
with torch.no_grad():
    for n, p in gpt.named_parameters():
        p.normal_(0, 0.02 if p.dim() > 1 else 0.1)
idx = torch.randint(0, 256, (3, 16))
tgt = torch.randint(0, 256, (3, 16))
logits = gpt(idx)
loss = nn.functional.cross_entropy(logits.reshape(-1, 256), tgt.reshape(-1))
loss.backward()
put("gpt.idx", idx)
put("gpt.tgt", tgt)
put("gpt.logits", logits)
put("gpt.loss", loss)
for k, v in gpt.state_dict().items():
    put(f"gpt.{k}", v)
for k, p in gpt.named_parameters():
    put(f"gpt.grad.{k}", p.grad)

here = os.path.dirname(os.path.abspath(__file__))
save(os.path.join(here, "transformer.safetensors"), out,
     {"generator": "make_transformer_parity.py", "torch": torch.__version__})
print(f"wrote {len(out)} tensors, torch {torch.__version__}")
