package autograd_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/tensor"
)

// ckNet is a small model for the checkpointing tests: a prologue computed
// outside any checkpoint (z), then blocks that each use their own weights,
// a weight shared by every block (used twice inside each), z by closure,
// and a dropout-like mask drawn from rng.
type ckNet struct {
	w0     *autograd.Var
	shared *autograd.Var
	ws, bs []*autograd.Var
	rng    *tensor.RNG
}

func newCkNet(blocks int) *ckNet {
	g := tensor.NewRNG(11)
	m := &ckNet{w0: autograd.Param(tensor.Randn(g, 16, 12)), shared: autograd.Param(tensor.Randn(g, 16)), rng: tensor.NewRNG(5)}
	for range blocks {
		m.ws = append(m.ws, autograd.Param(tensor.Randn(g, 16, 16).MulScalar(tensor.Randn(g, 16, 16), 0.3)))
		m.bs = append(m.bs, autograd.Param(tensor.Randn(g, 16)))
	}
	return m
}

func (m *ckNet) params() []*autograd.Var {
	return append(append([]*autograd.Var{m.w0, m.shared}, m.ws...), m.bs...)
}

// block i: tanh(Linear(h·shared, w_i, b_i) + shared) ⊙ mask + 0.1 z, where
// z is the prologue's output, reached by closure.
func (m *ckNet) block(i int, z *autograd.Var, rng *tensor.RNG) func(...*autograd.Var) *autograd.Var {
	return func(in ...*autograd.Var) *autograd.Var {
		h := autograd.Mul(in[0], m.shared)
		h = autograd.Tanh(autograd.Add(autograd.Linear(h, m.ws[i], m.bs[i]), m.shared))
		if rng != nil {
			mask := tensor.New(tensor.Float32, h.Shape()...)
			m := mask.Float32s()
			for k := range m {
				if rng.Float64() >= 0.3 {
					m[k] = 1 / 0.7
				}
			}
			h = autograd.Mul(h, autograd.Const(mask))
		}
		return autograd.Add(h, autograd.MulScalar(z, 0.1))
	}
}

// forward runs the model on x; with ck the blocks are checkpointed, and
// with replay their RNG is named for the recomputation.
func (m *ckNet) forward(x *tensor.Tensor, ck, replay bool) (loss, last *autograd.Var) {
	z := autograd.Linear(autograd.Const(x), m.w0, nil)
	h := z
	for i := range m.ws {
		f := m.block(i, z, m.rng)
		if ck {
			var opt autograd.CheckpointOptions
			if replay {
				opt.RNGs = []*tensor.RNG{m.rng}
			}
			h = autograd.CheckpointWith(opt, f, h)
		} else {
			h = f(h)
		}
	}
	return autograd.MeanAll(autograd.Square(h)), h
}

func ckInput() *tensor.Tensor { return tensor.Randn(tensor.NewRNG(3), 8, 12) }

// grads runs two steps (forward, backward; gradients accumulate) and
// returns every parameter's gradient and the RNG's next draw.
func grads(t *testing.T, ck, replay bool) ([]*tensor.Tensor, float64) {
	t.Helper()
	m := newCkNet(3)
	for step := range 2 {
		loss, _ := m.forward(tensor.Randn(tensor.NewRNG(uint64(step)), 8, 12), ck, replay)
		if err := loss.Backward(nil); err != nil {
			t.Fatal(err)
		}
	}
	var out []*tensor.Tensor
	for _, p := range m.params() {
		out = append(out, p.Grad())
	}
	return out, m.rng.Float64()
}

