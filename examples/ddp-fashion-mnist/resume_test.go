package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/data"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

// TestResumeIsExact (issue 19, item 6) trains the MLP for two short epochs
// without stopping, and again stopped in the second epoch (after its
// checkpoint of the first) and resumed by a fresh job: the final
// checkpoints' weights and optimizer state must be identical bit for bit.
// World 2 passes whatever the summation order (a+b is b+a); worlds 3 and 4
// do not unless the resumed run reduces each gradient element in the same
// order as the uninterrupted one. It runs over the in-process transport
// (buckets reduced on the ring and tree schedules) and over TCP with
// shared memory (buckets reduced in place), as `godist run` does.
func TestResumeIsExact(t *testing.T) {
	dir, err := data.SubsetDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, world := range []int{3, 4} {
		for _, shm := range []bool{false, true} {
			t.Run(fmt.Sprintf("world%d/shm=%v", world, shm), func(t *testing.T) {
				tmp := t.TempDir()
				c := config{model: "mlp", epochs: 2, batch: 16, lr: 0.01, mom: 0.9, dir: dir, maxSteps: 4, bucketMB: 25, firstMB: 1}
				opts := disttest.Options{TCP: shm, SharedMemory: shm}
				run := func(c config) {
					t.Helper()
					disttest.SpawnWith(t, world, opts, func(_ *disttest.Job, g *dist.Group) error {
						_, err := train(context.Background(), g, c, io.Discard)
						if errors.Is(err, errStopped) {
							return nil
						}
						return err
					})
				}
				whole := c
				whole.ckpt = filepath.Join(tmp, "whole.safetensors")
				run(whole)

				stopped := c
				stopped.ckpt = filepath.Join(tmp, "stopped.safetensors")
				stopped.stopAt = c.maxSteps + 2 // mid-way through the second epoch
				run(stopped)
				stopped.stopAt, stopped.resume = 0, true
				run(stopped)

				compareCheckpoints(t, whole.ckpt, stopped.ckpt)
			})
		}
	}
}

// compareCheckpoints fails t unless the two files hold the same tensors,
// bit for bit, and the same metadata, naming the largest difference
// otherwise.
func compareCheckpoints(t *testing.T, wantPath, gotPath string) {
	t.Helper()
	want, wmeta, err := checkpoint.LoadFile(wantPath)
	if err != nil {
		t.Fatal(err)
	}
	got, gmeta, err := checkpoint.LoadFile(gotPath)
	if err != nil {
		t.Fatal(err)
	}
	// The metadata too: position, loss history, bucket plan.
	for k, w := range wmeta {
		if g := gmeta[k]; g != w {
			t.Errorf("metadata %s: resumed run %.200q, uninterrupted %.200q", k, g, w)
		}
	}
	for k := range gmeta {
		if _, ok := wmeta[k]; !ok {
			t.Errorf("metadata %s: only in the resumed run's checkpoint", k)
		}
	}
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w, g := want[k], got[k]
		if g == nil {
			t.Errorf("%s: missing from the resumed run's checkpoint", k)
			continue
		}
		if tensor.Equal(w, g) {
			continue
		}
		wv, gv := w.Values(), g.Values()
		if len(wv) != len(gv) {
			t.Errorf("%s: %d values, uninterrupted %d", k, len(gv), len(wv))
			continue
		}
		worst, n := 0.0, 0
		for i := range wv {
			if math.Float64bits(wv[i]) != math.Float64bits(gv[i]) {
				n++
				worst = max(worst, math.Abs(wv[i]-gv[i]))
			}
		}
		t.Errorf("%s: %d of %d values differ from the uninterrupted run's, by up to %.3g", k, n, len(wv), worst)
	}
	for k := range got {
		if want[k] == nil {
			t.Errorf("%s: only in the resumed run's checkpoint", k)
		}
	}
}
