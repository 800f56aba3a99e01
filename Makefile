# godist: the two commands a new user runs are `make demo` and `make test`.

GO      ?= go
PYTHON  ?= /usr/bin/python3
# OpenBLAS is optional: the openblas build tag is used when its header is here.
HAVE_OPENBLAS := $(shell test -f /usr/include/x86_64-linux-gnu/cblas.h -o -f /usr/include/cblas.h -o -f /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h && echo yes)

.PHONY: demo demo-single demo-gpt demo-rpc-rl demo-rpc-batch demo-rpc-rnn demo-rpc-pipeline demo-rpc-ps demo-pipeline test vet bench bench-gemm bench-dist bench-hosts bench-hosts-train bench-hosts-gpt bench-hosts-pipeline bench-rpc bench-rpc-pipeline bench-pipeline bench-store bench-scale bench-init build bin/godist bin/ddp-fashion-mnist bin/tinygpt bin/rpc-rl bin/rpc-batch bin/rpc-rnn bin/rpc-pipeline bin/rpc-parameter-server bin/pipeline-gpt

# DDP on Fashion-MNIST with two ranks started by the launcher (the full set
# when the Debian package dataset-fashion-mnist is installed, the shipped
# subset otherwise).
demo: bin/godist bin/ddp-fashion-mnist
	bin/godist run --standalone --nproc-per-node 2 bin/ddp-fashion-mnist --model mlp --epochs 1

# The single-process trainer.
demo-single:
	$(GO) run ./examples/train-fashion-mnist --model mlp --epochs 1

# The tiny GPT on Go's own source tree, two ranks with DDP (about 10
# minutes here; --steps 200 for a first look).
demo-gpt: bin/godist bin/tinygpt
	bin/godist run --standalone --nproc-per-node 2 bin/tinygpt

# The RPC tutorial's REINFORCE on CartPole: an agent and two observers, each
# a process, until the running reward passes 475 (about a minute here).
demo-rpc-rl: bin/godist bin/rpc-rl
	bin/godist run --standalone --nproc-per-node 3 bin/rpc-rl

# The batch RPC tutorial: four observers whose action requests the agent
# answers one forward pass per step, then a forward pass per request.
demo-rpc-batch: bin/godist bin/rpc-batch
	bin/godist run --standalone --nproc-per-node 5 bin/rpc-batch --batch=true
	bin/godist run --standalone --nproc-per-node 5 bin/rpc-batch --batch=false

# The tutorial's model-parallel RNN: the embedding table and the decoder on
# the parameter server, the LSTM on the trainer, trained on Go's source
# bytes with distributed autograd and the distributed optimizer.
demo-rpc-rnn: bin/godist bin/rpc-rnn
	bin/godist run --standalone --nproc-per-node 2 bin/rpc-rnn

# Combining DDP with the RPC framework: the embedding table on the
# parameter server, a DDP linear layer on each of two trainers, driven by
# the master, with distributed autograd and the distributed optimizer.
.PHONY: demo-rpc-ddp bin/rpc-ddp
demo-rpc-ddp: bin/godist bin/rpc-ddp
	bin/godist run --standalone --nproc-per-node 4 bin/rpc-ddp

bin/rpc-ddp:
	$(GO) build -o $@ ./examples/rpc-ddp

# The RPC pipeline tutorial: a master and two workers holding the two
# shards of a small CNN, micro-batches in flight as RRefs, trained on
# Fashion-MNIST with distributed autograd and the distributed optimizer.
demo-rpc-pipeline: bin/godist bin/rpc-pipeline
	bin/godist run --standalone --nproc-per-node 3 bin/rpc-pipeline

# The parameter-server tutorial: one server holding the MLP, two trainers
# training through distributed autograd and the distributed optimizer.
demo-rpc-ps: bin/godist bin/rpc-parameter-server
	bin/godist run --standalone --nproc-per-node 3 bin/rpc-parameter-server

# The tiny GPT on 4 ranks as 2 pipeline stages × 2 data-parallel replicas.
demo-pipeline: bin/godist bin/pipeline-gpt
	bin/godist run --standalone --nproc-per-node 4 bin/pipeline-gpt --pp 2 --schedule 1f1b --steps 200

bin/rpc-parameter-server:
	$(GO) build -o $@ ./examples/rpc-parameter-server

