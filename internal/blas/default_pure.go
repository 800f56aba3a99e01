//go:build !openblas

package blas

func defaultImpl() Impl { return PureGo() }

// buildInfo describes the default implementation's configuration.
func buildInfo() string { return "pure Go: " + PureGo().Name() }
