//go:build !linux

package launch

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Elsewhere, workers get no process group (nor die with the launcher).
const groupsSupported = false

func procAttr(bool) *syscall.SysProcAttr { return nil }

// gated: no gate (nor watchdog) elsewhere.
func gated(*exec.Cmd) (*gate, error) { return nil, nil }

// groupAlive: no process groups elsewhere.
func groupAlive(int) bool { return false }

// watchGroup: no watchdog elsewhere.
func watchGroup(int, time.Duration) {}

// The watchdog's and the gate's variables, kept from workers on every
// platform.
const (
	watchdogEnv = "GODIST_WATCHDOG"
	gateEnv     = "GODIST_GATE"
)

func signalGroup(pid int, sig syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Signal(sig)
}

// frozen: a stopped process cannot be told elsewhere.
func frozen(int) bool { return false }

// SignalName returns a signal's name.
func SignalName(s syscall.Signal) string { return s.String() }
