// Command initscale starts many real processes on this host, each one
// rank of a job that initialises, all-reduces three times and exits: godist
// with every connection made at Init (eager), godist with connections on
// first use (dist.Options.ConnectOnDemand), the same job under `godist run
// --nproc-per-node N` (run: the whole job as a user starts it, the
// launcher's rendezvous and its workers' gates included), and PyTorch's
// gloo (tools/peers/init_scale.py, carried in this binary), in alternating
// rounds, and prints one markdown table.
//
//	go run ./tools/initscale                        # 64 and 128 processes, 2 rounds
//	go run ./tools/initscale --worlds 16 --rounds 1 --torch=false
//
// Every process first gets ready (PyTorch imports torch), says so, and
// waits for a start time the tool sends to all at once; init is timed from
// that start to the end of Init (init_process_group), the max over the
// ranks, so that the imports are not counted. Each process then counts its
// own sockets (/proc/self/fd) and shared-memory mappings (/proc/self/maps)
// after its all-reduces. The job's wall time runs from starting the first
// process to the last one's exit (PyTorch's includes its imports).
//
// The run side has no common start: its times run from the moment the
// tool starts godist run, and its whole job is godist run's own time.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/tools/peers"
)

// report is one rank's line (init_scale.py prints the same fields).
type report struct {
	Side    string  `json:"side"`
	Rank    int     `json:"rank"`
	InitS   float64 `json:"init_s"`
	DoneS   float64 `json:"done_s"`
	Sockets int     `json:"sockets"`
	ShmMaps int     `json:"shm_maps"`
	OK      bool    `json:"ok"`
}

// run is one job's measurement.
type run struct {
	initS, doneS, wallS float64
	readyS, exitS       float64 // from the first start until every rank is ready; from the last report until every rank has exited
	sockets0, sockets   int     // rank 0's (it serves the store: a socket a rank), the most any other held
	shmMaps             int     // the most any rank held
}

func main() {
	worker := flag.String("worker", "", "internal: run one godist rank (eager or ondemand)")
	worlds := flag.String("worlds", "64,128", "comma-separated process counts")
	rounds := flag.Int("rounds", 2, "rounds; each runs every side once, in turn")
	python := flag.String("python", "/usr/bin/python3", "the Python with PyTorch")
	torch := flag.Bool("torch", true, "run PyTorch's gloo side")
	only := flag.String("sides", "", "the godist sides to run, comma-separated (default eager,ondemand,run)")
	godistBin := flag.String("godist", "", "the godist binary for the run side (default: built from this checkout)")
	flag.Parse()
	if *worker != "" {
		if err := runWorker(*worker); err != nil {
			fmt.Fprintln(os.Stderr, "initscale worker:", err)
			os.Exit(1)
		}
		return
	}
	var ws []int
	for _, f := range strings.Split(*worlds, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 2 {
			fatal(fmt.Errorf("--worlds: %q is not a process count", f))
		}
		ws = append(ws, w)
	}
	sides := []string{"eager", "ondemand", "run"}
	if *only != "" {
		sides = strings.Split(*only, ",")
	}
	if slices.Contains(sides, "run") && *godistBin == "" {
		dir, err := os.MkdirTemp("", "godist-initscale-bin")
		if err != nil {
			fatal(err)
		}
		defer os.RemoveAll(dir)
		*godistBin = filepath.Join(dir, "godist")
		build := exec.Command("go", "build", "-o", *godistBin, "github.com/godist/godist/cmd/godist")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fatal(fmt.Errorf("building godist for the run side: %w", err))
		}
	}
	var script string
	if *torch {
		dir, err := peers.Write(filepath.Join(os.TempDir(), "godist-initscale-peers"))
		if err != nil {
			fatal(err)
		}
		script = filepath.Join(dir, "init_scale.py")
		sides = append(sides, "gloo")
	}
	self, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	results := map[string][]run{}
	for round := range *rounds {
		for _, w := range ws {
			for _, side := range sides {
				var r run
				var err error
				switch side {
				case "gloo":
					r, err = runJob(w, side, []string{*python, script})
				case "run":
					r, err = runLaunched(w, *godistBin, self)
				default:
					r, err = runJob(w, side, []string{self, "--worker", side})
				}
				if err != nil {
					fatal(fmt.Errorf("round %d, %d processes, %s: %w", round+1, w, side, err))
				}
				fmt.Fprintf(os.Stderr, "round %d, %d processes, %-8s ready %.2f s, init %.3f s, done %.3f s, exit %.2f s, wall %.2f s, sockets %d (rank 0: %d), shm maps %d\n",
					round+1, w, side, r.readyS, r.initS, r.doneS, r.exitS, r.wallS, r.sockets, r.sockets0, r.shmMaps)
				k := key(w, side)
				results[k] = append(results[k], r)
			}
		}
	}
	printTable(os.Stdout, ws, sides, results, *rounds)
}

