//go:build !linux

package launch

import (
	"os"
	"syscall"
)

// Elsewhere, workers get no process group (nor die with the launcher).
const groupsSupported = false

func procAttr(bool) *syscall.SysProcAttr { return nil }

func signalGroup(pid int, sig syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Signal(sig)
}

// SignalName returns a signal's name.
func SignalName(s syscall.Signal) string { return s.String() }
