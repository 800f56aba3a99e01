package dist

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/internal/handshake"
	"github.com/godist/godist/internal/launch/errorfile"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport"
)

// Options configure Init. A zero field takes its default, which for most
// fields is an environment variable, as `godist run` and torchrun set
// them: a field the caller sets wins over its variable. Init reads the
// environment in one place (withEnv) and for the rank's identity
// (ReadEnv); nothing below it does.
type Options struct {
	// InitMethod says how ranks meet: "env://" (the default: MASTER_ADDR,
	// MASTER_PORT, WORLD_SIZE, RANK, and the variables of torchrun, Slurm
	// and OpenMPI's mpirun), "tcp://host:port" (rank 0 serves the store
	// there), "file:///path" (a shared file store), or
	// "etcd://host:port[,host:port...]/prefix" (the store is kept in an
	// etcd cluster under prefix, one per job and attempt, so no rank
	// serves it and none takes it down by dying; the program must import
	// _ "github.com/godist/godist/store/etcdstore", which registers the
	// scheme; see store.RegisterScheme). When empty: the
	// GODIST_INIT_METHOD variable (godist run --rdzv-backend etcd sets
	// it), else env://. RANK and WORLD_SIZE (or another launcher's
	// variables) still give the rank unless Rank and WorldSize do.
	InitMethod string
	// Store, when set, is used instead of InitMethod's.
	Store store.Store
	// Rank and WorldSize, when WorldSize > 0; otherwise both come from
	// the environment (so the zero Options read everything from there).
	Rank, WorldSize int
	// Timeout bounds every collective and the rendezvous (when zero: the
	// GODIST_TIMEOUT variable, seconds or a duration, which godist run
	// --timeout sets; else DefaultTimeout).
	Timeout time.Duration
	// PeerTimeout is how long a peer may send this rank nothing, not even
	// a heartbeat, before it is declared lost: its host down or cut off,
	// its process stopped. Every call waiting on it, and every later
	// one, then fails with a *RankError naming it, its host and the ranks
	// there, within PeerTimeout rather than Timeout. Each rank sends a
	// heartbeat to every peer it has sent nothing to for PeerTimeout/5.
	// When zero: the GODIST_PEER_TIMEOUT variable (seconds or a
	// duration; 0 never), else transport.DefaultPeerTimeout (15 s);
	// negative: never (a silent peer is found at Timeout).
	PeerTimeout time.Duration
	// JobID and Token authenticate every connection; by default the
	// GODIST_RUN_ID/TORCHELASTIC_RUN_ID and GODIST_TOKEN variables (set by
	// godist run; the token in hex, or raw when it is not hex). Without a
	// run id the job id comes from the launcher that started the ranks
	// (Env.JobID: Slurm's job and step, OpenMPI's job), else, for env://
	// and tcp://, from the store's address ("master:host:port"). Every
	// handshake, with the store and between ranks, checks it, token or
	// not, so two jobs that meet at one port (two mpirun jobs on a host
	// both on the default MASTER_PORT) refuse each other rather than
	// merge. The job id in use is Group.JobID.
	JobID string
	Token []byte
	// Insecure allows a job without a token to listen on interfaces other
	// than loopback (default: the GODIST_INSECURE variable, 1 or true).
	// Without a token and without Insecure, Init serves the store and
	// accepts ranks on loopback only, and refuses a MASTER_ADDR or Host
	// that is not a loopback address: with no token, anyone who can reach
	// the ports could join the job, read its data or replace a rank.
	Insecure bool
	// Host is the address the other ranks reach this one at (default: the
	// GODIST_HOST variable, else the local address that routes to the
	// store's host, else 127.0.0.1).
	Host string
	// SharedMemory says whether ranks on one host move large payloads
	// through shared memory, and so whether NewSharedTensor can share
	// (default: on, unless the GODIST_SHM variable is 0).
	SharedMemory SharedMemoryMode
	// ShmRing says whether, with SharedMemory, every frame between ranks
	// of one host (headers and small payloads too) goes through a ring in
	// their shared memory instead of over loopback TCP
	// (transport.TCPOptions.ShmRing; default: on, unless the
	// GODIST_SHM_RING variable is 0).
	ShmRing SharedMemoryMode
	// Model is the cost model by which calls of groups that span hosts
	// choose their algorithms (algo.Model: the latency and bandwidth of
	// shared memory and of the network, the reduction rate, the cost of a
	// call). When zero, rank 0 of a job that spans hosts measures it at
	// Init against a rank of another host and one of its own (about 80
	// ms at 1 Gbit/s) and gives it to every rank through the store; a job
	// on one host chooses by size thresholds and needs none. Group.Choice
	// says what a call runs and the time the model predicts.
	Model algo.Model
	// SmallCollectives says whether, with SharedMemory, barriers and
	// all-reduces, broadcasts, all-gathers and reduce-scatters of at most
	// 4 KiB a member go through a control block in the members' shared
	// memory instead of the transport, when every member of the group is
	// on this host (samehost.go; default: on, unless the GODIST_SHM_CTL
	// variable is 0).
	SmallCollectives SharedMemoryMode
	// LocalWorldSize is how many ranks of the job run on this host
	// (default: the LOCAL_WORLD_SIZE variable; unknown when neither
	// says). It chooses the default Spin.
	LocalWorldSize int
	// Spin is how long this rank's connections poll their sockets before
	// they park; negative never polls. When zero: the GODIST_SPIN_US
	// variable (microseconds; 0 never polls), else transport.DefaultPolling
	// of LocalWorldSize, GOMAXPROCS and the CPUs. On a host with more
	// ranks than CPUs, a polling reader yields its CPU between polls.
	Spin time.Duration
	// Yield makes this rank's polling waits (the readers of its
	// connections, the same-host engine's waits) give up the CPU between
	// polls, as OpenMPI's mpi_yield_when_idle does: for CPUs shared with
	// work the rank cannot see (other jobs, a host's neighbours on one
	// machine). A yielding reader polls only while a receive waits. When
	// false: the GODIST_YIELD variable (1 yields), else only on a host
	// that runs more ranks than it has CPUs.
	Yield bool
	// FlightRecorder is how many calls each group remembers for its
	// flight record (FlightRecord, DumpFlight); zero: the
	// GODIST_FLIGHT_ENTRIES variable, else DefaultFlightEntries; negative:
	// none.
	FlightRecorder int
	// FlightDir is where the flight record is written when a group fails
	// with a timeout or a desync, on SIGUSR1 and by DumpFlight (default:
	// the GODIST_FLIGHT_DIR variable, else the directory of the
	// launcher's error file, GODIST_ERROR_FILE, else os.TempDir()).
	FlightDir string
	// DumpOnSignal installs a SIGUSR1 handler that writes the flight
	// record (see DumpOnSignal), until Destroy (default: the
	// GODIST_FLIGHT_SIGNAL variable, 1 or true; godist run sets it).
	DumpOnSignal bool
	// StatusInterval is how often this rank publishes what it is doing
	// (the call in flight, for how long, which peer it waits on) to the
	// job's store for godist top: every interval while something
	// changes or a call is in flight, else every StatusHeartbeat. Zero:
	// DefaultStatusInterval for the TCP store of env:// and tcp://, never
	// for a file:// store (its log is never compacted) or Options.Store
	// (set it to publish there); negative, or the GODIST_TOP variable 0:
	// never.
	StatusInterval time.Duration
	// CPUProfile and ExecutionTrace, when set, are path prefixes: this
	// rank writes its CPU profile (runtime/pprof) to CPUProfile.rank<R>
	// and its execution trace (runtime/trace) to ExecutionTrace.rank<R>,
	// from the end of Init until the default group's Destroy (a process
	// that exits without Destroy leaves them incomplete). Default: the
	// GODIST_CPUPROFILE and GODIST_TRACE variables, so every program that
	// calls Init (godist bench's workers, the examples, rpc.Init) writes
	// them alike. One profile of each kind runs per process: an Init that
	// finds one running says so to Logger and goes on without.
	CPUProfile, ExecutionTrace string
	// Logger hears the fallbacks that change behaviour: shared memory
	// asked for but not used with some peer (another host, /dev/shm
	// unusable), a NewSharedTensor that is an ordinary tensor, an
	// unreadable variable ignored. nil discards them.
	Logger *slog.Logger
}

