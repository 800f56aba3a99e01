//go:build !unix

package shmfile

import "os"

// pgrp: no process groups; the process stands for its own.
func pgrp() int { return os.Getpid() }
