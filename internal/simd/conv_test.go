package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// close32 reports whether got is within a float32 rounding error of want
// for a sum whose terms' magnitudes add up to scale.
func close32(got, want, scale float32) bool {
	return math.Abs(float64(got-want)) <= 1e-5*float64(scale)+1e-30
}

// TestConvRows checks ConvRows (the AVX2 kernel where there is one) against
// the float64 sum for every tile height, tap counts and lengths around the
// vector width, with a row stride wider than the rows.
func TestConvRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for r := 1; r <= 6; r++ {
		for _, k := range []int{1, 2, 5, 25, 150} {
			for _, n := range []int{1, 15, 16, 32, 48, 100, 896} {
				ldo := n + rng.IntN(3)
				x := randF32(rng, 3*n+200)
				offs := make([]int, k)
				for i := range offs {
					offs[i] = rng.IntN(len(x) - n + 1)
				}
				w := randF32(rng, k*r)
				var bias []float32
				if k%2 == 1 {
					bias = randF32(rng, r)
				}
				out := make([]float32, (r-1)*ldo+n+5)
				for i := range out {
					out[i] = 7
				}
				ConvRows(out, ldo, x, NewTaps(offs), w, bias, r, n)
				for i := range r {
					for p := range n {
						var want, scale float64
						if bias != nil {
							want, scale = float64(bias[i]), math.Abs(float64(bias[i]))
						}
						for kk, off := range offs {
							want += float64(w[kk*r+i]) * float64(x[off+p])
							scale += math.Abs(float64(w[kk*r+i]) * float64(x[off+p]))
						}
						if got := out[i*ldo+p]; !close32(got, float32(want), float32(scale)) {
							t.Fatalf("r %d k %d n %d: out[%d][%d] = %v, want %v", r, k, n, i, p, got, want)
						}
					}
					for p := n; p < ldo && i < r-1; p++ {
						if out[i*ldo+p] != 7 {
							t.Fatalf("r %d k %d n %d: wrote out[%d][%d] past the row", r, k, n, i, p)
						}
					}
				}
				for p := (r-1)*ldo + n; p < len(out); p++ {
					if out[p] != 7 {
						t.Fatalf("r %d k %d n %d: wrote past the last row", r, k, n)
					}
				}
				// The float32 Go loop gives the same sums within rounding.
				ref := make([]float32, len(out))
				convRowsGo(ref, ldo, x, offs, w, bias, r, n)
				for i := range r {
					for p := range n {
						if a, b := out[i*ldo+p], ref[i*ldo+p]; !close32(a, b, float32(k)*10) {
							t.Fatalf("r %d k %d n %d: kernel %v, Go %v", r, k, n, a, b)
						}
					}
				}
			}
		}
	}
}

// TestConvDW checks ConvDW against the float64 sum for every tile shape,
// image counts and lengths around the vector width.
func TestConvDW(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for ro := 1; ro <= 4; ro++ {
		for rk := 1; rk <= 4 && ro*rk <= 12; rk++ {
			for _, nimg := range []int{1, 2, 5} {
				for _, n := range []int{1, 7, 8, 16, 24, 144, 896} {
					ldg := n + rng.IntN(4)
					gimg := ro*ldg + rng.IntN(5)
					g := randF32(rng, (nimg-1)*gimg+(ro-1)*ldg+n)
					ximg := n + 50 + rng.IntN(9)
					x := randF32(rng, (nimg-1)*ximg+n+60)
					offs := make([]int, rk)
					for j := range offs {
						offs[j] = rng.IntN(61)
					}
					ldw := rk + rng.IntN(3)
					dw := randF32(rng, (ro-1)*ldw+rk)
					before := append([]float32(nil), dw...)
					ConvDW(dw, ldw, g, ldg, gimg, x, ximg, NewTaps(offs), ro, nimg, n)
					for i := range ro {
						for j := range rk {
							want, scale := float64(before[i*ldw+j]), math.Abs(float64(before[i*ldw+j]))
							for m := range nimg {
								for p := range n {
									v := float64(g[m*gimg+i*ldg+p]) * float64(x[m*ximg+offs[j]+p])
									want += v
									scale += math.Abs(v)
								}
							}
							if got := dw[i*ldw+j]; !close32(got, float32(want), float32(scale)) {
								t.Fatalf("%d×%d nimg %d n %d: dw[%d][%d] = %v, want %v", ro, rk, nimg, n, i, j, got, want)
							}
						}
					}
					for i := range ro - 1 {
						for j := rk; j < ldw; j++ {
							if dw[i*ldw+j] != before[i*ldw+j] {
								t.Fatalf("%d×%d: wrote dw[%d][%d] past the tile", ro, rk, i, j)
							}
						}
					}
					ref := append([]float32(nil), before...)
					convDWGo(ref, ldw, g, ldg, gimg, x, ximg, offs, ro, nimg, n)
					for i := range ref {
						if !close32(dw[i], ref[i], float32(nimg*n)*10) {
							t.Fatalf("%d×%d nimg %d n %d: kernel %v, Go %v", ro, rk, nimg, n, dw[i], ref[i])
						}
					}
				}
			}
		}
	}
}

