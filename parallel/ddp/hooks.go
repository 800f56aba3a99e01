package ddp

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/tensor"
)

// GradBucket is what a communication hook reduces: one bucket's gradients,
// flattened into Buffer in the bucket's parameter order.
type GradBucket struct {
	Index  int
	Buffer *tensor.Tensor // float32, the bucket's gradients back to back
	IsLast bool

	params *bucket
	ddp    *DDP
}

// Parameters returns the bucket's parameters, in the order of Gradients
// (PyTorch's GradBucket.parameters()). The slice is the caller's.
func (b *GradBucket) Parameters() []*autograd.Var {
	out := make([]*autograd.Var, len(b.params.params))
	for k, i := range b.params.params {
		out[k] = b.ddp.params[i]
	}
	return out
}

// Gradients returns views of Buffer, one per parameter, shaped like the
// parameters (matrices for PowerSGD).
func (b *GradBucket) Gradients() []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(b.params.params))
	for k := range b.params.params {
		out[k] = b.ddp.view(b.params, k)
	}
	return out
}

// CommHook reduces a bucket: it must start the communication and return a
// Work that completes once Buffer holds the average over the group of
// every member's Buffer (or its approximation, for compressing hooks).
// Hooks run inside backward; they must not block.
type CommHook func(g *dist.Group, b *GradBucket) *dist.Work

// AllReduceHook averages the bucket with one all-reduce (DDP's default).
func AllReduceHook(g *dist.Group, b *GradBucket) *dist.Work {
	return g.AllReduceAsync(b.Buffer, dist.Avg)
}

// FP16CompressHook sends the bucket as IEEE half floats: it halves the
// bytes on the wire at the cost of precision (PyTorch's fp16_compress_hook).
func FP16CompressHook(g *dist.Group, b *GradBucket) *dist.Work {
	return compressHook(g, b, tensor.Float16)
}

// BF16CompressHook sends the bucket as bfloat16 (bf16_compress_hook).
func BF16CompressHook(g *dist.Group, b *GradBucket) *dist.Work {
	return compressHook(g, b, tensor.BFloat16)
}

func compressHook(g *dist.Group, b *GradBucket, d tensor.DType) *dist.Work {
	// Divide first, as PyTorch does, so the half-precision sum stays in
	// range.
	scaled := new(tensor.Tensor).MulScalar(b.Buffer, 1/float64(g.Size()))
	c := scaled.To(d)
	return g.AllReduceAsync(c, dist.Sum).Then(func() error {
		b.Buffer.Copy(c)
		return nil
	})
}

// PowerSGD is the PowerSGD gradient compression of Vogels et al. (2019),
// as PyTorch's powerSGD_hook: each gradient matrix M (n×m) is sent as two
// low-rank factors P = M·Q (n×r) and Q = Mᵀ·P̂ (m×r), with P orthogonalised
// in between and the compression error fed back into the next iteration.
// Vectors (biases) and matrices too small to gain are all-reduced as they
// are. The first StartIter iterations run uncompressed (plain all-reduce),
// as PyTorch's start_powerSGD_iter.
type PowerSGD struct {
	Rank      int // the approximation rank r
	StartIter int

	mu    sync.Mutex
	iter  map[int]int               // per bucket: iterations seen
	err   map[string]*tensor.Tensor // error feedback, per bucket/parameter
	q     map[string]*tensor.Tensor // warm-started Q factors
	rng   *tensor.RNG
	bytes [2]int64   // bytes sent compressed / uncompressed, for reports
	last  *dist.Work // the previous bucket's reduction
}

// NewPowerSGD returns a PowerSGD state with the given rank.
func NewPowerSGD(rank, startIter int) *PowerSGD {
	return &PowerSGD{Rank: rank, StartIter: startIter, iter: map[int]int{}, err: map[string]*tensor.Tensor{}, q: map[string]*tensor.Tensor{}, rng: tensor.NewRNG(0)}
}

// Hook returns the state's communication hook.
func (s *PowerSGD) Hook() CommHook {
	return func(g *dist.Group, b *GradBucket) *dist.Work {
		s.mu.Lock()
		s.iter[b.Index]++
		it := s.iter[b.Index]
		s.mu.Unlock()
		if it <= s.StartIter {
			return AllReduceHook(g, b)
		}
		// Buckets are compressed one after another, in the order DDP
		// launches them (the same on every rank), so the collectives
		// they issue are numbered alike everywhere.
		s.mu.Lock()
		prev := s.last
		w := dist.Go(func() error {
			if prev != nil {
				_ = prev.Wait(context.Background())
			}
			return s.reduce(g, b)
		})
		s.last = w
		s.mu.Unlock()
		return w
	}
}

