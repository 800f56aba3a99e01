package dist_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

// regionMappings counts this process's mappings of shared-memory regions
// (transport.Region, its own and its peers').
func regionMappings(t *testing.T) int {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	prefix := "/dev/shm/godist-" + strconv.Itoa(os.Getpid()) + "-"
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if line := sc.Text(); strings.Contains(line, prefix) && strings.Contains(line, "-region-") {
			n++
		}
	}
	return n
}

// TestSharedTensorRelease: a shared tensor's memory outlives the garbage
// collector while only a slice of it is in use; Release frees it (once,
// from any view); Destroy releases the rest, and nothing stays mapped.
// With the tag godist_guard, a use after Destroy panics naming it.
func TestSharedTensorRelease(t *testing.T) {
	const n = 100_000 // 400 KB: all-reduces of it go through shared memory
	before := regionMappings(t)
	disttest.SpawnWith(t, 2, disttest.Options{TCP: true, SharedMemory: true}, func(_ *disttest.Job, g *dist.Group) error {
		ctx := context.Background()
		x, err := g.NewSharedTensor(ctx, tensor.Float32, n)
		if err != nil {
			return err
		}
		if !dist.SharedAllReduceApplies(g, x) {
			return fmt.Errorf("rank %d: all-reduce of the shared tensor does not go through shared memory", g.Rank())
		}
		x.Fill(1)
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			return err
		}
		// Only a slice of it is reachable now; collections must not unmap
		// the memory under it.
		f := x.Float32s()
		x = nil
		sum := float32(0)
		for i := range 30 {
			runtime.GC()
			for k := i; k < len(f); k += 997 {
				sum += f[k]
				f[k] = 2
			}
		}
		if sum == 0 || f[0] != 2 {
			return fmt.Errorf("rank %d: slice of a shared tensor read %v", g.Rank(), sum)
		}
		runtime.KeepAlive(f)

		// Release, of the tensor or a view, frees it once; its piece no
		// longer counts as shared.
		y, err := g.NewSharedTensor(ctx, tensor.Float32, n)
		if err != nil {
			return err
		}
		piece := y.Narrow(0, 0, n/2)
		piece.Release()
		y.Release()
		y.Release()
		if !y.Released() || !piece.Released() {
			return fmt.Errorf("rank %d: Released false after Release", g.Rank())
		}
		if z := tensor.New(tensor.Float32, n); dist.SharedAllReduceApplies(g, z) {
			return fmt.Errorf("rank %d: an ordinary tensor counts as shared", g.Rank())
		}

		// Destroy releases what is left.
		w, err := g.NewSharedTensor(ctx, tensor.Float32, n)
		if err != nil {
			return err
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if err := g.Destroy(); err != nil {
			return err
		}
		if !w.Released() {
			return fmt.Errorf("rank %d: shared tensor not released by Destroy", g.Rank())
		}
		if tensor.Guarded {
			msg := func() (msg string) {
				defer func() { msg = fmt.Sprint(recover()) }()
				w.Float32s()
				return ""
			}()
			if !strings.HasPrefix(msg, "tensor: use of a released tensor (released by ") || !strings.Contains(msg, "releaseShared") || !strings.Contains(msg, "Destroy") {
				return fmt.Errorf("rank %d: use after Destroy: panic %q", g.Rank(), msg)
			}
		}
		return nil
	})
	// The connections' readers unmap the peers' regions as they see the
	// connections end, a moment after the job returns: wait for them, a
	// bounded time.
	after := regionMappings(t)
	for deadline := time.Now().Add(5 * time.Second); after != before && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		after = regionMappings(t)
	}
	if after != before {
		t.Errorf("%d shared-memory regions mapped 5 s after the job, %d before", after, before)
	}
}