// TestConvBounds checks that reads and writes past the operands panic
// instead of reaching the kernels.
func TestConvBounds(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	x, w, out := make([]float32, 64), make([]float32, 12), make([]float32, 64)
	mustPanic("ConvRows reading past x", func() { ConvRows(out, 16, x, NewTaps([]int{0, 49}), w, nil, 2, 16) })
	mustPanic("ConvRows writing past out", func() { ConvRows(out, 49, x, NewTaps([]int{0}), w, nil, 2, 16) })
	mustPanic("ConvRows with few weights", func() { ConvRows(out, 16, x, NewTaps([]int{0, 1}), w[:3], nil, 2, 16) })
	mustPanic("ConvRows of 7 rows", func() { ConvRows(out, 8, x, NewTaps([]int{0}), w, nil, 7, 8) })
	mustPanic("ConvRows with few biases", func() { ConvRows(out, 16, x, NewTaps([]int{0}), w, w[:1], 2, 16) })
	mustPanic("ConvDW reading past x", func() { ConvDW(out, 2, x, 8, 16, x, 16, NewTaps([]int{0, 40}), 2, 2, 16) })
	mustPanic("ConvRowBlocks writing past out", func() { ConvRowBlocks(out, 16, 16, x, 0, NewTaps([]int{0}), w, nil, 1, 16, 5) })
	mustPanic("ConvRowBlocks reading past x", func() { ConvRowBlocks(out, 16, 0, x, 30, NewTaps([]int{0}), w, nil, 1, 16, 3) })
	taps := NewTaps([]int{0, 40, 1})
	mustPanic("ConvRows reading past x by a slice's whole set", func() { ConvRows(out, 16, x, taps.Slice(0, 1), w, nil, 2, 32) })
	mustPanic("ConvDW of a 4×4 tile", func() { ConvDW(out, 4, x, 8, 16, x, 8, NewTaps([]int{0, 1, 2, 3}), 4, 1, 8) })
}

// pool2x2Ref is MaxPool2x2F32's contract, one window at a time.
func pool2x2Ref(out []float32, idx []int64, x []float32, rows, w, ow int) {
	for i := range rows {
		for j := range ow {
			at := [4]int{2*i*w + 2*j, 2*i*w + 2*j + 1, (2*i+1)*w + 2*j, (2*i+1)*w + 2*j + 1}
			best, pos := x[at[0]], at[0]
			for _, a := range at[1:] {
				if v := x[a]; v > best || v != v {
					best, pos = v, a
				}
			}
			out[i*ow+j], idx[i*ow+j] = best, int64(pos)
		}
	}
}

