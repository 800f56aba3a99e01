package data

import (
	"fmt"
	"iter"
	"sync"

	"github.com/godist/godist/tensor"
)

// LoaderOptions configure a Loader. The zero value is batches of one in
// dataset order, built synchronously.
type LoaderOptions struct {
	// BatchSize is the number of examples per batch; 0 means 1.
	BatchSize int
	// Shuffle visits the examples in a random order drawn from Seed (a
	// RandomSampler). Ignored when Sampler is set.
	Shuffle bool
	// Seed seeds the shuffle.
	Seed uint64
	// DropLast drops the last batch of a pass when it is short.
	DropLast bool
	// Sampler, if not nil, decides the order and overrides Shuffle and
	// Seed.
	Sampler Sampler
	// Prefetch is the number of batches prepared ahead by a background
	// goroutine; 0 builds each batch synchronously when the loop asks for
	// it.
	Prefetch int
}

// Loader turns a Dataset into batches, as torch.utils.data.DataLoader with
// the default collate function: each batch is one tensor per element of
// the example tuple, stacked along a new dimension 0.
//
// A Loader may be ranged over any number of times, one pass at a time; each
// call to Batches is one epoch.
type Loader struct {
	ds      Dataset
	sampler Sampler
	opt     LoaderOptions
}

// NewLoader returns a loader over ds. It panics if BatchSize or Prefetch is
// negative. The sampler's indices must be valid for ds; the Loader does
// not check them beyond what the dataset's Get or Batch does.
func NewLoader(ds Dataset, opt LoaderOptions) *Loader {
	if opt.BatchSize < 0 || opt.Prefetch < 0 {
		panic(fmt.Sprintf("data: NewLoader with BatchSize %d, Prefetch %d", opt.BatchSize, opt.Prefetch))
	}
	if opt.BatchSize == 0 {
		opt.BatchSize = 1
	}
	s := opt.Sampler
	switch {
	case s != nil:
	case opt.Shuffle:
		s = NewRandomSampler(ds.Len(), opt.Seed)
	default:
		s = SequentialSampler{N: ds.Len()}
	}
	return &Loader{ds: ds, sampler: s, opt: opt}
}

// Sampler returns the sampler the loader draws indices from.
func (l *Loader) Sampler() Sampler { return l.sampler }

// Len returns the number of batches in one pass.
func (l *Loader) Len() int {
	n, bs := l.sampler.Len(), l.opt.BatchSize
	if l.opt.DropLast {
		return n / bs
	}
	return (n + bs - 1) / bs
}

// SetEpoch tells the sampler the epoch if it is an EpochSetter, and does
// nothing otherwise. Call it before ranging over Batches.
func (l *Loader) SetEpoch(epoch int) {
	if es, ok := l.sampler.(EpochSetter); ok {
		es.SetEpoch(epoch)
	}
}

// Batches returns one pass over the data. The sampler's Indices is called
// once, when the range loop starts. Each batch is a new tuple of tensors
// that belongs to the caller.
//
// With Prefetch > 0 a goroutine builds up to Prefetch batches ahead of the
// loop. Leaving the loop early (break, return, panic) stops that goroutine
// and waits for it to exit before the loop statement completes, so nothing
// outlives the loop. A panic while building a batch (a Dataset's Get
// panicking, say) is re-raised in the goroutine running the loop.
func (l *Loader) Batches() iter.Seq[[]*tensor.Tensor] {
	return func(yield func([]*tensor.Tensor) bool) {
		idx := l.sampler.Indices()
		nb := len(idx) / l.opt.BatchSize
		if !l.opt.DropLast && len(idx)%l.opt.BatchSize != 0 {
			nb++
		}
		batch := func(k int) []*tensor.Tensor {
			lo := k * l.opt.BatchSize
			return l.build(idx[lo:min(lo+l.opt.BatchSize, len(idx))])
		}
		if l.opt.Prefetch == 0 {
			for k := range nb {
				if !yield(batch(k)) {
					return
				}
			}
			return
		}
		prefetch(nb, l.opt.Prefetch, batch, yield)
	}
}

// build gathers one batch.
func (l *Loader) build(indices []int) []*tensor.Tensor {
	if b, ok := l.ds.(Batcher); ok {
		return b.Batch(indices)
	}
	ex := make([][]*tensor.Tensor, len(indices))
	for j, i := range indices {
		ex[j] = l.ds.Get(i)
	}
	return collate(ex)
}

// produced is one batch or the panic raised while building it.
type produced struct {
	batch    []*tensor.Tensor
	panicked any
}

// prefetch runs batch(0..n-1) on a goroutine, at most ahead batches ahead
// of yield, and stops and joins the goroutine when yield returns false.
func prefetch(n, ahead int, batch func(int) []*tensor.Tensor, yield func([]*tensor.Tensor) bool) {
	// One batch is in the producer's hands while ahead-1 wait in the
	// channel: ahead batches prepared in all.
	ch := make(chan produced, ahead-1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(ch)
		for k := range n {
			select {
			case <-done:
				return
			default:
			}
			var p produced
			func() {
				defer func() {
					if r := recover(); r != nil {
						p = produced{panicked: r}
					}
				}()
				p.batch = batch(k)
			}()
			select {
			case ch <- p:
			case <-done:
				return
			}
			if p.panicked != nil {
				return
			}
		}
	}()
	defer wg.Wait()
	defer close(done)
	for p := range ch {
		if p.panicked != nil {
			panic(p.panicked)
		}
		if !yield(p.batch) {
			return
		}
	}
}
