package dist_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/internal/cpuyield"
	"github.com/godist/godist/store"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// launcherVars are every variable ReadEnv looks at; each test case starts
// from all of them unset.
var launcherVars = []string{
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
	"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
	"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
	"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID",
	"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid",
}

func clearLauncherEnv(t *testing.T) {
	for _, k := range launcherVars {
		t.Setenv(k, "")
	}
}

func TestReadEnv(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		want    dist.Env
		wantErr string // a word of the error; empty: no error
	}{
		{"torchrun", map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"},
			dist.Env{Rank: 3, WorldSize: 8, LocalRank: 1, MasterAddr: "10.0.0.1", MasterPort: 1234, Source: "env"}, ""},
		{"torchrun default port, no local rank", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "localhost"},
			dist.Env{Rank: 0, WorldSize: 1, LocalRank: -1, MasterAddr: "localhost", MasterPort: 29500, Source: "env"}, ""},
		{"slurm bracketed list", map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "2", "SLURM_JOB_NODELIST": "node[03-05],gpu1"},
			dist.Env{Rank: 5, WorldSize: 6, LocalRank: 2, MasterAddr: "node03", MasterPort: 29500, Source: "slurm"}, ""},
		{"slurm list of commas in brackets", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "cn[7,9-10]"},
			dist.Env{Rank: 0, WorldSize: 2, LocalRank: -1, MasterAddr: "cn7", MasterPort: 29500, Source: "slurm"}, ""},
		{"slurm plain list", map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "alpha,beta"},
			dist.Env{Rank: 1, WorldSize: 2, LocalRank: -1, MasterAddr: "alpha", MasterPort: 29500, Source: "slurm"}, ""},
		{"slurm single host", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "solo"},
			dist.Env{Rank: 0, WorldSize: 1, LocalRank: -1, MasterAddr: "solo", MasterPort: 29500, Source: "slurm"}, ""},
		{"slurm host after a plain one", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "gpu1,node[03-05]"},
			dist.Env{Rank: 0, WorldSize: 1, LocalRank: -1, MasterAddr: "gpu1", MasterPort: 29500, Source: "slurm"}, ""},
		{"slurm suffix after the range", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "node[01-04]-ib"},
			dist.Env{Rank: 0, WorldSize: 4, LocalRank: -1, MasterAddr: "node01-ib", MasterPort: 29500, Source: "slurm"}, ""},
		{"slurm with MASTER_ADDR and MASTER_PORT", map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "node[03-05]", "MASTER_ADDR": "head", "MASTER_PORT": "4000"},
			dist.Env{Rank: 2, WorldSize: 4, LocalRank: -1, MasterAddr: "head", MasterPort: 4000, Source: "slurm"}, ""},
		{"openmpi", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
			dist.Env{Rank: 2, WorldSize: 4, LocalRank: 0, MasterAddr: "127.0.0.1", MasterPort: 29500, Source: "mpirun"}, ""},
		{"openmpi with MASTER_ADDR", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_ADDR": "h0", "MASTER_PORT": "777"},
			dist.Env{Rank: 0, WorldSize: 2, LocalRank: -1, MasterAddr: "h0", MasterPort: 777, Source: "mpirun"}, ""},
		{"mpich and intel mpi", map[string]string{"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"},
			dist.Env{Rank: 3, WorldSize: 4, LocalRank: 1, MasterAddr: "127.0.0.1", MasterPort: 29500, Source: "mpich"}, ""},
		{"torchrun wins over slurm", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "SLURM_PROCID": "7", "SLURM_NTASKS": "9", "SLURM_JOB_NODELIST": "x"},
			dist.Env{Rank: 1, WorldSize: 2, LocalRank: -1, MasterAddr: "m", MasterPort: 29500, Source: "env"}, ""},
		{"nothing set", map[string]string{}, dist.Env{}, "RANK and WORLD_SIZE"},
		{"rank without world size", map[string]string{"RANK": "0", "MASTER_ADDR": "m"}, dist.Env{}, "WORLD_SIZE"},
		{"missing MASTER_ADDR", map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, dist.Env{}, "MASTER_ADDR"},
		{"rank not a number", map[string]string{"RANK": "one", "WORLD_SIZE": "2", "MASTER_ADDR": "m"}, dist.Env{}, "RANK"},
		{"port not a number", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "http"}, dist.Env{}, "MASTER_PORT"},
		{"rank past world", map[string]string{"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "m"}, dist.Env{}, "rank 2"},
		{"negative rank", map[string]string{"RANK": "-1", "WORLD_SIZE": "2", "MASTER_ADDR": "m"}, dist.Env{}, "rank -1"},
		{"zero world", map[string]string{"RANK": "0", "WORLD_SIZE": "0", "MASTER_ADDR": "m"}, dist.Env{}, "world size 0"},
		{"slurm without node list", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, dist.Env{}, "SLURM_JOB_NODELIST"},
		// The launcher's job (issue 27, item 9).
		{"slurm job and step", map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3"},
			dist.Env{Rank: 1, WorldSize: 2, LocalRank: -1, MasterAddr: "n1", MasterPort: 29500, Source: "slurm", JobID: "slurm:4242.3"}, ""},
		{"slurm job without a step", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1", "SLURM_JOBID": "77"},
			dist.Env{Rank: 0, WorldSize: 2, LocalRank: -1, MasterAddr: "n1", MasterPort: 29500, Source: "slurm", JobID: "slurm:77"}, ""},
		{"openmpi 4", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_MCA_ess_base_jobid": "733741057", "PMIX_NAMESPACE": "733741057"},
			dist.Env{Rank: 1, WorldSize: 2, LocalRank: -1, MasterAddr: "127.0.0.1", MasterPort: 29500, Source: "mpirun", JobID: "openmpi:733741057"}, ""},
		{"openmpi 5", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "PMIX_NAMESPACE": "prterun-vm-1234@1"},
			dist.Env{Rank: 0, WorldSize: 2, LocalRank: -1, MasterAddr: "127.0.0.1", MasterPort: 29500, Source: "mpirun", JobID: "openmpi:prterun-vm-1234@1"}, ""},
		{"openmpi without PMIx", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_MCA_ess_base_jobid": "99"},
			dist.Env{Rank: 0, WorldSize: 2, LocalRank: -1, MasterAddr: "127.0.0.1", MasterPort: 29500, Source: "mpirun", JobID: "openmpi:99"}, ""},
		{"mpich names no job", map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2", "PMIX_NAMESPACE": "x", "SLURM_JOB_ID": "1"},
			dist.Env{Rank: 0, WorldSize: 2, LocalRank: -1, MasterAddr: "127.0.0.1", MasterPort: 29500, Source: "mpich"}, ""},
		{"RANK ignores the allocation's job", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "5", "PMIX_NAMESPACE": "x"},
			dist.Env{Rank: 0, WorldSize: 2, LocalRank: -1, MasterAddr: "m", MasterPort: 29500, Source: "env"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearLauncherEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			got, err := dist.ReadEnv()
			if c.wantErr != "" {
				if err == nil {
					t.Fatalf("ReadEnv() = %+v, want an error mentioning %q", got, c.wantErr)
				}
				if !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("ReadEnv() error %q does not mention %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadEnv(): %v", err)
			}
			if got != c.want {
				t.Fatalf("ReadEnv() = %+v, want %+v", got, c.want)
			}
		})
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// initRanks runs Init for world ranks as goroutines with the given
// method, an all-reduce, a broadcast and Destroy.
func initRanks(t *testing.T, world int, method string) {
	t.Helper()
	clearLauncherEnv(t)
	t.Setenv("GODIST_TOKEN", "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				g, err := dist.Init(ctx, dist.Options{InitMethod: method, Rank: r, WorldSize: world, Timeout: 10 * time.Second, JobID: "init-test", Token: []byte("secret")})
				if err != nil {
					return fmt.Errorf("init: %w", err)
				}
				defer g.Destroy()
				if g.Rank() != r || g.Size() != world || g.Backend() != "tcp" {
					return fmt.Errorf("group: rank %d size %d backend %q", g.Rank(), g.Size(), g.Backend())
				}
				x := tensor.Full(tensor.Int64, float64(r+1), 1000)
				if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
					return err
				}
				if err := expect(x, func(int) float64 { return float64(world * (world + 1) / 2) }, "all_reduce after init"); err != nil {
					return err
				}
				b := tensor.Full(tensor.Float32, float64(r), 100000)
				if err := g.Broadcast(ctx, b, world-1); err != nil {
					return err
				}
				if err := expect(b, func(int) float64 { return float64(world - 1) }, "broadcast after init"); err != nil {
					return err
				}
				return g.Barrier(ctx)
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d (%s): %v", r, method, err)
		}
	}
}

