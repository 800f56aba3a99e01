package dist

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/internal/cpuyield"
	"github.com/godist/godist/internal/localaddr"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport"
)

// Init joins this process to its job and returns the default group (all
// ranks). Rank 0 serves the store for env:// and tcp://; for etcd:// the
// store is etcd's. Every rank then connects to every other over
// authenticated TCP.
func Init(ctx context.Context, opt Options) (*Group, error) {
	j := &joining{jobFrom: jobIDFrom(opt)}
	j.opt = withEnv(opt, os.Getenv)
	if j.opt.Timeout == 0 {
		j.opt.Timeout = DefaultTimeout
	}
	if err := algo.CheckPins(j.opt.Algorithms); err != nil {
		return nil, fmt.Errorf("dist: Options.Algorithms (GODIST_ALGO): %w", err)
	}
	if err := j.identify(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, j.opt.Timeout)
	defer cancel()
	if err := j.openStore(rctx); err != nil {
		return nil, err
	}
	if err := j.chooseHost(); err != nil {
		return nil, err
	}
	ep, err := j.connect(rctx)
	if err != nil {
		return nil, err
	}
	return j.start(ctx, ep)
}

// joining is one Init on its way, in the order of its steps: who this
// rank is (identify), the job's store (openStore, rendezvous.go), the
// address at which the others reach this rank (chooseHost), the
// connections to them (connect), and the default group over those with
// what watches it (start).
type joining struct {
	opt Options // with the environment's values (withEnv) and Timeout set
	// jobFrom says where opt.JobID came from, for an error that finds
	// another job at the store or at a peer.
	jobFrom    string
	rank, size int
	method     string // the init method; env:// when Options had none
	// masterHost and port locate the store: env://'s MASTER_ADDR and
	// MASTER_PORT, tcp://'s address, or etcd://'s first host. This rank's
	// default address is the one that routes to masterHost.
	masterHost string
	port       int

	st store.Store
	// closers end what this Init opened, this rank's store client first
	// (or the file store), then rank 0's store server and the profiles;
	// none for a store the caller gave.
	closers   []func() error
	servedTCP bool   // the store is a TCP store Init dialed (env://, tcp://)
	host      string // the address the other ranks reach this one at
}

// jobIDFrom says where opt's job id will come from, before withEnv fills
// it from the environment.
func jobIDFrom(opt Options) string {
	switch {
	case opt.JobID != "":
		return "Options.JobID"
	case os.Getenv("GODIST_RUN_ID") != "":
		return "GODIST_RUN_ID"
	}
	return "TORCHELASTIC_RUN_ID"
}

// identify settles the init method, this rank and the world size: from
// Options, from a tcp:// or file:// method's query, else from the
// launcher's variables (ReadEnv), which also give env://'s master and,
// without a run id, the launcher's job id.
func (j *joining) identify() error {
	opt := &j.opt
	j.rank, j.size = opt.Rank, opt.WorldSize
	if j.size <= 0 {
		j.rank = -1
	}
	j.method = opt.InitMethod
	if j.method == "" {
		j.method = "env://"
	}
	envStore := opt.Store == nil && strings.HasPrefix(j.method, "env://")
	if j.size <= 0 && opt.Store == nil && !envStore {
		r, n, ok, err := rankInMethod(j.method)
		if err != nil {
			return err
		}
		if ok {
			j.rank, j.size = r, n
		}
	}
	if j.rank >= 0 && j.size > 0 && !envStore {
		return nil
	}
	// Only env:// needs the master's address; another init method names
	// its store itself.
	env, err := readEnv(os.Getenv, envStore)
	if err != nil {
		return err
	}
	if j.rank < 0 {
		j.rank = env.Rank
	}
	if j.size <= 0 {
		j.size = env.WorldSize
	}
	j.masterHost, j.port = env.MasterAddr, env.MasterPort
	if opt.JobID == "" {
		opt.JobID, j.jobFrom = launcherJob(env.Source, os.Getenv)
	}
	return nil
}