func sameBits(a, b *tensor.Tensor) bool {
	x, y := a.Float32s(), b.Float32s()
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// TestCheckpointSameGradients: checkpointed blocks (with a weight used
// twice in each, a Var reached by closure and a random mask) give every
// parameter the gradient the plain model gives, bit for bit, over two
// accumulating steps, and leave the RNG where the plain model does.
// Without naming the RNG the masks differ and so do the gradients: the
// comparison sees them.
func TestCheckpointSameGradients(t *testing.T) {
	want, wantNext := grads(t, false, false)
	got, gotNext := grads(t, true, true)
	for i := range want {
		if !sameBits(got[i], want[i]) {
			t.Errorf("parameter %d: checkpointed gradient differs from the plain one", i)
		}
	}
	if gotNext != wantNext {
		t.Errorf("RNG after the steps draws %v, plain %v", gotNext, wantNext)
	}
	unreplayed, _ := grads(t, true, false)
	same := true
	for i := range want {
		same = same && sameBits(unreplayed[i], want[i])
	}
	if same {
		t.Error("gradients without the RNG replayed match too: the test cannot see the masks")
	}
}

// TestCheckpointGraphBytes: after the forward pass the graph of the
// checkpointed model holds, per block, only the block's output: the
// plain graph's bytes less every other value the blocks computed.
func TestCheckpointGraphBytes(t *testing.T) {
	const blocks = 4
	m := newCkNet(blocks)
	_, plain := m.forward(ckInput(), false, false)
	_, ck := m.forward(ckInput(), true, true)
	// Per block the plain graph holds Mul, Linear, Add, Tanh, Mul (mask),
	// MulScalar and Add, seven 8×16 float32 values; checkpointed, one.
	const value = 8 * 16 * 4
	pb, cb := autograd.GraphBytes(plain), autograd.GraphBytes(ck)
	if want := pb - blocks*6*value; cb != want {
		t.Fatalf("checkpointed graph holds %d bytes, want %d (plain %d less 6 values a block)", cb, want, pb)
	}
	t.Logf("graph bytes: plain %d, checkpointed %d", pb, cb)
}

// TestCheckpointHooksOncePerPass: each parameter's grad-ready hook fires
// once per pass, with the whole gradient of the pass in Grad, and the
// hooks fire in the plain model's order.
func TestCheckpointHooksOncePerPass(t *testing.T) {
	order := func(ck bool) []int {
		m := newCkNet(3)
		var fired []int
		for i, p := range m.params() {
			p.RegisterGradReadyHook(func(v *autograd.Var) { fired = append(fired, i) })
		}
		loss, _ := m.forward(ckInput(), ck, true)
		if err := loss.Backward(nil); err != nil {
			t.Fatal(err)
		}
		return fired
	}
	plain, ck := order(false), order(true)
	if fmt.Sprint(plain) != fmt.Sprint(ck) {
		t.Fatalf("hooks fired in order %v, plain %v", ck, plain)
	}
	if len(ck) != len(newCkNet(3).params()) {
		t.Fatalf("%d hooks fired for %d parameters", len(ck), len(newCkNet(3).params()))
	}
}

// TestCheckpointBackwardTwice: with RetainGraph the first time, a second
// pass recomputes and accumulates the same gradient again; a pass through
// the call after one that freed it is refused with the engine's message,
// naming the call.
func TestCheckpointBackwardTwice(t *testing.T) {
	w := autograd.Param(vec(1, 2, 3))
	calls := 0
	f := func(in ...*autograd.Var) *autograd.Var {
		calls++
		return autograd.Tanh(autograd.Mul(in[0], w))
	}
	x := autograd.Param(vec(0.5, -1, 2))
	y := autograd.Checkpoint(f, x)
	loss := autograd.SumAll(y)
	if err := loss.BackwardWith(nil, autograd.BackwardOptions{RetainGraph: true}); err != nil {
		t.Fatal(err)
	}
	once := w.Grad().Clone()
	if err := loss.Backward(nil); err != nil {
		t.Fatal(err)
	}
	if calls != 3 {
		t.Fatalf("fn ran %d times, want 3 (forward and one recomputation a pass)", calls)
	}
	for i, v := range w.Grad().Float32s() {
		if v != 2*once.Float32s()[i] {
			t.Fatalf("after two passes grad %v, want twice %v", w.Grad().Float32s(), once.Float32s())
		}
	}
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), "Checkpoint a second time") || !strings.Contains(fmt.Sprint(r), "RetainGraph") {
			t.Fatalf("third pass: %v, want a refusal naming Checkpoint and RetainGraph", r)
		}
	}()
	_ = autograd.MeanAll(y).Backward(nil)
}

// TestCheckpointRecomputeMismatch: a function that computes something
// else when recomputed fails the backward pass with
// ErrCheckpointRecompute; the parameters' gradients are not touched.
func TestCheckpointRecomputeMismatch(t *testing.T) {
	w, other := autograd.Param(vec(1, 2)), autograd.Param(vec(3, 4))
	for name, f := range map[string]func(int) func(...*autograd.Var) *autograd.Var{
		"shape": func(call int) func(...*autograd.Var) *autograd.Var {
			return func(in ...*autograd.Var) *autograd.Var {
				if call > 0 {
					return autograd.Cat(0, autograd.Mul(in[0], w), w)
				}
				return autograd.Mul(in[0], w)
			}
		},
		"reach": func(call int) func(...*autograd.Var) *autograd.Var {
			return func(in ...*autograd.Var) *autograd.Var {
				if call > 0 {
					return autograd.Mul(in[0], other)
				}
				return autograd.Mul(in[0], w)
			}
		},
	} {
		calls := 0
		fn := func(in ...*autograd.Var) *autograd.Var { calls++; return f(calls - 1)(in...) }
		y := autograd.Checkpoint(fn, autograd.Const(vec(1, 1)))
		err := autograd.SumAll(y).Backward(nil)
		if !errors.Is(err, autograd.ErrCheckpointRecompute) {
			t.Errorf("%s: Backward returned %v, want ErrCheckpointRecompute", name, err)
		}
		if w.Grad() != nil || other.Grad() != nil {
			t.Errorf("%s: a failed pass accumulated gradients", name)
		}
	}
}

// TestCheckpointNoGrad: under NoGrad the function just runs.
func TestCheckpointNoGrad(t *testing.T) {
	w := autograd.Param(vec(1, 2))
	autograd.NoGrad(func() {
		y := autograd.Checkpoint(func(in ...*autograd.Var) *autograd.Var { return autograd.Mul(in[0], w) }, autograd.Const(vec(3, 3)))
		if y.RequiresGrad() || y.Value().Float32s()[1] != 6 {
			t.Fatalf("under NoGrad: requires grad %v, value %v", y.RequiresGrad(), y.Value().Float32s())
		}
	})
}
