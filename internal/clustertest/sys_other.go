//go:build !linux

package clustertest

import (
	"errors"
	"syscall"
)

func allowedCPUs() ([]int, error) { return nil, errors.New("not Linux") }

func holderAttr() *syscall.SysProcAttr { return nil }
