package blas_test

import (
	"testing"

	"github.com/godist/godist/internal/blas"
	"github.com/godist/godist/internal/blas/blastest"
)

// impls is Default plus every pure-Go kernel variant usable on this CPU
// (only Default and PureGo under the race detector).
func impls() []blas.Impl {
	out := []blas.Impl{blas.Default}
	vs := blas.PureGoVariants()
	if raceEnabled {
		vs = []blas.Impl{blas.PureGo()}
	}
	for _, im := range vs {
		if im.Name() != blas.Default.Name() {
			out = append(out, im)
		}
	}
	return out
}

func TestSgemm(t *testing.T) {
	for _, im := range impls() {
		t.Run(im.Name(), func(t *testing.T) { blastest.TestSgemm(t, im) })
	}
}

func TestDgemm(t *testing.T) {
	// Dgemm does not depend on the Sgemm kernel set.
	ims := []blas.Impl{blas.Default}
	if blas.PureGo().Name() != blas.Default.Name() {
		ims = append(ims, blas.PureGo())
	}
	for _, im := range ims {
		t.Run(im.Name(), func(t *testing.T) { blastest.TestDgemm(t, im) })
	}
}

func TestSgemmConcurrent(t *testing.T) {
	for _, im := range impls() {
		t.Run(im.Name(), func(t *testing.T) { blastest.TestSgemmConcurrent(t, im) })
	}
}

func TestPureGoDefault(t *testing.T) {
	if blas.PureGo() == nil || blas.Default == nil {
		t.Fatal("nil implementation")
	}
	t.Logf("Default=%s PureGo=%s (%s)", blas.Default.Name(), blas.PureGo().Name(), blas.BuildInfo())
}

func TestPackageFuncs(t *testing.T) {
	a := []float32{1, 2, 3, 4}
	b := []float32{5, 6, 7, 8}
	c := make([]float32, 4)
	blas.Sgemm(false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2)
	want := []float32{19, 22, 43, 50}
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("Sgemm = %v, want %v", c, want)
		}
	}
	ad := []float64{1, 2, 3, 4}
	bd := []float64{5, 6, 7, 8}
	cd := make([]float64, 4)
	blas.Dgemm(true, false, 2, 2, 2, 1, ad, 2, bd, 2, 0, cd, 2)
	wantd := []float64{26, 30, 38, 44}
	for i := range cd {
		if cd[i] != wantd[i] {
			t.Fatalf("Dgemm = %v, want %v", cd, wantd)
		}
	}
}

// TestSgemmBias runs the bias form of every pure-Go kernel set through the
// suite, and the package function (Default, which is not a BiasImpl in
// the openblas build) through the same check.
func TestSgemmBias(t *testing.T) {
	for _, im := range impls() {
		bi, ok := im.(blas.BiasImpl)
		if !ok {
			bi = fallbackBias{im}
		}
		t.Run(im.Name(), func(t *testing.T) { blastest.TestSgemmBias(t, bi) })
	}
}

// fallbackBias is an Impl whose SgemmBias is the package's, for an
// implementation without one of its own.
type fallbackBias struct{ blas.Impl }

func (f fallbackBias) SgemmBias(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, bias []float32, c []float32, ldc int) {
	blas.SgemmBias(transA, transB, m, n, k, alpha, a, lda, b, ldb, bias, c, ldc)
}
