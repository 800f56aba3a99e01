package nn_test

import (
	"math"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// TestParityClipGradNorm compares ClipGradNorm with
// torch.nn.utils.clip_grad_norm_ (testdata/parity/make_optim_parity.py),
// clipping and not, with one parameter lacking a gradient: the returned
// norm and the gradients after, within 1e-6 relative.
func TestParityClipGradNorm(t *testing.T) {
	ref, _, err := checkpoint.LoadFile(filepath.Join("..", "testdata", "parity", "optim_parity.safetensors"))
	if err != nil {
		t.Fatalf("%v (regenerate it with /usr/bin/python3 testdata/parity/make_optim_parity.py)", err)
	}
	const tol = 1e-6
	for _, c := range []struct {
		name    string
		maxNorm float64
	}{{"clip", 2}, {"noclip", 100}} {
		t.Run(c.name, func(t *testing.T) {
			ps := []*autograd.Var{
				autograd.Param(tensor.Zeros(4, 3)), autograd.Param(tensor.Zeros(5)), autograd.Param(tensor.Zeros(7)),
			}
			ps[0].SetGrad(ref["clip.grad0"].Clone())
			ps[2].SetGrad(ref["clip.grad2"].Clone())
			total := nn.ClipGradNorm(ps, c.maxNorm)
			want := ref["clip."+c.name+".total"].Item()
			t.Logf("total norm: relative error %.2g", math.Abs(total-want)/want)
			if math.Abs(total-want) > tol*want {
				t.Fatalf("total norm %v, PyTorch %v", total, want)
			}
			if ps[1].Grad() != nil {
				t.Fatal("a nil gradient was given a value")
			}
			for _, i := range []int{0, 2} {
				w := ref["clip."+c.name+".after"+strconv.Itoa(i)]
				e := relErr(ps[i].Grad(), w)
				t.Logf("gradient %d: relative error %.2g", i, e)
				if e > tol {
					t.Fatalf("gradient %d after clipping: relative error %.3g against PyTorch", i, e)
				}
			}
			if c.name == "noclip" {
				for _, i := range []int{0, 2} {
					if relErr(ps[i].Grad(), ref["clip.grad"+strconv.Itoa(i)]) != 0 {
						t.Fatalf("gradient %d changed below the maximum norm", i)
					}
				}
			}
		})
	}
}

func TestClipGradNormEdges(t *testing.T) {
	p := autograd.Param(tensor.Zeros(2))
	if got := nn.ClipGradNorm([]*autograd.Var{p}, 1); got != 0 {
		t.Fatalf("norm without gradients %v", got)
	}
	p.SetGrad(tensor.FromFloat32([]float32{3, 4}))
	if got := nn.GradNormSquared([]*autograd.Var{p}); got != 25 {
		t.Fatalf("GradNormSquared %v, want 25", got)
	}
	// Clipping to the norm itself: the coefficient 5/(5+1e-6) is below 1.
	if got := nn.ClipGradNorm([]*autograd.Var{p}, 1); got != 5 {
		t.Fatalf("norm %v, want 5", got)
	}
	if g := p.Grad().Values(); math.Abs(g[0]-0.6) > 1e-6 || math.Abs(g[1]-0.8) > 1e-6 {
		t.Fatalf("clipped gradient %v, want about [0.6 0.8]", g)
	}
	// float64 gradients, and a non-contiguous one.
	q := autograd.Param(tensor.FromFloat64([]float64{0, 0}))
	q.SetGrad(tensor.FromFloat64([]float64{6, 8}))
	r := autograd.Param(tensor.Zeros(2, 2))
	r.SetGrad(tensor.FromFloat32([]float32{1, 2, 3, 4}).Reshape(2, 2).Transpose(0, 1))
	if got := nn.GradNormSquared([]*autograd.Var{q, r}); got != 100+30 {
		t.Fatalf("GradNormSquared %v, want 130", got)
	}
	// ClipGradsWithNorm with a norm the caller computed (as a sharded
	// optimizer does after summing GradNormSquared across ranks).
	nn.ClipGradsWithNorm([]*autograd.Var{q}, 5, math.Sqrt(nn.GradNormSquared([]*autograd.Var{q})))
	if g := q.Grad().Values(); math.Abs(g[0]-3) > 1e-5 || math.Abs(g[1]-4) > 1e-5 {
		t.Fatalf("float64 gradient clipped to %v, want about [3 4]", g)
	}
	// A non-finite norm is returned and the gradients are left alone.
	for _, bad := range []float32{float32(math.Inf(1)), float32(math.NaN())} {
		p.SetGrad(tensor.FromFloat32([]float32{bad, 1}))
		got := nn.ClipGradNorm([]*autograd.Var{p}, 1)
		if !math.IsInf(got, 1) && !math.IsNaN(got) {
			t.Fatalf("norm of %v: %v, want it non-finite", bad, got)
		}
		if p.Grad().At(1) != 1 {
			t.Fatalf("gradients changed by a non-finite norm: %v", p.Grad().Values())
		}
	}
}
