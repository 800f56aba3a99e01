#!/bin/bash
# DDP speed and synchronisation overhead, godist against PyTorch, measured
# side by side: each round runs, one after the other, PyTorch DDP (gloo) and
# PyTorch's unsynchronised replicas (tools/peers/train_ddp.py
# under torchrun, world 2),
# then godist's example under `godist run --nproc-per-node 2`, pure Go and
# OpenBLAS builds, each with DDP and with --unsynced. One epoch of the full
# Fashion-MNIST each. The machine is shared and noisy: the summary takes,
# per round, the ratios of runs made in the same minute, then the median
# over rounds.
#
#   tools/ddpcmp/run.sh [rounds] [model]      (model: mlp, lenet, lstm or gru)
#   LOAD=2 tools/ddpcmp/run.sh [rounds] [model]
#
# With LOAD=N, N processes `sha256sum /dev/zero` run at the same priority
# for the whole measurement (a busy machine: issue 33's test, one hog a
# CPU on this 2-CPU machine); compare its table with one run without.
#
# Synchronisation overhead, as the anchors define it: (DDP step - step of
# unsynchronised replicas) / DDP step.
#
# Every DDP run also records the CPUs' cache-line round trip just before
# and just after it (tools/corelat): the host moves this VM's two
# vCPUs between nearby cores (~60 ns) and distant ones (~300 ns) every few
# seconds, and every exchange between ranks (PyTorch's too) is slower
# while they are distant. The summary gives the medians over all rounds,
# then over the runs made with the vCPUs near (both round trips < 150 ns)
# and far apart (both >= 150 ns).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
model=${2:-mlp}
ptscript=tools/peers/train_ddp.py
out=$(mktemp -d)
hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
mkdir -p bin
go build -o bin/godist ./cmd/godist
go build -o bin/ddp-go ./examples/ddp-fashion-mnist
go build -o bin/corelat ./tools/corelat
blas=()
if [ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ]; then
	go build -tags openblas -o bin/ddp-blas ./examples/ddp-fashion-mnist
	blas=(blas)
fi
py() { # name args...: one PyTorch run: name, ms/step, samples/s, CPU round trips before and after
	local name=$1 before res
	shift
	before=$(bin/corelat)
	# torch 1.13's torchrun crashes under Python 3.11 without --redirects and --tee.
	res=$(OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 \
		--redirects 1 --tee 1 "$ptscript" --model "$model" --threads 1 "$@" 2>/dev/null |
		sed -n 's/^\[default0\]:\({.*}\)$/\1/p' |
		python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(d['ms_per_step'], d['samples_per_s'])")
	echo "$name $res $before $(bin/corelat)"
}
gd() { # name binary args...: one godist run: name, ms/step, samples/s, CPU round trips before and after
	local name=$1 bin=$2 before res
	shift 2
	before=$(bin/corelat)
	res=$(bin/godist run --standalone --nproc-per-node 2 "bin/$bin" --model "$model" --epochs 1 "$@" 2>/dev/null |
		sed -n 's/^\[rank 0\] \({.*}\)$/\1/p' |
		python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(d['ms_per_step'], d['samples_per_s'])")
	echo "$name $res $before $(bin/corelat)"
}
for _ in $(seq "${LOAD:-0}"); do
	sha256sum /dev/zero >/dev/null &
	hogs+=($!)
done
[ ${#hogs[@]} -eq 0 ] || echo "ddpcmp: ${#hogs[@]} CPU hogs (sha256sum /dev/zero) running" >&2
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
    runs.append({l.split()[0]: [float(v) for v in l.split()[1:]] for l in open(f"{out}/round{r}")})
def med(xs):
    return st.median(xs) if xs else float("nan")
def mode(x, name):  # "near", "far" or "mixed": where the vCPUs were during the run
    a, b = x[name][2], x[name][3]
    return "near" if max(a, b) < 150 else "far" if min(a, b) >= 150 else "mixed"
names = ["pytorch"] + builds
def row(label, name, rs):
    return "| %s | %d | %.2f | %.0f | %.2fx | %.0f%% |" % (label, len(rs), med([x[name][0] for x in rs]), med([x[name][1] for x in rs]),
        med([x[name][1] / x["pytorch"][1] for x in rs]), 100 * med([1 - x[name + "-unsynced"][0] / x[name][0] for x in rs]))
print()
print("| | rounds | ms/step | samples/s | x PyTorch DDP (samples/s) | sync overhead |")
print("|---|---|---|---|---|---|")
for n in names:
    label = "PyTorch DDP" if n == "pytorch" else "godist " + n
    print(row(label, n, runs))
    for m in ("near", "far"):
        rs = [x for x in runs if mode(x, n) == m]
        if rs:
            print(row("%s, vCPUs %s" % (label, m), n, rs))
print()
print("(medians over %d rounds; ratios and overheads paired within a round; near: the CPUs' cache-line round trip" % rounds)
print("under 150 ns just before and just after that DDP run, far: over 150 ns both times; round trips, ns:")
for n in names:
    print("  %s: %s" % (n, " ".join("%.0f/%.0f" % (x[n][2], x[n][3]) for x in runs)))
print(")")
PY
