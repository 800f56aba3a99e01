package blas

import "github.com/godist/godist/internal/blas/internal/gogemm"

// PureGo returns the pure-Go implementation (Go assembly micro-kernels on
// amd64: AVX-512 or AVX2+FMA, picked at run time; GODIST_BLAS_ISA=avx2 or
// =generic caps the choice). It is available in every build, including
// `openblas`, so the two can be compared.
func PureGo() Impl { return pureGo }

var pureGo Impl = gogemm.Best()

// pureGoVariants returns one pure-Go Impl per kernel set usable on this CPU.
func pureGoVariants() []Impl {
	var out []Impl
	for _, v := range gogemm.Variants() {
		out = append(out, v)
	}
	return out
}
