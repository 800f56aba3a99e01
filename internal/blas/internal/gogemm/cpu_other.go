//go:build !amd64

package gogemm

// availableKernels lists the kernel sets this CPU can run, best first.
func availableKernels() []*kernelSet { return []*kernelSet{kernelGeneric} }
