package dist

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/transport"
)

// TestWithEnv: a field the caller left zero takes its variable, a field
// it set keeps its value, and an unreadable variable is ignored and said
// so to the logger.
func TestWithEnv(t *testing.T) {
	env := map[string]string{
		"GODIST_RUN_ID": "run", "TORCHELASTIC_RUN_ID": "elastic", "GODIST_TOKEN": "0a0b",
		"GODIST_HOST": "10.0.0.7", "GODIST_SHM": "0", "LOCAL_WORLD_SIZE": "4", "GODIST_SPIN_US": "25",
		"GODIST_INIT_METHOD": "etcd://10.0.0.1:2379/godist/run/round0",
		"GODIST_CPUPROFILE":  "/p/cpu", "GODIST_TRACE": "/p/trace",
	}
	from := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cases := []struct {
		name string
		env  map[string]string
		opt  Options
		want Options
	}{
		{"nothing set", map[string]string{}, Options{}, Options{SharedMemory: SharedMemoryOn}},
		{"all from the environment", env, Options{},
			Options{JobID: "run", Token: []byte{0x0a, 0x0b}, Host: "10.0.0.7", SharedMemory: SharedMemoryOff, LocalWorldSize: 4, Spin: 25 * time.Microsecond,
				InitMethod: "etcd://10.0.0.1:2379/godist/run/round0", CPUProfile: "/p/cpu", ExecutionTrace: "/p/trace"}},
		{"the options win", env,
			Options{JobID: "job", Token: []byte("t"), Host: "127.0.0.1", SharedMemory: SharedMemoryOn, LocalWorldSize: 1, Spin: -1, InitMethod: "tcp://h:1", CPUProfile: "/o"},
			Options{JobID: "job", Token: []byte("t"), Host: "127.0.0.1", SharedMemory: SharedMemoryOn, LocalWorldSize: 1, Spin: -1, InitMethod: "tcp://h:1", CPUProfile: "/o", ExecutionTrace: "/p/trace"}},
		{"off wins over GODIST_SHM=1", map[string]string{"GODIST_SHM": "1"}, Options{SharedMemory: SharedMemoryOff}, Options{SharedMemory: SharedMemoryOff}},
		{"torchelastic's run id, a raw token", map[string]string{"TORCHELASTIC_RUN_ID": "elastic", "GODIST_TOKEN": "not hex"}, Options{},
			Options{JobID: "elastic", Token: []byte("not hex"), SharedMemory: SharedMemoryOn}},
		{"GODIST_SPIN_US=0 never polls", map[string]string{"GODIST_SPIN_US": "0"}, Options{}, Options{SharedMemory: SharedMemoryOn, Spin: -1}},
		{"GODIST_PEER_TIMEOUT as a duration", map[string]string{"GODIST_PEER_TIMEOUT": "2s"}, Options{}, Options{SharedMemory: SharedMemoryOn, PeerTimeout: 2 * time.Second}},
		{"GODIST_PEER_TIMEOUT=0 never", map[string]string{"GODIST_PEER_TIMEOUT": "0"}, Options{}, Options{SharedMemory: SharedMemoryOn, PeerTimeout: -1}},
		{"a bad GODIST_PEER_TIMEOUT is ignored", map[string]string{"GODIST_PEER_TIMEOUT": "soon"}, Options{}, Options{SharedMemory: SharedMemoryOn}},
		{"GODIST_YIELD=1 yields", map[string]string{"GODIST_YIELD": "1"}, Options{}, Options{SharedMemory: SharedMemoryOn, Yield: true}},
		{"GODIST_YIELD=0 leaves the default", map[string]string{"GODIST_YIELD": "0"}, Options{}, Options{SharedMemory: SharedMemoryOn}},
		{"GODIST_TIMEOUT in seconds", map[string]string{"GODIST_TIMEOUT": "90"}, Options{}, Options{SharedMemory: SharedMemoryOn, Timeout: 90 * time.Second}},
		{"GODIST_TIMEOUT as a duration", map[string]string{"GODIST_TIMEOUT": "2m"}, Options{}, Options{SharedMemory: SharedMemoryOn, Timeout: 2 * time.Minute}},
		{"a bad GODIST_TIMEOUT is ignored", map[string]string{"GODIST_TIMEOUT": "-3"}, Options{}, Options{SharedMemory: SharedMemoryOn}},
		{"Options.Timeout wins", map[string]string{"GODIST_TIMEOUT": "90"}, Options{Timeout: time.Second}, Options{SharedMemory: SharedMemoryOn, Timeout: time.Second}},
		{"the flight recorder and the live view", map[string]string{"GODIST_FLIGHT_DIR": "/f", "GODIST_FLIGHT_SIGNAL": "1", "GODIST_FLIGHT_ENTRIES": "64", "GODIST_TOP": "0", "GODIST_ERROR_FILE": "/e/0/error.json"}, Options{},
			Options{SharedMemory: SharedMemoryOn, FlightDir: "/f", DumpOnSignal: true, FlightRecorder: 64, StatusInterval: -1}},
		{"flight records beside the error file", map[string]string{"TORCHELASTIC_ERROR_FILE": "/e/1/error.json"}, Options{}, Options{SharedMemory: SharedMemoryOn, FlightDir: "/e/1"}},
		{"options win over the flight variables", map[string]string{"GODIST_FLIGHT_DIR": "/f", "GODIST_FLIGHT_ENTRIES": "64"}, Options{FlightDir: "/o", FlightRecorder: -1, StatusInterval: time.Second},
			Options{SharedMemory: SharedMemoryOn, FlightDir: "/o", FlightRecorder: -1, StatusInterval: time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := withEnv(c.opt, from(c.env))
			if got.JobID != c.want.JobID || !bytes.Equal(got.Token, c.want.Token) || got.Host != c.want.Host || got.Timeout != c.want.Timeout || got.InitMethod != c.want.InitMethod ||
				got.SharedMemory != c.want.SharedMemory || got.LocalWorldSize != c.want.LocalWorldSize || got.Spin != c.want.Spin || got.Yield != c.want.Yield || got.PeerTimeout != c.want.PeerTimeout ||
				got.FlightDir != c.want.FlightDir || got.FlightRecorder != c.want.FlightRecorder || got.DumpOnSignal != c.want.DumpOnSignal || got.StatusInterval != c.want.StatusInterval ||
				got.CPUProfile != c.want.CPUProfile || got.ExecutionTrace != c.want.ExecutionTrace {
				t.Errorf("withEnv(%+v) = %+v, want %+v", c.opt, got, c.want)
			}
		})
	}
	t.Run("connect and algorithms", func(t *testing.T) {
		for _, c := range []struct {
			env     map[string]string
			opt     Options
			connect ConnectMode
			pins    string
		}{
			{map[string]string{}, Options{}, ConnectOnDemand, ""},
			{map[string]string{"GODIST_CONNECT": "init", "GODIST_ALGO": " all_reduce=ring, broadcast=chain "}, Options{}, ConnectAtInit, "all_reduce=ring,broadcast=chain"},
			{map[string]string{"GODIST_CONNECT": "init", "GODIST_ALGO": "all_reduce=ring"}, Options{Connect: ConnectOnDemand, Algorithms: map[string]string{"barrier": "two-level"}}, ConnectOnDemand, "barrier=two-level"},
			{map[string]string{"GODIST_ALGO": "ring"}, Options{}, ConnectOnDemand, ""}, // malformed: ignored, said so
		} {
			got := withEnv(c.opt, from(c.env))
			if got.Connect != c.connect || pinString(got.Algorithms) != c.pins {
				t.Errorf("withEnv(%v, %+v): Connect %v, Algorithms %q; want %v, %q", c.env, c.opt, got.Connect, pinString(got.Algorithms), c.connect, c.pins)
			}
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		got := withEnv(Options{Logger: log}, from(map[string]string{"LOCAL_WORLD_SIZE": "two", "GODIST_SPIN_US": "-5"}))
		if got.LocalWorldSize != 0 || got.Spin != 0 {
			t.Errorf("unreadable variables gave LocalWorldSize %d, Spin %v; want both left zero", got.LocalWorldSize, got.Spin)
		}
		for _, want := range []string{"ignoring LOCAL_WORLD_SIZE", `value=two`, "ignoring GODIST_SPIN_US", `value=-5`} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, buf.String())
			}
		}
	})
}

