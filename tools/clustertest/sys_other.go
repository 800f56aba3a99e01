//go:build !linux

package clustertest

import "errors"

func allowedCPUs() ([]int, error) { return nil, errors.New("not Linux") }
