// Command launcher-allreduce is a small worker for `godist run` (and for
// Slurm, mpirun and spawn.Run): it joins its group through env://, runs
// --steps all-reduces, and prints the sum of their results from rank 0.
// Under `godist run --rdzv-backend etcd` its store is etcd's (it imports
// store/etcdstore, which registers etcd:// for dist.Init). It can resume
// from a checkpoint file, kill itself or panic at a step
// (to test restarts and the root-cause report), and wait for the world
// size an elastic job grows to.
//
//	godist run --standalone --nproc-per-node 3 ./launcher-allreduce --steps 20
//	godist run --standalone --nproc-per-node 2 --max-restarts 3 ./launcher-allreduce \
//		--steps 20 --checkpoint /tmp/ckpt --kill-rank 1 --kill-at 7
//
// Step s all-reduces (rank+1)·(s+1) from every rank, so that the result of
// an uninterrupted run is Σ_s (s+1)·W(W+1)/2, which rank 0 prints as
// "RESULT <n> WORLD_SIZE <w>". With --count it also all-reduces a vector
// (with --gather, all-gathers and reduce-scatters one too) and checks
// every element. With --log it says which peers it does not share
// memory with, and why (on other hosts, say).
package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/store"
	_ "github.com/godist/godist/store/etcdstore" // etcd:// (godist run --rdzv-backend etcd)
	"github.com/godist/godist/tensor"
)