// TestOptionsSpin: a negative Spin never polls, a positive one is used
// as it is, and zero asks DefaultPolling (which yields with more ranks on
// the host than CPUs, and parks with more than four a CPU); Yield makes
// every reader yield.
func TestOptionsSpin(t *testing.T) {
	for _, c := range []struct {
		opt   Options
		want  time.Duration
		yield bool
	}{
		{Options{Spin: -1}, 0, false},
		{Options{Spin: -1, Yield: true}, 0, false},
		{Options{Spin: 3 * time.Millisecond}, 3 * time.Millisecond, false},
		{Options{Spin: 3 * time.Millisecond, Yield: true}, 3 * time.Millisecond, true},
		{Options{LocalWorldSize: runtime.NumCPU() + 1}, 100 * time.Millisecond, true},
		{Options{LocalWorldSize: 1 << 20}, 0, false},
		{Options{}, 50 * time.Microsecond, false},
		{Options{Yield: true}, transport.YieldSpin, true},
	} {
		if got, yield := c.opt.polling(); got != c.want || yield != c.yield {
			t.Errorf("Spin %v, Yield %v, LocalWorldSize %d: %v, yield %v; want %v, %v", c.opt.Spin, c.opt.Yield, c.opt.LocalWorldSize, got, yield, c.want, c.yield)
		}
	}
}

