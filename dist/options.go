package dist

import (
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/godist/godist/dist/algo"
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
	// Connect says when this rank connects to each peer. ConnectOnDemand
	// (the default): when a call first exchanges frames with it
	// (transport.TCPOptions.OnDemand), so that a rank holds the
	// connections its calls use (a ring's two neighbours, a tree's log
	// W) rather than W-1, and the ranks of a host of at most 8 connect
	// to each other at Init (the same-host paths and the control block
	// want every pair). ConnectAtInit: to every peer at Init, the full
	// mesh of W² connections. When ConnectDefault: the GODIST_CONNECT
	// variable ("init" or "ondemand"), else on demand.
	Connect ConnectMode
	// Algorithms pins collectives' algorithms by the collective's name
	// (algo.Algorithms lists them: "all_reduce" to "ring", "two-level",
	// ...; "broadcast", "all_gather", "reduce_scatter", "barrier",
	// "all_to_all"), as NCCL_ALGO does, for benchmarks and experiments;
	// one that runs in segments may fix their count ("broadcast=chain/4",
	// algo.Segmented lists them).
	// Every rank must pin the same: Init fails naming the difference. A
	// pinned algorithm that does not apply to a call (the leaders' above
	// their size, a two-level one on uneven hosts, Bruck's all-to-all on
	// blocks of unequal size) leaves the call to the usual choice, and
	// calls through a host's control block or shared tensors are not
	// affected (GODIST_SHM_CTL=0 turns the block off). Default: the
	// GODIST_ALGO variable ("all_reduce=ring,broadcast=chain"), else none.
	Algorithms map[string]string
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
	// ranks than CPUs, a polling reader yields its CPU between polls; with
	// more than four ranks a CPU, readers do not poll.
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

// ConnectMode is Options.Connect: when a rank connects to its peers.
type ConnectMode uint8

const (
	ConnectDefault  ConnectMode = iota // GODIST_CONNECT=init: at Init; else on demand
	ConnectOnDemand                    // on first use (a host's few ranks at Init)
	ConnectAtInit                      // every peer at Init
)

// SharedMemoryMode is Options.SharedMemory: on, off, or left to the
// environment.
type SharedMemoryMode uint8

const (
	SharedMemoryDefault SharedMemoryMode = iota // GODIST_SHM=0: off; else on
	SharedMemoryOn
	SharedMemoryOff
)

// withEnv returns opt with the fields the caller left zero that have a
// variable filled from it (get reads one: os.Getenv, or a map in tests).
// It is where Init reads the environment, apart from the rank's identity
// (ReadEnv); an unreadable value is ignored and said so to opt.Logger.
func withEnv(opt Options, get func(string) string) Options {
	log := logger(opt.Logger)
	jobFromEnv(&opt, get)
	diagnosisFromEnv(&opt, get, log)
	sharedMemoryFromEnv(&opt, get)
	algorithmsFromEnv(&opt, get, log)
	timingFromEnv(&opt, get, log)
	return opt
}

// jobFromEnv fills the fields that say which job this is and how its
// ranks meet: the init method, the run id, the token, this rank's
// address, and whether a job without a token may leave loopback.
func jobFromEnv(opt *Options, get func(string) string) {
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
	if v := get("GODIST_INSECURE"); !opt.Insecure && (v == "1" || strings.EqualFold(v, "true")) {
		opt.Insecure = true
	}
}

// diagnosisFromEnv fills the fields of what a rank leaves for diagnosis:
// profiles, the flight record and where it goes, and the status godist
// top reads.
func diagnosisFromEnv(opt *Options, get func(string) string, log *slog.Logger) {
	if opt.CPUProfile == "" {
		opt.CPUProfile = get("GODIST_CPUPROFILE")
	}
	if opt.ExecutionTrace == "" {
		opt.ExecutionTrace = get("GODIST_TRACE")
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
}

// sharedMemoryFromEnv settles the three shared-memory modes, on unless
// their variable is 0, and the connect mode (GODIST_CONNECT).
func sharedMemoryFromEnv(opt *Options, get func(string) string) {
	if opt.Connect == ConnectDefault {
		opt.Connect = ConnectOnDemand
		if v := get("GODIST_CONNECT"); v == "init" || v == "eager" {
			opt.Connect = ConnectAtInit
		}
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
}

// timingFromEnv fills the fields of time: the ranks on this host (which
// choose the default polling), the timeouts, and how readers poll.
func timingFromEnv(opt *Options, get func(string) string, log *slog.Logger) {
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
// polls yielding the CPU between polls, as every rank does with Yield (and
// with more than four ranks a CPU does not poll).
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

// algorithmsFromEnv reads GODIST_ALGO, "op=algorithm" pairs separated by
// commas, into Algorithms when the caller left it nil.
func algorithmsFromEnv(opt *Options, get func(string) string, log *slog.Logger) {
	v := strings.TrimSpace(get("GODIST_ALGO"))
	if opt.Algorithms != nil || v == "" {
		return
	}
	pins := map[string]string{}
	for _, f := range strings.Split(v, ",") {
		op, name, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || op == "" || name == "" {
			log.Warn("dist: GODIST_ALGO ignored: want op=algorithm pairs separated by commas", "value", v)
			return
		}
		pins[strings.TrimSpace(op)] = strings.TrimSpace(name)
	}
	opt.Algorithms = pins
}
