package main

import "syscall"

// childProcAttr makes a rank die with the parent (Pdeathsig), so that no
// rank outlives a killed godist bench.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