func TestInitTCP(t *testing.T) {
	initRanks(t, 3, fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t)))
}

func TestInitFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	initRanks(t, 3, "file://"+path)
	// The last of the world's Closes removes the file.
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("file store %s is still there after every rank destroyed its group (stat: %v)", path, err)
	}
}

// TestInitTCPRankInURL: the rank and world size may come in the init
// method's query, as PyTorch's "tcp://host:port?rank=R&world_size=N",
// with nothing in the environment; a malformed one is refused.
func TestInitTCPRankInURL(t *testing.T) {
	clearLauncherEnv(t)
	t.Setenv("GODIST_TOKEN", "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	port := freePort(t)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			g, err := dist.Init(ctx, dist.Options{InitMethod: fmt.Sprintf("tcp://127.0.0.1:%d?rank=%d&world_size=2", port, r)})
			if err != nil {
				errs[r] = err
				return
			}
			defer g.Destroy()
			if g.Rank() != r || g.Size() != 2 {
				errs[r] = fmt.Errorf("rank %d of %d", g.Rank(), g.Size())
				return
			}
			errs[r] = g.Barrier(ctx)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if _, err := dist.Init(ctx, dist.Options{InitMethod: fmt.Sprintf("tcp://127.0.0.1:%d?rank=2&world_size=2", port)}); err == nil || !strings.Contains(err.Error(), "0 <= R < N") {
		t.Errorf("rank 2 of 2 in the URL: %v", err)
	}
}

func TestInitSingleRank(t *testing.T) {
	initRanks(t, 1, fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t)))
}