// reduce compresses and reduces one bucket. It runs on its own goroutine;
// the collectives it issues follow the bucket order because every rank
// issues them in the same sequence within the bucket and DDP launches
// buckets in order (each PowerSGD bucket's calls are numbered when issued).
func (s *PowerSGD) reduce(g *dist.Group, b *GradBucket) error {
	grads := b.Gradients()
	n := float64(g.Size())
	var vectors []*tensor.Tensor
	type mat struct {
		key  string
		m    *tensor.Tensor // rows × cols view of the gradient (with error added)
		p, q *tensor.Tensor
	}
	var mats []mat
	for k, gr := range grads {
		rows, cols := matrixShape(gr.Shape())
		r := min(s.Rank, rows, cols)
		if r == 0 || (rows+cols)*r >= rows*cols {
			vectors = append(vectors, gr)
			continue
		}
		key := fmt.Sprintf("%d/%d", b.Index, k)
		m := gr.Reshape(rows, cols)
		s.mu.Lock()
		e, ok := s.err[key]
		if !ok {
			e = tensor.Zeros(rows, cols)
			s.err[key] = e
		}
		q, ok := s.q[key]
		if !ok {
			q = tensor.Zeros(cols, r).Normal(s.rng, 0, 1)
			s.q[key] = q
		}
		s.mu.Unlock()
		m.Add(m, e) // error feedback
		e.Copy(m)   // remember M; the approximation is subtracted below
		mats = append(mats, mat{key: key, m: m, q: q})
	}
	ctx := context.Background()
	// Vectors: one flat all-reduce of their concatenation.
	if len(vectors) > 0 {
		flat := tensor.Cat(0, reshape1(vectors)...)
		if err := g.AllReduce(ctx, flat, dist.Avg); err != nil {
			return err
		}
		at := 0
		for _, v := range vectors {
			v.Reshape(-1).Copy(flat.Narrow(0, at, v.Numel()))
			at += v.Numel()
		}
	}
	if len(mats) == 0 {
		return nil
	}
	// P = M·Q, all-reduced, orthogonalised.
	var ps []*tensor.Tensor
	for i := range mats {
		mats[i].p = new(tensor.Tensor).MatMul(mats[i].m, mats[i].q)
		ps = append(ps, mats[i].p)
	}
	if err := allReduceAll(ctx, g, ps); err != nil {
		return err
	}
	for _, p := range ps {
		orthogonalize(p)
	}
	// Q = Mᵀ·P, all-reduced and averaged.
	var qs []*tensor.Tensor
	for i := range mats {
		mats[i].q.MatMul(mats[i].m.T(), mats[i].p)
		qs = append(qs, mats[i].q)
	}
	if err := allReduceAll(ctx, g, qs); err != nil {
		return err
	}
	for i := range mats {
		q := mats[i].q
		q.Scale(1 / n)
		// M ≈ P·Qᵀ; the error is what the approximation missed.
		approx := new(tensor.Tensor).MatMul(mats[i].p, q.T())
		s.mu.Lock()
		e := s.err[mats[i].key]
		e.Sub(e, approx)
		s.bytes[0] += int64(4 * (mats[i].p.Numel() + q.Numel()))
		s.bytes[1] += int64(4 * mats[i].m.Numel())
		s.mu.Unlock()
		mats[i].m.Copy(approx)
	}
	return nil
}

// Compression returns the bytes PowerSGD sent for its matrices and what
// plain all-reduces of them would have sent.
func (s *PowerSGD) Compression() (sent, uncompressed int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes[0], s.bytes[1]
}

func matrixShape(shape []int) (rows, cols int) {
	if len(shape) < 2 {
		return 0, 0
	}
	rows = shape[0]
	cols = 1
	for _, s := range shape[1:] {
		cols *= s
	}
	return rows, cols
}

func reshape1(ts []*tensor.Tensor) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(ts))
	for i, t := range ts {
		out[i] = t.Reshape(-1)
	}
	return out
}

// allReduceAll sums every tensor with one all-reduce of their
// concatenation and writes the sums back.
func allReduceAll(ctx context.Context, g *dist.Group, ts []*tensor.Tensor) error {
	flat := tensor.Cat(0, reshape1(ts)...)
	if err := g.AllReduce(ctx, flat, dist.Sum); err != nil {
		return err
	}
	at := 0
	for _, t := range ts {
		t.Reshape(-1).Copy(flat.Narrow(0, at, t.Numel()))
		at += t.Numel()
	}
	return nil
}

// orthogonalize makes the columns of p orthonormal (Gram-Schmidt, as
// PyTorch's _orthogonalize for small ranks).
func orthogonalize(p *tensor.Tensor) {
	rows, cols := p.Size(0), p.Size(1)
	v := p.Float32s()
	for j := range cols {
		for k := range j {
			var dot float64
			for i := range rows {
				dot += float64(v[i*cols+j]) * float64(v[i*cols+k])
			}
			for i := range rows {
				v[i*cols+j] -= float32(dot) * v[i*cols+k]
			}
		}
		var norm float64
		for i := range rows {
			norm += float64(v[i*cols+j]) * float64(v[i*cols+j])
		}
		norm = math.Sqrt(norm) + 1e-8
		for i := range rows {
			v[i*cols+j] = float32(float64(v[i*cols+j]) / norm)
		}
	}
}
