// Command corebench measures the local training core for `make bench` and
// prints the README's table: GEMM GFLOP/s (one thread, or --threads, as
// PyTorch's set_num_threads gets too) of the pure-Go and
// OpenBLAS builds (OpenBLAS with and without OPENBLAS_CORETYPE, which needs
// a fresh process each), and milliseconds per training step of five models
// (stepModels: the MLP, LeNet, the LSTM and GRU classifiers and a
// transformer block) beside PyTorch's (torch_step.py), measured in the same
// run.
//
//	go run -tags openblas ./tools/corebench
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/internal/blas"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

var shapes = [][3]int{{64, 784, 256}, {256, 256, 256}, {1024, 1024, 1024}}

// stepModel is a model whose training step corebench times: its name (as
// torch_step.py knows it too), its row's label, and div: a timing run
// takes --steps/div steps, so that the slower steps do not make the run
// long.
type stepModel struct {
	name, label string
	div         int
}

var stepModels = []stepModel{
	{"mlp", "MLP train step, batch 64, SGD, ms", 1},
	{"lenet", "LeNet train step, batch 64, SGD, ms", 1},
	{"lstm", "LSTM classifier train step, batch 64, Adam, ms", 4},
	{"gru", "GRU classifier train step, batch 64, Adam, ms", 4},
	{"block", "Transformer block train step, 8×128 tokens, width 128, AdamW, ms", 10},
}

func (m stepModel) steps(steps int) int { return max(1, steps/m.div) }

// run is one measuring process and the environment it gets.
type run struct {
	label string
	env   []string
}

type report struct {
	Impls map[string]implReport `json:"impls"`
}

type implReport struct {
	Gemm      map[string]float64 `json:"gemm"`
	MsPerStep map[string]float64 `json:"ms_per_step"`
}

type torchReport struct {
	Torch     string             `json:"torch"`
	BLAS      string             `json:"blas"`
	MKLDNN    bool               `json:"mkldnn"`
	Gemm      map[string]float64 `json:"gemm"`
	MsPerStep map[string]float64 `json:"ms_per_step"`
}

func main() {
	child := flag.Bool("child", false, "measure and print JSON (internal)")
	python := flag.String("python", "/usr/bin/python3", "Python with PyTorch for the peer's numbers (empty: skip)")
	steps := flag.Int("steps", 200, "training steps per timing run (of the MLP and LeNet; fewer of the slower models, see stepModels)")
	reps := flag.Int("reps", 5, "timing runs (the median is reported)")
	threads := flag.Int("threads", 1, "threads for both sides: GOMAXPROCS (godist's products spread over it) and PyTorch's set_num_threads")
	flag.Parse()
	runtime.GOMAXPROCS(max(1, *threads))
	if *child {
		r := measure(*steps, *reps)
		json.NewEncoder(os.Stdout).Encode(r)
		return
	}

	// Two Go processes: the environment as given, and (if it sets it)
	// without OPENBLAS_CORETYPE, which OpenBLAS reads when it loads.
	runs := []run{{"env as given", os.Environ()}}
	if ct, ok := os.LookupEnv("OPENBLAS_CORETYPE"); ok {
		runs[0].label = "OPENBLAS_CORETYPE=" + ct
		runs = append(runs, run{"OPENBLAS_CORETYPE unset", slices.DeleteFunc(os.Environ(), func(s string) bool {
			return strings.HasPrefix(s, "OPENBLAS_CORETYPE=")
		})})
	}
	self, err := os.Executable()
	check(err)
	results := make([]report, len(runs))
	for i, r := range runs {
		cmd := exec.Command(self, "-child", fmt.Sprint("-steps=", *steps), fmt.Sprint("-reps=", *reps), fmt.Sprint("-threads=", *threads))
		cmd.Env = append(r.env, fmt.Sprint("OMP_NUM_THREADS=", *threads), fmt.Sprint("OPENBLAS_NUM_THREADS=", *threads))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		check(err)
		check(json.Unmarshal(out, &results[i]))
	}
	var torch *torchReport
	if *python != "" {
		torch = runTorch(*python, *steps, *reps, *threads)
	}
	printTable(results, runs, torch, *threads)
}

