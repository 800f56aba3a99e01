// Package shmfile names the files that godist makes in /dev/shm (the
// transport's segments and regions) so that whoever outlives their maker
// can find them: a file is named
//
//	godist-PID-PGID-RANDOM-TAG
//
// by the process that made it (PID) and its process group then (PGID).
// A process unlinks its files as soon as its peers have mapped them, but
// one killed in between (SIGKILL, or SIGTERM, which a Go program does not
// catch unless it asks) cannot; its launcher can. A launcher starts each
// worker in a process group of its own (launch.Command.OwnGroup), whose id
// is the worker's pid, so that after a worker's end it removes the files
// of the worker and of whatever it started (Remove).
package shmfile

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Dir is where the files go.
const Dir = "/dev/shm"

// Prefix is how the names of this process's files begin:
// "godist-PID-PGID-".
func Prefix() string {
	return "godist-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(pgrp()) + "-"
}

// Create creates a file of size bytes in Dir, mode 0600, named Prefix, a
// random part and tag.
func Create(tag string, size int64) (*os.File, error) {
	var b [8]byte
	rand.Read(b[:])
	name := filepath.Join(Dir, Prefix()+hex.EncodeToString(b[:])+"-"+tag)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		os.Remove(name)
		return nil, err
	}
	return f, nil
}

// Owner returns the process and the process group that made the file
// named name (a base name), and false for a name that is not one of
// Create's.
func Owner(name string) (pid, pgid int, ok bool) {
	rest, ok := strings.CutPrefix(name, "godist-")
	if !ok {
		return 0, 0, false
	}
	f := strings.SplitN(rest, "-", 4)
	if len(f) < 4 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(f[0])
	pgid, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || pid <= 0 || pgid <= 0 || f[0] != strconv.Itoa(pid) || f[1] != strconv.Itoa(pgid) {
		return 0, 0, false
	}
	return pid, pgid, true
}

// Remove removes the files in Dir that process pid made and, with group,
// those that any process of the process group whose id is pid made. Call
// it once pid has exited (and, with group, every process of its group):
// the files of a process that is still running are its own business. It
// returns the names it removed.
func Remove(pid int, group bool) []string {
	ents, err := os.ReadDir(Dir)
	if err != nil {
		return nil
	}
	var gone []string
	for _, e := range ents {
		p, pg, ok := Owner(e.Name())
		if !ok || (p != pid && !(group && pg == pid)) {
			continue
		}
		if os.Remove(filepath.Join(Dir, e.Name())) == nil {
			gone = append(gone, e.Name())
		}
	}
	return gone
}
