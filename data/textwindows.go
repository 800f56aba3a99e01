package data

import (
	"fmt"
	"iter"
	"runtime"

	"github.com/godist/godist/tensor"
)

// WindowOptions configure RandomWindows.
type WindowOptions struct {
	// BatchSize is the number of windows each rank gets per step (at
	// least 1).
	BatchSize int
	// Block is the number of tokens of input per window, the context
	// length (at least 1); each window reads Block+1 bytes.
	Block int
	// Seed, with the step, decides the windows.
	Seed uint64
	// World is the number of ranks that share each step's global batch
	// of World×BatchSize windows; 0 means 1.
	World int
	// Rank is this rank's place in the world, 0..World-1.
	Rank int
}

// RandomWindows draws batches of random windows from one split of a
// TextCorpus for training, as nanoGPT's get_batch: a window is Block+1
// consecutive bytes starting anywhere in the split (uniformly in
// 0..Len-Block-1), x is its first Block bytes and y its last Block, so
// y[i] is the byte that follows x[i].
//
// Step k's batch is a function of (Seed, k) alone: a tensor.NewRNG seeded
// with a mix of the two (splitmix64) draws the starts of the global batch,
// World×BatchSize windows, and rank r takes rows r×BatchSize up to
// (r+1)×BatchSize. So every rank draws from the same stream without
// talking, the ranks' shares are disjoint rows of one global batch, and
// World ranks with BatchSize b together see exactly, row for row, what one
// process with World 1 and BatchSize World×b sees: DDP and single-process
// training take the same data. Steps need not be asked for in order (a
// resumed run asks for step k directly), and different seeds give
// unrelated streams (not the same stream shifted, as seed+step would).
//
// A RandomWindows is safe for concurrent use.
type RandomWindows struct {
	data  *tensor.Tensor // the split, kept reachable while in use
	split Split
	opt   WindowOptions
}

// RandomWindows returns a source of random training windows from split s.
// Errors wrap ErrTextOption (BatchSize or Block below 1, World below 1,
// Rank outside 0..World-1) or ErrSplitTooShort (the split has fewer than
// Block+1 bytes; both sizes are named).
func (c *TextCorpus) RandomWindows(s Split, opt WindowOptions) (*RandomWindows, error) {
	if opt.World == 0 {
		opt.World = 1
	}
	if err := checkWindows(c, s, opt.BatchSize, opt.Block, opt.World, opt.Rank); err != nil {
		return nil, err
	}
	return &RandomWindows{data: c.data[s], split: s, opt: opt}, nil
}

// checkWindows checks the options common to both kinds of windows.
func checkWindows(c *TextCorpus, s Split, batch, block, world, rank int) error {
	if s != Train && s != Validation {
		return fmt.Errorf("%w: %v is not a split; pass data.Train or data.Validation", ErrTextOption, s)
	}
	if batch < 1 || block < 1 {
		return fmt.Errorf("%w: batch size %d and block %d must both be at least 1", ErrTextOption, batch, block)
	}
	if world < 1 || rank < 0 || rank >= world {
		return fmt.Errorf("%w: rank %d of world %d; the rank must be in 0..world-1", ErrTextOption, rank, world)
	}
	if n := c.Len(s); n < block+1 {
		return fmt.Errorf("%w: block %d needs windows of %d bytes but the %v split of %s has %d bytes; lower the block or add files", ErrSplitTooShort, block, block+1, s, c.root, n)
	}
	return nil
}

// Options returns the options, with World filled in.
func (w *RandomWindows) Options() WindowOptions { return w.opt }

// Starts returns the split offsets of this rank's windows at step, in row
// order: a new slice of BatchSize offsets. Negative steps are steps like
// any other.
func (w *RandomWindows) Starts(step int) []int {
	b, r := w.opt.BatchSize, w.opt.Rank
	rng := tensor.NewRNG(stepSeed(w.opt.Seed, uint64(step)))
	span := w.data.Numel() - w.opt.Block
	// Rows after this rank's share do not change it: draw up to its end.
	for range r * b {
		rng.IntN(span)
	}
	out := make([]int, b)
	for i := range out {
		out[i] = rng.IntN(span)
	}
	return out
}

// Batch returns this rank's batch at step: x and y, new int64 tensors of
// BatchSize×Block tokens (byte values 0..255) that belong to the caller.
func (w *RandomWindows) Batch(step int) (x, y *tensor.Tensor) {
	return w.BatchInto(nil, nil, step)
}

// BatchInto is Batch writing into x and y where they are contiguous int64
// BatchSize×Block tensors (a training loop passes the previous step's,
// which it no longer needs); others, nil included, are allocated anew. It
// returns the batch.
func (w *RandomWindows) BatchInto(x, y *tensor.Tensor, step int) (*tensor.Tensor, *tensor.Tensor) {
	return fillWindows(w.data, w.Starts(step), w.opt.Block, x, y)
}

// stepSeed mixes a seed and a step into the seed of that step's
// generator: splitmix64(splitmix64(seed) ^ step), one-to-one in the step
// for a given seed.
func stepSeed(seed, step uint64) uint64 {
	return splitmix64(splitmix64(seed) ^ step)
}

