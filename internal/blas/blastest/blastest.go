// Package blastest is a conformance suite for blas.Impl implementations.
//
// It compares Sgemm and Dgemm against a naive float64 reference over many
// shapes (empty, tiny, odd, around micro-tile and cache-block boundaries, and
// a few larger ones), all four transpose combinations, padded leading
// dimensions and several alpha/beta values. It checks that padding columns of
// C are left untouched, that NaNs in A/B padding are never used, and that
// beta == 0 overwrites a NaN-filled C.
package blastest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/godist/godist/internal/blas"
)

// Seed seeds the suite's random source; it is printed with every failure.
const Seed = 20240917

// Quick, when set (or under go test -short), runs about a quarter of the
// cases: every fourth small case and the smaller large shapes. Meant for slow
// modes such as the race detector.
var Quick bool

type float interface{ float32 | float64 }

type gemmFunc[T float] func(tA, tB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)

type shape struct{ m, n, k int }

var (
	smallDims = []int{0, 1, 2, 3, 5, 6, 7, 8, 13, 15, 16, 17, 31, 33, 48, 63, 65}
	smallKs   = []int{0, 1, 4, 7, 16, 17, 33, 65}
	largeShps = []shape{
		{200, 300, 150}, {129, 257, 300}, {64, 256, 784}, {256, 784, 64},
		{6, 784, 25}, {16, 100, 150}, {500, 70, 513}, {97, 1100, 40}, {1, 1500, 3}, {700, 1, 300},
	}
	alphas = []float64{1, 0.5, -2}
	betas  = []float64{0, 1, 0.25}
)

// TestSgemm runs the conformance suite on impl.Sgemm.
func TestSgemm(t *testing.T, impl blas.Impl) {
	t.Helper()
	run[float32](t, impl.Name()+".Sgemm", impl.Sgemm, 1e-4, 1e-6)
}

// TestDgemm runs the conformance suite on impl.Dgemm.
func TestDgemm(t *testing.T, impl blas.Impl) {
	t.Helper()
	run[float64](t, impl.Name()+".Dgemm", impl.Dgemm, 1e-12, 1e-300)
}

// TestSgemmConcurrent calls impl.Sgemm from several goroutines at once, on
// different shapes, and checks every result.
func TestSgemmConcurrent(t *testing.T, impl blas.Impl) {
	t.Helper()
	shapes := []shape{{64, 256, 784}, {300, 200, 150}, {33, 65, 17}, {6, 784, 25}, {128, 128, 300}, {17, 500, 260}}
	const workers, iters = 6, 3
	var wg sync.WaitGroup
	errs := make(chan string, workers*iters)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(Seed, uint64(w)))
			for it := 0; it < iters; it++ {
				s := shapes[(w+it)%len(shapes)]
				tc := testCase{s: s, tA: it%2 == 1, tB: w%2 == 1, alpha: 1, beta: 0.25, pad: w % 3}
				if msg := checkOne[float32](impl.Sgemm, rng, tc, 1e-4, 1e-6); msg != "" {
					errs <- fmt.Sprintf("worker %d iter %d: %s", w, it, msg)
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("%s concurrent (seed %d): %s", impl.Name(), Seed, e)
	}
}

type testCase struct {
	s           shape
	tA, tB      bool
	alpha, beta float64
	pad         int // extra leading-dimension padding
}

// layout returns the stored shapes of A and B (rows × columns, after the
// transposes) and the leading dimensions of A, B and C, padded by tc.pad.
func (tc testCase) layout() (ar, ac, br, bc, lda, ldb, ldc int) {
	m, n, k := tc.s.m, tc.s.n, tc.s.k
	ar, ac = m, k
	if tc.tA {
		ar, ac = k, m
	}
	br, bc = k, n
	if tc.tB {
		br, bc = n, k
	}
	return ar, ac, br, bc, max(1, ac+tc.pad), max(1, bc+tc.pad), max(1, n+tc.pad)
}