// rankInMethod returns the rank and the world size that a tcp:// or
// file:// init method carries, as PyTorch's init_method
// "tcp://host:port?rank=R&world_size=N" does, and whether it carries
// them.
func rankInMethod(method string) (rank, size int, ok bool, err error) {
	u, err := url.Parse(method)
	if err != nil || !u.Query().Has("rank") && !u.Query().Has("world_size") {
		return 0, 0, false, nil // a method that does not parse fails at openStore
	}
	r, rerr := strconv.Atoi(u.Query().Get("rank"))
	n, nerr := strconv.Atoi(u.Query().Get("world_size"))
	if rerr != nil || nerr != nil || n < 1 || r < 0 || r >= n {
		return 0, 0, false, fmt.Errorf("dist: init method %q: want rank=R&world_size=N with 0 <= R < N", method)
	}
	return r, n, true, nil
}

// chooseHost settles the address at which the other ranks reach this
// one: Options.Host, else the local address that routes to the store's
// host. Without a job token it must be a loopback address, unless
// Options.Insecure, and then a warning says so.
func (j *joining) chooseHost() error {
	j.host = j.opt.Host
	if j.host == "" {
		j.host = localaddr.Toward(j.masterHost)
	}
	if len(j.opt.Token) > 0 || isLoopback(j.host) {
		return nil
	}
	if !j.opt.Insecure {
		j.closeAll()
		return fmt.Errorf("dist: rank %d would accept connections at %s without a job token, so anyone who can reach it could join the job or take a rank's place; set GODIST_TOKEN to the same secret on every rank (godist run does), or GODIST_INSECURE=1 (Options.Insecure) on a private network", j.rank, j.host)
	}
	insecureOnce.Do(func() {
		fmt.Fprintf(os.Stderr, "dist: warning: no job token: rank %d accepts unauthenticated connections at %s (GODIST_INSECURE)\n", j.rank, j.host)
	})
	return nil
}

// insecureOnce says the no-token warning once per process.
var insecureOnce sync.Once

// connect connects this rank to every other over TCP (the transport
// meets them through the store).
func (j *joining) connect(ctx context.Context) (*transport.Endpoint, error) {
	opt := &j.opt
	spin, yield := opt.polling()
	ep, err := transport.NewTCP(ctx, transport.TCPOptions{
		Rank: j.rank, Size: j.size, Store: j.st, Host: j.host, JobID: opt.JobID, Token: opt.Token,
		Spin: spin, Yield: yield, PeerTimeout: opt.PeerTimeout, SharedMemory: opt.SharedMemory != SharedMemoryOff, ShmRing: opt.ShmRing != SharedMemoryOff, OnDemand: opt.Connect != ConnectAtInit, Logger: opt.Logger,
	})
	if err == nil {
		return ep, nil
	}
	j.closeAfterFailure()
	if oerr := otherJobError(err, j.rank, "a peer", opt.JobID, j.jobFrom); oerr != nil {
		return nil, oerr
	}
	return nil, fmt.Errorf("dist: %w", err)
}

// closeAll closes what this Init opened, at once.
func (j *joining) closeAll() {
	for _, c := range j.closers {
		c()
	}
}

// closeAfterFailure closes what this Init opened when the ranks failed
// to connect. The store stays up a moment (in the background; the
// process may exit sooner): the other ranks, still in Init, read there
// which rank's death failed it, and do not blame this one for leaving.
func (j *joining) closeAfterFailure() {
	if len(j.closers) == 0 {
		return
	}
	j.closers[0]() // this rank's client, or the file store
	if rest := j.closers[1:]; len(rest) > 0 {
		time.AfterFunc(failedInitStoreGrace, func() {
			for _, c := range rest {
				c()
			}
		})
	}
}

// failedInitStoreGrace is how long rank 0 serves the store after its Init
// failed.
const failedInitStoreGrace = 3 * time.Second