// SharedMemoryMode is Options.SharedMemory: on, off, or left to the
// environment.
type SharedMemoryMode uint8

const (
	SharedMemoryDefault SharedMemoryMode = iota // GODIST_SHM=0: off; else on
	SharedMemoryOn
	SharedMemoryOff
)

// Env is the identity Init found in the environment.
type Env struct {
	Rank, WorldSize, LocalRank int
	MasterAddr                 string
	MasterPort                 int
	Source                     string // which launcher's variables were used
	// JobID names the job of the launcher that gave the rank, the same
	// on every rank of one job and different between jobs: for Slurm
	// "slurm:JOB.STEP" (SLURM_JOB_ID, SLURM_STEP_ID), for OpenMPI's
	// mpirun "openmpi:NS" (PMIX_NAMESPACE, else OMPI_MCA_ess_base_jobid).
	// It is "" for RANK and WORLD_SIZE, whose launchers (godist run,
	// torchrun) set a run id instead, and for MPICH's and Intel MPI's
	// mpiexec, which set no variable that names the job.
	JobID string
}

// ReadEnv reads a rank's identity from the environment: godist run and
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Slurm
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the first host of
// SLURM_JOB_NODELIST as the master), OpenMPI's mpirun
// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK)
// and MPICH's or Intel MPI's mpiexec (PMI_RANK, PMI_SIZE,
// MPI_LOCALRANKID); an MPI launcher implies a master on this host.
// MASTER_ADDR and MASTER_PORT, when set, win over what a launcher implies.
// Env.JobID names the launcher's job.
func ReadEnv() (Env, error) { return readEnv(os.Getenv, true) }

