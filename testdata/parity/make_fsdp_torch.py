"""PyTorch 1.13 loads the full state dict FSDP wrote (fsdp_full_state.safetensors,
from TestFullStateDictInPyTorch with GODIST_WRITE_PARITY=1) into the tiny GPT
of tools/peers/gpt_twin.py, strictly, and writes its logits on the stored
input to fsdp_full_state_torch.safetensors.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 testdata/parity/make_fsdp_torch.py
"""
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "internal", "tools", "peers"))
sys.path.insert(0, here)
import gpt_twin as twin  # noqa: E402
from safetensors_io import save  # noqa: E402

cfg = {"vocab": 256, "block": 8, "layers": 2, "heads": 2, "dim": 12, "dropout": 0.0}
state = twin.read_safetensors(os.path.join(here, "fsdp_full_state.safetensors"), torch)
x = state.pop("input.x")
model = twin.build(torch, cfg)
sd = {k[len("model."):]: v for k, v in state.items()}
missing, unexpected = model.load_state_dict(sd, strict=False)
if unexpected or [k for k in missing if k != "mask"]:
    raise SystemExit(f"not PyTorch's names: missing {missing}, unexpected {unexpected}")
model.eval()
with torch.no_grad():
    logits = model(x)
save(os.path.join(here, "fsdp_full_state_torch.safetensors"), {"logits": logits.contiguous()},
     {"torch": torch.__version__, "from": "fsdp_full_state.safetensors"})
print("logits", tuple(logits.shape))
