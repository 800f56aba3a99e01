package dist

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"sync"
)

// startProfiles starts this rank's CPU profile and execution trace when
// Options.CPUProfile and Options.ExecutionTrace name prefixes, writing
// prefix.rank<R>, and returns what stops them and closes the files (to be
// called once the job is done; it may be called again), or nil. A profile
// already running in this process (another Init's, or the program's own)
// is left alone, said to log; a file that cannot be written is said on
// stderr, as a flight record's is.
func startProfiles(cpuPrefix, tracePrefix string, rank int, log *slog.Logger) func() error {
	var stops []func()
	start := func(what, prefix string, begin func(io.Writer) error, end func()) {
		if prefix == "" {
			return
		}
		f := &lazyFile{path: prefix + ".rank" + strconv.Itoa(rank)}
		if err := begin(f); err != nil {
			log.Warn("dist: not writing a "+what, "rank", rank, "path", f.path, "err", err)
			return
		}
		stops = append(stops, func() {
			end()
			if err := f.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "dist: rank %d: cannot write the %s: %v\n", rank, what, err)
			}
		})
	}
	start("CPU profile", cpuPrefix, pprof.StartCPUProfile, pprof.StopCPUProfile)
	start("execution trace", tracePrefix, trace.Start, trace.Stop)
	if len(stops) == 0 {
		return nil
	}
	var once sync.Once
	return func() error {
		once.Do(func() {
			for _, stop := range stops {
				stop()
			}
		})
		return nil
	}
}

// lazyFile creates its file at the first Write, so that a profiler that
// refuses to start (one is running already, perhaps into this very path)
// truncates nothing.
type lazyFile struct {
	path string
	f    *os.File
	err  error // the first error, returned by every later call
}

func (l *lazyFile) Write(p []byte) (int, error) {
	if l.f == nil && l.err == nil {
		l.f, l.err = os.Create(l.path)
	}
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.f.Write(p)
	if err != nil {
		l.err = err
	}
	return n, err
}

// Close closes the file; it returns the first error of any Write or of
// creating the file.
func (l *lazyFile) Close() error {
	if l.f == nil {
		return l.err
	}
	if err := l.f.Close(); l.err == nil {
		l.err = err
	}
	return l.err
}
