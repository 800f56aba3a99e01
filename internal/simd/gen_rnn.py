#!/usr/bin/env python3
"""Writes rnn_amd64.s and rnn_go.go: the pointwise parts of the fused LSTM
and GRU layers (nn/rnnlayer.go) as AVX2 kernels, eight floats at a time,
and their pure-Go forms, both from one description per kernel, so that
the two compute the same operations in the same order: every product and
sum is rounded on its own (no fused multiply-add; the Go form converts
each result to float32, which keeps the compiler from fusing), and the
vector code gives the Go code's bits.

A kernel is a list of named slices (the Go function's parameters, all of
the same length n; the assembly gets their first elements' addresses as
an array) and a list of operations on them and on temporaries:
(dst, op, a, b) with op mul, add or sub; (dst, "oneminus", a) for 1 - a;
("store", slice, value). A slice's name as an operand loads it.

Run: python3 gen_rnn.py"""
import os

KERNELS = [
    ("lstmCell", "c = f⊙cp + i⊙g: the LSTM's new cell state",
     ["c", "f", "cp", "i", "g"],
     [("t0", "mul", "f", "cp"), ("t1", "mul", "i", "g"), ("t2", "add", "t0", "t1"), ("store", "c", "t2")]),
    ("mul", "dst = a⊙b",
     ["dst", "a", "b"],
     [("t0", "mul", "a", "b"), ("store", "dst", "t0")]),
    ("mulAdd", "dst = dst + a⊙b",
     ["dst", "a", "b"],
     [("t0", "mul", "a", "b"), ("t1", "add", "dst", "t0"), ("store", "dst", "t1")]),
    ("gruOut", "h = n + z⊙(hp − n): the GRU's new hidden state",
     ["h", "n", "z", "hp"],
     [("t0", "sub", "hp", "n"), ("t1", "mul", "z", "t0"), ("t2", "add", "n", "t1"), ("store", "h", "t2")]),
    ("lstmCellBackward",
     "the LSTM cell's backward: from dL/dh (dh + gy), dL/dc' (dc) and the saved\n"
     "// gates i, f, g, o, tanh(c') (tc) and c (cp), the gates' pre-activations'\n"
     "// gradients di, df, dg, do, and dL/dc in dc",
     ["dh", "gy", "dc", "i", "f", "g", "o", "tc", "cp", "di", "df", "dg", "do"],
     [("dhj", "add", "dh", "gy"),
      ("tt", "mul", "tc", "tc"), ("omt", "oneminus", "tt"), ("a0", "mul", "dhj", "o"), ("a1", "mul", "a0", "omt"),
      ("dct", "add", "dc", "a1"),
      ("b0", "mul", "dct", "g"), ("b1", "mul", "b0", "i"), ("omi", "oneminus", "i"), ("b2", "mul", "b1", "omi"),
      ("store", "di", "b2"),
      ("c0", "mul", "dct", "cp"), ("c1", "mul", "c0", "f"), ("omf", "oneminus", "f"), ("c2", "mul", "c1", "omf"),
      ("store", "df", "c2"),
      ("d0", "mul", "dct", "i"), ("gg", "mul", "g", "g"), ("omg", "oneminus", "gg"), ("d1", "mul", "d0", "omg"),
      ("store", "dg", "d1"),
      ("e0", "mul", "dhj", "tc"), ("e1", "mul", "e0", "o"), ("omo", "oneminus", "o"), ("e2", "mul", "e1", "omo"),
      ("store", "do", "e2"),
      ("f0", "mul", "dct", "f"), ("store", "dc", "f0")]),
    ("gruCellBackward",
     "the GRU cell's backward: from dL/dh' (dh + gy), the saved gates r, z,\n"
     "// n, h·W_hnᵀ + b_hn (hn) and the previous state hp, the pre-activations'\n"
     "// gradients dr, dz, dn (input and hidden parts alike for r and z), the\n"
     "// hidden part of n's (dhn), and in dh the part of dL/dhp not through W_hh",
     ["dh", "gy", "r", "z", "n", "hn", "hp", "dr", "dz", "dn", "dhn"],
     [("dhj", "add", "dh", "gy"),
      ("omz", "oneminus", "z"), ("nn", "mul", "n", "n"), ("omn", "oneminus", "nn"),
      ("a0", "mul", "dhj", "omz"), ("dnp", "mul", "a0", "omn"), ("store", "dn", "dnp"),
      ("b0", "mul", "dnp", "hn"), ("b1", "mul", "b0", "r"), ("omr", "oneminus", "r"), ("b2", "mul", "b1", "omr"),
      ("store", "dr", "b2"),
      ("c0", "sub", "hp", "n"), ("c1", "mul", "dhj", "c0"), ("c2", "mul", "c1", "z"), ("c3", "mul", "c2", "omz"),
      ("store", "dz", "c3"),
      ("d0", "mul", "dnp", "r"), ("store", "dhn", "d0"),
      ("e0", "mul", "dhj", "z"), ("store", "dh", "e0")]),
]

