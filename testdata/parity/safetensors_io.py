"""Writes safetensors files by hand (json + struct), so that the reference
scripts beside it need no package beyond PyTorch."""
import json
import struct

import torch


def save(path, tensors, metadata):
    dt = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.bfloat16: "BF16"}
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        t = tensors[k]
        # numpy has no bfloat16: its bits travel as int16.
        b = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[k] = {"dtype": dt[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
