package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// testConfig is a small job whose trainers' bags share many rows of the
// table (20 rows, 8 bags of up to 10 indices a step).
func testConfig(steps int) config {
	return config{steps: steps, batch: 8, sizes: sizes{Rows: 20, Dim: 6}, lr: 0.1, seed: 3, timeout: 50 * time.Second}
}

// spawn runs the four workers as goroutines over the in-process transport
// and returns the master's result and every worker's log.
func spawn(t *testing.T, c config) (*result, string) {
	t.Helper()
	var (
		mu  sync.Mutex
		res *result
		log bytes.Buffer
	)
	disttest.SpawnWith(t, world, disttest.Options{Timeout: 60 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
		var buf bytes.Buffer
		r, err := run(context.Background(), g, c, &buf)
		mu.Lock()
		defer mu.Unlock()
		if g.Rank() == masterRank {
			res = r
		}
		log.Write(buf.Bytes())
		return err
	})
	if res == nil {
		t.Fatalf("no result from the master; log:\n%s", log.String())
	}
	return res, log.String()
}

// reference is a one-process training of the same model on the same
// batches.
type reference struct {
	losses       [trainers][]float64
	weight, bias *tensor.Tensor // final
	table        *tensor.Tensor // final
	// linGrads[step] are the layer's gradients averaged over the
	// trainers (weight, bias): what DDP leaves in each trainer's context.
	linGrads [][2]*tensor.Tensor
}

// trainLocal trains the model in one process with local autograd and
// optim.SGD, running the same code (hybrid.loss, embeddingBag.forward) with
// plain calls instead of RPCs. Each step it computes each trainer's loss
// and gradients from the same weights; the layer steps once with the
// average of the two trainers' gradients (DDP's), and the table steps
// twice, with trainer 0's gradient and then with trainer 1's (what each
// trainer's distributed optimizer does, in lockstep's order).
func trainLocal(c config) *reference {
	table := newEmbeddingBag(c.seed, c.sizes)
	lin := newLinear(c.seed, c.sizes, 0) // DDP broadcasts trainer 0's
	m := &hybrid{
		embed: func(_ context.Context, indices, offsets []int64) (*autograd.Var, error) {
			return table.forward(indices, offsets)
		},
		fc: lin,
	}
	tableW := table.emb.Weight
	tableOpt := optim.NewSGD([]*autograd.Var{tableW}, optim.SGDOptions{LR: c.lr})
	linOpt := optim.NewSGD(nn.Parameters(lin), optim.SGDOptions{LR: c.lr})
	ref := &reference{}
	for step := range c.steps {
		var tableGrads [trainers]*tensor.Tensor
		var avg [2]*tensor.Tensor
		for r := range trainers {
			tableOpt.ZeroGrad(true)
			linOpt.ZeroGrad(true)
			indices, offsets, target := batch(c.seed, r, step, c.batch, c.sizes.Rows)
			loss, err := m.loss(context.Background(), indices, offsets, target)
			if err != nil {
				panic(err)
			}
			if err := loss.Backward(nil); err != nil {
				panic(err)
			}
			ref.losses[r] = append(ref.losses[r], loss.Value().Item())
			tableGrads[r] = tableW.Grad()
			for k, p := range []*autograd.Var{lin.Weight, lin.Bias} {
				if avg[k] == nil {
					avg[k] = p.Grad().Clone()
				} else {
					avg[k].Add(avg[k], p.Grad())
				}
			}
		}
		for k, p := range []*autograd.Var{lin.Weight, lin.Bias} {
			avg[k].MulScalar(avg[k], 1.0/trainers)
			p.SetGrad(avg[k].Clone())
		}
		ref.linGrads = append(ref.linGrads, avg)
		linOpt.Step()
		for _, g := range tableGrads {
			tableW.SetGrad(g)
			tableOpt.Step()
		}
	}
	ref.weight, ref.bias, ref.table = lin.Weight.Value(), lin.Bias.Value(), tableW.Value()
	return ref
}

// gradRecorder keeps what inspect sees: each trainer's layer gradients in
// its context, step by step.
type gradRecorder struct {
	mu    sync.Mutex
	grads [trainers][][2]*tensor.Tensor
	errs  []string
}

