//go:build unix

package shmfile

import "golang.org/x/sys/unix"

// pgrp is this process's process group.
func pgrp() int { return unix.Getpgrp() }