func TestInitBadMethod(t *testing.T) {
	clearLauncherEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range []string{"udp://x:1", "tcp://127.0.0.1:notaport", "tcp://127.0.0.1"} {
		if g, err := dist.Init(ctx, dist.Options{InitMethod: m, Rank: 0, WorldSize: 2}); err == nil {
			g.Destroy()
			t.Errorf("Init(%q) succeeded", m)
		}
	}
	// env:// without the variables says which are missing.
	_, err := dist.Init(ctx, dist.Options{Rank: -1})
	if err == nil || !strings.Contains(err.Error(), "RANK") {
		t.Errorf("Init from an empty environment: %v, want an error naming RANK", err)
	}
}

// TestInitOptionsOverrideEnv: with GODIST_HOST and GODIST_SHM=0 set, zero
// Options take them (the ranks publish the variable's host, and a shared
// tensor is an ordinary one, which the logger hears), while Options that
// name a host and shared memory on win over them (the shared tensor is
// shared, all-reduced through shared memory, and nothing is logged).
func TestInitOptionsOverrideEnv(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	ln.Close()
	clearLauncherEnv(t)
	t.Setenv("GODIST_TOKEN", "")
	t.Setenv("GODIST_HOST", "127.0.0.2")
	t.Setenv("GODIST_SHM", "0")
	t.Setenv("GODIST_SPIN_US", "0")
	const world, n = 2, 64 << 10 // 256 KiB of float32: over the shared all-reduce's floor
	for _, c := range []struct {
		name   string
		opt    dist.Options
		host   string
		shared bool
	}{
		{"zero options take the environment", dist.Options{}, "127.0.0.2", false},
		{"options win", dist.Options{Host: "127.0.0.1", SharedMemory: dist.SharedMemoryOn, Spin: 20 * time.Microsecond}, "127.0.0.1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st := store.NewMem()
			defer st.Close()
			logs := make([]bytes.Buffer, world)
			errs := make([]error, world)
			var wg sync.WaitGroup
			for r := range world {
				wg.Go(func() {
					errs[r] = func() error {
						opt := c.opt
						opt.Store, opt.Rank, opt.WorldSize, opt.Timeout = st, r, world, 10*time.Second
						opt.Logger = slog.New(slog.NewTextHandler(&logs[r], nil))
						g, err := dist.Init(ctx, opt)
						if err != nil {
							return fmt.Errorf("init: %w", err)
						}
						defer g.Destroy()
						x, err := g.NewSharedTensor(ctx, tensor.Float32, n)
						if err != nil {
							return err
						}
						before := dist.SharedCalls(g) // small calls go through the control block too
						if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
							return err
						}
						if got := dist.SharedCalls(g)-before == 1; got != c.shared {
							return fmt.Errorf("all-reduce through shared memory: %v, want %v", got, c.shared)
						}
						return g.Barrier(ctx)
					}()
				})
			}
			wg.Wait()
			for r := range world {
				if errs[r] != nil {
					t.Errorf("rank %d: %v", r, errs[r])
				}
				addr, err := transport.RankAddr(ctx, st, "", r)
				if h, _, _ := net.SplitHostPort(string(addr)); err != nil || h != c.host {
					t.Errorf("rank %d published %q (%v), want host %s", r, addr, err, c.host)
				}
				log := logs[r].String()
				const fallback = "NewSharedTensor returns an ordinary tensor"
				switch {
				case c.shared && log != "":
					t.Errorf("rank %d logged with shared memory on:\n%s", r, log)
				case !c.shared && (!strings.Contains(log, fallback) || !strings.Contains(log, "members=\"[0 1]\"") || strings.Count(log, "\n") != 1):
					t.Errorf("rank %d's log, want one line of %q naming the members:\n%s", r, fallback, log)
				}
			}
		})
	}
}

