package clustertest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/store/etcdstore/etcdtest"
)

// Issue 29, item 4: hosts that come and go. An elastic job (--nnodes 2:3,
// the store rendezvous) trains the tiny GPT under FSDP with a distributed
// checkpoint every 5 steps; a third host arrives and the job grows to it
// at a restart, then that host's link is cut and the job goes on with the
// two left, each time from the last checkpoint, resharded for the world
// it restarts as.

// elasticLine is a line of rank 0 that the test follows: the start of a
// run ("data: ... world N,"), a resume ("... at step S") or an
// evaluation ("step S: ...").
var elasticLine = regexp.MustCompile(`world (\d+), batch|resumed from the distributed checkpoint \S+ at step (\d+)|\] step (\d+): train loss`)

// elasticEvent is one such line: World, Resumed or Step set.
type elasticEvent struct{ World, Resumed, Step int }

func elasticEvents(out string) []elasticEvent {
	var evs []elasticEvent
	for _, m := range elasticLine.FindAllStringSubmatch(out, -1) {
		var e elasticEvent
		e.World, _ = strconv.Atoi(m[1])
		e.Resumed, _ = strconv.Atoi(m[2])
		e.Step, _ = strconv.Atoi(m[3])
		evs = append(evs, e)
	}
	return evs
}

func TestElasticEvents(t *testing.T) {
	out := "[rank 0] data: /x: 3 files, 0.1 MB train, 0.0 MB validation (read in 0.0 s); world 2, batch 4×32 bytes per rank\n" +
		"[rank 0] step 5: train loss 5.1, validation loss 5.0 (7.2 bits per byte), lr 1e-3\n" +
		"[rank 0] data: /x: ...; world 3, batch 4×32 bytes per rank\n" +
		"[rank 0] resumed from the distributed checkpoint /tmp/ck at step 5\n"
	got := fmt.Sprint(elasticEvents(out))
	if want := "[{2 0 0} {0 0 5} {3 0 0} {0 5 0}]"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestElasticHostsComeAndGo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds godist and tinygpt and runs elastic jobs")
	}
	t.Run("store", func(t *testing.T) {
		c := Start(t, Config{Hosts: 3, ShareCPUs: true, Rate: 1000 * Mbit})
		comeAndGo(t, c, "store", net.JoinHostPort(c.Host(0).Addr.String(), "29400"))
	})
	t.Run("etcd", func(t *testing.T) {
		bin := etcdtest.Binary()
		if bin == "" {
			t.Skip("no etcd server binary (Debian: etcd-server, or $GODIST_ETCD)")
		}
		c := Start(t, Config{Hosts: 3, ShareCPUs: true, Rate: 1000 * Mbit})
		comeAndGo(t, c, "etcd", startEtcd(t, c, bin))
	})
}

// startEtcd runs a one-member etcd on host 0 (its client port on the
// cluster's network) until t ends, and returns its endpoint once it
// accepts connections.
func startEtcd(t *testing.T, c *Cluster, bin string) string {
	t.Helper()
	addr := c.Host(0).Addr.String()
	client, peer := "http://"+net.JoinHostPort(addr, "2379"), "http://127.0.0.1:2380"
	ctx, cancel := context.WithCancel(context.Background())
	cmd := c.Command(ctx, 0, bin, "--name", "lab", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "lab="+peer,
		"--log-level", "error")
	out := &syncWriter{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	// Up when host 0 can connect to its client port.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		probe := c.Command(context.Background(), 0, "bash", "-c", "exec 3<>/dev/tcp/"+addr+"/2379")
		if probe.Run() == nil {
			return net.JoinHostPort(addr, "2379")
		}
		if time.Now().After(end) {
			t.Fatalf("etcd on host 0 did not come up within 30 s:\n%s", out.String())
		}
	}
}

