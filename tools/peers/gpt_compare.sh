#!/bin/bash
# tokens/s of examples/tinygpt against its PyTorch twin, side by side:
# each round runs, one after the other, at world 1 and at world 2 (DDP, two
# processes under `godist run`; the twin with DDP over gloo), godist pure
# Go, godist with OpenBLAS (when libopenblas-dev is installed) and
# PyTorch, each for STEPS steps of the default model from the same dump
# (same weights, same batches). One thread per rank everywhere: godist run
# gives each worker GOMAXPROCS = CPUs / workers (GOMAXPROCS=1 at world 1),
# the twin sets torch.set_num_threads(1), and OPENBLAS_NUM_THREADS=1 keeps
# OpenBLAS (the BLAS Debian's PyTorch is linked to here, through
# libblas.so.3) on one thread. Then world 1 with two threads on each side
# (GOMAXPROCS=2, godist's large products spread over both; the twin's
# set_num_threads(2) with OpenBLAS at two threads). Then world 1 in
# bfloat16 on each side (tinygpt --autocast bf16; the twin under
# torch.autocast("cpu", dtype=torch.bfloat16)), set against both PyTorch's
# bfloat16 and its float32. The summary takes the ratios within each
# round, then the median over rounds; the machine is shared and noisy.
#
#   tools/peers/gpt_compare.sh [rounds] [steps]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
steps=${2:-40}
out=$(mktemp -d)
mkdir -p bin
go build -o bin/godist ./cmd/godist
go build -o bin/tinygpt ./examples/tinygpt
builds=(go)
if [ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ]; then
	go build -tags openblas -o bin/tinygpt-openblas ./examples/tinygpt
	builds+=(openblas)
fi
export OPENBLAS_NUM_THREADS=1
flags=(--steps "$steps" --warmup 10 --eval-every 100000 --eval-batches 2 --sample 0 --checkpoint "" --plot "")
bin() { [ "$1" = go ] && echo bin/tinygpt || echo bin/tinygpt-openblas; }
tps() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())['tokens_per_s'])"; }
# The dumps: world 1 and world 2 batches of the same configuration.
bin/tinygpt "${flags[@]}" --dump "$out/w1" >/dev/null 2>&1
bin/godist run --standalone --nproc-per-node 2 bin/tinygpt "${flags[@]}" --dump "$out/w2" >/dev/null 2>&1
for r in $(seq "$rounds"); do
	{
		for b in "${builds[@]}"; do
			echo "w1-$b $(GOMAXPROCS=1 "$(bin "$b")" "${flags[@]}" 2>/dev/null | tail -1 | tps)"
			echo "w2-$b $(bin/godist run --standalone --nproc-per-node 2 "$(bin "$b")" "${flags[@]}" 2>/dev/null | sed -n 's/^\[rank 0\] \({.*}\)$/\1/p' | tps)"
		done
		echo "w1-torch $(/usr/bin/python3 tools/peers/gpt_twin.py "$out/w1" --steps "$steps" 2>/dev/null | tail -1 | tps)"
		echo "w2-torch $(/usr/bin/python3 tools/peers/gpt_twin.py "$out/w2" --world 2 --steps "$steps" 2>/dev/null | tail -1 | tps)"
		echo "t2-go $(GOMAXPROCS=2 bin/tinygpt "${flags[@]}" 2>/dev/null | tail -1 | tps)"
		echo "t2-torch $(OPENBLAS_NUM_THREADS=2 /usr/bin/python3 tools/peers/gpt_twin.py "$out/w1" --threads 2 --steps "$steps" 2>/dev/null | tail -1 | tps)"
		echo "b1-go $(GOMAXPROCS=1 bin/tinygpt "${flags[@]}" --autocast bf16 2>/dev/null | tail -1 | tps)"
		echo "b1-torch $(/usr/bin/python3 tools/peers/gpt_twin.py "$out/w1" --autocast bf16 --steps "$steps" 2>/dev/null | tail -1 | tps)"
	} | tee "$out/round$r"
done
python3 - "$out" "$rounds" "${builds[@]}" <<'PY'
import sys, statistics as st
out, rounds, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = [{l.split()[0]: float(l.split()[1]) for l in open(f"{out}/round{r}")} for r in range(1, rounds + 1)]
print("| | tokens/s (median) | × PyTorch (median of rounds) |")
print("|---|---|---|")
for w in ("w1", "w2"):
    print(f"| world {w[1]} PyTorch 1.13 (OpenBLAS, 1 thread) | {st.median(r[w + '-torch'] for r in runs):,.0f} | 1.00× |")
    for b in builds:
        k = f"{w}-{b}"
        print(f"| world {w[1]} godist {b} | {st.median(r[k] for r in runs):,.0f} | {st.median(r[k] / r[w + '-torch'] for r in runs):.2f}× |")
print(f"| world 1, 2 threads: PyTorch 1.13 (OpenBLAS, 2 threads) | {st.median(r['t2-torch'] for r in runs):,.0f} | 1.00× |")
print(f"| world 1, 2 threads: godist go | {st.median(r['t2-go'] for r in runs):,.0f} | {st.median(r['t2-go'] / r['t2-torch'] for r in runs):.2f}× |")
print(f"| world 1 bfloat16: PyTorch 1.13 autocast | {st.median(r['b1-torch'] for r in runs):,.0f} | 1.00× |")
print(f"| world 1 bfloat16: godist go | {st.median(r['b1-go'] for r in runs):,.0f} | "
      f"{st.median(r['b1-go'] / r['b1-torch'] for r in runs):.2f}× (× PyTorch's float32: {st.median(r['b1-go'] / r['w1-torch'] for r in runs):.2f}×) |")
PY
rm -rf "$out"