// nonLoopbackIP returns an address of this machine outside loopback, or
// skips.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address")
	return ""
}

// TestInitWithoutTokenStaysOnLoopback (issue 19, item 2): without a job
// token, rank 0's store listens on loopback only (it listened on every
// interface, where any host could rewrite the job's addresses), and Init
// refuses a master address or host outside loopback unless told that the
// network is private.
func TestInitWithoutTokenStaysOnLoopback(t *testing.T) {
	clearLauncherEnv(t)
	t.Setenv("GODIST_TOKEN", "")
	t.Setenv("GODIST_INSECURE", "")
	ip := nonLoopbackIP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A one-host job without a token: the store is not reachable from
	// the machine's other address.
	port := freePort(t)
	g, err := dist.Init(ctx, dist.Options{InitMethod: fmt.Sprintf("tcp://127.0.0.1:%d", port), Rank: 0, WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(port)), time.Second); err == nil {
		c.Close()
		t.Errorf("the store of a job without a token answers on %s", ip)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err != nil {
		t.Errorf("the store does not answer on loopback: %v", err)
	} else {
		c.Close()
	}
	g.Destroy()

	// Outside loopback without a token: refused, saying what to do.
	for _, opt := range []dist.Options{
		{InitMethod: fmt.Sprintf("tcp://%s:%d", ip, freePort(t)), Rank: 0, WorldSize: 2},
		{InitMethod: fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t)), Rank: 0, WorldSize: 2, Host: ip},
	} {
		g, err := dist.Init(ctx, opt)
		if err == nil {
			g.Destroy()
			t.Fatalf("Init(%+v) without a token succeeded", opt)
		}
		if !strings.Contains(err.Error(), "GODIST_TOKEN") || !strings.Contains(err.Error(), "GODIST_INSECURE") {
			t.Errorf("Init(%+v): %v, want an error naming GODIST_TOKEN and GODIST_INSECURE", opt, err)
		}
	}

	// Told that the network is private, it runs as before.
	t.Setenv("GODIST_INSECURE", "1")
	g, err = dist.Init(ctx, dist.Options{InitMethod: fmt.Sprintf("tcp://%s:%d", ip, freePort(t)), Rank: 0, WorldSize: 1})
	if err != nil {
		t.Fatalf("GODIST_INSECURE=1: %v", err)
	}
	g.Destroy()
}

// TestInitPinnedAlgorithms: Options.Algorithms pins what calls run
// (Group.Choice says so, and the calls give their results); a rank that
// pins differently from rank 0 fails its Init naming both, and an
// unknown algorithm fails at once.
func TestInitPinnedAlgorithms(t *testing.T) {
	clearLauncherEnv(t)
	t.Setenv("GODIST_TOKEN", "")
	const world = 3
	pins := map[string]string{"all_reduce": "ring", "broadcast": "chain", "all_gather": "ring", "barrier": "dissemination", "all_to_all": "pairwise"}
	run := func(pinsOf func(r int) map[string]string, body func(r int, g *dist.Group) error) []error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		method := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
		errs := make([]error, world)
		var wg sync.WaitGroup
		for r := range world {
			wg.Go(func() {
				g, err := dist.Init(ctx, dist.Options{InitMethod: method, Rank: r, WorldSize: world, Timeout: 10 * time.Second,
					JobID: "pins", Token: []byte("secret"), SmallCollectives: dist.SharedMemoryOff, Algorithms: pinsOf(r)})
				if err != nil {
					errs[r] = err
					return
				}
				defer g.Destroy()
				errs[r] = body(r, g)
			})
		}
		wg.Wait()
		return errs
	}
	errs := run(func(int) map[string]string { return pins }, func(r int, g *dist.Group) error {
		ctx := context.Background()
		for op, want := range map[string]string{"all_reduce": "ring", "broadcast": "chain", "all_gather": "ring", "barrier": "dissemination", "all_to_all": "pairwise"} {
			if c, ok := g.Choice(op, 10000, tensor.Float32); !ok || !strings.HasPrefix(c.Algo, want) {
				return fmt.Errorf("Choice(%s) = %+v, want %s", op, c, want)
			}
		}
		x := tensor.Full(tensor.Float32, float64(r+1), 10000)
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			return err
		}
		if err := expect(x, func(int) float64 { return 6 }, "pinned all_reduce"); err != nil {
			return err
		}
		in, out := tensor.Full(tensor.Float32, float64(r), world), tensor.New(tensor.Float32, world)
		if err := g.AllToAllSingle(ctx, out, in, nil, nil); err != nil {
			return err
		}
		if err := expect(out, func(i int) float64 { return float64(i) }, "pinned all_to_all"); err != nil {
			return err
		}
		return g.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	errs = run(func(r int) map[string]string {
		if r == 1 {
			return map[string]string{"all_reduce": "halving-doubling"}
		}
		return pins
	}, func(int, *dist.Group) error { return nil })
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "all_reduce=halving-doubling") || !strings.Contains(errs[1].Error(), "all_reduce=ring") {
		t.Errorf("rank 1 pinned differently: Init gave %v, want an error naming both pins", errs[1])
	}
	_, err := dist.Init(context.Background(), dist.Options{Rank: 0, WorldSize: 1, Algorithms: map[string]string{"all_reduce": "chain"}})
	if err == nil || !strings.Contains(err.Error(), "recursive-doubling") {
		t.Errorf("an unknown algorithm: Init gave %v, want an error listing all_reduce's", err)
	}
}

