// Package peers holds the scripts that measure godist's peers with the
// method godist bench uses (barrier; t0; op; t1, the max over ranks, the
// median over iterations): bench_gloo.py (PyTorch's gloo, on this host or
// under torchrun across hosts) and bench_mpi.py (OpenMPI through mpi4py,
// under mpirun), bench_rpc.py (PyTorch's TensorPipe RPC, timed as godist
// bench --rpc times godist's), and train_ddp.py (PyTorch DDP over gloo training
// Fashion-MNIST as examples/ddp-fashion-mnist does, under torchrun) and
// gpt_twin.py (examples/tinygpt's PyTorch twin: the same GPT, weights and
// batches; alone, or under torchrun), store_load.py (PyTorch's TCPStore
// under tools/storeload's rendezvous load), init_scale.py (one rank of
// a many-process init_process_group, for tools/initscale) and
// rpc_pipeline.py (examples/rpc-pipeline's PyTorch twin: the RPC pipeline
// tutorial's code on the same model, weights and batches, for
// tools/pipecmp). They are the team's anchors
// (shared/anchors) kept in the repository, so that the benchmark tools
// need nothing outside it; the tools carry them in their binaries and
// write them out to run them. gpt_compare.sh compares tinygpt with its
// twin on this host.
//
//	dir, err := peers.Write(tmp) // tmp/bench_gloo.py, tmp/bench_mpi.py, tmp/bench_rpc.py, ...
package peers

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
)

//go:embed bench_gloo.py bench_mpi.py bench_rpc.py train_ddp.py gpt_twin.py store_load.py init_scale.py rpc_pipeline.py
var scripts embed.FS

// Scripts are the file names Write writes.
var Scripts = []string{"bench_gloo.py", "bench_mpi.py", "bench_rpc.py", "train_ddp.py", "gpt_twin.py", "store_load.py", "init_scale.py", "rpc_pipeline.py"}

// Write writes the scripts into dir (made if missing), side by side, since
// bench_mpi.py imports bench_gloo.py's table, and returns dir.
func Write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("peers: %w", err)
	}
	for _, name := range Scripts {
		b, err := scripts.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("peers: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			return "", fmt.Errorf("peers: %w", err)
		}
	}
	return dir, nil
}