// TestMaxPool2x2F32 checks the vector kernel against the reference,
// bit for bit, on widths around the vector width, with ties, signed
// zeros, infinities and NaNs in the windows, and that it stops before
// reading past the end of its plane.
func TestMaxPool2x2F32(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	nan := float32(math.NaN())
	for _, w := range []int{2, 3, 5, 10, 14, 15, 16, 17, 28, 31, 32, 33, 56} {
		for _, h := range []int{2, 3, 4, 7, 28} {
			for _, extra := range []int{0, 5, 1000} {
				rows, ow := h/2, w/2
				x := make([]float32, h*w+extra)
				for i := range x {
					switch rng.IntN(10) {
					case 0:
						x[i] = 1 // ties
					case 1:
						x[i] = float32(math.Copysign(0, float64(rng.IntN(2)*2-1)))
					case 2:
						x[i] = nan
					case 3:
						x[i] = float32(math.Inf(rng.IntN(2)*2 - 1))
					default:
						x[i] = float32(rng.NormFloat64())
					}
				}
				// Outputs with room for a short row's spill past the last
				// row when x has room to read, none otherwise; sentinels
				// after the slices.
				room := 0
				if extra >= 1000 {
					room = 8
				}
				outBack, idxBack := make([]float32, rows*ow+room+8), make([]int64, rows*ow+room+8)
				for i := range outBack {
					outBack[i], idxBack[i] = 7, 7
				}
				out, idx := outBack[:rows*ow+room], idxBack[:rows*ow+room]
				done := MaxPool2x2F32(out, idx, x, rows, w, ow)
				if hasAVX2 && extra >= 1000 && done != rows {
					t.Fatalf("w %d h %d: did %d of %d rows with room to read and write", w, h, done, rows)
				}
				if done > rows || done < 0 {
					t.Fatalf("w %d h %d: did %d of %d rows", w, h, done, rows)
				}
				if ow < 8 && done > 0 && (2*done-1)*w+16 > len(x) {
					t.Fatalf("w %d h %d extra %d: did %d rows, reading past x", w, h, extra, done)
				}
				for i := len(out); i < len(outBack); i++ {
					if outBack[i] != 7 || idxBack[i] != 7 {
						t.Fatalf("w %d h %d: wrote past the outputs", w, h)
					}
				}
				want, wantIdx := make([]float32, rows*ow), make([]int64, rows*ow)
				pool2x2Ref(want, wantIdx, x, rows, w, ow)
				for k := range done * ow {
					if math.Float32bits(out[k]) != math.Float32bits(want[k]) || idx[k] != wantIdx[k] {
						t.Fatalf("w %d h %d: output %d = %v at %d, want %v at %d", w, h, k, out[k], idx[k], want[k], wantIdx[k])
					}
				}
			}
		}
	}
}

// TestReLUF32 checks the ReLU kernels bit for bit against Go's max and the
// mask of non-zero outputs, with signed zeros, NaNs and infinities.
func TestReLUF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 1, 31, 32, 33, 64, 100, 1000} {
		x, g := make([]float32, n), randF32(rng, n)
		for i := range x {
			switch rng.IntN(6) {
			case 0:
				x[i] = float32(math.Copysign(0, float64(rng.IntN(2)*2-1)))
			case 1:
				x[i] = float32(math.NaN())
			case 2:
				x[i] = float32(math.Inf(rng.IntN(2)*2 - 1))
			default:
				x[i] = float32(rng.NormFloat64())
			}
		}
		y := make([]float32, n)
		k := ReLUF32(y, x)
		if hasAVX2 && k != n&^31 {
			t.Fatalf("n %d: vectorised %d", n, k)
		}
		for i := range k {
			if want := max(x[i], 0); math.Float32bits(y[i]) != math.Float32bits(want) {
				t.Fatalf("n %d: relu(%v) = %v, want %v", n, x[i], y[i], want)
			}
		}
		d := make([]float32, n)
		k = ReLUBackwardF32(d, g, x)
		for i := range k {
			want := g[i]
			if x[i] == 0 {
				want = 0
			}
			if math.Float32bits(d[i]) != math.Float32bits(want) {
				t.Fatalf("n %d: gradient at y %v of %v = %v, want %v", n, x[i], g[i], d[i], want)
			}
		}
	}
}

