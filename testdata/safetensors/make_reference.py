#!/usr/bin/python3
"""Reference safetensors files for package checkpoint, written by hand.

The `safetensors` Python package is not needed: this script writes and reads
the format with json + struct + numpy alone, which is itself a check of our
reading of the spec (https://github.com/huggingface/safetensors):

    8 bytes   N, little-endian uint64
    N bytes   JSON header, padded with spaces to a multiple of 8:
              {"__metadata__": {...}, "name": {"dtype": "F32",
               "shape": [2, 3], "data_offsets": [begin, end]}, ...}
    rest      the data section, little-endian, row-major; the ranges
              cover it exactly.

Usage (from this directory, with Debian's /usr/bin/python3):

    /usr/bin/python3 make_reference.py
        writes python_written.safetensors (no checksums, as PyTorch
        writes), python_written_crc.safetensors (the same with godist's
        checksums) and expected.json (needs torch for bfloat16 rounding,
        and numpy)
    /usr/bin/python3 make_reference.py verify FILE
        parses FILE (e.g. one written by Go) by hand with numpy, checks
        godist's checksums if it has them, and checks that it holds exactly
        the tensors and metadata of expected.json (needs numpy only); exits
        non-zero on any difference.

The header is written compactly, tensors sorted by name, "__metadata__"
first, each entry's keys in the order dtype, shape, data_offsets: the same
bytes package checkpoint's Save writes, which its test checks.

godist's checksums (see package checkpoint's format.go) are metadata
strings of 8 lowercase hex digits, each a CRC-32C (Castagnoli):
"godist.crc32c.NAME" of tensor NAME's bytes, and "godist.crc32c" of the
rest of the header as header_digest encodes it.
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# numpy dtype of each safetensors dtype; BF16 is handled as raw uint16.
NP = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1",
      "BF16": "<u2", "F16": "<f2"}
SIZE = {"F32": 4, "F64": 8, "I64": 8, "I32": 4, "U8": 1, "BF16": 2, "F16": 2}

METADATA = {"format": "pt", "producer": "make_reference.py"}


def reference_tensors():
    """name -> (dtype, shape, raw little-endian bytes, values as plain numbers)."""
    import numpy as np
    import torch

    out = {}

    def add(name, dtype, shape, arr, values):
        out[name] = (dtype, list(shape), arr.tobytes(), values)

    a = np.array([[1.0, -2.0, 3.5], [0.1, 1e-30, 65504.0]], dtype="<f4")
    add("net1.weight", "F32", a.shape, a, [float(v) for v in a.ravel()])
    a = np.array([np.pi, -1e300, 5e-324], dtype="<f8")
    add("f64", "F64", a.shape, a, [float(v) for v in a.ravel()])
    a = np.array([0, -1, 2**63 - 1, -2**63, 123456789012], dtype="<i8")
    add("i64", "I64", a.shape, a, [int(v) for v in a.ravel()])
    a = np.array([[1, -2], [2**31 - 1, -2**31]], dtype="<i4")
    add("i32", "I32", a.shape, a, [int(v) for v in a.ravel()])
    a = np.array([0, 1, 127, 128, 255], dtype="u1")
    add("u8", "U8", a.shape, a, [int(v) for v in a.ravel()])
    b = torch.tensor([[1.0, -2.5], [3.14159, 1e-3], [65504.0, -1e30]], dtype=torch.bfloat16)
    add("bf16", "BF16", b.shape, b.view(torch.int16).numpy().astype("<i2"),
        [float(v) for v in b.float().flatten().tolist()])
    a = np.array([1.0, -0.5, 65504.0, 6e-5, 1e-7], dtype="<f2")
    add("f16", "F16", a.shape, a, [float(v) for v in a.astype(np.float64).ravel()])
    a = np.array(42.5, dtype="<f4")
    add("scalar", "F32", a.shape, a, [float(a)])
    a = np.zeros((0, 3), dtype="<f4")
    add("empty", "F32", a.shape, a, [])
    return out


CHECKSUM_KEY = "godist.crc32c"
CHECKSUM_PREFIX = CHECKSUM_KEY + "."

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data):
    """CRC-32C (Castagnoli), bit-reflected, as hash/crc32's Castagnoli table."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def header_digest(metadata, described):
    """CRC-32C of the metadata (without checksums) and each tensor's name,
    dtype and shape: described is {name: (dtype, shape)}."""
    def s(x):
        x = x.encode("utf-8")
        return struct.pack("<I", len(x)) + x
    b = struct.pack("<I", len(metadata))
    for k in sorted(metadata, key=lambda k: k.encode("utf-8")):
        b += s(k) + s(metadata[k])
    b += struct.pack("<I", len(described))
    for name in sorted(described, key=lambda k: k.encode("utf-8")):
        dtype, shape = described[name]
        b += s(name) + s(dtype) + struct.pack("<I", len(shape))
        b += b"".join(struct.pack("<Q", d) for d in shape)
    return crc32c(b)


