package dist_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
)

// GODIST_CPUPROFILE and GODIST_TRACE work for every program that calls
// Init, not only godist bench's workers (issue 27, item 10): each rank
// writes prefix.rank<R> until Destroy.
func TestInitWritesProfiles(t *testing.T) {
	clearLauncherEnv(t)
	dir := t.TempDir()
	t.Setenv("GODIST_CPUPROFILE", filepath.Join(dir, "cpu"))
	t.Setenv("GODIST_TRACE", filepath.Join(dir, "trace"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := dist.Init(ctx, dist.Options{Rank: 0, WorldSize: 1, Store: store.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.Full(tensor.Float32, 1, 1000)
	for range 10 {
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	cpu, err := os.ReadFile(filepath.Join(dir, "cpu.rank0"))
	if err != nil || !bytes.HasPrefix(cpu, []byte{0x1f, 0x8b}) { // a gzipped profile.proto
		t.Fatalf("cpu.rank0: %d bytes %.8q, %v", len(cpu), cpu, err)
	}
	tr, err := os.ReadFile(filepath.Join(dir, "trace.rank0"))
	if err != nil || !bytes.HasPrefix(tr, []byte("go 1.")) {
		t.Fatalf("trace.rank0: %d bytes %.16q, %v", len(tr), tr, err)
	}
}

// A CPU profile the program already runs, into the very path, is left
// alone: Init neither stops it nor truncates its file.
func TestInitLeavesARunningProfile(t *testing.T) {
	clearLauncherEnv(t)
	dir := t.TempDir()
	t.Setenv("GODIST_CPUPROFILE", filepath.Join(dir, "cpu"))
	t.Setenv("GODIST_TRACE", "")
	f, err := os.Create(filepath.Join(dir, "cpu.rank0"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Skipf("cannot profile here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := dist.Init(ctx, dist.Options{Rank: 0, WorldSize: 1, Store: store.NewMem()})
	if err != nil {
		pprof.StopCPUProfile()
		t.Fatal(err)
	}
	g.Destroy()
	pprof.StopCPUProfile()
	b, err := os.ReadFile(f.Name())
	if err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Fatalf("the program's own profile: %d bytes %.8q, %v", len(b), b, err)
	}
}