func (g *gradRecorder) inspect(r, step int, lin *nn.Linear, grads map[*autograd.Var]*tensor.Tensor) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w, b := grads[lin.Weight], grads[lin.Bias]
	if w == nil || b == nil {
		g.errs = append(g.errs, fmt.Sprintf("trainer %d, step %d: the layer has no gradient in the context (weight %v, bias %v)", r, step+1, w != nil, b != nil))
	}
	if lin.Weight.Grad() != nil || lin.Bias.Grad() != nil {
		g.errs = append(g.errs, fmt.Sprintf("trainer %d, step %d: a distributed pass set the layer's Grad", r, step+1))
	}
	for len(g.grads[r]) <= step {
		g.grads[r] = append(g.grads[r], [2]*tensor.Tensor{})
	}
	g.grads[r][step] = [2]*tensor.Tensor{w.Clone(), b.Clone()}
}

func maxAbsDiff(a, b *tensor.Tensor) float64 {
	d := new(tensor.Tensor).Sub(a, b)
	var m float64
	for _, v := range d.Contiguous().Float32s() {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// TestMatchesOneProcess: with the trainers' optimizer steps in lockstep
// (trainer 0's, then trainer 1's, both before the next lookups), training
// across the four workers is the one-process training of trainLocal bit
// for bit: every trainer's loss of every step, the layer's gradient in
// each trainer's context after DDP's Wait at every step (the average of
// the two trainers' local gradients), both trainers' final layers and the
// final table. Without lockstep the table's updates interleave as they
// come (TestUnordered).
func TestMatchesOneProcess(t *testing.T) {
	const steps = 12
	c := testConfig(steps)
	c.keepParams, c.lockstep = true, true
	rec := &gradRecorder{}
	c.inspect = rec.inspect
	res, log := spawn(t, c)
	ref := trainLocal(c)
	for _, e := range rec.errs {
		t.Error(e)
	}
	if n := strings.Count(log, "\tloss "); n != trainers*steps {
		t.Errorf("%d loss lines, want %d:\n%s", n, trainers*steps, log)
	}
	for r, tr := range res.trainers {
		for i, l := range tr.Losses {
			if l != ref.losses[r][i] {
				t.Errorf("trainer %d, step %d: loss %.9g across 4 workers, %.9g in one process", r, i+1, l, ref.losses[r][i])
			}
		}
		t.Logf("trainer %d: losses %.5g", r, tr.Losses)
		for step, g := range rec.grads[r] {
			for k, name := range []string{"weight", "bias"} {
				if !tensor.Equal(g[k], ref.linGrads[step][k]) {
					t.Errorf("trainer %d, step %d: the layer's %s gradient in the context differs from the trainers' average by up to %g",
						r, step+1, name, maxAbsDiff(g[k], ref.linGrads[step][k]))
				}
			}
		}
		if len(rec.grads[r]) != steps {
			t.Errorf("trainer %d: inspected %d steps, want %d", r, len(rec.grads[r]), steps)
		}
		if !tensor.Equal(tr.Weight, ref.weight) || !tensor.Equal(tr.Bias, ref.bias) {
			t.Errorf("trainer %d: final layer differs from one process's by up to %g (weight), %g (bias)",
				r, maxAbsDiff(tr.Weight, ref.weight), maxAbsDiff(tr.Bias, ref.bias))
		}
	}
	if !tensor.Equal(res.table, ref.table) {
		t.Errorf("final table differs from one process's by up to %g", maxAbsDiff(res.table, ref.table))
	}
	first := (ref.losses[0][0] + ref.losses[1][0]) / 2
	last := (ref.losses[0][steps-1] + ref.losses[1][steps-1]) / 2
	if res.LossFirst != first || res.LossLast != last || res.Steps != steps || res.Trainers != trainers ||
		res.Batch != c.batch || !(res.WallS > 0) || !(res.SamplesPerS > 0) {
		t.Errorf("result %+v; want losses %v then %v", res, first, last)
	}
	if !(last < first) {
		t.Errorf("the mean loss did not fall in %d steps: %v to %v", steps, first, last)
	}
}

// TestUnordered runs the example as it is, the trainers stepping the
// table whenever they get there. The first step is still exact: both
// trainers look their bags up before either steps (a trainer steps after
// DDP's Wait, which needs the other's gradients, which need its lookup),
// so the layer's gradient of step 1 in each trainer's context is the
// one-process average bit for bit. DDP keeps both trainers' layers equal
// bit for bit throughout. After that, a trainer's lookup may or may not
// see the other's last update of the table, and two updates of a row
// round differently in either order, so the final parameters are only
// near trainLocal's. A lookup that misses an update sees the table one
// learning-rate step of that row off, which changes the gradients, and so
// the parameters, by second-order amounts: over 20 runs of 8 steps the
// largest differences were 1.1e-3 (layer weight), 1.4e-4 (bias) and
// 1.8e-4 (table), against total moves of 0.22, 0.046 and 0.073 from the
// initial values; the test allows 0.01, which a lost update of the table
// or the layer would exceed. The log says how large they were.
func TestUnordered(t *testing.T) {
	const steps = 8
	c := testConfig(steps)
	c.keepParams = true
	rec := &gradRecorder{}
	c.inspect = rec.inspect
	res, _ := spawn(t, c)
	ref := trainLocal(c)
	for _, e := range rec.errs {
		t.Error(e)
	}
	for r := range trainers {
		for k, name := range []string{"weight", "bias"} {
			if g := rec.grads[r][0][k]; !tensor.Equal(g, ref.linGrads[0][k]) {
				t.Errorf("trainer %d, step 1: the layer's %s gradient in the context differs from the trainers' average by up to %g",
					r, name, maxAbsDiff(g, ref.linGrads[0][k]))
			}
		}
		if l := res.trainers[r].Losses[0]; l != ref.losses[r][0] {
			t.Errorf("trainer %d, step 1: loss %.9g, one process %.9g", r, l, ref.losses[r][0])
		}
	}
	t0, t1 := res.trainers[0], res.trainers[1]
	if !tensor.Equal(t0.Weight, t1.Weight) || !tensor.Equal(t0.Bias, t1.Bias) {
		t.Errorf("the trainers' layers differ by up to %g (weight), %g (bias)", maxAbsDiff(t0.Weight, t1.Weight), maxAbsDiff(t0.Bias, t1.Bias))
	}
	dw, db, dt := maxAbsDiff(t0.Weight, ref.weight), maxAbsDiff(t0.Bias, ref.bias), maxAbsDiff(res.table, ref.table)
	t.Logf("after %d steps, largest differences from the one-process training: layer weight %g, bias %g, table %g", steps, dw, db, dt)
	const tol = 0.01
	if dw > tol || db > tol || dt > tol {
		t.Errorf("after %d steps the parameters differ from the one-process training by %g (weight), %g (bias), %g (table): more than %g", steps, dw, db, dt, tol)
	}
}

// TestEmbeddingBag checks the bag sums against sums written out, the
// table's gradient (each row's count of uses under a sum of everything),
// an empty bag, and that bad input is an error.
func TestEmbeddingBag(t *testing.T) {
	s := sizes{Rows: 7, Dim: 3}
	tb := newEmbeddingBag(5, s)
	w := tb.emb.Weight.Value()
	indices := []int64{1, 6, 1, 0, 3, 3, 3}
	offsets := []int64{0, 3, 3, 4}
	out, err := tb.forward(indices, offsets)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Shape(); len(got) != 2 || got[0] != 4 || got[1] != 3 {
		t.Fatalf("shape %v, want [4 3]", got)
	}
	bags := [][]int64{{1, 6, 1}, {}, {0}, {3, 3, 3}}
	for b, bag := range bags {
		for d := range s.Dim {
			var want float64
			for _, i := range bag {
				want += float64(w.At(int(i), d))
			}
			if got := float64(out.Value().At(b, d)); math.Abs(got-want) > 1e-5 {
				t.Errorf("bag %d, column %d: %g, want %g", b, d, got, want)
			}
		}
	}
	if err := autograd.SumAll(out).Backward(nil); err != nil {
		t.Fatal(err)
	}
	counts := []float64{1, 2, 0, 3, 0, 0, 1}
	for r, n := range counts {
		for d := range s.Dim {
			if g := tb.emb.Weight.Grad().At(r, d); g != n {
				t.Errorf("gradient of row %d, column %d: %g, want %g", r, d, g, n)
			}
		}
	}
	for _, bad := range []struct{ indices, offsets []int64 }{
		{nil, []int64{0}}, {[]int64{1}, nil}, {[]int64{1, 2}, []int64{1}},
		{[]int64{1, 2}, []int64{0, 2, 1}}, {[]int64{1, 2}, []int64{0, 3}}, {[]int64{1, 7}, []int64{0}}, {[]int64{-1}, []int64{0}},
	} {
		if _, err := tb.forward(bad.indices, bad.offsets); err == nil {
			t.Errorf("indices %v, offsets %v: no error", bad.indices, bad.offsets)
		}
	}
}

// TestBatch: a batch depends on the seed, the trainer and the step only,
// and is well formed.
func TestBatch(t *testing.T) {
	i1, o1, y1 := batch(3, 0, 5, 8, 20)
	i2, o2, y2 := batch(3, 0, 5, 8, 20)
	if fmt.Sprint(i1, o1) != fmt.Sprint(i2, o2) || !tensor.Equal(y1, y2) {
		t.Fatal("the same batch drawn twice differs")
	}
	for _, other := range [][3]int{{4, 0, 5}, {3, 1, 5}, {3, 0, 6}} {
		i3, _, _ := batch(uint64(other[0]), other[1], other[2], 8, 20)
		if fmt.Sprint(i3) == fmt.Sprint(i1) {
			t.Errorf("seed, trainer, step %v: the same indices as %v", other, [3]int{3, 0, 5})
		}
	}
	if len(o1) != 8 || o1[0] != 0 || y1.Size(0) != 8 {
		t.Fatalf("offsets %v, %d targets", o1, y1.Size(0))
	}
	for b := range o1 {
		end := int64(len(i1))
		if b+1 < len(o1) {
			end = o1[b+1]
		}
		if n := end - o1[b]; n < 1 || n > maxBag {
			t.Errorf("bag %d has %d indices", b, n)
		}
	}
	for _, i := range i1 {
		if i < 0 || i >= 20 {
			t.Errorf("index %d", i)
		}
	}
	for _, y := range y1.Int64s() {
		if y < 0 || y >= classes {
			t.Errorf("target %d", y)
		}
	}
}

func TestWorldSize(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		_, err := run(context.Background(), g, testConfig(1), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--nproc-per-node 4") {
			t.Errorf("world size 3: %v", err)
		}
		return nil
	})
}

