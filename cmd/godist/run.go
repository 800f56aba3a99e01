package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godist/godist/elastic"
	"github.com/godist/godist/internal/localaddr"
	"github.com/godist/godist/store"
	"github.com/godist/godist/store/etcdstore"
)

// runOptions is godist run's parsed command line.
type runOptions struct {
	minNodes, maxNodes int
	nproc              int
	nodeRank           int
	masterAddr         string
	masterPort         int
	backend            string // "static", "store" or "etcd"
	endpoint           string // host:port (etcd: host:port[,host:port...])
	rdzvID             string
	runID              string
	standalone         bool
	insecure           bool // no job token off loopback, on purpose
	localRankArg       bool // --local-rank=N appended to the workers' arguments
	maxRestarts        int
	monitor            time.Duration
	stopGrace          time.Duration
	timeout            time.Duration // GODIST_TIMEOUT for the workers (0: theirs)
	logDir             string
	redirects, tee     elastic.Streams
	role               string
	localAddr          string
	lastCall           time.Duration
	joinTimeout        time.Duration
	keepAlive          time.Duration
	program            []string
}

const runUsage = `Usage: godist run [flags] PROGRAM [ARGS...]

Starts --nproc-per-node workers of PROGRAM (a binary or a script, executed
directly: for Python, PROGRAM is the interpreter) on this node, as torchrun
does: each gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, GODIST_RESTART_COUNT, GODIST_MAX_RESTARTS, GODIST_RUN_ID (and
the TORCHELASTIC_* names of the last three), GODIST_TOKEN,
GODIST_ERROR_FILE (and TORCHELASTIC_ERROR_FILE: where dist.RecordError
writes why the worker failed, for the report), and
OMP_NUM_THREADS=1 / OPENBLAS_NUM_THREADS=1, GOMAXPROCS=CPUs/workers, and
GOGC=200 with GOMEMLIMIT=half the node's memory/workers, unless set. When a worker fails,
the group is stopped and restarted (up to --max-restarts) after a new
rendezvous; when the job fails for good, a root-cause report names the
first failure (by the times in the error files, not the order in which
the launcher reaped the workers) that its error file does not show to be
a consequence of another (a lost peer, or one the launcher stopped), or a
worker the launcher found stopped (SIGSTOP): its rank, host, pid, exit
code or signal, what it recorded, and its last lines of stderr. SIGINT and SIGTERM are forwarded to the workers.
Workers also get GODIST_FLIGHT_SIGNAL=1 unless it is set: a worker's
dist.Init then writes its flight record (its last calls) beside its error
file on SIGUSR1. godist top --store <the workers' master, as logged>
shows every worker's call in flight, live.

  godist run --standalone --nproc-per-node 4 ./train
  godist run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 --nproc-per-node 8 ./train   # and node rank 1
  godist run --nnodes 1:4 --rdzv-backend store --rdzv-endpoint 10.0.0.1:29400 --rdzv-id job7 --nproc-per-node 8 ./train
  godist run --nnodes 1:4 --rdzv-backend etcd --rdzv-endpoint 10.0.0.5:2379 --rdzv-id job7 --max-restarts 3 --nproc-per-node 8 ./train

With --rdzv-backend etcd the launchers meet in an etcd cluster (keys under
godist/RUN_ID/), and the workers of each round get their store there too
(GODIST_INIT_METHOD=etcd://ENDPOINTS/godist/RUN_ID/roundN/; a Go program
imports _ "github.com/godist/godist/store/etcdstore" for dist.Init to
accept it), so no launcher or worker hosts the job's store and any node may
die without taking it down. etcd's own authentication and TLS are not used:
keep the cluster on a private network. GODIST_TOKEN still authenticates
the workers' connections (required off loopback unless --insecure). Give
each job its own --rdzv-id: the keys stay in etcd after the job.

Flags may be spelled with dashes or underscores (--nproc_per_node). Every
flag's default can be given as GODIST_<NAME> or PET_<NAME> (for example
PET_NPROC_PER_NODE=4), in that order; flags win.

Flags:
`