// splitmix64 is the finaliser of Vigna's SplitMix64 applied to x plus its
// increment.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// fillWindows writes the windows at starts of data into x and y (reused
// when they are contiguous int64 len(starts)×block, allocated otherwise).
func fillWindows(data *tensor.Tensor, starts []int, block int, x, y *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor) {
	b := len(starts)
	if !windowFits(x, b, block) {
		x = tensor.New(tensor.Int64, b, block)
	}
	if !windowFits(y, b, block) || y == x {
		y = tensor.New(tensor.Int64, b, block)
	}
	src, xs, ys := data.Uint8s(), x.Int64s(), y.Int64s()
	for i, s := range starts {
		win := src[s : s+block+1]
		xr, yr := xs[i*block:(i+1)*block], ys[i*block:(i+1)*block]
		for j := range block {
			xr[j] = int64(win[j])
			yr[j] = int64(win[j+1])
		}
	}
	runtime.KeepAlive(data)
	return x, y
}

// windowFits reports whether t can hold a batch of b windows of block.
func windowFits(t *tensor.Tensor, b, block int) bool {
	return t != nil && t.DType() == tensor.Int64 && t.IsContiguous() && t.Dim() == 2 && t.Size(0) == b && t.Size(1) == block
}

// EvalOptions configure EvalWindows.
type EvalOptions struct {
	// BatchSize is the number of windows each rank gets per batch (at
	// least 1).
	BatchSize int
	// Block is the number of tokens of input per window (at least 1).
	Block int
	// World is the number of ranks sharing each global batch; 0 means 1.
	World int
	// Rank is this rank's place in the world, 0..World-1.
	Rank int
	// MaxBatches caps the number of batches (global batches: every rank
	// gets this many); 0 means all of them.
	MaxBatches int
}

// EvalWindows walks one split of a TextCorpus in order for an evaluation
// loss: window j is the Block+1 bytes starting at j×Block, so consecutive
// windows share one byte and every byte after the first is a target
// exactly once; there are (Len-1)/Block windows (a shorter tail is left
// out).
//
// Batch i is global batch i of World×BatchSize consecutive windows, of
// which rank r takes rows r×BatchSize up to (r+1)×BatchSize; so World ranks
// with BatchSize b see exactly what one process with BatchSize World×b
// sees. A last global batch that would be short is left out, so that every
// rank has the same number of full batches (Len) and can take part in the
// same collectives for each; at most World×BatchSize-1 windows are lost.
//
// An EvalWindows is safe for concurrent use.
type EvalWindows struct {
	data *tensor.Tensor
	opt  EvalOptions
	n    int // batches
}

// EvalWindows returns the sequential windows of split s. Errors wrap
// ErrTextOption (BatchSize or Block below 1, World below 1, Rank outside
// 0..World-1, MaxBatches negative) or ErrSplitTooShort (fewer than Block+1
// bytes, or fewer windows than one global batch; the sizes are named).
func (c *TextCorpus) EvalWindows(s Split, opt EvalOptions) (*EvalWindows, error) {
	if opt.World == 0 {
		opt.World = 1
	}
	if err := checkWindows(c, s, opt.BatchSize, opt.Block, opt.World, opt.Rank); err != nil {
		return nil, err
	}
	if opt.MaxBatches < 0 {
		return nil, fmt.Errorf("%w: MaxBatches %d; 0 means all batches", ErrTextOption, opt.MaxBatches)
	}
	windows := (c.Len(s) - 1) / opt.Block
	global := opt.World * opt.BatchSize
	n := windows / global
	if n == 0 {
		return nil, fmt.Errorf("%w: the %v split of %s has %d bytes, %d windows of block %d, fewer than one global batch of %d (world %d × batch %d); lower the batch size or the block", ErrSplitTooShort, s, c.root, c.Len(s), windows, opt.Block, global, opt.World, opt.BatchSize)
	}
	if opt.MaxBatches > 0 {
		n = min(n, opt.MaxBatches)
	}
	return &EvalWindows{data: c.data[s], opt: opt, n: n}, nil
}

// Options returns the options, with World filled in.
func (e *EvalWindows) Options() EvalOptions { return e.opt }

// Len returns the number of batches, the same on every rank.
func (e *EvalWindows) Len() int { return e.n }

// Starts returns the split offsets of this rank's windows in batch i, a
// new slice of BatchSize offsets. It panics if i is not in 0..Len()-1.
func (e *EvalWindows) Starts(i int) []int {
	if i < 0 || i >= e.n {
		panic(fmt.Sprintf("data: evaluation batch %d out of range for %d batches", i, e.n))
	}
	b, block := e.opt.BatchSize, e.opt.Block
	first := (i*e.opt.World + e.opt.Rank) * b
	out := make([]int, b)
	for j := range out {
		out[j] = (first + j) * block
	}
	return out
}

// Batch returns this rank's share of batch i as new int64 tensors x and y
// of BatchSize×Block tokens (y is x shifted by one byte). It panics if i
// is not in 0..Len()-1.
func (e *EvalWindows) Batch(i int) (x, y *tensor.Tensor) {
	return fillWindows(e.data, e.Starts(i), e.opt.Block, nil, nil)
}

// All returns the batches in order, x and y of each; ranging over it
// again starts from the first batch. Each batch's tensors are new and
// belong to the loop body.
func (e *EvalWindows) All() iter.Seq2[*tensor.Tensor, *tensor.Tensor] {
	return func(yield func(x, y *tensor.Tensor) bool) {
		for i := range e.n {
			if !yield(e.Batch(i)) {
				return
			}
		}
	}
}
