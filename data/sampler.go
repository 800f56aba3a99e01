package data

import (
	"fmt"
	"sync"

	"github.com/godist/godist/tensor"
)

// Sampler decides the order in which a Loader visits a dataset, as
// torch.utils.data.Sampler.
//
// Indices returns the indices for the next pass over the data (one epoch);
// the Loader calls it once at the start of each pass. The returned slice
// belongs to the caller. Len is the number of indices one pass yields.
//
// Samplers that depend on the epoch (so that every rank of a job shuffles
// alike without talking) also implement EpochSetter.
//
// DistributedSampler (distributed.go) plugs in here: a sampler with
// torch's semantics (num_replicas, rank, shuffle, seed, drop_last; without
// drop_last the permutation is padded by repeating its head so every rank
// gets ceil(N/replicas) indices, with it the tail is dropped so each gets
// floor(N/replicas); rank r takes every replicas-th index starting at r;
// set_epoch reseeds the shuffle with seed+epoch).
type Sampler interface {
	Len() int
	Indices() []int
}

// EpochSetter is implemented by samplers whose order is a function of the
// epoch. Loader.SetEpoch forwards to it, like calling
// sampler.set_epoch(epoch) in PyTorch before each epoch.
type EpochSetter interface {
	SetEpoch(epoch int)
}

// SequentialSampler visits 0, 1, ..., N-1 in order.
type SequentialSampler struct {
	N int
}

var _ Sampler = SequentialSampler{}

// Len returns N.
func (s SequentialSampler) Len() int { return s.N }

// Indices returns a new slice 0..N-1.
func (s SequentialSampler) Indices() []int {
	out := make([]int, s.N)
	for i := range out {
		out[i] = i
	}
	return out
}

// RandomSampler visits 0..N-1 in a random order, as
// torch.utils.data.RandomSampler without replacement.
//
// Until SetEpoch is called, each call to Indices returns the next
// permutation from one stream seeded with Seed: a new order every epoch,
// the same sequence of orders for the same seed. Once SetEpoch(e) has been
// called, Indices returns the permutation for (Seed, e) alone (its stream is
// seeded with Seed+e, as DistributedSampler does), the same on every call
// until the epoch changes: two processes with the same seed and epoch agree
// without talking. The permutations are torch.randperm's (the generator is
// tensor.NewTorchRNG), so after SetEpoch the order is exactly that of
// PyTorch's DistributedSampler(shuffle=True, seed=Seed) with one replica.
//
// A RandomSampler is safe for concurrent use.
type RandomSampler struct {
	n    int
	seed uint64

	mu struct {
		sync.Mutex
		rng      *tensor.RNG // the free-running stream
		epoch    int
		epochSet bool
	}
}

var (
	_ Sampler     = (*RandomSampler)(nil)
	_ EpochSetter = (*RandomSampler)(nil)
)

// NewRandomSampler returns a sampler over n examples shuffled from seed.
// It panics if n < 0.
func NewRandomSampler(n int, seed uint64) *RandomSampler {
	if n < 0 {
		panic(fmt.Sprintf("data: NewRandomSampler(%d)", n))
	}
	s := &RandomSampler{n: n, seed: seed}
	s.mu.rng = tensor.NewTorchRNG(seed)
	return s
}

// Len returns n.
func (s *RandomSampler) Len() int { return s.n }

// SetEpoch makes the following passes' order a function of (seed, epoch).
func (s *RandomSampler) SetEpoch(epoch int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.epoch, s.mu.epochSet = epoch, true
}

// Indices returns a new permutation of 0..n-1 (see the type's comment for
// which one).
func (s *RandomSampler) Indices() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.epochSet {
		return tensor.NewTorchRNG(s.seed + uint64(s.mu.epoch)).Perm(s.n)
	}
	return s.mu.rng.Perm(s.n)
}
