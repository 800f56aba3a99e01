// Command storeload puts the rendezvous' load on a TCP store with many
// clients connected at once, on godist's store (`godist store`, a process
// of its own, authenticated) and on PyTorch's TCPStore
// (tools/peers/store_load.py, carried in this binary), in alternating
// rounds, and prints one markdown table.
//
//	go run ./tools/storeload                          # 10,000 clients, 3 rounds
//	go run ./tools/storeload --clients 1000 --rounds 1 --torch=false
//
// Every round of the load, each client sets its key, adds to a counter;
// the one whose add makes the count whole sets "go"; every client gets
// "go" (a barrier: it waits for the slowest) and then waits for its
// neighbour's key, which is there already. Latency is that of the set,
// the add and the wait; the barrier's wait is reported apart. Throughput
// is every operation of every round over the time from the start signal
// to the last client's end. Memory is the server's resident set after
// the clients connected, and its growth a client.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/godist/godist/store"
	"github.com/godist/godist/tools/peers"
)

// result is one run's measurement, on either side (the Python side prints
// the same fields).
type result struct {
	Store         string  `json:"store"`
	Clients       int     `json:"clients"`
	Rounds        int     `json:"rounds"`
	ConnectS      float64 `json:"connect_s"`
	WallS         float64 `json:"wall_s"`
	Ops           int     `json:"ops"`
	OpsPerS       float64 `json:"ops_per_s"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	BarrierP50Ms  float64 `json:"barrier_p50_ms"`
	BarrierP99Ms  float64 `json:"barrier_p99_ms"`
	ServerRSSMB   float64 `json:"server_rss_mb"`
	RSSPerClientK float64 `json:"rss_per_client_kb"`
	ServerFDs     int     `json:"server_fds"`
	ServerCPUUs   float64 `json:"server_cpu_us_per_op"`
}

func main() {
	clients := flag.Int("clients", 10000, "clients connected at once")
	rounds := flag.Int("rounds", 3, "rendezvous rounds of the load a run")
	runs := flag.Int("runs", 2, "runs of each side, alternating which goes first")
	withTorch := flag.Bool("torch", true, "also measure PyTorch's TCPStore")
	procs := flag.Int("procs", 8, "processes the Python clients are spread over")
	python := flag.String("python", "/usr/bin/python3", "Python with torch (Debian's python3-torch)")
	godistBin := flag.String("godist", "", "godist binary (default: go build ./cmd/godist into a temporary directory)")
	flag.Parse()

	dir, err := os.MkdirTemp("", "storeload")
	check(err)
	defer os.RemoveAll(dir)
	bin := *godistBin
	if bin == "" {
		bin = filepath.Join(dir, "godist")
		build := exec.Command("go", "build", "-o", bin, "github.com/godist/godist/cmd/godist")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		check(build.Run())
	}
	_, err = peers.Write(dir)
	check(err)
	// This process holds every client's connection.
	if have, err := store.RaiseFileLimit(uint64(*clients) + 256); err != nil || have < uint64(*clients)+256 {
		fmt.Fprintf(os.Stderr, "storeload: the descriptor limit (%d) is below %d clients: run as root or raise ulimit -n\n", have, *clients)
		os.Exit(1)
	}

	var gd, pt []result
	for r := range *runs {
		sides := []string{"godist", "torch"}
		if r%2 == 1 {
			slices.Reverse(sides)
		}
		for _, side := range sides {
			switch {
			case side == "godist":
				res, err := runGodist(bin, *clients, *rounds)
				check(err)
				gd = append(gd, res)
				printJSON(res)
			case *withTorch:
				res, err := runTorch(*python, filepath.Join(dir, "store_load.py"), *clients, *rounds, *procs)
				if err != nil {
					fmt.Fprintln(os.Stderr, "storeload: PyTorch's side:", err)
					*withTorch = false
					continue
				}
				pt = append(pt, res)
				printJSON(res)
			}
		}
	}
	fmt.Print(table(*clients, *rounds, gd, pt))
}

// runGodist starts `godist store` with a fresh token and puts the load on
// it from this process's goroutines, one client each.
func runGodist(bin string, n, rounds int) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tok := make([]byte, 16)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	cmd := exec.CommandContext(ctx, bin, "store", "--addr", "127.0.0.1:0", "--job-id", "load", "--max-conns", strconv.Itoa(n+64))
	cmd.Env = append(os.Environ(), "GODIST_TOKEN="+token)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addr, err := listeningOn(stderr)
	if err != nil {
		return result{}, err
	}
	rss0 := rssKB(cmd.Process.Pid)

	t0 := time.Now()
	ss := make([]store.Store, n)
	defer func() {
		for _, s := range ss {
			if s != nil {
				s.Close()
			}
		}
	}()
	var g sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 256) // as many dials at once as the listen queue takes
	for i := range n {
		g.Add(1)
		sem <- struct{}{}
		go func() {
			defer g.Done()
			defer func() { <-sem }()
			s, err := store.Dial(ctx, addr, store.DialOptions{JobID: "load", Token: tok, Rank: i, Timeout: 10 * time.Minute})
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
				return
			}
			ss[i] = s
		}()
	}
	g.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return result{}, err
	}
	connect := time.Since(t0)
	rss1 := rssKB(cmd.Process.Pid)
	fds := countFDs(cmd.Process.Pid)
	cpu0 := cpuSeconds(cmd.Process.Pid)

	lats := make([][]time.Duration, n)
	waits := make([][]time.Duration, n)
	start := make(chan struct{})
	errs = make(chan error, n)
	for i := range n {
		g.Add(1)
		go func() {
			defer g.Done()
			<-start
			l, w, err := rendezvous(ctx, ss[i], i, n, rounds)
			lats[i], waits[i] = l, w
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	begin := time.Now()
	close(start)
	g.Wait()
	wall := time.Since(begin)
	cpu := cpuSeconds(cmd.Process.Pid) - cpu0
	close(errs)
	if err := <-errs; err != nil {
		return result{}, err
	}
	all, barrier := slices.Concat(lats...), slices.Concat(waits...)
	ops := n*rounds*4 + rounds
	return result{
		Store: "godist", Clients: n, Rounds: rounds, ConnectS: connect.Seconds(), WallS: wall.Seconds(),
		Ops: ops, OpsPerS: float64(ops) / wall.Seconds(),
		P50Ms: ms(pct(all, 0.5)), P99Ms: ms(pct(all, 0.99)),
		BarrierP50Ms: ms(pct(barrier, 0.5)), BarrierP99Ms: ms(pct(barrier, 0.99)),
		ServerRSSMB: float64(rss1) / 1024, RSSPerClientK: float64(rss1-rss0) / float64(n),
		ServerFDs: fds, ServerCPUUs: cpu / float64(ops) * 1e6,
	}, nil
}

// rendezvous is client i's part of the load; it returns the latencies of
// its set, add and neighbour's wait, and of its barrier.
func rendezvous(ctx context.Context, s store.Store, i, n, rounds int) (lat, barrier []time.Duration, err error) {
	value := []byte("10.0.0.1:29500 pid 12345 host-a")
	for r := range rounds {
		p := fmt.Sprintf("r%d/", r)
		t := time.Now()
		if err := s.Set(ctx, p+"rank"+strconv.Itoa(i), value); err != nil {
			return lat, barrier, err
		}
		t1 := time.Now()
		c, err := s.Add(ctx, p+"count", 1)
		if err != nil {
			return lat, barrier, err
		}
		t2 := time.Now()
		lat = append(lat, t1.Sub(t), t2.Sub(t1))
		if c == int64(n) {
			if err := s.Set(ctx, p+"go", []byte("1")); err != nil {
				return lat, barrier, err
			}
		}
		t3 := time.Now()
		if _, err := s.Get(ctx, p+"go"); err != nil {
			return lat, barrier, err
		}
		t4 := time.Now()
		if err := s.Wait(ctx, p+"rank"+strconv.Itoa((i+1)%n)); err != nil {
			return lat, barrier, err
		}
		lat = append(lat, time.Since(t4))
		barrier = append(barrier, t4.Sub(t3))
	}
	return lat, barrier, nil
}

// runTorch runs the Python side and reads its JSON line.
func runTorch(python, script string, n, rounds, procs int) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, script, "--clients", strconv.Itoa(n), "--rounds", strconv.Itoa(rounds), "--procs", strconv.Itoa(procs))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return result{}, err
	}
	var res result
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return result{}, fmt.Errorf("reading %q: %w", lines[len(lines)-1], err)
	}
	return res, nil
}

var listening = regexp.MustCompile(`listening on (\S+)`)

// listeningOn reads godist store's log until it says its address.
func listeningOn(stderr interface{ Read([]byte) (int, error) }) (string, error) {
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			go func() {
				for sc.Scan() {
					fmt.Fprintln(os.Stderr, "godist store:", sc.Text())
				}
			}()
			return m[1], nil
		}
		fmt.Fprintln(os.Stderr, sc.Text())
	}
	return "", fmt.Errorf("godist store ended before it listened: %v", sc.Err())
}

// rssKB is a process's resident set in KiB, 0 when unknown.
func rssKB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			v, _ := strconv.Atoi(strings.Fields(rest)[0])
			return v
		}
	}
	return 0
}

// countFDs is how many descriptors a process holds open.
func countFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// cpuSeconds is the CPU time (user and system) a process has used, from
// /proc/PID/stat in clock ticks of 1/100 s (Linux's USER_HZ).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return float64(u+k) / 100
}

func pct(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[min(len(xs)-1, int(q*float64(len(xs))))]
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }

func printJSON(r result) {
	b, _ := json.Marshal(r)
	fmt.Fprintln(os.Stderr, string(b))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "storeload:", err)
		os.Exit(1)
	}
}