func (tc testCase) String() string {
	return fmt.Sprintf("m=%d n=%d k=%d transA=%v transB=%v alpha=%v beta=%v pad=%d", tc.s.m, tc.s.n, tc.s.k, tc.tA, tc.tB, tc.alpha, tc.beta, tc.pad)
}

func run[T float](t *testing.T, name string, f gemmFunc[T], rtol, atol float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(Seed, 1))
	var cases []testCase
	i := 0
	for _, m := range smallDims {
		for _, n := range smallDims {
			for _, k := range smallKs {
				for tr := 0; tr < 4; tr++ {
					cases = append(cases, testCase{
						s: shape{m, n, k}, tA: tr&1 != 0, tB: tr&2 != 0,
						alpha: alphas[i%3], beta: betas[(i/3)%3], pad: (i / 9) % 3 * 3,
					})
					i++
				}
			}
		}
	}
	for i, s := range largeShps {
		for tr := 0; tr < 4; tr++ {
			ab := [][2]float64{{1, 0}, {-2, 0.25}, {0.5, 1}}[(i+tr)%3]
			cases = append(cases, testCase{s: s, tA: tr&1 != 0, tB: tr&2 != 0, alpha: ab[0], beta: ab[1], pad: tr})
		}
	}
	// alpha == 0 leaves beta*C.
	cases = append(cases, testCase{s: shape{7, 9, 5}, alpha: 0, beta: 0.5}, testCase{s: shape{7, 9, 5}, tA: true, alpha: 0, beta: 0})
	if Quick || testing.Short() {
		var q []testCase
		for i, tc := range cases {
			if tc.s.m*tc.s.n*tc.s.k <= 65*65*65 && i%4 == 0 || tc.s.m*tc.s.n*tc.s.k <= 300000 && tc.s.m*tc.s.n*tc.s.k > 65*65*65 {
				q = append(q, tc)
			}
		}
		cases = q
	}
	fails := 0
	for _, tc := range cases {
		if msg := checkOne(f, rng, tc, rtol, atol); msg != "" {
			t.Errorf("%s (seed %d) %v: %s", name, Seed, tc, msg)
			fails++
			if fails >= 10 {
				t.Fatalf("%s: too many failures", name)
			}
		}
	}
}

// checkOne runs one case and returns "" or a description of the first error.
func checkOne[T float](f gemmFunc[T], rng *rand.Rand, tc testCase, rtol, atol float64) string {
	m, n, k := tc.s.m, tc.s.n, tc.s.k
	ar, ac, br, bc, lda, ldb, ldc := tc.layout()
	nan := T(math.NaN())
	// fill allocates an exactly sized rows×cols matrix with leading dimension
	// ld; padding gets pad.
	fill := func(rows, cols, ld int, pad T, rnd bool) []T {
		sz := 0
		if rows > 0 && cols > 0 {
			sz = (rows-1)*ld + cols
		}
		s := make([]T, sz)
		for i := range s {
			if i%ld >= cols {
				s[i] = pad
			} else if rnd {
				s[i] = T(rng.Float64()*2 - 1)
			} else {
				s[i] = nan
			}
		}
		return s
	}
	a := fill(ar, ac, lda, nan, true)
	b := fill(br, bc, ldb, nan, true)
	const sentinel = 12345.5
	c := fill(m, n, ldc, sentinel, tc.beta != 0)
	c0 := append([]T(nil), c...)

	// Dense float64 copies of op(A) (m×k) and op(B)ᵀ (n×k) for the reference.
	opA := make([]float64, m*k)
	opBT := make([]float64, n*k)
	for i := 0; i < m; i++ {
		for p := 0; p < k; p++ {
			if tc.tA {
				opA[i*k+p] = float64(a[p*lda+i])
			} else {
				opA[i*k+p] = float64(a[i*lda+p])
			}
		}
	}
	for j := 0; j < n; j++ {
		for p := 0; p < k; p++ {
			if tc.tB {
				opBT[j*k+p] = float64(b[j*ldb+p])
			} else {
				opBT[j*k+p] = float64(b[p*ldb+j])
			}
		}
	}

	f(tc.tA, tc.tB, m, n, k, T(tc.alpha), a, lda, b, ldb, T(tc.beta), c, ldc)

	for i := 0; i < m; i++ {
		for j := 0; j < ldc && i*ldc+j < len(c); j++ {
			got := float64(c[i*ldc+j])
			if j >= n {
				if got != sentinel {
					return fmt.Sprintf("padding C[%d][%d] changed to %v", i, j, got)
				}
				continue
			}
			var want, mag float64
			if tc.alpha != 0 {
				ai, bj := opA[i*k:i*k+k], opBT[j*k:j*k+k]
				for p, x := range ai {
					y := x * bj[p]
					want += y
					mag += math.Abs(y)
				}
				want *= tc.alpha
				mag *= math.Abs(tc.alpha)
			}
			if tc.beta != 0 {
				cv := float64(c0[i*ldc+j])
				want += tc.beta * cv
				mag += math.Abs(tc.beta * cv)
			}
			if d := math.Abs(got - want); !(d <= rtol*mag+atol) {
				return fmt.Sprintf("C[%d][%d] = %v, want %v (|diff| %.3g > tol %.3g)", i, j, got, want, d, rtol*mag+atol)
			}
		}
	}
	return ""
}