def write(path, tensors, metadata, checksums=False):
    header = {}
    if checksums:
        metadata = dict(metadata)
        metadata[CHECKSUM_KEY] = "%08x" % header_digest(
            metadata, {n: (t[0], t[1]) for n, t in tensors.items()})
        for name, (_, _, raw, _) in tensors.items():
            metadata[CHECKSUM_PREFIX + name] = "%08x" % crc32c(raw)
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    data = bytearray()
    for name in sorted(tensors):
        dtype, shape, raw, _ = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(data)


def read(path):
    """Parses a safetensors file by hand: (metadata, {name: numpy array}),
    checking and removing godist's checksums if the file has them."""
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert 8 + n <= len(raw), "header length %d beyond the file" % n
    hbytes = raw[8:8 + n]
    assert n % 8 == 0, "header length %d is not a multiple of 8" % n
    header = json.loads(hbytes.decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for b, e, k in spans:
        assert b == at, "tensor %s begins at %d, previous ends at %d" % (k, b, at)
        at = e
    assert at == len(data), "tensors cover %d of %d data bytes" % (at, len(data))
    sums = {k: v for k, v in (meta or {}).items()
            if k == CHECKSUM_KEY or k.startswith(CHECKSUM_PREFIX)}
    if sums:
        meta = {k: v for k, v in meta.items() if k not in sums} or None
        want = sums.pop(CHECKSUM_KEY)
        got = "%08x" % header_digest(meta or {}, {k: (v["dtype"], v["shape"]) for k, v in header.items()})
        assert got == want, "header digest %s, %s says %s" % (got, CHECKSUM_KEY, want)
        assert sorted(sums) == sorted(CHECKSUM_PREFIX + k for k in header), \
            "checksums %s for tensors %s" % (sorted(sums), sorted(header))
        for k, v in header.items():
            b, e = v["data_offsets"]
            got = "%08x" % crc32c(data[b:e])
            assert got == sums[CHECKSUM_PREFIX + k], "tensor %s: CRC-32C %s, the file says %s" % (k, got, sums[CHECKSUM_PREFIX + k])
    arrays = {}
    for k, v in header.items():
        b, e = v["data_offsets"]
        dt = v["dtype"]
        count = 1
        for s in v["shape"]:
            count *= s
        assert e - b == count * SIZE[dt], "tensor %s: %d bytes for shape %s" % (k, e - b, v["shape"])
        a = np.frombuffer(data[b:e], dtype=NP[dt]).reshape(v["shape"])
        if dt == "BF16":  # widen bfloat16 to float32 by hand
            a = (a.astype(np.uint32) << 16).view(np.float32)
        arrays[k] = (dt, a)
    return meta, arrays


def generate():
    tensors = reference_tensors()
    write(os.path.join(HERE, "python_written.safetensors"), tensors, METADATA)
    write(os.path.join(HERE, "python_written_crc.safetensors"), tensors, METADATA, checksums=True)
    expected = {
        "metadata": METADATA,
        "tensors": {name: {"dtype": d, "shape": s, "values": vals}
                    for name, (d, s, _, vals) in sorted(tensors.items())},
    }
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    # Check our own writer with our own reader.
    for name in ("python_written.safetensors", "python_written_crc.safetensors"):
        problems = verify(os.path.join(HERE, name))
        assert not problems, problems
    print("wrote python_written.safetensors, python_written_crc.safetensors and expected.json (%d tensors)" % len(tensors))


def verify(path):
    """Returns a list of differences between path and expected.json."""
    import numpy as np
    with open(os.path.join(HERE, "expected.json")) as f:
        expected = json.load(f)
    meta, arrays = read(path)
    problems = []
    if meta != expected["metadata"]:
        problems.append("metadata %r, want %r" % (meta, expected["metadata"]))
    if sorted(arrays) != sorted(expected["tensors"]):
        problems.append("tensors %s, want %s" % (sorted(arrays), sorted(expected["tensors"])))
    for name, want in expected["tensors"].items():
        if name not in arrays:
            continue
        dt, a = arrays[name]
        if dt != want["dtype"] or list(a.shape) != want["shape"]:
            problems.append("%s: %s%s, want %s%s" % (name, dt, list(a.shape), want["dtype"], want["shape"]))
            continue
        got = a.ravel().tolist()
        if dt in ("F32", "F64", "BF16", "F16"):
            got = [float(v) for v in got]
        else:
            got = [int(v) for v in got]
        if got != want["values"]:
            problems.append("%s: values %r, want %r" % (name, got, want["values"]))
    return problems


def main():
    if len(sys.argv) == 1:
        generate()
    elif len(sys.argv) == 3 and sys.argv[1] == "verify":
        problems = verify(sys.argv[2])
        for p in problems:
            print("MISMATCH:", p)
        if problems:
            sys.exit(1)
        print("OK: %s matches expected.json" % sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