ONE = 15  # Y15 holds 1.0 in every lane


def asm(name, doc, ptrs, ops):
    last = {}
    for k, op in enumerate(ops):
        for a in op[2:]:
            last[a] = k
    free = list(range(15))
    reg = {}
    out = [f"// func {name}F32AVX2(p *[{len(ptrs)}]*float32, n int)",
           f"TEXT ·{name}F32AVX2(SB), NOSPLIT, $0-16",
           "\tMOVQ p+0(FP), AX", "\tMOVQ n+8(FP), CX", "\tXORQ SI, SI", "\tSHRQ $3, CX", f"\tJZ   {name}done"]
    if any(op[1] == "oneminus" for op in ops):
        out.append(f"\tVBROADCASTSS rnnone<>(SB), Y{ONE}")
    out.append(f"{name}loop:")

    def operand(a):
        if a not in reg:
            r = free.pop(0)
            reg[a] = r
            out.append(f"\tMOVQ {8 * ptrs.index(a)}(AX), R8")
            out.append(f"\tVMOVUPS (R8)(SI*1), Y{r}")
        return reg[a]

    def release(k, names):
        for a in dict.fromkeys(names):
            if last.get(a) == k and a in reg:
                free.insert(0, reg.pop(a))

    for k, op in enumerate(ops):
        if op[0] == "store":
            r = operand(op[2])
            out.append(f"\tMOVQ {8 * ptrs.index(op[1])}(AX), R8")
            out.append(f"\tVMOVUPS Y{r}, (R8)(SI*1)")
            release(k, op[2:])
            continue
        dst, kind, srcs = op[0], op[1], op[2:]
        rs = [operand(a) for a in srcs]
        release(k, srcs)
        d = free.pop(0)
        reg[dst] = d
        if kind == "oneminus":
            out.append(f"\tVSUBPS  Y{rs[0]}, Y{ONE}, Y{d}")
        else:
            ins = {"mul": "VMULPS", "add": "VADDPS", "sub": "VSUBPS"}[kind]
            # Go's operand order: the second source first; dst = a op b.
            out.append(f"\t{ins}  Y{rs[1]}, Y{rs[0]}, Y{d}")
    out += ["\tADDQ $32, SI", "\tDECQ CX", f"\tJNZ  {name}loop", "\tVZEROUPPER", f"{name}done:", "\tRET", ""]
    return "\n".join(out)


def gofn(name, doc, ptrs, ops):
    args = ", ".join(ptrs)
    lines = [f"// {name}F32Go computes, element by element, {doc}.",
             f"func {name}F32Go({args} []float32) {{"]
    n = ptrs[0]
    for p in ptrs[1:]:
        lines.append(f"\t{p} = {p}[:len({n})]")
    lines.append(f"\tfor k := range {n} {{")
    for op in ops:
        if op[0] == "store":
            lines.append(f"\t\t{op[1]}[k] = {val(op[2], ptrs)}")
        elif op[1] == "oneminus":
            lines.append(f"\t\t{op[0]} := float32(1 - {val(op[2], ptrs)})")
        else:
            sym = {"mul": "*", "add": "+", "sub": "-"}[op[1]]
            lines.append(f"\t\t{op[0]} := float32({val(op[2], ptrs)} {sym} {val(op[3], ptrs)})")
    lines += ["\t}", "}"]
    return "\n".join(lines)


def val(a, ptrs):
    return f"{a}[k]" if a in ptrs else a


here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "rnn_amd64.s"), "w") as f:
    f.write("// Code generated by gen_rnn.py; DO NOT EDIT.\n\n#include \"textflag.h\"\n\n"
            "// The fused recurrent layers' pointwise kernels (rnn.go), eight floats at a\n"
            "// time with AVX2. p holds the slices' first elements' addresses in the\n"
            "// order of the Go function's parameters; n is a multiple of 8.\n\n"
            "DATA rnnone<>+0(SB)/4, $0x3f800000\nGLOBL rnnone<>(SB), RODATA|NOPTR, $4\n\n")
    for k in KERNELS:
        f.write(asm(*k) + "\n")
with open(os.path.join(here, "rnn_go.go"), "w") as f:
    f.write("// Code generated by gen_rnn.py; DO NOT EDIT.\n\npackage simd\n\n"
            "// The pure-Go forms of the kernels of rnn_amd64.s: the same operations in\n"
            "// the same order, each rounded to float32 on its own.\n")
    for k in KERNELS:
        f.write("\n" + gofn(*k) + "\n")
