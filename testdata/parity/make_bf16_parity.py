#!/usr/bin/python3
"""bfloat16 matrix products for tensor/bf16_parity_test.go.

Run with Debian's PyTorch 1.13:  /usr/bin/python3 make_bf16_parity.py
It writes bf16_parity.safetensors beside this script; CI needs no PyTorch.

Each case c stores c.a, c.b (and c.bias) in bfloat16 and PyTorch's
bfloat16 result c.out. Its linear (addmm) widens the operands to
float32, sums in float32 and rounds once; its matmul and bmm of
bfloat16 on a CPU without AVX-512 (the generic BLAS of Debian's build)
keep partial sums in bfloat16 and land several steps from the exact
product, so the test holds godist to the exact product there:

  mm_M_K_N       torch.matmul(a (M x K), b (K x N))
  linear_M_K_N   torch.nn.functional.linear(a (M x K), b (N x K), bias (N)):
                 a·bᵀ + bias, as a Linear layer under autocast computes it
  bmm_B_M_K_N    torch.matmul(a (B x M x K), b (B x K x N))

The shapes cover the GEMM kernels' bodies and tails (6 and 4 rows, 16
columns) and a k long enough that float32 sums of 300 terms round.
"""
import os

import torch

from safetensors_io import save

torch.manual_seed(0)
torch.set_num_threads(1)
out = {}


def bf(*shape):
    return torch.randn(*shape).to(torch.bfloat16)


for m, k, n in [(1, 1, 1), (7, 13, 5), (64, 96, 80), (33, 300, 17)]:
    a, b = bf(m, k), bf(k, n)
    c = f"mm_{m}_{k}_{n}"
    out[c + ".a"], out[c + ".b"], out[c + ".out"] = a, b, torch.matmul(a, b)
for m, k, n in [(6, 16, 16), (50, 128, 36)]:
    a, w, bias = bf(m, k), bf(n, k), bf(n)
    c = f"linear_{m}_{k}_{n}"
    out[c + ".a"], out[c + ".b"], out[c + ".bias"] = a, w, bias
    out[c + ".out"] = torch.nn.functional.linear(a, w, bias)
a, b = bf(3, 5, 24), bf(3, 24, 7)
out["bmm_3_5_24_7.a"], out["bmm_3_5_24_7.b"], out["bmm_3_5_24_7.out"] = a, b, torch.matmul(a, b)

save(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bf16_parity.safetensors"), out,
     {"torch": torch.__version__, "script": "make_bf16_parity.py"})