// TestInitReportsUnreachableStore (issue 19, item 8): a rank whose store
// address does not answer says so through its logger, naming the
// address, long before its timeout (it was silent for 30 minutes).
func TestInitReportsUnreachableStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts nothing: no answer
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	defer func(d time.Duration) { dialReportAfter = d }(dialReportAfter)
	dialReportAfter = 100 * time.Millisecond
	var buf syncBuffer
	_, err = Init(context.Background(), Options{
		InitMethod: "tcp://" + ln.Addr().String(), Rank: 1, WorldSize: 2, Timeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(&buf, nil)),
	})
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("Init: %v, want an error naming %s", err, ln.Addr())
	}
	log := buf.String()
	if !strings.Contains(log, ln.Addr().String()) || !strings.Contains(log, "still trying") || !strings.Contains(log, "rank=1") {
		t.Fatalf("log:\n%s\nwant a report naming %s", log, ln.Addr())
	}
	t.Log(log)
}

// syncBuffer is a bytes.Buffer that goroutines may write at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestJobIDDerivation (issue 27, item 9): the job id Init presents
// without a run id, from the launcher's variables or the store's address.
func TestJobIDDerivation(t *testing.T) {
	from := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		source   string
		env      map[string]string
		id, vars string
	}{
		{"slurm", map[string]string{"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0"}, "slurm:12.0", "SLURM_JOB_ID and SLURM_STEP_ID"},
		{"slurm", map[string]string{"SLURM_JOBID": "12", "SLURM_STEPID": "4"}, "slurm:12.4", "SLURM_JOBID and SLURM_STEPID"},
		{"slurm", map[string]string{"SLURM_STEP_ID": "0"}, "", ""},
		{"mpirun", map[string]string{"PMIX_NAMESPACE": "ns", "OMPI_MCA_ess_base_jobid": "7"}, "openmpi:ns", "PMIX_NAMESPACE"},
		{"mpirun", map[string]string{"OMPI_MCA_ess_base_jobid": "7"}, "openmpi:7", "OMPI_MCA_ess_base_jobid"},
		{"mpirun", map[string]string{"OMPI_MCA_orte_ess_jobid": "8"}, "openmpi:8", "OMPI_MCA_orte_ess_jobid"},
		{"mpirun", map[string]string{}, "", ""},
		{"mpich", map[string]string{"PMIX_NAMESPACE": "ns", "SLURM_JOB_ID": "1"}, "", ""},
		{"env", map[string]string{"PMIX_NAMESPACE": "ns", "SLURM_JOB_ID": "1"}, "", ""},
		{"", map[string]string{"PMIX_NAMESPACE": "ns", "SLURM_JOB_ID": "1"}, "", ""},
	} {
		if id, vars := launcherJob(c.source, from(c.env)); id != c.id || vars != c.vars {
			t.Errorf("launcherJob(%q, %v) = %q, %q; want %q, %q", c.source, c.env, id, vars, c.id, c.vars)
		}
	}
	// Two jobs of one launcher differ; its ranks agree.
	a, _ := launcherJob("mpirun", from(map[string]string{"PMIX_NAMESPACE": "720896001"}))
	b, _ := launcherJob("mpirun", from(map[string]string{"PMIX_NAMESPACE": "718929921"}))
	if a == b {
		t.Errorf("two OpenMPI jobs share the job id %q", a)
	}
	for _, c := range []struct {
		host string
		port int
		want string
	}{
		{"", 29500, "master:127.0.0.1:29500"},
		{"localhost", 29500, "master:127.0.0.1:29500"},
		{"127.0.0.1", 29500, "master:127.0.0.1:29500"},
		{"node01", 4000, "master:node01:4000"},
		{"::1", 7, "master:[::1]:7"},
	} {
		if got := masterJobID(c.host, c.port); got != c.want {
			t.Errorf("masterJobID(%q, %d) = %q, want %q", c.host, c.port, got, c.want)
		}
	}
	// A derived id fits the handshake's 255 bytes, and stays distinct.
	long := strings.Repeat("h", 300)
	a, b = masterJobID(long+"a", 1), masterJobID(long+"b", 1)
	if len(a) != 255 || len(b) != 255 || a == b || !strings.HasPrefix(a, "master:hhh") {
		t.Errorf("masterJobID of 300-byte hosts: %q (%d bytes), %q (%d bytes)", a, len(a), b, len(b))
	}
}