// TestConvFallbacks runs the exported kernels as a machine without AVX2
// and FMA would: the Go code alone, against the vector kernels' results.
func TestConvFallbacks(t *testing.T) {
	if !hasAVX2 || !hasFMA {
		t.Skip("no vector kernels to compare with")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	x := randF32(rng, 4000)
	offs := []int{0, 1, 2, 30, 31, 32, 60, 61, 62}
	w, bias := randF32(rng, 9*6), randF32(rng, 6)
	g := randF32(rng, 3000)
	pool := randF32(rng, 28*28*2)
	run := func() (rows, dw, pooled []float32, idx []int64, relu []float32) {
		rows = make([]float32, 6*320)
		ConvRows(rows, 320, x, NewTaps(offs), w, bias, 6, 320)
		dw = make([]float32, 4*9)
		ConvDW(dw, 9, g, 200, 900, x, 1000, NewTaps(offs[:3]), 4, 3, 192)
		pooled, idx = make([]float32, 14*14*2), make([]int64, 14*14*2)
		for pl := range 2 {
			done := MaxPool2x2F32(pooled[pl*196:], idx[pl*196:], pool[pl*784:], 14, 28, 14)
			pool2x2Ref(pooled[pl*196+done*14:], idx[pl*196+done*14:], pool[pl*784+done*56:], 14-done, 28, 14)
			for i := done * 14; i < 196; i++ {
				idx[pl*196+i] += int64(done * 56)
			}
		}
		relu = make([]float32, len(x))
		k := ReLUF32(relu, x)
		for i := k; i < len(x); i++ {
			relu[i] = max(x[i], 0)
		}
		return
	}
	r1, d1, p1, i1, l1 := run()
	hasAVX2, hasFMA = false, false
	defer func() { hasAVX2, hasFMA = true, true }()
	r2, d2, p2, i2, l2 := run()
	for i := range r1 {
		if !close32(r1[i], r2[i], 100) {
			t.Fatalf("ConvRows element %d: vector %v, Go %v", i, r1[i], r2[i])
		}
	}
	for i := range d1 {
		if !close32(d1[i], d2[i], 3000) {
			t.Fatalf("ConvDW element %d: vector %v, Go %v", i, d1[i], d2[i])
		}
	}
	for i := range p1 {
		if p1[i] != p2[i] || i1[i] != i2[i] {
			t.Fatalf("pooling output %d: vector %v at %d, Go %v at %d", i, p1[i], i1[i], p2[i], i2[i])
		}
	}
	for i := range l1 {
		if math.Float32bits(l1[i]) != math.Float32bits(l2[i]) {
			t.Fatalf("ReLU element %d: vector %v, Go %v", i, l1[i], l2[i])
		}
	}
}

// TestMaxPool2x2BackwardF32 checks the dense gradient of 2×2 pooling
// against a scatter into zeros, for widths around the vector width and
// indices anywhere in their windows, and that an index outside its window
// fails the call, in the vector kernel and in the Go code.
func TestMaxPool2x2BackwardF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	defer func(had bool) { hasAVX2 = had }(hasAVX2)
	for _, vec := range []bool{true, false} {
		if !vec {
			if !hasAVX2 {
				continue
			}
			hasAVX2 = false
		}
		for _, w := range []int{2, 3, 5, 10, 14, 16, 17, 28, 33, 50} {
			for _, rows := range []int{1, 2, 5, 14} {
				ow := w / 2
				g := randF32(rng, rows*ow)
				g[0] = float32(math.Copysign(0, -1))
				idx := make([]int64, rows*ow)
				for i := range rows {
					for j := range ow {
						idx[i*ow+j] = int64((2*i+rng.IntN(2))*w + 2*j + rng.IntN(2))
					}
				}
				h := 2*rows + rows%2           // a spare row or none
				dxBack := randF32(rng, h*w+16) // garbage where not written
				for i := h * w; i < len(dxBack); i++ {
					dxBack[i] = 7
				}
				dx := dxBack[:h*w]
				if !MaxPool2x2BackwardF32(dx, g, idx, rows, w, ow) {
					t.Fatalf("vector %v w %d rows %d: failed with indices in their windows", vec, w, rows)
				}
				for i := h * w; i < len(dxBack); i++ {
					if dxBack[i] != 7 {
						t.Fatalf("vector %v w %d rows %d: wrote past dx", vec, w, rows)
					}
				}
				want := make([]float32, h*w)
				for k, at := range idx {
					want[at] += g[k]
				}
				for i := range 2 * rows {
					for j := range 2 * ow {
						if math.Float32bits(dx[i*w+j]) != math.Float32bits(want[i*w+j]) {
							t.Fatalf("vector %v w %d rows %d: dx[%d][%d] = %v, want %v", vec, w, rows, i, j, dx[i*w+j], want[i*w+j])
						}
					}
				}
				// One index moved to the next row pair fails.
				k := rng.IntN(len(idx))
				bad := append([]int64(nil), idx...)
				bad[k] += int64(2 * w)
				if MaxPool2x2BackwardF32(dx, g, bad, rows, w, ow) {
					t.Fatalf("vector %v w %d rows %d: index %d moved out of its window passed", vec, w, rows, k)
				}
				if ow > 1 && k%ow < ow-1 { // to the next window of the row
					bad[k] = idx[k] + 2
					if MaxPool2x2BackwardF32(dx, g, bad, rows, w, ow) {
						t.Fatalf("vector %v w %d rows %d: index %d moved to the next window passed", vec, w, rows, k)
					}
				}
				bad[k] = idx[k] + int64(1)<<32 // the same low half
				if MaxPool2x2BackwardF32(dx, g, bad, rows, w, ow) {
					t.Fatalf("vector %v w %d rows %d: index %d + 2³² passed", vec, w, rows, k)
				}
			}
		}
	}
}