func runMain(args []string) int {
	opt, code := parseRun(args, getenvOS, os.Stderr)
	if code >= 0 {
		return code
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return runJob(context.Background(), opt, sigs, os.Stdout, os.Stderr)
}

// parseRun parses the command line; code >= 0 means exit with it.
func parseRun(args []string, getenv func(string) string, stderr io.Writer) (*runOptions, int) {
	fs := flag.NewFlagSet("godist run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nnodes := fs.String("nnodes", "1", "number of nodes, `N` or MIN:MAX (elastic)")
	nproc := fs.String("nproc-per-node", "1", "workers per node: a `number`, or auto (the number of CPUs)")
	nodeRank := fs.Int("node-rank", 0, "this node's rank, for static rendezvous")
	masterAddr := fs.String("master-addr", "127.0.0.1", "`host` of node rank 0, for static rendezvous")
	masterPort := fs.Int("master-port", 29500, "`port` of the launchers' store on node rank 0, for static rendezvous (the workers get another, free one as MASTER_PORT)")
	backend := fs.String("rdzv-backend", "static", "rendezvous: static (fixed --nnodes, --node-rank, node 0 serves the store at --master-addr:--master-port), store (c10d: the launchers meet at --rdzv-endpoint) or etcd (the launchers and workers keep their stores in the etcd cluster at --rdzv-endpoint; etcd's auth and TLS are not used)")
	endpoint := fs.String("rdzv-endpoint", "", "`host:port` of the rendezvous store (store backend; default --master-addr:29400; the first launcher on that host to bind it serves it), or the etcd cluster's client endpoints host:port[,host:port...] (etcd backend; default --master-addr:2379)")
	rdzvID := fs.String("rdzv-id", "none", "job `id`: launchers with the same id form one job")
	conf := fs.String("rdzv-conf", "", "rendezvous settings, `key=value,...`: last_call_timeout (seconds, default 30), join_timeout (600), keep_alive_timeout (15)")
	runID := fs.String("run-id", "", "run `id` given to the workers (default: --rdzv-id, or a random one with --standalone)")
	standalone := fs.Bool("standalone", false, "one node: a rendezvous store on a free local port, no other rendezvous flags needed")
	localRankArg := fs.Bool("pass-local-rank", false, "also pass --local-rank=N to each worker, as the legacy torch.distributed.launch did (for scripts that parse it)")
	useEnv := fs.Bool("use-env", false, "accepted for torch.distributed.launch's command lines: workers always get LOCAL_RANK in their environment (the default; it cannot be combined with --pass-local-rank)")
	insecure := fs.Bool("insecure", false, "allow a job whose rendezvous is not on loopback to run without GODIST_TOKEN (a private network only: anyone who can reach its ports could join the job)")
	maxRestarts := fs.Int("max-restarts", 0, "restarts of the worker group after a failure before giving up")
	monitor := fs.String("monitor-interval", "0.1", "how often, in `seconds` (or a duration such as 100ms), the launcher checks rendezvous for joining and leaving nodes")
	timeout := fs.String("timeout", "", "how long the workers' collectives and rendezvous may wait, in `seconds` or a duration (10m); sets GODIST_TIMEOUT for them (default: theirs, 30 minutes)")
	grace := durationFlag(fs, "stop-timeout", 5*time.Second, "how long, in `seconds` or a duration (5s), workers get between SIGTERM and SIGKILL when the group is stopped (or the launcher dies)")
	logDir := fs.String("log-dir", "", "write each worker's output to `dir`/RUN_ID/attempt_N/LOCAL_RANK/{stdout,stderr}.log (with neither --redirects nor --tee, both streams go only there)")
	redirects := fs.String("redirects", "", "streams that go only to files: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank as 0:1,1:3")
	tee := fs.String("tee", "", "streams that go to files and to the console, as --redirects")
	role := fs.String("role", "default", "the workers' ROLE_NAME")
	localAddr := fs.String("local-addr", "", "`host` the other nodes reach this node's workers at (default: the address that routes to the rendezvous host)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), runUsage)
		fs.PrintDefaults()
	}
	prog, err := parseRunFlags(fs, args, getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitOK
		}
		fmt.Fprintf(stderr, "godist run: %v\n", err)
		return nil, exitUsage
	}
	fail := func(format string, a ...any) (*runOptions, int) {
		fmt.Fprintf(stderr, "godist run: "+format+"\n", a...)
		return nil, exitUsage
	}
	if len(prog) == 0 {
		return fail("no PROGRAM to run (usage: godist run [flags] PROGRAM [ARGS...]; -h lists the flags)")
	}
	if *localRankArg && *useEnv {
		return fail("--use-env and --pass-local-rank contradict each other: --use-env means the workers read LOCAL_RANK and get no --local-rank argument")
	}
	o := &runOptions{nodeRank: *nodeRank, masterAddr: *masterAddr, masterPort: *masterPort, backend: *backend,
		endpoint: *endpoint, rdzvID: *rdzvID, runID: *runID, standalone: *standalone, insecure: *insecure, localRankArg: *localRankArg, maxRestarts: *maxRestarts,
		stopGrace: *grace, logDir: *logDir, role: *role, localAddr: *localAddr, program: prog,
		lastCall: 30 * time.Second, joinTimeout: 10 * time.Minute, keepAlive: 15 * time.Second}
	if o.minNodes, o.maxNodes, err = parseNNodes(*nnodes); err != nil {
		return fail("--nnodes: %v", err)
	}
	switch *nproc {
	case "auto", "cpu":
		o.nproc = runtime.NumCPU()
	default:
		if o.nproc, err = strconv.Atoi(*nproc); err != nil || o.nproc < 1 {
			return fail("--nproc-per-node %q: want a positive number or auto", *nproc)
		}
		if limit := maxNProc(); o.nproc > limit {
			return fail("--nproc-per-node %d: at most %d workers per node here (64 per CPU); a typo?", o.nproc, limit)
		}
	}
	if *grace < 0 {
		return fail("--stop-timeout %v: want 0 or more", *grace)
	}
	if *timeout != "" {
		if o.timeout, err = parseSeconds(*timeout); err != nil || o.timeout <= 0 {
			return fail("--timeout %q: want seconds (600) or a duration (10m)", *timeout)
		}
	}
	if o.monitor, err = parseSeconds(*monitor); err != nil || o.monitor <= 0 {
		return fail("--monitor-interval %q: want seconds (0.1) or a duration (100ms)", *monitor)
	}
	if o.maxRestarts < 0 {
		return fail("--max-restarts %d: want 0 or more", o.maxRestarts)
	}
	if o.redirects, err = elastic.ParseStreams(*redirects); err != nil {
		return fail("--redirects: %v", err)
	}
	if o.tee, err = elastic.ParseStreams(*tee); err != nil {
		return fail("--tee: %v", err)
	}
	if *conf != "" {
		for kv := range strings.SplitSeq(*conf, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			d, err := parseSeconds(v)
			if err != nil || d < 0 {
				return fail("--rdzv-conf %s: want seconds", kv)
			}
			switch k {
			case "last_call_timeout":
				o.lastCall = d
			case "join_timeout":
				o.joinTimeout = d
			case "keep_alive_timeout":
				o.keepAlive = d
			case "close_timeout", "read_timeout", "timeout":
				// torch's; nothing to do here.
			default:
				return fail("--rdzv-conf: unknown key %q (known: last_call_timeout, join_timeout, keep_alive_timeout)", k)
			}
		}
	}
	if o.runID == "" {
		o.runID = o.rdzvID
	}
	switch o.backend {
	case "static":
	case "store", "c10d":
		o.backend = "store"
	case "etcd", "etcd-v2":
		o.backend = "etcd"
	default:
		return fail("--rdzv-backend %q: want static, store or etcd", o.backend)
	}
	if o.standalone {
		if o.backend == "etcd" {
			return fail("--standalone serves its own rendezvous store; drop --rdzv-backend etcd, or drop --standalone and give --rdzv-endpoint")
		}
		if o.minNodes != 1 || o.maxNodes != 1 {
			return fail("--standalone runs one node; --nnodes %s asks for more (drop --standalone and give a rendezvous endpoint)", *nnodes)
		}
		o.backend = "store"
		o.minNodes, o.maxNodes = 1, 1
		if *runID == "" && (*rdzvID == "none" || *rdzvID == "") {
			o.runID = "standalone-" + elastic.NewNodeID()
		}
		return o, -1
	}
	if o.backend == "static" {
		if o.minNodes != o.maxNodes {
			return fail("--nnodes %s: static rendezvous needs a fixed number of nodes; use --rdzv-backend store for MIN:MAX", *nnodes)
		}
		if o.nodeRank < 0 || o.nodeRank >= o.maxNodes {
			return fail("--node-rank %d: want 0..%d for --nnodes %d", o.nodeRank, o.maxNodes-1, o.maxNodes)
		}
	} else if o.backend == "etcd" {
		if o.endpoint == "" {
			o.endpoint = o.masterAddr
		}
		eps, _, err := etcdstore.ParseURL("etcd://" + o.endpoint + "/x")
		if err != nil || strings.Contains(o.endpoint, "/") {
			return fail("--rdzv-endpoint %q: want the etcd cluster's client endpoints, host:port[,host:port...]", o.endpoint)
		}
		o.endpoint = strings.Join(eps, ",")
	} else if o.endpoint == "" {
		o.endpoint = net.JoinHostPort(o.masterAddr, "29400")
	} else if _, _, err := net.SplitHostPort(o.endpoint); err != nil {
		o.endpoint = net.JoinHostPort(o.endpoint, "29400")
	}
	return o, -1
}

// maxNProc is the most workers godist run starts on one node.
func maxNProc() int { return max(64, 64*runtime.NumCPU()) }

// parseNNodes parses "N" or "MIN:MAX".
func parseNNodes(s string) (int, int, error) {
	lo, hi, elastic := strings.Cut(s, ":")
	a, err := strconv.Atoi(lo)
	if err != nil || a < 1 {
		return 0, 0, fmt.Errorf("%q: want N or MIN:MAX with 1 <= MIN <= MAX", s)
	}
	if !elastic {
		return a, a, nil
	}
	b, err := strconv.Atoi(hi)
	if err != nil || b < a {
		return 0, 0, fmt.Errorf("%q: want N or MIN:MAX with 1 <= MIN <= MAX", s)
	}
	return a, b, nil
}

// parseSeconds reads "0.5" as seconds, or a Go duration such as "500ms".
func parseSeconds(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.Abs(f) > float64(math.MaxInt64)/float64(time.Second) {
			return 0, fmt.Errorf("%q: not a number of seconds", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}

// runJob sets up the launchers' store and rendezvous and runs the agent.
func runJob(ctx context.Context, o *runOptions, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "godist run: "+format+"\n", a...) }
	host, _ := os.Hostname()
	envToken := os.Getenv("GODIST_TOKEN")
	storeToken := tokenFrom(envToken)

	var (
		st     store.Store
		srv    *store.Server
		self   = elastic.Node{ID: elastic.NewNodeID(), NodeRank: -1, LocalWorldSize: o.nproc}
		dialTo string
		err    error
	)
	sctx, cancel := context.WithTimeout(ctx, o.joinTimeout)
	defer cancel()
	// The job token authenticates every connection of the job. A
	// standalone launcher makes one; launchers on several nodes cannot
	// agree on a secret through a store that anyone could read, so the
	// operator gives the same one to every node. Without one, the
	// rendezvous and the workers stay on loopback unless --insecure.
	rdzvHost := o.masterAddr
	switch {
	case o.backend == "store" && !o.standalone:
		rdzvHost, _, _ = net.SplitHostPort(o.endpoint)
	case o.backend == "etcd":
		first, _, _ := strings.Cut(o.endpoint, ",")
		rdzvHost, _, _ = net.SplitHostPort(first)
	}
	loopback := o.standalone || isLoopbackHost(rdzvHost)
	if envToken == "" && !o.standalone && !loopback && !o.insecure {
		logf("a job whose nodes meet at %s needs a job token: set GODIST_TOKEN to the same secret on every node (for example: export GODIST_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')), or pass --insecure on a private network", rdzvHost)
		return exitUsage
	}
	if envToken == "" && !loopback {
		logf("warning: --insecure: no job token; anyone who can reach %s or the workers can join this job", rdzvHost)
	}
	// Without a token a store serves loopback only (with --insecure:
	// every interface, as asked).
	bindHost := ""
	if envToken == "" && !o.insecure {
		bindHost = "127.0.0.1"
	}
	var (
		initMethod func(round int) string
		rdzvStore  store.Store // the launchers' keys, under the run id
	)
	switch {
	case o.backend == "etcd":
		// The store is etcd's: no launcher serves one, and the workers
		// of each round get a fresh prefix there.
		first, _, _ := strings.Cut(o.endpoint, ",")
		dialTo = first
		prefix := "godist/" + o.runID + "/"
		if st, err = etcdstore.New(sctx, strings.Split(o.endpoint, ","), prefix, etcdstore.Options{}); err != nil {
			logf("cannot reach the etcd cluster at %s: %v", o.endpoint, err)
			return exitFail
		}
		rdzvStore = store.NewPrefix("rdzv", st)
		initMethod = func(round int) string {
			return "etcd://" + o.endpoint + "/" + prefix + "round" + strconv.Itoa(round) + "/"
		}
	case o.standalone:
		if envToken == "" {
			envToken = elastic.NewToken()
			storeToken = tokenFrom(envToken)
		}
		if srv, err = store.NewServer(sctx, "127.0.0.1:0", store.ServerOptions{Token: storeToken, JobID: o.runID}); err != nil {
			logf("starting the rendezvous store: %v", err)
			return exitFail
		}
		dialTo, self.Addr = srv.Addr(), "127.0.0.1"
	case o.backend == "static":
		self.NodeRank = o.nodeRank
		dialTo = net.JoinHostPort(o.masterAddr, strconv.Itoa(o.masterPort))
		if o.nodeRank == 0 {
			if srv, err = store.NewServer(sctx, net.JoinHostPort(bindHost, strconv.Itoa(o.masterPort)), store.ServerOptions{Token: storeToken, JobID: o.runID}); err != nil {
				logf("node rank 0 cannot serve the rendezvous store on --master-port %d: %v (is another job using it?)", o.masterPort, err)
				return exitFail
			}
			self.Addr = o.masterAddr
		}
	default: // store
		dialTo = o.endpoint
		h, p, _ := net.SplitHostPort(o.endpoint)
		if isLocalHost(h) {
			// The first launcher to bind the endpoint serves it.
			if s, err := store.NewServer(sctx, net.JoinHostPort(bindHost, p), store.ServerOptions{Token: storeToken, JobID: o.runID}); err == nil {
				srv = s
				logf("serving the rendezvous store at %s", o.endpoint)
			}
		}
	}
	if srv != nil {
		defer srv.Close()
	}
	if self.Addr == "" {
		self.Addr = o.localAddr
		if self.Addr == "" {
			h, _, _ := net.SplitHostPort(dialTo)
			self.Addr = localaddr.Toward(h)
		}
	} else if o.localAddr != "" {
		self.Addr = o.localAddr
	}
	if st == nil {
		st, err = store.Dial(sctx, dialTo, store.DialOptions{Token: storeToken, JobID: o.runID, Rank: -1, Timeout: time.Minute, ConnectTimeout: o.joinTimeout})
		if err != nil {
			logf("cannot reach the rendezvous store at %s: %v", dialTo, err)
			return exitFail
		}
		rdzvStore = store.NewPrefix("godist-rdzv/"+o.runID, st)
	}
	defer st.Close()
	rdzv := &elastic.StoreRendezvous{
		Store:       rdzvStore,
		Config:      elastic.Config{MinNodes: o.minNodes, MaxNodes: o.maxNodes, LastCall: o.lastCall, KeepAlive: o.keepAlive},
		Self:        self,
		JoinTimeout: o.joinTimeout,
	}
	defer rdzv.Close()
	token := envToken
	spec := elastic.Spec{
		Program: o.program[0], Args: o.program[1:], LocalRankArg: o.localRankArg, NProc: o.nproc, Role: o.role, RunID: o.runID, Token: token,
		MaxRestarts: o.maxRestarts, Monitor: o.monitor, StopGrace: o.stopGrace, Host: host,
		LogDir: o.logDir, Redirects: o.redirects, Tee: o.tee, Stdout: stdout, Stderr: stderr,
		ServesStore: srv != nil, Signals: sigs, Logf: logf, InitMethod: initMethod,
	}
	if o.timeout > 0 {
		spec.Env = append(os.Environ(), "GODIST_TIMEOUT="+o.timeout.String())
	}
	if _, set := os.LookupEnv("GODIST_FLIGHT_SIGNAL"); !set {
		// A worker's dist.Init then writes its flight record on SIGUSR1.
		if spec.Env == nil {
			spec.Env = os.Environ()
		}
		spec.Env = append(spec.Env, "GODIST_FLIGHT_SIGNAL=1")
	}
	if token == "" && o.insecure {
		if spec.Env == nil {
			spec.Env = os.Environ()
		}
		spec.Env = append(spec.Env, "GODIST_INSECURE=1") // the workers' dist.Init asks too
	}
	tempLogs := "" // a log directory made here, for --redirects or --tee alone
	if spec.LogDir == "" && (o.redirects.IsSet() || o.tee.IsSet()) {
		if spec.LogDir, err = os.MkdirTemp("", "godist-run-"); err != nil {
			logf("%v", err)
			return exitFail
		}
		tempLogs = spec.LogDir
		logf("worker logs go under %s", spec.LogDir)
	} else if spec.LogDir != "" && !o.redirects.IsSet() && !o.tee.IsSet() {
		spec.Redirects = elastic.Streams{Default: elastic.StdBoth}
	}
	via := dialTo
	if o.backend == "etcd" {
		via = "etcd://" + o.endpoint + "/godist/" + o.runID + "/"
	}
	logf("starting %d worker(s) of %s per node; %d..%d node(s), %s rendezvous via %s, run id %s, max restarts %d",
		o.nproc, o.program[0], o.minNodes, o.maxNodes, o.backend, via, o.runID, o.maxRestarts)
	res := (&elastic.Agent{Spec: spec, Rendezvous: rdzv}).Run(ctx)
	if res.Report != nil {
		io.WriteString(stderr, res.Report.String())
	}
	if tempLogs != "" {
		// Output that went only to the files is the user's: kept. Files
		// that copy the console go, with the directory, unless a worker
		// left something else there (a flight record).
		if onlyInFiles(o.redirects, o.tee, o.nproc) {
			logf("the workers' output under --redirects is kept in %s", tempLogs)
		} else if kept := elastic.RemoveTempDir(tempLogs); len(kept) > 0 {
			logf("kept %s: the workers left %s there", tempLogs, strings.Join(kept, ", "))
		}
	}
	return res.ExitCode
}

// onlyInFiles reports whether some local rank's stream goes to its log
// file and not to the console (redirected and not tee'd).
func onlyInFiles(redirects, tee elastic.Streams, nproc int) bool {
	for lr := range nproc {
		if redirects.For(lr)&^tee.For(lr) != 0 {
			return true
		}
	}
	return false
}

// isLoopbackHost reports whether host is a loopback address or name.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isLocalHost reports whether host names this machine.
func isLocalHost(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false
	}
	addrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() {
			return true
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}
