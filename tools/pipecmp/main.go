// Command pipecmp runs examples/rpc-pipeline under godist run and its
// PyTorch twin (tools/peers/rpc_pipeline.py, carried in this binary) for a
// few rounds, one after the other, and prints one markdown table: each
// round's samples/s of both and their ratio (godist over PyTorch: above
// 1, godist is faster), both test accuracies, and the ratio's median and
// range over the rounds.
//
//	go run ./tools/pipecmp                          # 3 rounds of 300 steps
//	go run ./tools/pipecmp --rounds 5 --steps 0     # whole epochs
//
// The rounds alternate which goes first (godist, PyTorch; PyTorch,
// godist; ...), so that a machine growing busier or quieter weighs on
// both. Both train the same CNN shards from the same weights on the same
// batches (the full Fashion-MNIST when installed), so the accuracies
// should agree to about a percent.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/godist/godist/tools/peers"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each runs both once")
	steps := flag.Int("steps", 300, "steps of each run (0: whole epochs)")
	epochs := flag.Int("epochs", 1, "epochs of each run")
	batch := flag.Int("batch", 64, "batch size")
	micro := flag.Int("micro-batches", 4, "micro-batches a batch")
	lr := flag.Float64("lr", 0.05, "SGD's learning rate")
	python := flag.String("python", "/usr/bin/python3", "Python with torch (Debian's python3-torch)")
	timeout := flag.Duration("timeout", 10*time.Minute, "limit for one run; it is killed when it passes")
	flag.Parse()

	dir, err := os.MkdirTemp("", "pipecmp")
	check(err)
	defer os.RemoveAll(dir)
	godist, example := filepath.Join(dir, "godist"), filepath.Join(dir, "rpc-pipeline")
	for _, b := range [][2]string{{godist, "./cmd/godist"}, {example, "./examples/rpc-pipeline"}} {
		fmt.Fprintln(os.Stderr, "pipecmp: go build", b[1])
		build := exec.Command("go", "build", "-o", b[0], "github.com/godist/godist/"+strings.TrimPrefix(b[1], "./"))
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		check(build.Run())
	}
	scripts, err := peers.Write(filepath.Join(dir, "peers"))
	check(err)
	args := []string{"--epochs", strconv.Itoa(*epochs), "--max-steps", strconv.Itoa(*steps), "--batch", strconv.Itoa(*batch),
		"--micro-batches", strconv.Itoa(*micro), "--lr", strconv.FormatFloat(*lr, 'g', -1, 64), "--log-interval", "0"}
	sides := []side{
		{name: "godist", argv: append([]string{godist, "run", "--standalone", "--nproc-per-node", "3", example}, args...)},
		{name: "PyTorch", argv: append([]string{*python, filepath.Join(scripts, "rpc_pipeline.py")}, args...)},
	}
	var rs []round
	for i := range *rounds {
		var r round
		for k := range 2 {
			s := sides[(i+k)%2]
			fmt.Fprintf(os.Stderr, "pipecmp: round %d: %s\n", i+1, s.name)
			res, err := s.run(*timeout)
			if err != nil {
				fmt.Fprintf(os.Stderr, "pipecmp: round %d: %s: %v\n", i+1, s.name, err)
				os.Exit(1)
			}
			if s.name == "godist" {
				r.godist = res
			} else {
				r.torch = res
			}
		}
		rs = append(rs, r)
	}
	fmt.Printf("pipecmp: %s, %d rounds; batch %d in %d micro-batches, %s, SGD lr %g; 3 processes each on %d CPUs\n\n",
		time.Now().UTC().Format(time.RFC3339), *rounds, *batch, *micro, describe(*epochs, *steps), *lr, runtime.NumCPU())
	fmt.Print(table(rs))
}

func describe(epochs, steps int) string {
	if steps > 0 {
		return fmt.Sprintf("%d steps", epochs*steps)
	}
	return fmt.Sprintf("%d epochs", epochs)
}

type side struct {
	name string
	argv []string
}

// run runs the side once and returns the samples/s and test accuracy of
// its JSON line.
func (s side) run(limit time.Duration) (measure, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.argv[0], s.argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return measure{}, fmt.Errorf("%v\n%s", err, tail(errb.String(), 2000))
	}
	m, err := parse(out.String())
	if err != nil {
		return measure{}, fmt.Errorf("%v\nstdout:\n%s", err, tail(out.String(), 2000))
	}
	return m, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipecmp:", err)
		os.Exit(1)
	}
}