bin/pipeline-gpt:
	$(GO) build -o $@ ./examples/pipeline-gpt

bin/rpc-rl:
	$(GO) build -o $@ ./examples/rpc-rl

bin/rpc-batch:
	$(GO) build -o $@ ./examples/rpc-batch

bin/rpc-rnn:
	$(GO) build -o $@ ./examples/rpc-rnn

bin/rpc-pipeline:
	$(GO) build -o $@ ./examples/rpc-pipeline

bin/tinygpt:
	$(GO) build -o $@ ./examples/tinygpt

bin/godist:
	$(GO) build -o $@ ./cmd/godist

bin/ddp-fashion-mnist:
	$(GO) build -o $@ ./examples/ddp-fashion-mnist

build:
	$(GO) build ./...

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)

# Every package under the race detector; the release tests again with the
# guard that makes a use of released tensor memory panic (godist_guard);
# the long PyTorch parity runs and the 256-node rendezvous that the race
# build skips or shrinks; then the
# OpenBLAS build's tests when OpenBLAS is installed.
#
# The tests run with TMPDIR in .test-tmp, emptied first and removed when
# all pass: what the tests of failures leave behind (a launcher's run
# directory with its workers' error.json, a rank's flight record) stays
# out of /tmp, and after a failing run it is there to read.
TEST_TMP := $(CURDIR)/.test-tmp
test: vet
	rm -rf $(TEST_TMP) && mkdir -p $(TEST_TMP)
	TMPDIR=$(TEST_TMP) $(GO) test -race -timeout 20m ./...
	TMPDIR=$(TEST_TMP) $(GO) test -tags godist_guard -timeout 5m -run Release ./tensor/ ./dist/
	TMPDIR=$(TEST_TMP) $(GO) test -tags godist_guard -timeout 5m -run 'Recycl|Dirty|Held|Sequential|StepAllocation' ./tensor/ ./autograd/ ./nn/ ./models/
	TMPDIR=$(TEST_TMP) $(GO) test -timeout 10m -run Parity ./parallel/ddp/ ./nn/
	TMPDIR=$(TEST_TMP) $(GO) test -timeout 5m -run RendezvousManyNodes ./elastic/
ifeq ($(HAVE_OPENBLAS),yes)
	TMPDIR=$(TEST_TMP) $(GO) test -tags openblas -timeout 10m ./internal/blas/... ./tensor/... ./nn/...
else
	@echo "libopenblas-dev not installed: skipping the openblas build's tests"
endif
	rm -rf $(TEST_TMP)

# The benchmark table of the README: GEMM GFLOP/s (pure Go and OpenBLAS,
# with and without OPENBLAS_CORETYPE) and ms per training step of the MLP,
# LeNet, an LSTM and a GRU classifier and a transformer block beside
# PyTorch's, measured in one run; THREADS=2 gives both sides two threads
# (GOMAXPROCS and set_num_threads).
bench:
	$(GO) run $(if $(HAVE_OPENBLAS),-tags openblas) ./tools/corebench --python $(PYTHON) $(if $(THREADS),--threads $(THREADS))

# Collectives: godist bench, OpenMPI over shared memory (vader) and over
# loopback TCP (tools/peers/bench_mpi.py under mpirun) and PyTorch
# gloo (tools/peers/bench_gloo.py) one after the other, as one table
# per world and op with each peer's median over godist's. A peer not
# installed is skipped. DISTCMP_FLAGS narrows it, e.g.
# DISTCMP_FLAGS='--target 0.3s'; with '--rounds 5' every benchmark runs
# five times, interleaved, and the tables give the rounds' spread and
# where the host had put the vCPUs (tools/corelat).
bench-dist:
	$(GO) run ./tools/distcmp --worlds 2,4 --python $(PYTHON) $(DISTCMP_FLAGS)

# Collectives across hosts made on this machine (tools/clustertest: a
# network namespace, /dev/shm and CPUs per host, links shaped by tbf; needs
# root): for 2 hosts × 2 ranks and 4 × 1 at 1 Gbit/s and 2 × 2 at 10 Gbit/s,
# godist (godist run on each host), PyTorch gloo (torchrun on each host) and
# OpenMPI over TCP (mpirun across the hosts) in interleaved rounds, as one
# table per configuration and op with each peer's median over godist's and,
# for all_reduce, the two-level bound. A peer not installed is skipped.
# HOSTCMP_FLAGS narrows it, e.g. HOSTCMP_FLAGS='--target 0.5s --configs 2x2@1G'.
bench-hosts:
	$(GO) run ./tools/hostcmp --python $(PYTHON) $(HOSTCMP_FLAGS)

