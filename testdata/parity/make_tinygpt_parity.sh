#!/bin/sh
# Reference losses for examples/tinygpt's parity test, computed by
# PyTorch 1.13: the example dumps its data, initial weights, batches and
# configuration for a 2-layer tiny GPT on the Go files of testdata/gosrc,
# and its PyTorch twin (tools/peers/gpt_twin.py) trains the same
# model on the same batches with AdamW (two groups), warm-up + cosine and
# clipping. tinygpt.json keeps the twin's result; CI needs no PyTorch.
#
#   sh testdata/parity/make_tinygpt_parity.sh      (from the repository root)
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Keep these flags in step with parityConfig in examples/tinygpt/main_test.go.
go run ./examples/tinygpt --data testdata/gosrc --layers 2 --heads 2 --width 32 --block 32 --batch 4 \
	--steps 20 --warmup 5 --lr 3e-3 --min-lr 3e-4 --clip 0.5 --eval-every 10 --eval-batches 4 --seed 7 \
	--sample 0 --checkpoint "" --plot "" --dump "$dir/dump" >/dev/null 2>&1
/usr/bin/python3 tools/peers/gpt_twin.py "$dir/dump" 2>/dev/null | tail -1 >testdata/parity/tinygpt.json
cat testdata/parity/tinygpt.json