// readEnv is ReadEnv with get reading the variables; without needMaster,
// a missing MASTER_ADDR is no error.
func readEnv(get func(string) string, needMaster bool) (Env, error) {
	e := Env{LocalRank: -1, MasterPort: 29500}
	atoi := func(name string) (int, bool, error) {
		s := get(name)
		if s == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, true, fmt.Errorf("dist: %s=%q is not a number", name, s)
		}
		return n, true, nil
	}
	type source struct {
		name              string
		rank, size, local string
		defaultMaster     func() string
	}
	sources := []source{
		{"env", "RANK", "WORLD_SIZE", "LOCAL_RANK", nil},
		{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", func() string { return firstSlurmHost(get("SLURM_JOB_NODELIST")) }},
		{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", func() string { return "127.0.0.1" }},
		{"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", func() string { return "127.0.0.1" }}, // MPICH's and Intel MPI's Hydra
	}
	found := false
	for _, s := range sources {
		r, okR, err := atoi(s.rank)
		if err != nil {
			return e, err
		}
		n, okN, err := atoi(s.size)
		if err != nil {
			return e, err
		}
		if !okR || !okN {
			continue
		}
		l, okL, err := atoi(s.local)
		if err != nil {
			return e, err
		}
		if !okL {
			l = -1
		}
		e.Rank, e.WorldSize, e.LocalRank, e.Source = r, n, l, s.name
		e.JobID, _ = launcherJob(s.name, get)
		if s.defaultMaster != nil {
			e.MasterAddr = s.defaultMaster()
		}
		found = true
		break
	}
	if !found {
		return e, fmt.Errorf("dist: env:// needs RANK and WORLD_SIZE (or Slurm's SLURM_PROCID/SLURM_NTASKS, OpenMPI's OMPI_COMM_WORLD_RANK/SIZE, or MPICH's PMI_RANK/PMI_SIZE); start the program with godist run or set them")
	}
	if a := get("MASTER_ADDR"); a != "" {
		e.MasterAddr = a
	}
	if p, ok, err := atoi("MASTER_PORT"); err != nil {
		return e, err
	} else if ok {
		e.MasterPort = p
	}
	if e.MasterAddr == "" && needMaster {
		if e.Source == "slurm" {
			return e, fmt.Errorf("dist: env:// under Slurm needs SLURM_JOB_NODELIST (rank 0 runs on its first host) or MASTER_ADDR (the host of rank 0); neither is set")
		}
		return e, fmt.Errorf("dist: env:// needs MASTER_ADDR (the host of rank 0)")
	}
	if e.WorldSize < 1 || e.Rank < 0 || e.Rank >= e.WorldSize {
		return e, fmt.Errorf("dist: rank %d of world size %d (from %s variables)", e.Rank, e.WorldSize, e.Source)
	}
	return e, nil
}

// launcherJob returns the job id of the launcher whose variables gave the
// rank (source, as Env.Source) and the variables it comes from, or "" (see
// Env.JobID). get reads a variable.
func launcherJob(source string, get func(string) string) (id, from string) {
	first := func(names ...string) (string, string) {
		for _, n := range names {
			if v := get(n); v != "" {
				return v, n
			}
		}
		return "", ""
	}
	switch source {
	case "slurm":
		job, jobVar := first("SLURM_JOB_ID", "SLURM_JOBID")
		if job == "" {
			return "", ""
		}
		// One srun is one step: two steps of an allocation are two jobs.
		if step, stepVar := first("SLURM_STEP_ID", "SLURM_STEPID"); step != "" {
			return fitJobID("slurm:" + job + "." + step), jobVar + " and " + stepVar
		}
		return fitJobID("slurm:" + job), jobVar
	case "mpirun":
		// OpenMPI 4 sets both, to the same number; OpenMPI 5 (PRRTE)
		// sets PMIX_NAMESPACE; older ones OMPI_MCA_orte_ess_jobid.
		if v, n := first("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"); v != "" {
			return fitJobID("openmpi:" + v), n
		}
	}
	return "", ""
}

// masterJobID is the job id of a job with neither a run id nor a
// launcher's job: the address of its store, with the spellings of this
// host's loopback that Init binds alike.
func masterJobID(host string, port int) string {
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	return fitJobID("master:" + net.JoinHostPort(host, strconv.Itoa(port)))
}

// fitJobID returns a derived job id that the handshake can carry (255
// bytes at most): id itself, or when longer its first bytes and a hash of
// the whole.
func fitJobID(id string) string {
	if len(id) <= 255 {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return id[:255-33] + "~" + hex.EncodeToString(sum[:16])
}

// otherJobError returns, when err (from reaching what: the store, a peer)
// is a job id mismatch, an error that says so, where this rank's job id
// came from and what to do; otherwise nil.
func otherJobError(err error, rank int, what, job, from string) error {
	var me *handshake.MismatchError
	if !errors.As(err, &me) || me.Field != "job id" {
		return nil
	}
	return fmt.Errorf("dist: rank %d: %s belongs to another job, %s (this rank's job is %q, from %s): two jobs meet at one port; give each job on a host its own MASTER_PORT (or, if they are one job, every rank the same GODIST_RUN_ID): %w",
		rank, what, me.Remote, job, from, err)
}

// firstSlurmHost returns the first host of a Slurm node list such as
// "node[01-04,07],gpu2" (node01) or "rack[1-2]-ib" (rack1-ib).
func firstSlurmHost(list string) string {
	list = strings.TrimSpace(list)
	if list == "" {
		return ""
	}
	i := strings.IndexAny(list, "[,")
	if i < 0 {
		return list
	}
	if list[i] == ',' {
		return list[:i]
	}
	prefix, rest := list[:i], list[i+1:]
	close := strings.IndexByte(rest, ']')
	if close < 0 {
		return prefix
	}
	first := rest[:close]
	if j := strings.IndexAny(first, "-,"); j >= 0 {
		first = first[:j]
	}
	suffix := rest[close+1:]
	if j := strings.IndexAny(suffix, ",["); j >= 0 {
		suffix = suffix[:j]
	}
	return prefix + first + suffix
}

// Init joins this process to its job and returns the default group (all
// ranks). Rank 0 serves the store for env:// and tcp://; for etcd:// the
// store is etcd's. Every rank then connects to every other over
// authenticated TCP.
func Init(ctx context.Context, opt Options) (*Group, error) {
	jobFrom := "Options.JobID"
	if opt.JobID == "" {
		jobFrom = "GODIST_RUN_ID"
		if os.Getenv(jobFrom) == "" {
			jobFrom = "TORCHELASTIC_RUN_ID"
		}
	}
	opt = withEnv(opt, os.Getenv)
	if opt.Timeout == 0 {
		opt.Timeout = DefaultTimeout
	}
	rank, size := opt.Rank, opt.WorldSize
	if size <= 0 {
		rank = -1
	}
	method := opt.InitMethod
	if method == "" {
		method = "env://"
	}
	var masterHost string
	var port int
	var closers []func() error
	servedTCP := false // the store is a TCP store Init dialed (env://, tcp://)
	st := opt.Store
	// tcp:// and file:// may carry the rank and the world size, as
	// PyTorch's init_method "tcp://host:port?rank=R&world_size=N".
	if size <= 0 && st == nil && !strings.HasPrefix(method, "env://") {
		if u, err := url.Parse(method); err == nil && (u.Query().Has("rank") || u.Query().Has("world_size")) {
			r, rerr := strconv.Atoi(u.Query().Get("rank"))
			n, nerr := strconv.Atoi(u.Query().Get("world_size"))
			if rerr != nil || nerr != nil || n < 1 || r < 0 || r >= n {
				return nil, fmt.Errorf("dist: init method %q: want rank=R&world_size=N with 0 <= R < N", method)
			}
			rank, size = r, n
		}
	}
	if rank < 0 || size <= 0 || (st == nil && strings.HasPrefix(method, "env://")) {
		// Only env:// needs the master's address; another init method
		// names its store itself.
		env, err := readEnv(os.Getenv, st == nil && strings.HasPrefix(method, "env://"))
		if err != nil {
			return nil, err
		}
		if rank < 0 {
			rank = env.Rank
		}
		if size <= 0 {
			size = env.WorldSize
		}
		masterHost, port = env.MasterAddr, env.MasterPort
		if opt.JobID == "" {
			opt.JobID, jobFrom = launcherJob(env.Source, os.Getenv)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()
	if scheme, _, _ := strings.Cut(method, "://"); st == nil && scheme != "env" && scheme != "tcp" && scheme != "file" {
		// A store that lives outside the job (etcd://), registered by
		// the package that implements it: no rank serves it.
		var err error
		if st, err = store.Open(rctx, method); err != nil {
			return nil, fmt.Errorf("dist: init method %q: %w (want env://, tcp://host:port, file:///path or etcd://host:port/prefix)", method, err)
		}
		closers = append(closers, st.Close)
		if masterHost == "" {
			masterHost = firstHost(method)
		}
	}
	if st == nil {
		u, err := url.Parse(method)
		if err != nil {
			return nil, fmt.Errorf("dist: init method %q: %w", method, err)
		}
		switch u.Scheme {
		case "env", "tcp":
			if u.Scheme == "tcp" {
				masterHost = u.Hostname()
				if port, err = strconv.Atoi(u.Port()); err != nil {
					return nil, fmt.Errorf("dist: init method %q needs host:port", method)
				}
			}
			addr := net.JoinHostPort(masterHost, strconv.Itoa(port))
			if opt.JobID == "" {
				opt.JobID, jobFrom = masterJobID(masterHost, port), "the store's address, MASTER_ADDR and MASTER_PORT"
				if u.Scheme == "tcp" {
					jobFrom = "the store's address in the init method"
				}
			}
			if rank == 0 {
				// A store for ranks on this host only listens on
				// loopback; one for other hosts needs a token or an
				// explicit Insecure.
				bind := ""
				switch {
				case isLoopback(masterHost):
					bind = masterHost
					if masterHost == "localhost" || masterHost == "" {
						bind = "127.0.0.1"
					}
				case len(opt.Token) == 0 && !opt.Insecure:
					return nil, fmt.Errorf("dist: rank 0 would serve the job's store on %s without a job token, so anyone who can reach it could rewrite the job's addresses and join as any rank; set GODIST_TOKEN to the same secret on every rank (godist run does), use a loopback MASTER_ADDR for a one-host job, or set GODIST_INSECURE=1 (Options.Insecure) on a private network", masterHost)
				}
				srv, err := store.NewServer(rctx, net.JoinHostPort(bind, strconv.Itoa(port)), store.ServerOptions{Token: opt.Token, JobID: opt.JobID})
				if err != nil {
					return nil, fmt.Errorf("dist: rank 0 cannot serve the store on port %d: %w (is another job using it? set MASTER_PORT)", port, err)
				}
				closers = append(closers, srv.Close)
			}
			servedTCP = true
			st, err = store.Dial(rctx, addr, store.DialOptions{Token: opt.Token, JobID: opt.JobID, Rank: rank,
				Logf: dialLogf(opt.Logger, rank), ReportAfter: dialReportAfter})
			if err != nil {
				for _, c := range closers {
					c()
				}
				if oerr := otherJobError(err, rank, "the store at "+addr, opt.JobID, jobFrom); oerr != nil {
					return nil, oerr
				}
				return nil, fmt.Errorf("dist: rank %d cannot reach the store at %s: %w", rank, addr, err)
			}
		case "file":
			st, err = store.NewFile(u.Path, store.FileOptions{JobID: opt.JobID, WorldSize: size})
			if err != nil {
				return nil, err
			}
		default: // cannot happen: other schemes went to store.Open
			return nil, fmt.Errorf("dist: unknown init method %q (want env://, tcp://host:port, file:///path or etcd://host:port/prefix)", method)
		}
		closers = append([]func() error{st.Close}, closers...)
	}
	host := opt.Host
	if host == "" {
		host = localAddrFor(masterHost)
	}
	if len(opt.Token) == 0 && !opt.Insecure && !isLoopback(host) {
		for _, c := range closers {
			c()
		}
		return nil, fmt.Errorf("dist: rank %d would accept connections at %s without a job token, so anyone who can reach it could join the job or take a rank's place; set GODIST_TOKEN to the same secret on every rank (godist run does), or GODIST_INSECURE=1 (Options.Insecure) on a private network", rank, host)
	}
	if len(opt.Token) == 0 && !isLoopback(host) {
		insecureOnce.Do(func() {
			fmt.Fprintf(os.Stderr, "dist: warning: no job token: rank %d accepts unauthenticated connections at %s (GODIST_INSECURE)\n", rank, host)
		})
	}
	spin, yield := opt.polling()
	ep, err := transport.NewTCP(rctx, transport.TCPOptions{
		Rank: rank, Size: size, Store: st, Host: host, JobID: opt.JobID, Token: opt.Token,
		Spin: spin, Yield: yield, PeerTimeout: opt.PeerTimeout, SharedMemory: opt.SharedMemory != SharedMemoryOff, ShmRing: opt.ShmRing != SharedMemoryOff, Logger: opt.Logger,
	})
	if err != nil {
		// The store stays up a moment after a failed Init (in the
		// background; the process may exit sooner): the other ranks,
		// still in Init, read there which rank's death failed it, and do
		// not blame this one for leaving.
		if len(closers) > 0 {
			closers[0]() // this rank's client, or the file store
			if rest := closers[1:]; len(rest) > 0 {
				time.AfterFunc(failedInitStoreGrace, func() {
					for _, c := range rest {
						c()
					}
				})
			}
		}
		if oerr := otherJobError(err, rank, "a peer", opt.JobID, jobFrom); oerr != nil {
			return nil, oerr
		}
		return nil, fmt.Errorf("dist: %w", err)
	}
	w := newWorld(rank, size, ep, st, "tcp")
	w.jobID = opt.JobID
	if stop := startProfiles(opt.CPUProfile, opt.ExecutionTrace, rank, logger(opt.Logger)); stop != nil {
		closers = append(closers, stop)
	}
	w.closers = closers
	w.host = host
	if servedTCP {
		w.storeHost = 0
	}
	w.noCtl = opt.SmallCollectives == SharedMemoryOff || opt.SharedMemory == SharedMemoryOff
	w.yield = opt.Yield || opt.LocalWorldSize > runtime.NumCPU()
	switch {
	case opt.FlightRecorder == 0:
		w.flightSize = DefaultFlightEntries
	case opt.FlightRecorder < 0:
		w.flightSize = 0
	default:
		w.flightSize = min(opt.FlightRecorder, maxFlightEntries)
	}
	w.flightDir, w.autoDump = opt.FlightDir, true
	if opt.DumpOnSignal {
		w.stopSignal = DumpOnSignal()
	}
	if opt.StatusInterval == 0 && servedTCP {
		opt.StatusInterval = DefaultStatusInterval
	}
	if opt.StatusInterval > 0 {
		w.startStatus(opt.StatusInterval)
	}
	all := make([]int, size)
	for i := range all {
		all[i] = i
	}
	g := newGroup(w, 0, all, opt.Timeout)
	if err := g.initCtl(ctx); err != nil {
		g.Destroy()
		return nil, fmt.Errorf("dist: rank %d: the control block of small collectives: %w", rank, err)
	}
	if err := g.measureModel(ctx, opt.Model); err != nil {
		g.Destroy()
		return nil, fmt.Errorf("dist: rank %d: the cost model of calls across hosts (Options.Model): %w", rank, err)
	}
	settleHeap()
	return g, nil
}

// settleHeap collects Init's garbage (connection setup, the cost model's
// probe buffers: up to tens of MiB) before the first call. Left alone,
// the heap would grow into fresh memory until the next collection, and
// on a virtual machine a first touch of memory is a fault that can cost
// tens of µs: on the namespace hosts of issue 28 a job's 8 B all_reduce
// took 200-600 µs for its first second or two, and 100-150 µs from its
// first collection on (with GOGC=off, for as long as it ran). Collected
// now, the calls' allocations reuse memory Init has touched.
func settleHeap() { runtime.GC() }

// failedInitStoreGrace is how long rank 0 serves the store after its Init
// failed.
const failedInitStoreGrace = 3 * time.Second

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

// withEnv returns opt with the fields the caller left zero that have a
// variable filled from it (get reads one: os.Getenv, or a map in tests).
// It is where Init reads the environment, apart from the rank's identity
// (ReadEnv); an unreadable value is ignored and said so to opt.Logger.
func withEnv(opt Options, get func(string) string) Options {
	log := logger(opt.Logger)
	if opt.InitMethod == "" && opt.Store == nil {
		opt.InitMethod = get("GODIST_INIT_METHOD")
	}
	if opt.JobID == "" {
		opt.JobID = get("GODIST_RUN_ID")
	}
	if opt.JobID == "" {
		opt.JobID = get("TORCHELASTIC_RUN_ID")
	}
	if t := get("GODIST_TOKEN"); opt.Token == nil && t != "" {
		if b, err := hex.DecodeString(t); err == nil {
			opt.Token = b
		} else {
			opt.Token = []byte(t)
		}
	}
	if opt.Host == "" {
		opt.Host = get("GODIST_HOST")
	}
	if opt.CPUProfile == "" {
		opt.CPUProfile = get("GODIST_CPUPROFILE")
	}
	if opt.ExecutionTrace == "" {
		opt.ExecutionTrace = get("GODIST_TRACE")
	}
	if v := get("GODIST_INSECURE"); !opt.Insecure && (v == "1" || strings.EqualFold(v, "true")) {
		opt.Insecure = true
	}
	if v := get("GODIST_FLIGHT_ENTRIES"); opt.FlightRecorder == 0 && v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			opt.FlightRecorder = n
		} else {
			log.Warn("dist: ignoring GODIST_FLIGHT_ENTRIES: not a number", "value", v)
		}
	}
	if opt.FlightDir == "" {
		opt.FlightDir = get("GODIST_FLIGHT_DIR")
	}
	for _, name := range []string{errorfile.Env, errorfile.TorchEnv} {
		if v := get(name); opt.FlightDir == "" && v != "" {
			opt.FlightDir = filepath.Dir(v)
		}
	}
	if v := get("GODIST_FLIGHT_SIGNAL"); !opt.DumpOnSignal && (v == "1" || strings.EqualFold(v, "true")) {
		opt.DumpOnSignal = true
	}
	if get("GODIST_TOP") == "0" && opt.StatusInterval == 0 {
		opt.StatusInterval = -1
	}
	if opt.ShmRing == SharedMemoryDefault {
		opt.ShmRing = SharedMemoryOn
		if get("GODIST_SHM_RING") == "0" {
			opt.ShmRing = SharedMemoryOff
		}
	}
	if opt.SmallCollectives == SharedMemoryDefault {
		opt.SmallCollectives = SharedMemoryOn
		if get("GODIST_SHM_CTL") == "0" {
			opt.SmallCollectives = SharedMemoryOff
		}
	}
	if opt.SharedMemory == SharedMemoryDefault {
		opt.SharedMemory = SharedMemoryOn
		if get("GODIST_SHM") == "0" {
			opt.SharedMemory = SharedMemoryOff
		}
	}
	if v := get("LOCAL_WORLD_SIZE"); opt.LocalWorldSize == 0 && v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			opt.LocalWorldSize = n
		} else {
			log.Warn("dist: ignoring LOCAL_WORLD_SIZE: not a positive number", "value", v)
		}
	}
	if v := get("GODIST_TIMEOUT"); opt.Timeout == 0 && v != "" {
		// Seconds ("600") or a duration ("10m"), as godist run --timeout.
		if d, ok := parseSeconds(v); ok {
			opt.Timeout = d
		} else {
			log.Warn("dist: ignoring GODIST_TIMEOUT: want seconds or a duration such as 10m", "value", v)
		}
	}
	if v := get("GODIST_PEER_TIMEOUT"); opt.PeerTimeout == 0 && v != "" {
		if v == "0" {
			opt.PeerTimeout = -1 // never
		} else if d, ok := parseSeconds(v); ok {
			opt.PeerTimeout = d
		} else {
			log.Warn("dist: ignoring GODIST_PEER_TIMEOUT: want seconds or a duration such as 15s", "value", v)
		}
	}
	if v := get("GODIST_YIELD"); !opt.Yield && v != "" {
		switch v {
		case "1":
			opt.Yield = true
		case "0":
		default:
			log.Warn("dist: ignoring GODIST_YIELD: want 1 or 0", "value", v)
		}
	}
	if v := get("GODIST_SPIN_US"); opt.Spin == 0 && v != "" {
		switch us, err := strconv.Atoi(v); {
		case err != nil || us < 0:
			log.Warn("dist: ignoring GODIST_SPIN_US: not a number of microseconds", "value", v)
		case us == 0:
			opt.Spin = -1 // never poll
		default:
			opt.Spin = time.Duration(us) * time.Microsecond
		}
	}
	return opt
}

