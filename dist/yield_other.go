//go:build !linux

package dist

import "runtime"

// osYield yields to this process's goroutines.
func osYield() { runtime.Gosched() }