func key(w int, side string) string { return strconv.Itoa(w) + "/" + side }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "initscale:", err)
	os.Exit(1)
}

// runJob starts w processes of cmd as the ranks of one job, starts them
// together once all are ready, and gathers their reports.
func runJob(w int, side string, cmd []string) (run, error) {
	port, err := freePort()
	if err != nil {
		return run{}, err
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	type proc struct {
		cmd   *exec.Cmd
		stdin *os.File
		lines chan string
	}
	procs := make([]proc, w)
	var wg sync.WaitGroup
	for r := range w {
		c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
		c.Env = append(os.Environ(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(w),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(w),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"GODIST_TOKEN="+hex.EncodeToString(tok), "GODIST_RUN_ID=initscale-"+side,
			"OMP_NUM_THREADS=1",
		)
		c.Stderr = os.Stderr
		pr, pw, err := os.Pipe()
		if err != nil {
			return run{}, err
		}
		c.Stdin = pr
		out, err := c.StdoutPipe()
		if err != nil {
			return run{}, err
		}
		if err := c.Start(); err != nil {
			return run{}, err
		}
		pr.Close()
		lines := make(chan string, 4)
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		})
		procs[r] = proc{c, pw, lines}
	}
	defer func() {
		for _, p := range procs {
			p.stdin.Close()
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	}()
	for r, p := range procs {
		if l, ok := <-p.lines; !ok || l != "ready" {
			return run{}, fmt.Errorf("rank %d did not get ready (it said %q)", r, l)
		}
	}
	ready := time.Now()
	t0 := float64(ready.Add(200*time.Millisecond).UnixNano()) / 1e9
	for _, p := range procs {
		fmt.Fprintf(p.stdin, "%.6f\n", t0)
		p.stdin.Close()
	}
	var res run
	for r, p := range procs {
		l, ok := <-p.lines
		if !ok {
			return run{}, fmt.Errorf("rank %d ended without a report", r)
		}
		var rep report
		if err := json.Unmarshal([]byte(l), &rep); err != nil {
			return run{}, fmt.Errorf("rank %d: %q: %w", r, l, err)
		}
		if !rep.OK {
			return run{}, fmt.Errorf("rank %d: the all-reduces gave a wrong sum", r)
		}
		res.add(rep)
	}
	reported := time.Now()
	for r, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			return run{}, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	res.wallS = time.Since(start).Seconds()
	res.readyS, res.exitS = ready.Sub(start).Seconds(), time.Since(reported).Seconds()
	wg.Wait()
	return res, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runLaunched runs the job as godist run's w workers, each self in the
// worker mode "run", which writes its report to a file in a directory
// named by the environment.
func runLaunched(w int, godistBin, self string) (run, error) {
	dir, err := os.MkdirTemp("", "godist-initscale-run")
	if err != nil {
		return run{}, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	c := exec.CommandContext(ctx, godistBin, "run", "--standalone", "--nproc-per-node", strconv.Itoa(w), self, "--worker", "run")
	c.Env = append(os.Environ(), "INITSCALE_DIR="+dir, fmt.Sprintf("INITSCALE_T0=%.6f", float64(start.UnixNano())/1e9))
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return run{}, fmt.Errorf("godist run: %w\n%s", err, out.String())
	}
	res := run{wallS: time.Since(start).Seconds()}
	for r := range w {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(r)+".json"))
		if err != nil {
			return run{}, fmt.Errorf("rank %d left no report: %w", r, err)
		}
		var rep report
		if err := json.Unmarshal(b, &rep); err != nil {
			return run{}, fmt.Errorf("rank %d: %q: %w", r, b, err)
		}
		if !rep.OK {
			return run{}, fmt.Errorf("rank %d: the all-reduces gave a wrong sum", r)
		}
		res.add(rep)
	}
	return res, nil
}