func main() {
	steps := flag.Int("steps", 10, "all-reduce steps")
	ckpt := flag.String("checkpoint", "", "resume from, and after each step write (rank 0), this `file`")
	killAt := flag.Int("kill-at", -1, "on the first attempt (GODIST_RESTART_COUNT=0), SIGKILL this process at `step`")
	killRank := flag.Int("kill-rank", 0, "the rank that --kill-at and --panic-at apply to")
	panicAt := flag.Int("panic-at", -1, "panic at `step` on --kill-rank (every attempt)")
	waitWorld := flag.Int("wait-world", 0, "print WORLD_SIZE and wait (until stopped) while it is below `n`")
	sleep := flag.Duration("step-sleep", 0, "sleep this long in every step")
	progress := flag.Bool("progress", false, "print STEP <s> WORLD_SIZE <w> after each step (every rank)")
	count := flag.Int("count", 0, "also all-reduce a float32 vector of `n` elements each step, check every element, and (rank 0) print the group's hosts and the algorithm chosen for it")
	gather := flag.Bool("gather", false, "with --count, also all-gather n elements (n/world a rank) and reduce-scatter them back each step, check every element, and (rank 0) print the algorithms chosen for them")
	logFallbacks := flag.Bool("log", false, "log to stderr what dist falls back from (shared memory not used with some peers, and why: on other hosts, say)")
	flag.Parse()

	ws, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	if *waitWorld > 0 && ws < *waitWorld {
		fmt.Printf("WORLD_SIZE %d, waiting for %d\n", ws, *waitWorld)
		for {
			time.Sleep(time.Second)
		}
	}
	ctx := context.Background()
	opt := dist.Options{Timeout: time.Minute}
	if *logFallbacks {
		opt.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	g, err := dist.Init(ctx, opt)
	if err != nil {
		dist.RecordError(err)
		fmt.Fprintf(os.Stderr, "launcher-allreduce: %v\n", err)
		os.Exit(1)
	}
	rank, world := g.Rank(), g.Size()
	start, acc := 0, int64(0)
	if *ckpt != "" {
		if b, err := os.ReadFile(*ckpt); err == nil {
			f := strings.Fields(string(b))
			if len(f) == 2 {
				start, _ = strconv.Atoi(f[0])
				acc, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
		if rank == 0 && start > 0 {
			fmt.Printf("resuming at step %d (restart %s)\n", start, os.Getenv("GODIST_RESTART_COUNT"))
		}
	}
	first := os.Getenv("GODIST_RESTART_COUNT") == "0" || os.Getenv("GODIST_RESTART_COUNT") == ""
	if rank == 0 && *count > 0 {
		c, _ := g.Choice("all_reduce", *count, tensor.Float32)
		fmt.Printf("HOSTS %v ALGO %s PREDICTED %v MODEL %v\n", g.Topology().Hosts, c.Algo, c.Predicted, g.Model())
		if *gather {
			n := max(1, *count/world) * world
			ag, _ := g.Choice("all_gather", n, tensor.Float32)
			rs, _ := g.Choice("reduce_scatter", n, tensor.Float32)
			fmt.Printf("GATHER %s SCATTER %s\n", ag.Algo, rs.Algo)
		}
	}
	for s := start; s < *steps; s++ {
		if rank == *killRank && s == *killAt && first {
			fmt.Fprintf(os.Stderr, "rank %d: killing myself at step %d\n", rank, s)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		if rank == *killRank && s == *panicAt {
			panic(fmt.Sprintf("boom at step %d", s))
		}
		t := tensor.FromInt64([]int64{int64(rank+1) * int64(s+1)}, 1)
		if err := g.AllReduce(ctx, t, dist.Sum); err != nil {
			dist.RecordError(err) // for the launcher's root-cause report
			fmt.Fprintf(os.Stderr, "launcher-allreduce: rank %d step %d: %v\n", rank, s, err)
			os.Exit(1)
		}
		acc += int64(t.Item())
		if *count > 0 {
			err := checkVector(ctx, g, *count, s)
			if err == nil && *gather {
				err = checkGather(ctx, g, *count, s)
			}
			if err != nil {
				dist.RecordError(err)
				fmt.Fprintf(os.Stderr, "launcher-allreduce: rank %d step %d: %v\n", rank, s, err)
				os.Exit(1)
			}
		}
		if *progress {
			fmt.Printf("STEP %d WORLD_SIZE %d\n", s, world)
		}
		if rank == 0 && *ckpt != "" {
			tmp := *ckpt + ".tmp"
			os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", s+1, acc)), 0o644)
			os.Rename(tmp, *ckpt)
		}
		time.Sleep(*sleep)
	}
	if rank == 0 {
		fmt.Printf("RESULT %d WORLD_SIZE %d\n", acc, world)
	}
	if err := leaveTogether(ctx, g); err != nil {
		dist.RecordError(err)
		fmt.Fprintf(os.Stderr, "launcher-allreduce: rank %d: leaving: %v\n", rank, err)
		os.Exit(1)
	}
}

// checkVector all-reduces n elements, element i of rank r being
// (r+1)·(s+1) + i mod 7, and checks the sums.
func checkVector(ctx context.Context, g *dist.Group, n, s int) error {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32((g.Rank()+1)*(s+1) + i%7)
	}
	t := tensor.FromFloat32(x, n)
	if err := g.AllReduce(ctx, t, dist.Sum); err != nil {
		return err
	}
	w := g.Size()
	for i, v := range t.Float32s() {
		if want := float32((s+1)*w*(w+1)/2 + w*(i%7)); v != want {
			return fmt.Errorf("all-reduce of %d elements: element %d is %v, want %v", n, i, v, want)
		}
	}
	return nil
}

// checkGather all-gathers max(1, n/W) elements a rank, element i of rank
// r's being r·(n/W) + i + s (so that the output's element j is j + s),
// reduce-scatters the output back (rank r's chunk then holds W times its
// input), and checks both.
func checkGather(ctx context.Context, g *dist.Group, n, s int) error {
	w, r := g.Size(), g.Rank()
	per := max(1, n/w)
	x := make([]float32, per)
	for i := range x {
		x[i] = float32(r*per + i + s)
	}
	out := tensor.New(tensor.Float32, per*w)
	if err := g.AllGatherIntoTensor(ctx, out, tensor.FromFloat32(x, per)); err != nil {
		return err
	}
	for j, v := range out.Float32s() {
		if want := float32(j + s); v != want {
			return fmt.Errorf("all-gather of %d elements a rank: element %d is %v, want %v", per, j, v, want)
		}
	}
	back := tensor.New(tensor.Float32, per)
	if err := g.ReduceScatterTensor(ctx, back, out, dist.Sum); err != nil {
		return err
	}
	for i, v := range back.Float32s() {
		if want := float32(w * (r*per + i + s)); v != want {
			return fmt.Errorf("reduce-scatter of %d elements a rank: element %d is %v, want %v", per, i, v, want)
		}
	}
	return nil
}

// leaveTogether keeps rank 0 (which serves the store) up until every
// rank is done with it, then destroys the group. A store that no rank
// serves (GODIST_INIT_METHOD=etcd://..., from godist run --rdzv-backend
// etcd) needs no such care.
func leaveTogether(ctx context.Context, g *dist.Group) error {
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if m := os.Getenv("GODIST_INIT_METHOD"); m != "" && !strings.HasPrefix(m, "env://") {
		g.Destroy()
		return nil
	}
	rank, world := g.Rank(), g.Size()
	env, err := dist.ReadEnv()
	if err != nil {
		return err
	}
	tok := os.Getenv("GODIST_TOKEN")
	var token []byte
	if tok != "" {
		token = []byte(tok)
		if b, err := hex.DecodeString(tok); err == nil {
			token = b
		}
	}
	st, err := store.Dial(ctx, net.JoinHostPort(env.MasterAddr, strconv.Itoa(env.MasterPort)),
		store.DialOptions{Token: token, JobID: g.JobID(), Rank: rank, Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	defer st.Close()
	if rank != 0 {
		st.Set(ctx, "launcher-allreduce/gone/"+strconv.Itoa(rank), nil)
		g.Destroy()
		return nil
	}
	for r := 1; r < world; r++ {
		if err := st.Wait(ctx, "launcher-allreduce/gone/"+strconv.Itoa(r)); err != nil {
			return err
		}
	}
	g.Destroy()
	return nil
}