// TestCopyRows checks strided row copies for widths around the vector
// width, and that nothing past the rows is written.
func TestCopyRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, w := range []int{1, 7, 8, 9, 10, 14, 16, 17, 28, 33} {
		for _, rows := range []int{1, 2, 5} {
			lds, ldd := w+rng.IntN(5), w+rng.IntN(5)
			src := randF32(rng, (rows-1)*lds+w)
			dst := make([]float32, (rows-1)*ldd+w+3)
			for i := range dst {
				dst[i] = 7
			}
			CopyRows(dst[:(rows-1)*ldd+w], ldd, src, lds, rows, w)
			for i := range dst {
				want := float32(7)
				if r, c := i/ldd, i%ldd; r < rows && c < w {
					want = src[r*lds+c]
				}
				if dst[i] != want {
					t.Fatalf("w %d rows %d: dst[%d] = %v, want %v", w, rows, i, dst[i], want)
				}
			}
		}
	}
}

// TestConvRowBlocks checks blocks of ConvRows, whose outputs may overlap
// (a block overwriting what the one before wrote past its positions),
// against the Go code applied block after block.
func TestConvRowBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	for r := 1; r <= 6; r++ {
		for _, n := range []int{16, 32, 48} {
			for _, blocks := range []int{1, 2, 5} {
				for _, ostep := range []int{n - 4, n, n + 3} {
					xstep := n - 2 + rng.IntN(6)
					ldo := blocks*ostep + n
					offs := []int{0, 1, 2, 13, 14, 15, 40}
					x := randF32(rng, (blocks-1)*xstep+40+n)
					w, bias := randF32(rng, len(offs)*r), randF32(rng, r)
					out := make([]float32, (r-1)*ldo+(blocks-1)*ostep+n)
					ConvRowBlocks(out, ldo, ostep, x, xstep, NewTaps(offs), w, bias, r, n, blocks)
					want := make([]float32, len(out))
					for b := range blocks {
						convRowsGo(want[b*ostep:], ldo, x[b*xstep:], offs, w, bias, r, n)
					}
					for i := range want {
						if !close32(out[i], want[i], 100) {
							t.Fatalf("r %d n %d blocks %d ostep %d: out[%d] = %v, want %v", r, n, blocks, ostep, i, out[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestSumF32 checks the float64 sum of float32s: exactly for small
// integers (whose float64 sums are exact), within rounding for terms of
// mixed magnitudes.
func TestSumF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{0, 1, 15, 16, 17, 100, 784, 1000} {
		x := make([]float32, n)
		var want float64
		for i := range x {
			x[i] = float32(rng.IntN(2001) - 1000) // sums of these are exact
			want += float64(x[i])
		}
		s, k := SumF32(x)
		if hasAVX2 && k != n&^15 {
			t.Fatalf("n %d: vectorised %d", n, k)
		}
		for _, v := range x[k:] {
			s += float64(v)
		}
		if s != want {
			t.Fatalf("n %d: sum %v, want %v", n, s, want)
		}
	}
	// Large and small terms: within float64 rounding of the Go sum.
	x := make([]float32, 4096)
	var want float64
	for i := range x {
		x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(10)-5)))
		want += float64(x[i])
	}
	if s, k := SumF32(x); k == len(x) && math.Abs(s-want) > 1e-12*math.Abs(want)+1e-12 {
		t.Fatalf("sum %v, want %v", s, want)
	}
}
