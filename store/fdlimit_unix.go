//go:build unix

package store

import "syscall"

// RaiseFileLimit raises this process's limit on open descriptors
// (RLIMIT_NOFILE) to want when it can: the soft limit up to the hard one,
// and the hard one too where the process may (root). It returns the soft
// limit in force afterwards, which is below want when the raise was not
// allowed. A server of n clients holds one descriptor for each.
func RaiseFileLimit(want uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur >= want {
		return l.Cur, nil
	}
	if l.Max < want {
		raised := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			return want, nil
		}
	}
	l.Cur = min(want, l.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

// fileLimit is the soft limit on open descriptors, 0 when unknown.
func fileLimit() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	return l.Cur
}
