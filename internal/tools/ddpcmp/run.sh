#!/bin/bash
# DDP speed and synchronisation overhead, godist against PyTorch, measured
# side by side: each round runs, one after the other, PyTorch DDP (gloo) and
# PyTorch's unsynchronised replicas (shared/anchors/train_ddp.py, world 2),
# then godist's example under `godist run --nproc-per-node 2`, pure Go and
# OpenBLAS builds, each with DDP and with --unsynced. One epoch of the full
# Fashion-MNIST each. The machine is shared and noisy: the summary takes,
# per round, the ratios of runs made in the same minute, then the median
# over rounds.
#
#   internal/tools/ddpcmp/run.sh [rounds] [model]      (model: mlp or lenet)
#
# Synchronisation overhead, as the anchors define it: (DDP step - step of
# unsynchronised replicas) / DDP step.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-3}
model=${2:-mlp}
ptmodel=$model
[ "$model" = lenet ] && ptmodel=cnn
anchors=${ANCHORS:-../shared/anchors}
out=$(mktemp -d)
mkdir -p bin
go build -o bin/godist ./cmd/godist
go build -o bin/ddp-go ./examples/ddp-fashion-mnist
blas=()
if [ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ]; then
	go build -tags openblas -o bin/ddp-blas ./examples/ddp-fashion-mnist
	blas=(blas)
fi
py() { # name args...: one PyTorch run, its ms/step
	local name=$1
	shift
	/usr/bin/python3 "$anchors/train_ddp.py" --model "$ptmodel" --world 2 "$@" 2>/dev/null | tail -1 |
		python3 -c "import json,sys; d=json.loads(sys.stdin.read())['epochs'][0]; print('$name', d['ms_per_step'], d['samples_per_s'])"
}
gd() { # name binary args...: one godist run, its ms/step
	local name=$1 bin=$2
	shift 2
	bin/godist run --standalone --nproc-per-node 2 "bin/$bin" --model "$model" --epochs 1 "$@" 2>/dev/null |
		sed -n 's/^\[rank 0\] \({.*}\)$/\1/p' |
		python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print('$name', d['ms_per_step'], d['samples_per_s'])"
}
for r in $(seq "$rounds"); do
	{
		py pytorch
		py pytorch-unsynced --no-ddp
		for b in go "${blas[@]}"; do
			gd "$b" "ddp-$b"
			gd "$b-unsynced" "ddp-$b" --unsynced
		done
		if [ ${#blas[@]} -gt 0 ] && [ -n "${OPENBLAS_CORETYPE:-}" ]; then
			# This machine's environment forces OpenBLAS's Haswell (AVX2)
			# kernels; also run with the kernels OpenBLAS picks itself.
			OPENBLAS_CORETYPE= gd blas-native ddp-blas
			OPENBLAS_CORETYPE= gd blas-native-unsynced ddp-blas --unsynced
		fi
	} | tee "$out/round$r"
done
native=()
[ ${#blas[@]} -gt 0 ] && [ -n "${OPENBLAS_CORETYPE:-}" ] && native=(blas-native)
python3 - "$out" "$rounds" "${blas[@]}" "${native[@]}" <<'PY'
import sys, statistics as st
out, rounds, builds = sys.argv[1], int(sys.argv[2]), ["go"] + sys.argv[3:]
runs = []
for r in range(1, rounds + 1):
    runs.append({l.split()[0]: (float(l.split()[1]), float(l.split()[2])) for l in open(f"{out}/round{r}")})
def med(f):
    return st.median(f(x) for x in runs)
print()
print("| | ms/step | samples/s | x PyTorch DDP (samples/s) | sync overhead |")
print("|---|---|---|---|---|")
print("| PyTorch DDP | %.2f | %.0f | 1.00x | %.0f%% |" % (med(lambda x: x["pytorch"][0]), med(lambda x: x["pytorch"][1]),
      100 * med(lambda x: 1 - x["pytorch-unsynced"][0] / x["pytorch"][0])))
for b in builds:
    print("| godist %s | %.2f | %.0f | %.2fx | %.0f%% |" % (b, med(lambda x: x[b][0]), med(lambda x: x[b][1]),
          med(lambda x: x[b][1] / x["pytorch"][1]), 100 * med(lambda x: 1 - x[b + "-unsynced"][0] / x[b][0])))
print("\n(medians over %d rounds; ratios and overheads paired within a round)" % rounds)
PY