// start makes the default group over ep: the world, with what watches
// it (watch), then the group's control block for small collectives and
// its cost model.
func (j *joining) start(ctx context.Context, ep *transport.Endpoint) (*Group, error) {
	opt := &j.opt
	w := newWorld(j.rank, j.size, ep, j.st, "tcp")
	w.jobID = opt.JobID
	if stop := startProfiles(opt.CPUProfile, opt.ExecutionTrace, j.rank, logger(opt.Logger)); stop != nil {
		j.closers = append(j.closers, stop)
	}
	w.closers = j.closers
	w.host = j.host
	if j.servedTCP {
		w.storeHost = 0
	}
	w.noCtl = opt.SmallCollectives == SharedMemoryOff || opt.SharedMemory == SharedMemoryOff
	w.onDemand = opt.Connect != ConnectAtInit
	w.yield = opt.Yield || opt.LocalWorldSize > runtime.NumCPU()
	j.watch(w)
	g := newGroup(w, 0, allRanks(j.size), opt.Timeout)
	if err := g.initCtl(ctx); err != nil {
		g.Destroy()
		return nil, fmt.Errorf("dist: rank %d: the control block of small collectives: %w", j.rank, err)
	}
	if err := g.measureModel(ctx, opt.Model); err != nil {
		g.Destroy()
		return nil, fmt.Errorf("dist: rank %d: the cost model of calls across hosts (Options.Model): %w", j.rank, err)
	}
	if err := w.agreePins(ctx, opt.Algorithms); err != nil {
		g.Destroy()
		return nil, err
	}
	if opt.LocalWorldSize <= runtime.NumCPU() {
		settleHeap()
	}
	// The yields the pollers lost so far were to the job's own start
	// (the links' measurement above, the ranks' collections), not to a
	// hog; so may be those of the next initGrace, while the other ranks
	// finish theirs.
	cpuyield.Clear(time.Now().Add(initGrace))
	return g, nil
}

// watch sets up what records and reports w's calls: the flight recorder
// (its size, where it is written, and on SIGUSR1 when asked), and the
// status godist top reads, published by default to a TCP store Init
// dialed.
func (j *joining) watch(w *world) {
	opt := &j.opt
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
	if opt.StatusInterval == 0 && j.servedTCP {
		opt.StatusInterval = DefaultStatusInterval
	}
	if opt.StatusInterval > 0 {
		w.startStatus(opt.StatusInterval)
	}
}

// initGrace is how long after its Init a rank's lost yields are taken as
// the job's own start (cpuyield.Clear): the ranks end Init within
// milliseconds of each other, and each ends with a collection
// (settleHeap) that holds a shared CPU for a few.
const initGrace = 50 * time.Millisecond

// settleHeap collects Init's garbage (connection setup, the cost model's
// probe buffers: up to tens of MiB) before the first call. Left alone,
// the heap would grow into fresh memory until the next collection, and
// on a virtual machine a first touch of memory is a fault that can cost
// tens of µs: on the namespace hosts of issue 28 a job's 8 B all_reduce
// took 200-600 µs for its first second or two, and 100-150 µs from its
// first collection on (with GOGC=off, for as long as it ran). Collected
// now, the calls' allocations reuse memory Init has touched. Not on a host
// with more ranks than CPUs: there a collection's phases each wait their
// turn for a CPU, and it took 30-490 ms of every rank's Init at 64 ranks
// on 2 CPUs (tools/initscale).
func settleHeap() { runtime.GC() }

// allRanks returns the ranks of a world of size n: 0, 1, ..., n-1.
//
// The slice is shared (a group never changes its members): the W ranks of
// a job in one process (goroutine ranks) would otherwise hold W² ints.
func allRanks(n int) []int {
	allRanksCache.Lock()
	defer allRanksCache.Unlock()
	if all, ok := allRanksCache.m[n]; ok {
		return all
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if allRanksCache.m == nil || len(allRanksCache.m) >= 16 {
		allRanksCache.m = map[int][]int{}
	}
	allRanksCache.m[n] = all
	return all
}

var allRanksCache struct {
	sync.Mutex
	m map[int][]int
}

// FromEndpoint builds the default group over an endpoint that is already
// connected (an in-process mesh in tests, say). st may be nil.
func FromEndpoint(ep *transport.Endpoint, st store.Store, backend string, timeout time.Duration) *Group {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	w := newWorld(ep.Rank(), ep.Size(), ep, st, backend)
	w.noCtl = true // InitSmallCollectives makes one
	return newGroup(w, 0, allRanks(ep.Size()), timeout)
}
