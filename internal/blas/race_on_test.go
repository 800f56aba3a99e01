//go:build race

package blas_test

import "github.com/godist/godist/internal/blas/blastest"

// raceEnabled: under the race detector the conformance suite runs on fewer
// kernel variants and fewer cases to keep the run short.
const raceEnabled = true

func init() { blastest.Quick = true }