// parseSeconds reads a positive duration written as seconds ("600",
// "1.5") or as a Go duration ("10m").
func parseSeconds(v string) (time.Duration, bool) {
	d, err := time.ParseDuration(v)
	if secs, serr := strconv.ParseFloat(v, 64); serr == nil {
		d, err = time.Duration(secs*float64(time.Second)), nil
	}
	return d, err == nil && d > 0
}

// logger returns log, or one that discards when it is nil.
func logger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// spin is TCPOptions.Spin for opt.
func (opt Options) spin() time.Duration {
	spin, _ := opt.polling()
	return spin
}

// polling is how this rank's readers poll: Spin when set (yielding with
// Yield or on a host with more ranks than CPUs), else
// transport.DefaultPolling, which on a host with more ranks than CPUs
// polls yielding the CPU between polls, as every rank does with Yield.
func (opt Options) polling() (time.Duration, bool) {
	switch {
	case opt.Spin < 0:
		return 0, false
	case opt.Spin > 0:
		return opt.Spin, opt.Yield || opt.LocalWorldSize > runtime.NumCPU()
	}
	if opt.Yield {
		return transport.YieldSpin, true
	}
	return transport.DefaultPolling(opt.LocalWorldSize, runtime.GOMAXPROCS(0), runtime.NumCPU())
}

// localAddrFor returns the local address that routes to host (without
// sending anything), or 127.0.0.1.
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

// insecureOnce says the no-token warning once per process.
var insecureOnce sync.Once

func localAddrFor(host string) string {
	if host == "" || host == "localhost" || strings.HasPrefix(host, "127.") {
		return "127.0.0.1"
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

// FromEndpoint builds the default group over an endpoint that is already
// connected (an in-process mesh in tests, say). st may be nil.
func FromEndpoint(ep *transport.Endpoint, st store.Store, backend string, timeout time.Duration) *Group {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	w := newWorld(ep.Rank(), ep.Size(), ep, st, backend)
	w.noCtl = true // InitSmallCollectives makes one
	all := make([]int, ep.Size())
	for i := range all {
		all[i] = i
	}
	return newGroup(w, 0, all, timeout)
}