// TestLauncher builds the launcher and the example and runs them as the
// package doc says, four processes under godist run: the master's JSON
// line ends stdout, and each trainer logs a loss a step.
func TestLauncher(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the launcher")
	}
	dir := t.TempDir()
	godist, prog := filepath.Join(dir, "godist"), filepath.Join(dir, "rpc-ddp")
	for _, b := range [][2]string{{godist, "github.com/godist/godist/cmd/godist"}, {prog, "github.com/godist/godist/examples/rpc-ddp"}} {
		if out, err := exec.Command("go", "build", "-o", b[0], b[1]).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b[1], err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const steps = 5
	cmd := exec.CommandContext(ctx, godist, "run", "--standalone", "--nproc-per-node", "4",
		prog, "--steps", fmt.Sprint(steps), "--batch", "8", "--rows", "30", "--dim", "8", "--timeout", "50s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Env = &stdout, &stderr, os.Environ()
	if err := cmd.Run(); err != nil {
		t.Fatalf("godist run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	// The launcher marks each line with its rank; the master is rank 2.
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last, ok := strings.CutPrefix(lines[len(lines)-1], fmt.Sprintf("[rank %d] ", masterRank))
	var res result
	if err := json.Unmarshal([]byte(last), &res); !ok || err != nil {
		t.Fatalf("last line of stdout: %v\n%s", err, stdout.String())
	}
	if res.Steps != steps || res.Trainers != trainers || res.Batch != 8 || !(res.LossFirst > 0) || !(res.LossLast > 0) ||
		!(res.WallS > 0) || !(res.SamplesPerS > 0) {
		t.Errorf("result %+v", res)
	}
	for r := range trainers {
		if n := strings.Count(stderr.String(), trainerName(r)+" step "); n != steps {
			t.Errorf("%d loss lines of %s, want %d:\n%s", n, trainerName(r), steps, stderr.String())
		}
	}
}
