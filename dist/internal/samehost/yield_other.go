//go:build !linux

package samehost

import "runtime"

// osYield yields to this process's goroutines.
func osYield() { runtime.Gosched() }
