//go:build !race

package blas_test

const raceEnabled = false