// comeAndGo runs the elastic job of TestElasticHostsComeAndGo with the
// rendezvous backend at endpoint.
func comeAndGo(t *testing.T, c *Cluster, backend, endpoint string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	godist, _ := buildBins(ctx, t)
	tiny := filepath.Join(filepath.Dir(godist), "tinygpt")
	corpus, err := filepath.Abs(filepath.Join("..", "..", "dist", "algo"))
	if err != nil {
		t.Fatal(err)
	}
	const steps = 150
	ckpt := t.TempDir()
	args := []string{"run", "--nnodes", "2:3", "--rdzv-backend", backend,
		"--rdzv-endpoint", endpoint, "--rdzv-id", "come-and-go",
		"--nproc-per-node", "1", "--max-restarts", "3",
		"--rdzv-conf", fmt.Sprintf("keep_alive_timeout=%g,last_call_timeout=1", lostBound.Seconds()),
		"--monitor-interval", "0.2", "--stop-timeout", "1s",
		tiny, "--layers", "1", "--heads", "2", "--width", "32", "--block", "32", "--batch", "4",
		"--steps", strconv.Itoa(steps), "--eval-every", "5", "--eval-batches", "2", "--sample", "0",
		"--checkpoint", "", "--plot", "", "--checkpoint-dir", ckpt, "--resume", "--strategy", "fsdp",
		"--data", corpus, "--step-sleep", "40ms"}
	env := append(jobEnv(), "GODIST_PEER_TIMEOUT="+lostBound.String())
	// One log for the three launchers, in the order their lines come:
	// rank 0 may be on any host after a restart.
	log := &syncWriter{}
	done := make([]chan error, 3)
	node := func(i int) {
		cmd := c.Command(ctx, i, godist, args...)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = log, log
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done[i] = make(chan error, 1)
		go func() { done[i] <- cmd.Wait() }()
	}
	waitFor := func(what string, within time.Duration, ok func(evs []elasticEvent) bool) {
		t.Helper()
		for end := time.Now().Add(within); !ok(elasticEvents(log.String())); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: not within %v:\n%s", what, within, log.String())
			}
		}
		t.Logf("%s", what)
	}
	// stepsAfterWorld reports whether n evaluations came after the last
	// start of a run of world w. Each evaluation is followed by a
	// checkpoint, so the second says the first one's checkpoint is whole.
	stepsAfterWorld := func(w, n int) func([]elasticEvent) bool {
		return func(evs []elasticEvent) bool {
			last := -1
			for i, e := range evs {
				if e.World == w {
					last = i
				}
			}
			if last < 0 {
				return false
			}
			seen := 0
			for _, e := range evs[last+1:] {
				if e.Step > 0 {
					seen++
				}
			}
			return seen >= n
		}
	}
	node(0) // with the store backend, it serves the store
	time.Sleep(200 * time.Millisecond)
	node(1)
	// Grow and cut only once a checkpoint of the world is whole (two
	// evaluations): during its save, the job would resume from the one
	// before, and the test could not tell the restarts apart.
	waitFor("the job trains as a world of 2", 90*time.Second, stepsAfterWorld(2, 2))
	node(2)
	waitFor("a third host joined: the job trains as a world of 3", 90*time.Second, stepsAfterWorld(3, 2))
	if err := c.SetLink(ctx, 2, false); err != nil {
		t.Fatal(err)
	}
	defer c.SetLink(context.Background(), 2, true)
	for i := range 2 {
		select {
		case err := <-done[i]:
			if err != nil {
				t.Errorf("node %d: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("node %d did not end:\n%s", i, log.String())
		}
	}
	// Cut off, node 2 ends one way or another (TestLostHost bounds how
	// soon); whatever is left of it is killed with ctx.
	select {
	case <-done[2]:
	case <-time.After(5 * time.Second):
		t.Logf("node 2 still runs 5 s after the others ended: killed")
	}
	out := log.String()
	// The runs: worlds 2, 3, 2, each after the first resumed from a later
	// checkpoint than the one before, and the last reaching the end.
	var worlds, resumed []int
	last := 0
	for _, e := range elasticEvents(out) {
		switch {
		case e.World > 0:
			worlds = append(worlds, e.World)
		case e.Resumed > 0:
			resumed = append(resumed, e.Resumed)
		case e.Step > 0:
			last = e.Step
		}
	}
	if fmt.Sprint(worlds) != "[2 3 2]" {
		t.Errorf("the job ran as worlds %v, want [2 3 2]", worlds)
	}
	if len(resumed) != 2 || resumed[0] <= 0 || resumed[1] <= resumed[0] {
		t.Errorf("the restarts resumed at steps %v: want two, each later than the one before", resumed)
	}
	if last != steps {
		t.Errorf("the last evaluation was at step %d, want %d", last, steps)
	}
	if !strings.Contains(out, "waiting to join") {
		t.Errorf("no launcher said a node was waiting to join")
	}
	// The cut host is found by the launchers' heartbeats or by the ranks'
	// (a worker's error then names it): either restarts the job.
	if !strings.Contains(out, "stopped sending heartbeats") && !strings.Contains(out, "not even a heartbeat") {
		t.Errorf("nothing says the cut host stopped sending heartbeats")
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("the job's log:\n%s", out)
	}
}
