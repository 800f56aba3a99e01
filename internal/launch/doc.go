// Package launch is what godist's three launchers share: godist run's
// agent (elastic.Agent), spawn.Run and godist bench. It owns the list of
// variables that make up a worker's identity, which a child must get from
// its launcher and never inherit ([Identity], [Env], [Rank]); starting a
// worker and describing how it ended ([Start], [Exit]); free ports and
// tokens; and the reading of the error file through which a failed
// worker tells its launcher why it failed ([Record], [ReadRecord],
// [RootCause], [Order]; the file's format, which workers write, is
// package errorfile's, apart so that a worker need not link this one).
//
// A launcher does, in short:
//
//	env := launch.Env(os.Environ(), launch.Rank{Rank: r, WorldSize: n, ...,
//		ErrorFile: filepath.Join(dir, strconv.Itoa(r), "error.json")}.Vars())
//	p, err := launch.Start(r, launch.Command{Path: prog, Env: env, Stderr: tail}, exits)
//	...
//	e := <-exits // e.Code, e.Signal
//	rec, err := launch.ReadRecord(errorFile) // nil, fs.ErrNotExist when it wrote none
//
// and a worker that fails calls dist.RecordError, which writes the record.
//
// A worker started with OwnGroup is in a process group of its own, which
// Start hands to the launcher's watchdog (Linux): a process that stops
// the group, SIGTERM then SIGKILL, when the launcher dies without doing
// so, even by SIGKILL. Such a worker starts through a gate that holds it
// until the watchdog has its group: /bin/sh with a one-line script when
// that changes nothing the program sees (about a millisecond a worker),
// else the launcher's own binary re-executed (package gate, early in its
// initialisation). The watchdog is the launcher's binary re-executed too:
// this package's init runs it, so any program that links it can launch,
// and only such a program should link it: package dist does not.
package launch
