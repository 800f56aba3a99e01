//go:build race

package ddp_test

// raceOn is set when the race detector is on: the LeNet parity runs (100
// steps of two ranks, ~10x slower under the detector) are left to the
// normal build, which runs them in full.
const raceOn = true