// TestSgemmBias checks impl.SgemmBias against impl.Sgemm, which the suite
// checks against the reference: on every shape of the suite, both
// transposes, padded leading dimensions and alpha in {1, 0.5, -2, 0},
// SgemmBias into a NaN-filled C must give, bit for bit, what Sgemm with
// beta = 1 gives into a C whose rows hold the bias, and leave C's padding
// alone.
func TestSgemmBias(t *testing.T, impl blas.BiasImpl) {
	t.Helper()
	rng := rand.New(rand.NewPCG(Seed, 3))
	var shapes []shape
	for _, m := range smallDims {
		for _, n := range smallDims {
			for _, k := range smallKs {
				shapes = append(shapes, shape{m, n, k})
			}
		}
	}
	shapes = append(shapes, largeShps...)
	fails := 0
	for i, s := range shapes {
		if (Quick || testing.Short()) && i%4 != 0 {
			continue
		}
		tr := i % 4
		tc := testCase{s: s, tA: tr&1 != 0, tB: tr&2 != 0, alpha: append(alphas, 0)[i%4], pad: i % 3 * 3}
		if msg := checkBias(impl, rng, tc); msg != "" {
			t.Errorf("%s.SgemmBias (seed %d) %v: %s", impl.Name(), Seed, tc, msg)
			if fails++; fails >= 10 {
				t.Fatalf("%s.SgemmBias: too many failures", impl.Name())
			}
		}
	}
}

func checkBias(impl blas.BiasImpl, rng *rand.Rand, tc testCase) string {
	m, n, k := tc.s.m, tc.s.n, tc.s.k
	ar, ac, br, bc, lda, ldb, ldc := tc.layout()
	rnd := func(sz int) []float32 {
		s := make([]float32, sz)
		for i := range s {
			s[i] = float32(rng.Float64()*2 - 1)
		}
		return s
	}
	size := func(rows, cols, ld int) int {
		if rows == 0 || cols == 0 {
			return 0
		}
		return (rows-1)*ld + cols
	}
	a, b, bias := rnd(size(ar, ac, lda)), rnd(size(br, bc, ldb)), rnd(n)
	const sentinel = 12345.5
	want := make([]float32, size(m, n, ldc))
	got := make([]float32, len(want))
	for i := range want {
		want[i], got[i] = sentinel, sentinel
		if i%ldc < n {
			want[i], got[i] = bias[i%ldc], float32(math.NaN())
		}
	}
	impl.Sgemm(tc.tA, tc.tB, m, n, k, float32(tc.alpha), a, lda, b, ldb, 1, want, ldc)
	impl.SgemmBias(tc.tA, tc.tB, m, n, k, float32(tc.alpha), a, lda, b, ldb, bias, got, ldc)
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Sprintf("C[%d][%d] = %v, want %v (Sgemm onto the bias)", i/ldc, i%ldc, got[i], want[i])
		}
	}
	return ""
}