// add takes one rank's report into the job's result.
func (res *run) add(rep report) {
	res.initS = max(res.initS, rep.InitS)
	res.doneS = max(res.doneS, rep.DoneS)
	if rep.Rank == 0 {
		res.sockets0 = rep.Sockets
	} else {
		res.sockets = max(res.sockets, rep.Sockets)
	}
	res.shmMaps = max(res.shmMaps, rep.ShmMaps)
}

// runWorker is one godist rank: ready, the start time from stdin, Init,
// three all-reduces, the report; in mode "run" (under godist run), the
// start time is the job's, from the environment, and the report goes to
// a file.
func runWorker(mode string) error {
	var t0 time.Time
	if mode == "run" {
		t0f, err := strconv.ParseFloat(os.Getenv("INITSCALE_T0"), 64)
		if err != nil {
			return fmt.Errorf("INITSCALE_T0: %w", err)
		}
		t0 = time.Unix(0, int64(t0f*1e9))
	} else {
		fmt.Println("ready")
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil {
			return fmt.Errorf("reading the start time: %w", err)
		}
		t0f, err := strconv.ParseFloat(strings.TrimSpace(line), 64)
		if err != nil {
			return err
		}
		t0 = time.Unix(0, int64(t0f*1e9))
		time.Sleep(time.Until(t0))
	}
	if path := os.Getenv("INITSCALE_CPUPROFILE"); path != "" && os.Getenv("RANK") == os.Getenv("INITSCALE_PROFILE_RANK") {
		// One rank's profile of Init and the all-reduces (a tool for
		// finding what Init costs at many processes).
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := dist.Init(ctx, dist.Options{Connect: connectMode(mode)})
	if err != nil {
		return err
	}
	defer g.Destroy()
	initS := time.Since(t0).Seconds()
	x := tensor.FromFloat32([]float32{1, 1, 1, 1, 1, 1, 1, 1})
	for range 3 {
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			return err
		}
	}
	doneS := time.Since(t0).Seconds()
	w := float32(g.Size())
	rep := report{Side: "godist-" + mode, Rank: g.Rank(), InitS: initS, DoneS: doneS,
		Sockets: countFDs("socket:"), ShmMaps: countShmMaps(), OK: x.Float32s()[0] == w*w*w}
	b, _ := json.Marshal(rep)
	if mode == "run" {
		return os.WriteFile(filepath.Join(os.Getenv("INITSCALE_DIR"), strconv.Itoa(g.Rank())+".json"), b, 0o644)
	}
	fmt.Println(string(b))
	return nil
}

func countFDs(prefix string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if t, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(t, prefix) {
			n++
		}
	}
	return n
}

func countShmMaps() int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return -1
	}
	return strings.Count(string(b), "/dev/shm/")
}

// printTable prints the medians over the rounds, with their ranges.
func printTable(f *os.File, ws []int, sides []string, results map[string][]run, rounds int) {
	fmt.Fprintf(f, "\n%d round(s), median (range); init and init + 3 all-reduces are the slowest rank's, from a common start (the run side's from godist run's start); sockets are rank 0's (it serves the store) and the most any other rank held, shared-memory mappings the most any rank held\n\n", rounds)
	fmt.Fprintln(f, "| processes | side | init, s | init + 3 all-reduces, s | whole job, s | sockets: rank 0, others | /dev/shm mappings a rank |")
	fmt.Fprintln(f, "| --- | --- | --- | --- | --- | --- | --- |")
	for _, w := range ws {
		for _, side := range sides {
			rs := results[key(w, side)]
			col := func(get func(run) float64, prec int) string {
				var v []float64
				for _, r := range rs {
					v = append(v, get(r))
				}
				slices.Sort(v)
				return fmt.Sprintf("%.*f (%.*f-%.*f)", prec, v[len(v)/2], prec, v[0], prec, v[len(v)-1])
			}
			fmt.Fprintf(f, "| %d | %s | %s | %s | %s | %s | %s |\n", w, side,
				col(func(r run) float64 { return r.initS }, 3), col(func(r run) float64 { return r.doneS }, 3),
				col(func(r run) float64 { return r.wallS }, 2),
				col(func(r run) float64 { return float64(r.sockets0) }, 0)+", "+col(func(r run) float64 { return float64(r.sockets) }, 0),
				col(func(r run) float64 { return float64(r.shmMaps) }, 0))
		}
	}
}

// connectMode is the dist.Options.Connect of a side: "eager" connects
// every pair at Init, "ondemand" on first use.
func connectMode(side string) dist.ConnectMode {
	if side == "eager" {
		return dist.ConnectAtInit
	}
	return dist.ConnectOnDemand
}