# DDP training across the same hosts, each pinned to one CPU: the MLP and
# LeNet of examples/ddp-fashion-mnist under godist run beside PyTorch DDP
# over gloo (tools/peers/train_ddp.py) under torchrun, on one host
# (the base of the scaling efficiency) and on 2 and 4 at 1 and 10 Gbit/s.
# Needs root and python3-torch.
bench-hosts-train:
	$(GO) run ./tools/hostcmp --python $(PYTHON) --train mlp,lenet $(HOSTCMP_FLAGS)

# The tiny GPT across the same hosts: examples/tinygpt with DDP, FSDP and
# hybrid sharding under godist run beside its PyTorch twin (DDP over gloo,
# the same weights and batches) under torchrun, in tokens/s.
bench-hosts-gpt:
	$(GO) run ./tools/hostcmp --python $(PYTHON) --train gpt,gpt-fsdp,gpt-hybrid $(HOSTCMP_FLAGS)

# The pipeline across the same hosts: examples/pipeline-gpt as data
# parallelism alone, with its stages across hosts and with its stages
# inside hosts, measured step time beside the schedule simulator's
# prediction from the stages' costs and the link's. Needs root.
bench-hosts-pipeline:
	$(GO) run ./tools/hostcmp --pipeline $(HOSTCMP_FLAGS)

# RPC: godist bench --rpc and PyTorch's TensorPipe RPC
# (tools/peers/bench_rpc.py), 3 rounds taking turns to go first, as one
# table of the rounds' medians and ranges and godist's advantage per case.
# RPCCMP_FLAGS narrows it, e.g. RPCCMP_FLAGS='--rounds 1 --cases add'.
bench-rpc:
	$(GO) run ./tools/rpccmp --python $(PYTHON) $(RPCCMP_FLAGS)

# The RPC pipeline tutorial: examples/rpc-pipeline under godist run beside
# its PyTorch twin (tools/peers/rpc_pipeline.py: the same CNN shards,
# weights and batches), 3 rounds taking turns to go first, as one table of
# samples/s, their ratio and both test accuracies. PIPECMP_FLAGS narrows
# it, e.g. PIPECMP_FLAGS='--rounds 1 --steps 100'.
bench-rpc-pipeline:
	$(GO) run ./tools/pipecmp --python $(PYTHON) $(PIPECMP_FLAGS)

# The store under the rendezvous' load: 10,000 clients connected at once
# to godist store, beside PyTorch's TCPStore (tools/peers/store_load.py),
# 2 runs each taking turns. STORELOAD_FLAGS='--clients 8000' for a count
# PyTorch's server fits in 20,000 descriptors (it holds two a client).
bench-store:
	$(GO) run ./tools/storeload --python $(PYTHON) $(STORELOAD_FLAGS)

# Many real processes on this host: Init, three small all-reduces and exit,
# godist with every connection at Init, godist connecting on demand, and
# PyTorch's gloo, from a common start (tools/initscale). INITSCALE_FLAGS
# narrows it, e.g. INITSCALE_FLAGS='--worlds 16 --rounds 1'.
bench-init:
	$(GO) run ./tools/initscale --python $(PYTHON) $(INITSCALE_FLAGS)

# Thousands of goroutine ranks over the in-process transport: every kind
# of call, checked, with its time and the heap per rank (dist's TestScale;
# make test runs it at 256 ranks). SCALE='1024,4096' for fewer.
SCALE ?= 4096,16384
bench-scale:
	$(GO) test -run '^TestScale$$' -count=1 -v -timeout 30m ./dist -scale=$(SCALE)

bench-gemm:
	$(GO) test -run '^$$' -bench . -benchtime 20x $(if $(HAVE_OPENBLAS),-tags openblas) ./internal/blas/

# Pipeline schedules: measured step time beside the simulator's prediction
# from the stages' profiled costs (meas/pred), at 2 and 4 stages.
bench-pipeline:
	$(GO) test -run '^$$' -bench PipelineStep -benchtime 4x ./parallel/pipeline/
