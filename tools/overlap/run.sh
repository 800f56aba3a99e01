#!/usr/bin/env bash
# Measures what DDP's overlap of communication with backward gains on a
# slow link: two ranks in two network namespaces joined by a veth pair
# shaped to 1 Gbit/s (or $RATE) with tc tbf (netem is not in this kernel), the DDP
# example run with and without overlap. Needs root and iproute2.
#
#   tools/overlap/run.sh [MODEL] [STEPS] [EXTRA ARGS...]
set -euo pipefail
model=${1:-lenet}; steps=${2:-150}; shift 2 || true
extra=("$@")
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(mktemp -d)
trap 'ip netns del gdov0 2>/dev/null || true; ip netns del gdov1 2>/dev/null || true; rm -rf "$bin"' EXIT
(cd "$root" && go build -o "$bin/ddp" ./examples/ddp-fashion-mnist)

ip netns del gdov0 2>/dev/null || true; ip netns del gdov1 2>/dev/null || true
ip netns add gdov0; ip netns add gdov1
ip link add gdov-a type veth peer name gdov-b
ip link set gdov-a netns gdov0; ip link set gdov-b netns gdov1
ip -n gdov0 addr add 10.77.0.1/24 dev gdov-a; ip -n gdov1 addr add 10.77.0.2/24 dev gdov-b
for ns in gdov0 gdov1; do ip -n $ns link set lo up; done
ip -n gdov0 link set gdov-a up; ip -n gdov1 link set gdov-b up
for x in "gdov0 gdov-a" "gdov1 gdov-b"; do
  read -r ns dev <<< "$x"
  tc -n "$ns" qdisc add dev "$dev" root tbf rate "${RATE:-1gbit}" burst 128kb latency 100ms
done

run() { # label, extra flags
  local port=$((30000 + RANDOM % 20000))
  for r in 0 1; do
    ip netns exec gdov$r env RANK=$r WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=$port \
      GODIST_HOST=10.77.0.$((r + 1)) OPENBLAS_NUM_THREADS=1 GODIST_DDP_TRACE=${TRACE:-} GOMAXPROCS=${GOMAXPROCS:-1} \
      "$bin/ddp" --model "$model" --epochs 1 --max-steps "$steps" --plot "" \
      --checkpoint "$bin/ck-$port.safetensors" "$@" > "$bin/out$r" 2> "$bin/err$r" &
  done
  wait
  [ -n "${TRACE:-}" ] && grep trace: "$bin/err0" | sed -n 20,28p
  python3 -c "import json,sys; d=json.load(open(sys.argv[2])); print('%-12s %8.2f ms/step %8.0f samples/s  backward %6.2f ms  wait %6.2f ms' % (sys.argv[1], d['ms_per_step'], d['samples_per_s'], d['backward_ms_per_step'], d['wait_ms_per_step']))" "$label" "$bin/out0"
}
for i in 1 2; do
  label=overlap run "${extra[@]}"
  label=no-overlap run --no-overlap "${extra[@]}"
done
