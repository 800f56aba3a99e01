package dist

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/godist/godist/store"
)

// The rendezvous: where an Init finds the job's store, through which the
// ranks then meet. env:// and tcp:// have rank 0 serve a TCP store at the
// master's address; file:// is a file every rank opens; any other scheme
// (etcd://) is a store outside the job, registered by the package that
// implements it (store.RegisterScheme), which no rank serves.

// openStore opens the job's store for this Init, unless Options gave one.
func (j *joining) openStore(ctx context.Context) error {
	if j.st = j.opt.Store; j.st != nil {
		return nil
	}
	if scheme, _, _ := strings.Cut(j.method, "://"); scheme != "env" && scheme != "tcp" && scheme != "file" {
		return j.openRegisteredStore(ctx)
	}
	u, err := url.Parse(j.method)
	if err != nil {
		return fmt.Errorf("dist: init method %q: %w", j.method, err)
	}
	switch u.Scheme {
	case "env", "tcp":
		err = j.openTCPStore(ctx, u)
	case "file":
		j.st, err = store.NewFile(u.Path, store.FileOptions{JobID: j.opt.JobID, WorldSize: j.size})
	default: // cannot happen: other schemes went to openRegisteredStore
		err = fmt.Errorf("dist: unknown init method %q (want env://, tcp://host:port, file:///path or etcd://host:port/prefix)", j.method)
	}
	if err != nil {
		return err
	}
	j.closers = append([]func() error{j.st.Close}, j.closers...)
	return nil
}

// openRegisteredStore opens a store that lives outside the job
// (etcd://), registered by the package that implements it.
func (j *joining) openRegisteredStore(ctx context.Context) error {
	st, err := store.Open(ctx, j.method)
	if err != nil {
		return fmt.Errorf("dist: init method %q: %w (want env://, tcp://host:port, file:///path or etcd://host:port/prefix)", j.method, err)
	}
	j.st = st
	j.closers = append(j.closers, st.Close)
	if j.masterHost == "" {
		j.masterHost = firstHost(j.method)
	}
	return nil
}

// openTCPStore opens the TCP store of env:// (at MASTER_ADDR and
// MASTER_PORT) or tcp:// (at u's address): rank 0 serves it, and every
// rank dials it. Without a run id or a launcher's job, the store's
// address is the job id.
func (j *joining) openTCPStore(ctx context.Context, u *url.URL) error {
	opt := &j.opt
	if u.Scheme == "tcp" {
		j.masterHost = u.Hostname()
		var err error
		if j.port, err = strconv.Atoi(u.Port()); err != nil {
			return fmt.Errorf("dist: init method %q needs host:port", j.method)
		}
	}
	addr := net.JoinHostPort(j.masterHost, strconv.Itoa(j.port))
	if opt.JobID == "" {
		opt.JobID, j.jobFrom = masterJobID(j.masterHost, j.port), "the store's address, MASTER_ADDR and MASTER_PORT"
		if u.Scheme == "tcp" {
			j.jobFrom = "the store's address in the init method"
		}
	}
	if j.rank == 0 {
		if err := j.serveStore(ctx); err != nil {
			return err
		}
	}
	j.servedTCP = true
	st, err := store.Dial(ctx, addr, store.DialOptions{Token: opt.Token, JobID: opt.JobID, Rank: j.rank,
		Logf: dialLogf(opt.Logger, j.rank), ReportAfter: dialReportAfter})
	if err != nil {
		j.closeAll()
		if oerr := otherJobError(err, j.rank, "the store at "+addr, opt.JobID, j.jobFrom); oerr != nil {
			return oerr
		}
		return fmt.Errorf("dist: rank %d cannot reach the store at %s: %w", j.rank, addr, err)
	}
	j.st = st
	return nil
}

// serveStore is rank 0 serving the TCP store. A store for ranks on this
// host only listens on loopback; one for other hosts needs a token or an
// explicit Insecure.
func (j *joining) serveStore(ctx context.Context) error {
	opt := &j.opt
	bind := ""
	switch {
	case isLoopback(j.masterHost):
		bind = j.masterHost
		if j.masterHost == "localhost" || j.masterHost == "" {
			bind = "127.0.0.1"
		}
	case len(opt.Token) == 0 && !opt.Insecure:
		return fmt.Errorf("dist: rank 0 would serve the job's store on %s without a job token, so anyone who can reach it could rewrite the job's addresses and join as any rank; set GODIST_TOKEN to the same secret on every rank (godist run does), use a loopback MASTER_ADDR for a one-host job, or set GODIST_INSECURE=1 (Options.Insecure) on a private network", j.masterHost)
	}
	srv, err := store.NewServer(ctx, net.JoinHostPort(bind, strconv.Itoa(j.port)), store.ServerOptions{Token: opt.Token, JobID: opt.JobID})
	if err != nil {
		return fmt.Errorf("dist: rank 0 cannot serve the store on port %d: %w (is another job using it? set MASTER_PORT)", j.port, err)
	}
	j.closers = append(j.closers, srv.Close)
	return nil
}

// dialReportAfter is when a rank that still cannot reach the store first
// says so (and then every six times as long); tests shorten it.
var dialReportAfter = 10 * time.Second

// dialLogf is where a rank that keeps trying to reach the store says so:
// the logger when there is one, else a line on stderr, since a rank that
// waits for an unreachable MASTER_ADDR must not wait in silence.
func dialLogf(log *slog.Logger, rank int) func(string, ...any) {
	if log != nil {
		return func(format string, args ...any) { log.Warn(fmt.Sprintf(format, args...), "rank", rank) }
	}
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "dist: rank %d: %s\n", rank, fmt.Sprintf(format, args...))
	}
}

// isLoopback reports whether host names this machine's loopback
// interface (an empty host, as a default MASTER_ADDR, counts).
func isLoopback(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// firstHost returns the host of the first address of an init method
// "scheme://host:port[,host:port...]/...", to find the local address that
// routes toward the store.
func firstHost(method string) string {
	_, rest, _ := strings.Cut(method, "://")
	rest, _, _ = strings.Cut(rest, "/")
	rest, _, _ = strings.Cut(rest, ",")
	if h, _, err := net.SplitHostPort(rest); err == nil {
		return h
	}
	return strings.Trim(rest, "[]")
}
