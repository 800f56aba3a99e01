// Package gate is the gate a launcher's worker waits at until the
// launcher's watchdog has its process group (package launch): the
// launcher's own binary, started with argv[0] Arg0 and Env=1, then the
// program's path and its argv, with the pipe from the launcher as fd 3.
// It waits for one byte on the pipe, then executes the program in its
// place; when the pipe ends without one (the launcher died, or gave up on
// the worker) it exits with status 1.
//
// The gate is its own package, importing little, so that it runs early in
// the binary's initialisation: Go initialises packages in the order of
// their import paths among those whose imports are done, so this one runs
// once os is ready, before the packages of a large binary that sort after
// it (etcd's client and its protocol buffers in godist's own: 8 ms of
// init a worker otherwise spends before its program starts).
package gate

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
)

const (
	Arg0 = "godist-gate" // a gate's argv[0]
	Env  = "GODIST_GATE" // set to 1 in a gate's environment, and removed before its program runs
)

func init() {
	if len(os.Args) >= 3 && os.Args[0] == Arg0 && os.Getenv(Env) == "1" {
		os.Exit(run(os.NewFile(3, "gate"), os.Args[1], os.Args[2:]))
	}
}

// run waits for the launcher's go-ahead on f, then executes path with
// argv in its place. It returns only when it cannot.
func run(f *os.File, path string, argv []string) int {
	var b [1]byte
	n, _ := f.Read(b[:])
	f.Close()
	if n != 1 {
		return 1 // the launcher died before the watchdog had this group
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, Env+"=") })
	err := syscall.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "godist: cannot execute %s: %v\n", path, err)
	return 127
}
