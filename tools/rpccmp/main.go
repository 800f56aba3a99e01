// Command rpccmp runs godist bench --rpc and PyTorch's TensorPipe RPC
// benchmark (tools/peers/bench_rpc.py, carried in this binary),
// which time the same cases the same way, for a few rounds, and prints one markdown table: each case's
// median over the rounds with their range, and godist's advantage
// (PyTorch's latency over godist's, or godist's throughput over PyTorch's:
// above 1, godist is faster).
//
//	go run ./tools/rpccmp                      # 3 rounds, 1 s a case
//	go run ./tools/rpccmp --rounds 1 --target 0.3s --cases add,echo_16MiB
//
// The rounds alternate which goes first (godist, PyTorch; PyTorch,
// godist; ...), so that a machine growing busier or quieter weighs on
// both. PyTorch always runs all its cases; with --cases only godist's are
// shown. Without torch only godist's column is filled.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godist/godist/tools/peers"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each runs both benchmarks once")
	target := flag.Duration("target", time.Second, "time budget per case, for both")
	cases := flag.String("cases", "all", "godist bench's --rpc-cases: add,remote,echo_1KiB,echo_1MiB,echo_16MiB,async_echo,async_add, or all")
	timeout := flag.Duration("timeout", 5*time.Minute, "limit for one benchmark run; it is killed when it passes")
	godistBin := flag.String("godist", "", "godist binary (default: go build ./cmd/godist into a temporary directory)")
	python := flag.String("python", "/usr/bin/python3", "Python with torch (Debian's python3-torch)")
	script := flag.String("script", "", "PyTorch's side (default: tools/peers/bench_rpc.py, written out from this binary)")
	keep := flag.String("keep", "", "directory to keep every run's JSON in")
	flag.Parse()

	dir, err := os.MkdirTemp("", "rpccmp")
	check(err)
	defer os.RemoveAll(dir)
	if *keep != "" {
		check(os.MkdirAll(*keep, 0o755))
		dir = *keep
	}
	bin := *godistBin
	if bin == "" {
		bin = filepath.Join(dir, "godist")
		fmt.Fprintln(os.Stderr, "rpccmp: go build ./cmd/godist")
		build := exec.Command("go", "build", "-o", bin, "github.com/godist/godist/cmd/godist")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		check(build.Run())
	}
	version, err := exec.Command(bin, "version").Output()
	check(err)
	if *script == "" {
		scripts, err := peers.Write(filepath.Join(dir, "peers"))
		check(err)
		*script = filepath.Join(scripts, "bench_rpc.py")
	}

	fmt.Printf("rpccmp: %s, %d rounds, target %v a case\n\n", time.Now().UTC().Format(time.RFC3339), *rounds, *target)
	fmt.Printf("- godist: %s\n", strings.Join(strings.Fields(string(version)), " "))
	torchVersion, torch := probeTorch(*python, *script)
	if torch != "" {
		fmt.Printf("- skipping PyTorch: %s\n", torch)
	} else {
		fmt.Printf("- PyTorch: %s, %s\n", torchVersion, filepath.Base(*script))
	}

	godistArgv := []string{bin, "bench", "--rpc", "--json", "--target", target.String(), "--rpc-cases", *cases}
	var godist, peer []run
	var notes []string
	for i := range *rounds {
		g := func() {
			out := filepath.Join(dir, fmt.Sprintf("godist_r%d.json", i+1))
			godist = append(godist, measure("godist", godistArgv, out, true, *timeout, &notes))
		}
		p := func() {
			if torch != "" {
				return
			}
			out := filepath.Join(dir, fmt.Sprintf("pytorch_r%d.json", i+1))
			argv := []string{*python, *script, "--target", strconv.FormatFloat(target.Seconds(), 'g', -1, 64),
				"--port", strconv.Itoa(freePort()), "--out", out}
			peer = append(peer, measure("PyTorch", argv, out, false, *timeout, &notes))
		}
		fmt.Fprintf(os.Stderr, "rpccmp: round %d of %d\n", i+1, *rounds)
		if i%2 == 0 {
			g()
			p()
		} else {
			p()
			g()
		}
	}

	var rows []string
	if *cases == "all" {
		rows = caseOrder(godist, peer)
	} else {
		rows = caseOrder(godist)
	}
	if len(notes) > 0 {
		fmt.Printf("\n%s\n", strings.Join(notes, "\n"))
	}
	fmt.Printf("\nEach side's median over the rounds (min..max); godist's advantage is PyTorch's latency over godist's,\n" +
		"or godist's throughput over PyTorch's (above 1, godist is faster), with the range of the rounds' ratios.\n\n")
	fmt.Print(renderTable(rows, godist, peer, "PyTorch"))
	if len(notes) > 0 {
		os.Exit(1)
	}
}

// measure runs argv, whose JSON lands in out (or on its stdout, which
// then goes to out), and returns its results. A failure is added to notes
// and gives an empty run; the end of its output goes to stderr.
func measure(label string, argv []string, out string, jsonOnStdout bool, timeout time.Duration, notes *[]string) run {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// bench_rpc.py and godist bench start their ranks as children: a
	// timeout kills the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v: %w", timeout, ctx.Err())
	}
	if err == nil && jsonOnStdout {
		err = os.WriteFile(out, stdout.Bytes(), 0o644)
	}
	var r run
	if err == nil {
		var raw []byte
		if raw, err = os.ReadFile(out); err == nil {
			r, err = parseRun(raw)
		}
	}
	if err != nil {
		os.Stderr.Write(tail(append(stdout.Bytes(), stderr.Bytes()...), 4000))
		*notes = append(*notes, fmt.Sprintf("- %s failed: %v (its output's end is on stderr)", label, err))
		return run{}
	}
	return r
}

// probeTorch returns torch's version, or says why bench_rpc.py cannot
// run here.
func probeTorch(python, script string) (version, missing string) {
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Sprintf("no %s: %v (--script)", filepath.Base(script), err)
	}
	v, err := exec.Command(python, "-c", "import torch.distributed.rpc, torch; print('torch', torch.__version__)").Output()
	if err != nil {
		return "", fmt.Sprintf("%s cannot import torch.distributed.rpc (Debian: python3-torch)", python)
	}
	return strings.TrimSpace(string(v)), ""
}

// freePort returns a loopback port free a moment ago, so that runs beside
// other bench_rpc.py runs do not collide on its fixed default.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func check(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "rpccmp: %v\n", err)
		os.Exit(1)
	}
}