func runTorch(python string, steps, reps, threads int) *torchReport {
	script := filepath.Join(sourceDir(), "torch_step.py")
	var runs []string
	for _, m := range stepModels {
		runs = append(runs, fmt.Sprint(m.name, ":", m.steps(steps)))
	}
	cmd := exec.Command(python, script, "--models="+strings.Join(runs, ","), fmt.Sprint("--reps=", reps), fmt.Sprint("--threads=", threads))
	cmd.Env = append(os.Environ(), fmt.Sprint("OMP_NUM_THREADS=", threads))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "corebench: PyTorch not measured (%v): %s\n", err, firstLine(stderr.String()))
		return nil
	}
	var t torchReport
	check(json.Unmarshal(out, &t))
	return &t
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// sourceDir finds this command's directory (for torch_step.py) from the
// working directory, which is the repository root under `make bench`.
func sourceDir() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "tools", "corebench")
		if _, err := os.Stat(filepath.Join(p, "torch_step.py")); err == nil {
			return p
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func measure(steps, reps int) report {
	impls := []blas.Impl{blas.PureGo()}
	if blas.Default.Name() != blas.PureGo().Name() {
		impls = append(impls, blas.Default)
	}
	r := report{Impls: map[string]implReport{}}
	for _, impl := range impls {
		blas.Default = impl
		ir := implReport{Gemm: map[string]float64{}, MsPerStep: map[string]float64{}}
		for _, s := range shapes {
			ir.Gemm[key(s)] = gemmGFLOPs(impl, s, reps)
		}
		for _, m := range stepModels {
			ir.MsPerStep[m.name] = stepMs(m.name, m.steps(steps), reps)
		}
		r.Impls[impl.Name()] = ir
	}
	return r
}

func key(s [3]int) string { return fmt.Sprintf("%dx%dx%d", s[0], s[1], s[2]) }

func gemmGFLOPs(impl blas.Impl, s [3]int, reps int) float64 {
	m, k, n := s[0], s[1], s[2]
	rng := tensor.NewRNG(1)
	a, b, c := tensor.Randn(rng, m, k).Float32s(), tensor.Randn(rng, k, n).Float32s(), make([]float32, m*n)
	flops := 2 * float64(m*n*k)
	iters := max(1, int(2e8/flops))
	var runs []float64
	for r := range reps + 1 {
		t0 := time.Now()
		for range iters {
			impl.Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		}
		if r > 0 {
			runs = append(runs, flops*float64(iters)/time.Since(t0).Seconds()/1e9)
		}
	}
	return median(runs)
}

// trainer is one model's training step: its optimizer, and its loss on a
// fixed batch (the forward pass).
type trainer struct {
	opt  optim.Optimizer
	loss func() *autograd.Var
}

// newTrainer returns the model called name with its batch, loss and
// optimizer, as torch_step.py's make_trainer builds its twin:
//
//   - mlp, lenet: models.MLP and LeNet on a (64, 1, 28, 28)
//     batch, cross-entropy, SGD lr 0.01 momentum 0.9;
//   - lstm, gru: models.LSTMClassifier and GRUClassifier (1
//     layer, hidden 64) over the 28 rows of a (64, 28, 28) batch,
//     cross-entropy, Adam lr 1e-3;
//   - block: one causal pre-LayerNorm nn.TransformerBlock (width 128, 4
//     heads, GELU MLP of 512, no dropout) on a (8, 128, 128) batch, MSE
//     against a fixed random target, AdamW lr 1e-3 weight decay 0.01.
func newTrainer(name string) trainer {
	rng := tensor.NewRNG(0)
	labels := func() *tensor.Tensor {
		l := make([]int64, 64)
		for i := range l {
			l[i] = int64(rng.IntN(10))
		}
		return tensor.FromInt64(l)
	}
	switch name {
	case "mlp", "lenet":
		net, err := models.New(name, rng)
		check(err)
		x := autograd.Const(tensor.Randn(rng, 64, 1, 28, 28))
		y := labels()
		return trainer{
			optim.NewSGD(nn.Parameters(net), optim.SGDOptions{LR: 0.01, Momentum: 0.9}),
			func() *autograd.Var { return nn.CrossEntropy(nn.Call(net, x), y) },
		}
	case "lstm", "gru":
		net := models.LSTMClassifier(rng)
		if name == "gru" {
			net = models.GRUClassifier(rng)
		}
		x := autograd.Const(tensor.Randn(rng, 64, 28, 28))
		y := labels()
		return trainer{
			optim.NewAdam(nn.Parameters(net), optim.AdamOptions{LR: 1e-3}),
			func() *autograd.Var { return nn.CrossEntropy(nn.Call(net, x), y) },
		}
	case "block":
		net := nn.NewTransformerBlock(rng, 128, 4, 4*128, 0, true)
		x := autograd.Const(tensor.Randn(rng, 8, 128, 128))
		y := autograd.Const(tensor.Randn(rng, 8, 128, 128))
		return trainer{
			optim.NewAdamW(nn.Parameters(net), optim.AdamOptions{LR: 1e-3, WeightDecay: 0.01}),
			func() *autograd.Var { return nn.MSELoss(nn.Call(net, x), y) },
		}
	}
	check(fmt.Errorf("no model %q", name))
	return trainer{}
}

// stepMs returns the median over reps timing runs (after one that warms
// up) of the milliseconds per step of steps training steps of model.
func stepMs(model string, steps, reps int) float64 {
	t := newTrainer(model)
	var runs []float64
	for r := range reps + 1 {
		t0 := time.Now()
		for range steps {
			t.opt.ZeroGrad(true)
			t.loss().Backward(nil)
			t.opt.Step()
		}
		if r > 0 {
			runs = append(runs, float64(time.Since(t0).Microseconds())/1e3/float64(steps))
		}
	}
	return median(runs)
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func printTable(results []report, runs []run, torch *torchReport, threads int) {
	fmt.Printf("%d thread(s) (GOMAXPROCS=%d, OMP/OPENBLAS_NUM_THREADS=%d, PyTorch's set_num_threads(%d)), median of runs, measured %s.\n\n", threads, threads, threads, threads, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	type col struct {
		name string
		ir   implReport
	}
	var cols []col
	for i, r := range results {
		for _, name := range sortedKeys(r.Impls) {
			if i > 0 && !strings.Contains(name, "openblas") {
				continue // the pure-Go build does not read OPENBLAS_CORETYPE
			}
			label := name
			if strings.Contains(name, "openblas") {
				label += " (" + runs[i].label + ")"
			}
			cols = append(cols, col{label, r.Impls[name]})
		}
	}
	header := "| | " + strings.Join(mapCols(cols, func(c col) string { return "godist " + c.name }), " | ")
	sep := "|---|" + strings.Repeat("---|", len(cols))
	if torch != nil {
		header += fmt.Sprintf(" | PyTorch %s (BLAS %s, mkldnn %v)", torch.Torch, torch.BLAS, torch.MKLDNN)
		sep += "---|"
	}
	fmt.Println(header + " |")
	fmt.Println(sep)
	for _, s := range shapes {
		row := fmt.Sprintf("| GEMM %d×%d·%d×%d GFLOP/s |", s[0], s[1], s[1], s[2])
		for _, c := range cols {
			row += fmt.Sprintf(" %.1f |", c.ir.Gemm[key(s)])
		}
		if torch != nil {
			row += fmt.Sprintf(" %.1f |", torch.Gemm[key(s)])
		}
		fmt.Println(row)
	}
	for _, sm := range stepModels {
		m := sm.name
		row := fmt.Sprintf("| %s |", sm.label)
		for _, c := range cols {
			row += fmt.Sprintf(" %.2f", c.ir.MsPerStep[m])
			if torch != nil {
				row += fmt.Sprintf(" (%.2f× PyTorch)", c.ir.MsPerStep[m]/torch.MsPerStep[m])
			}
			row += " |"
		}
		if torch != nil {
			row += fmt.Sprintf(" %.2f |", torch.MsPerStep[m])
		}
		fmt.Println(row)
	}
}

func mapCols[T any](xs []T, f func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "corebench:", err)
		os.Exit(1)
	}
}
