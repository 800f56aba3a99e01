package dist_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/godist/godist/tensor"
)

// Helpers shared by the p2p, object, subgroup, desync, fault, init and
// multi-process tests.

// randFloat32 returns n pseudo-random float32s (not small integers, so a
// reduction's result depends on its order) from seed.
func randFloat32(seed uint64, n int) *tensor.Tensor {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	v := make([]float32, n)
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	return tensor.FromFloat32(v)
}

// iota32 returns the float32 tensor base, base+1, ... of n elements.
func iota32(base float32, n int) *tensor.Tensor {
	v := make([]float32, n)
	for i := range v {
		v[i] = base + float32(i)
	}
	return tensor.FromFloat32(v)
}

// sameBytes reports the first difference between two tensors' bytes.
func sameBytes(what string, got, want []byte) error {
	if bytes.Equal(got, want) {
		return nil
	}
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%s: byte %d of %d is %#x, want %#x", what, i, len(got), got[i], want[i])
		}
	}
	return nil
}

// within runs fn and fails if it returns later than d.
func within(d time.Duration, what string, fn func() error) error {
	start := time.Now()
	err := fn()
	if el := time.Since(start); el > d {
		return errors.Join(fmt.Errorf("%s took %v, want at most %v", what, el.Round(time.Millisecond), d), err)
	}
	return err
}
