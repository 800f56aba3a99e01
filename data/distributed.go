package data

import (
	"fmt"
	"sync"

	"github.com/godist/godist/tensor"
)

// DistributedSampler gives each of Replicas ranks its own share of a
// dataset's indices, as torch.utils.data.distributed.DistributedSampler:
// with Shuffle, the order is torch.randperm(N) from a generator seeded
// with Seed+epoch (SetEpoch), so the index streams are exactly PyTorch's
// for the same seed; the list is padded by repeating its start (or cut,
// with DropLast) to a multiple of Replicas, and rank r takes every
// Replicas-th index starting at r.
type DistributedSampler struct {
	n, replicas, rank int
	shuffle, dropLast bool
	seed              uint64

	mu    sync.Mutex
	epoch int
}

var (
	_ Sampler     = (*DistributedSampler)(nil)
	_ EpochSetter = (*DistributedSampler)(nil)
)

// NewDistributedSampler returns rank's sampler over n examples.
func NewDistributedSampler(n, replicas, rank int, shuffle bool, seed uint64, dropLast bool) (*DistributedSampler, error) {
	if replicas < 1 || rank < 0 || rank >= replicas || n < 0 {
		return nil, fmt.Errorf("data: DistributedSampler rank %d of %d replicas over %d examples", rank, replicas, n)
	}
	return &DistributedSampler{n: n, replicas: replicas, rank: rank, shuffle: shuffle, dropLast: dropLast, seed: seed}, nil
}

// Len returns how many indices each rank gets per epoch.
func (s *DistributedSampler) Len() int {
	if s.dropLast && s.n%s.replicas != 0 {
		return (s.n - s.replicas + s.replicas - 1) / s.replicas // ceil((n - replicas) / replicas)
	}
	return (s.n + s.replicas - 1) / s.replicas
}

// SetEpoch sets the epoch: with Shuffle, each epoch has its own order.
func (s *DistributedSampler) SetEpoch(epoch int) {
	s.mu.Lock()
	s.epoch = epoch
	s.mu.Unlock()
}

// Indices returns this rank's indices for the current epoch.
func (s *DistributedSampler) Indices() []int {
	s.mu.Lock()
	epoch := s.epoch
	s.mu.Unlock()
	var idx []int
	if s.shuffle {
		idx = tensor.NewTorchRNG(s.seed + uint64(epoch)).Perm(s.n)
	} else {
		idx = make([]int, s.n)
		for i := range idx {
			idx[i] = i
		}
	}
	per := s.Len()
	total := per * s.replicas
	if !s.dropLast && len(idx) > 0 {
		for len(idx) < total {
			idx = append(idx, idx[:min(total-len(idx), len(idx))]...)
		}
	}
	idx = idx[:total]
	out := make([]int, 0, per)
	for i := s.rank; i < total; i += s.replicas {
		out = append(out, idx[i])
	}
	return out
}