// initPair starts a world of two ranks as goroutines over loopback TCP
// and destroys it when the test ends.
func initPair(t *testing.T, ctx context.Context, job string) []*dist.Group {
	t.Helper()
	method := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	groups := make([]*dist.Group, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[r], errs[r] = dist.Init(ctx, dist.Options{InitMethod: method, Rank: r, WorldSize: len(groups), Timeout: 10 * time.Second, JobID: job, Token: []byte("secret")})
		}()
	}
	wg.Wait()
	for r, g := range groups {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		t.Cleanup(func() { g.Destroy() })
	}
	return groups
}

// TestInitEndsHolds: yields lost before Init returns (to the job's own
// start: the links' measurement, the ranks' collections) leave no
// pollers held asleep after it (cpuyield.Clear).
func TestInitEndsHolds(t *testing.T) {
	clearLauncherEnv(t)
	t.Setenv("GODIST_TOKEN", "")
	// The earlier tests' Inits take the yields lost up to 50 ms after
	// them as their start's: begin after that.
	time.Sleep(100 * time.Millisecond)
	var h cpuyield.Hold
	start := time.Now()
	h.Lost(start)
	h.Lost(start)
	if !h.Held(time.Now()) {
		t.Fatal("two lost yields did not hold")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	initPair(t, ctx, "holds")
	now := time.Now()
	if now.Sub(start) > cpuyield.HoldFor/2 {
		t.Skipf("Init took %v: a hold would have ended by itself (HoldFor %v)", now.Sub(start), cpuyield.HoldFor)
	}
	if h.Held(now) {
		t.Errorf("a hold begun before Init still holds %v after it began", now.Sub(start))
	}
}

// TestBulkCallsEndTheirHolds: a hold that yields lost just after a call of
// 1 MiB a rank confirmed ends cpuyield.BulkTail after that call; one
// confirmed after a small call lasts (cpuyield.BulkBegan).
func TestBulkCallsEndTheirHolds(t *testing.T) {
	clearLauncherEnv(t)
	t.Setenv("GODIST_TOKEN", "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	groups := initPair(t, ctx, "bulk-holds")
	each := func(f func(g *dist.Group) error) {
		t.Helper()
		errs := make([]error, len(groups))
		var wg sync.WaitGroup
		for r, g := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = f(g)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // past Init's clear of the holds
	each(func(g *dist.Group) error { return g.AllReduce(ctx, tensor.Full(tensor.Float32, 1, 2), dist.Sum) })
	var small cpuyield.Hold
	now := time.Now()
	small.Lost(now)
	small.Lost(now)
	if !small.Held(now.Add(cpuyield.BulkTail + time.Millisecond)) {
		t.Error("a hold confirmed after a small call ended within BulkTail")
	}
	each(func(g *dist.Group) error { return g.AllReduce(ctx, tensor.Full(tensor.Float32, 1, 1<<18), dist.Sum) })
	var bulk cpuyield.Hold
	now = time.Now()
	bulk.Lost(now)
	bulk.Lost(now)
	if !bulk.Held(now) {
		t.Fatal("two yields lost after a bulk call did not hold")
	}
	if bulk.Held(now.Add(cpuyield.BulkTail + time.Millisecond)) {
		t.Error("a hold confirmed just after a call of 1 MiB a rank lasted past BulkTail")
	}
}
