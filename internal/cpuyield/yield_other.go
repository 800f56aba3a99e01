//go:build !linux

package cpuyield

import "runtime"

// Yield yields to this process's goroutines only.
func Yield() { runtime.Gosched() }
