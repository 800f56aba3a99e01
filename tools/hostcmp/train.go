package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/godist/godist/tools/clustertest"
)

// Training across hosts (--train): DDP on Fashion-MNIST, godist's
// examples/ddp-fashion-mnist under godist run on each host beside
// PyTorch's DDP over gloo (peers/train_ddp.py, the same models, batch,
// optimizer and data) under torchrun on each host, and the tiny GPT
// (gpt.go), in interleaved rounds whose order rotates. Each host is pinned to one CPU (a one-CPU host
// runs one rank: --configs HxR gives R anyway), and the one-host
// configuration is the base of the scaling efficiency:
// samples/s over h hosts ÷ (the one-host samples/s × the CPUs the h
// hosts have between them), 100% when the hosts add their CPUs' worth.

// trainConfigs are --train's labs by default: the one-host base, 2 and 4
// hosts at 1 and 10 Gbit/s.
const trainConfigs = "1x1,2x1@1G,4x1@1G,2x1@10G,4x1@10G"

// trainResult is what one training run reports (rank 0's JSON line).
type trainResult struct {
	// SamplesPerS is the run's rate: samples/s, or tokens/s for the GPT
	// (whose programs report tokens_per_s).
	SamplesPerS float64 `json:"samples_per_s"`
	TokensPerS  float64 `json:"tokens_per_s"`
	ValLoss     float64 `json:"val_loss"` // the GPT's validation loss at the end
	MsPerStep   float64 `json:"ms_per_step"`
	TestAcc     float64 `json:"test_acc"`
	LastLoss    float64 `json:"last_loss"`
	// With a target accuracy: whether the run reached it, after how many
	// steps and how many seconds of training.
	Reached     bool    `json:"reached"`
	TargetSteps int     `json:"target_steps"`
	TargetS     float64 `json:"target_s"`
	// Buckets and BucketCaps are godist DDP's buckets as the run ended
	// (tinygpt reports them: with --auto-bucket-caps, the caps chosen).
	Buckets    int `json:"buckets"`
	BucketCaps struct {
		First, Rest int64
	} `json:"bucket_caps"`
	// BucketTrials are the caps --auto-bucket-caps tried, with rank 0's
	// median (ns) from the first ready gradient to the end of Wait.
	BucketTrials []struct {
		Caps struct {
			First, Rest int64
		}
		Median time.Duration
	} `json:"bucket_trials"`
	// PhaseMs is tinygpt's rank 0's mean step split into phases.
	PhaseMs map[string]float64 `json:"phase_ms"`
}

// lastJSON returns the JSON object of the last line of out that holds
// one and any of keys (quoted, as `"samples_per_s"`): the launchers prefix
// their workers' lines ("[rank 0] ", "[default0]:"). ok is false when no
// line does.
func lastJSON(out []byte, keys ...string) (obj []byte, ok bool) {
	lines := bytes.Split(out, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		j := bytes.IndexByte(l, '{')
		if j < 0 {
			continue
		}
		for _, k := range keys {
			if bytes.Contains(l, []byte(k)) {
				return l[j:], true
			}
		}
	}
	return nil, false
}

// parseTrainResult reads the last training result in out.
func parseTrainResult(out []byte) (trainResult, error) {
	var r trainResult
	l, ok := lastJSON(out, `"samples_per_s"`, `"tokens_per_s"`)
	if !ok {
		return r, errors.New("no training result in its output")
	}
	if err := json.Unmarshal(l, &r); err != nil {
		return r, fmt.Errorf("reading %q: %w", l, err)
	}
	if r.SamplesPerS == 0 {
		r.SamplesPerS = r.TokensPerS
	}
	if r.SamplesPerS <= 0 {
		return r, fmt.Errorf("a result with no samples/s: %q", l)
	}
	return r, nil
}

// trainRun is what every run of a training comparison does, the same on
// both sides: Steps steps of one epoch, or with TargetAcc > 0 up to
// Epochs epochs until the test accuracy, taken every EvalEvery steps,
// reaches TargetAcc.
type trainRun struct {
	Steps, Epochs, EvalEvery int
	TargetAcc                float64
	// BucketMB, when positive, caps DDP's buckets (godist's first bucket
	// too; PyTorch 1.13 fixes its first at 1 MiB).
	BucketMB float64
	// GPTSteps are the steps of a GPT run, GPTDump the directory of the
	// twin's dump (gpt.go).
	GPTSteps int
	GPTDump  string
}

// args are the flags both programs take for r.
func (r trainRun) args() []string {
	if r.TargetAcc > 0 {
		return []string{"--epochs", strconv.Itoa(r.Epochs), "--target-acc", strconv.FormatFloat(r.TargetAcc, 'g', -1, 64),
			"--eval-every", strconv.Itoa(r.EvalEvery)}
	}
	return []string{"--epochs", "1", "--max-steps", strconv.Itoa(r.Steps)}
}

// trainBench is one side of the training comparison, or a variant of
// one (the same program with Extra flags: without overlap, unsynced).
type trainBench struct {
	Name, Label string
	Probe       func(t tools) (about, missing string)
	Cmds        func(t tools, l *lab, model, hook string, run trainRun, port int, extra []string) []hostCmd
	// Unsupported says why the side cannot train model with hook ("" if
	// it can).
	Unsupported func(model, hook string) string
	Extra       []string
	// Variant marks the runs of --overlap: only on labs of several hosts,
	// with the plain all-reduce, and only in the overlap table.
	Variant bool
}

// godistTrain is godist's side: the example under godist run on every
// host.
func godistTrain(t tools, l *lab, model, hook string, run trainRun, port int, extra []string) []hostCmd {
	if isGPT(model) {
		return godistOnHosts(t, l, port, append(gptArgs(t, model, run), extra...)...)
	}
	args := []string{t.Example, "--model", model, "--checkpoint", "", "--plot", "", "--comm-hook", hook}
	args = append(append(args, run.args()...), extra...)
	if run.BucketMB > 0 {
		mb := strconv.FormatFloat(run.BucketMB, 'g', -1, 64)
		args = append(args, "--bucket-cap-mb", mb, "--first-bucket-mb", mb)
	}
	return godistOnHosts(t, l, port, args...)
}

// torchTrain is PyTorch's side: train_ddp.py under torchrun on every
// host.
func torchTrain(t tools, l *lab, model, hook string, run trainRun, port int, extra []string) []hostCmd {
	if isGPT(model) {
		return torchrunOnHosts(t, l, port, append(twinArgs(t, run), extra...)...)
	}
	args := []string{filepath.Join(t.Scripts, "train_ddp.py"), "--model", model, "--threads", "1", "--comm-hook", hook}
	args = append(append(args, run.args()...), extra...)
	if run.BucketMB > 0 {
		args = append(args, "--bucket-cap-mb", strconv.FormatFloat(run.BucketMB, 'g', -1, 64))
	}
	return torchrunOnHosts(t, l, port, args...)
}

func probeGodistTrain(t tools) (string, string) {
	if t.Example == "" {
		return "", "no examples/ddp-fashion-mnist binary"
	}
	return "examples/ddp-fashion-mnist under godist run on each host (static rendezvous at node0)", ""
}

func probeTorchTrain(t tools) (string, string) {
	v, missing := torchVersion(t)
	if missing != "" {
		return "", missing
	}
	return v + "; DDP over gloo, train_ddp.py under torchrun on each host (static rendezvous at node0), one thread a rank", ""
}

var trainBenches = []trainBench{
	{Name: "godist", Label: "godist", Probe: probeGodistTrain, Cmds: godistTrain},
	{
		Name: "torch", Label: "PyTorch", Probe: probeTorchTrain, Cmds: torchTrain,
		Unsupported: func(model, hook string) string {
			if hook == "bf16" {
				// default_hooks.bf16_compress_hook raises "BF16 all reduce
				// communication hook required CUDA 11+ and NCCL 2.10+".
				return "PyTorch 1.13's bf16_compress_hook needs CUDA and NCCL"
			}
			if isGPT(model) && model != "gpt" {
				return "the twin trains with DDP; the row compares with its DDP (the gpt row)"
			}
			return ""
		},
	},
	{Name: "godist-no-overlap", Label: "godist without overlap", Probe: probeGodistTrain, Cmds: godistTrain, Extra: []string{"--no-overlap"}, Variant: true, Unsupported: mnistOnly},
	{Name: "godist-unsynced", Label: "godist unsynced", Probe: probeGodistTrain, Cmds: godistTrain, Extra: []string{"--unsynced"}, Variant: true, Unsupported: mnistOnly},
	{Name: "torch-unsynced", Label: "PyTorch unsynced", Probe: probeTorchTrain, Cmds: torchTrain, Extra: []string{"--no-ddp"}, Variant: true, Unsupported: mnistOnly},
}

// mnistOnly is the overlap variants' Unsupported: the GPT programs have
// no such flags.
func mnistOnly(model, hook string) string {
	if isGPT(model) {
		return "only the Fashion-MNIST models have --no-overlap, --unsynced and --no-ddp"
	}
	return ""
}

// trainCells are the (model, hook) pairs a lab runs: every hook on labs
// of more than one host, only the plain all-reduce on one (whose ranks,
// sharing its memory, gain nothing from compression) and for the GPT
// (tinygpt has no communication hooks).
func trainCells(cfg labConfig, models, hooks []string) [][2]string {
	var out [][2]string
	for _, m := range models {
		for _, h := range hooks {
			if (cfg.Hosts > 1 && !isGPT(m)) || h == "allreduce" {
				out = append(out, [2]string{m, h})
			}
		}
	}
	return out
}

// trainRow is one (lab, model) row: each side's results over the rounds.
type trainRow struct {
	Config labConfig
	CPUs   int // the distinct CPUs the lab's hosts have between them
	Model  string
	Hook   string // DDP's communication hook (--comm-hook)
	Godist []trainResult
	Torch  []trainResult
	// Variants are the --overlap runs, by trainBench name.
	Variants map[string][]trainResult
}

// samples is the spread of the rounds' samples/s.
func samples(rs []trainResult) spread {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.SamplesPerS
	}
	return spreadOf(v)
}

// valLoss is the spread of the rounds' validation losses (the GPT's).
func valLoss(rs []trainResult) spread {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.ValLoss
	}
	return spreadOf(v)
}

// accuracy is the spread of the rounds' test accuracies.
func accuracy(rs []trainResult) spread {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.TestAcc
	}
	return spreadOf(v)
}

// renderTrain returns the markdown table of the training rows: per lab
// and model, each side's median samples/s over the rounds (with their
// range), godist's over PyTorch's, each one's scaling efficiency against
// the one-host row of the same model and ranks per host (when there is
// one), and the test accuracies.
func renderTrain(rows []trainRow) string {
	var b strings.Builder
	b.WriteString("| lab | model | hook | godist samples/s (range) | PyTorch samples/s (range) | godist/PyTorch | efficiency godist / PyTorch | test accuracy (GPT: validation loss) godist / PyTorch |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	// base is the one-host samples/s of model with r's ranks per host:
	// godist's, or PyTorch's when torch is set.
	base := func(r trainRow, model string, torch bool) (float64, bool) {
		for _, o := range rows {
			if o.Config.Hosts == 1 && o.Config.PerHost == r.Config.PerHost && o.Model == model && o.Hook == "allreduce" {
				rs := o.Godist
				if torch {
					rs = o.Torch
				}
				if len(rs) > 0 {
					return samples(rs).Median, true
				}
			}
		}
		return 0, false
	}
	// torch is r's PyTorch runs; for the GPT's FSDP and hybrid rows, the
	// twin's DDP in the same lab (its gpt row), which the row says.
	torch := func(r trainRow) (rs []trainResult, note string) {
		if len(r.Torch) > 0 || !isGPT(r.Model) || r.Model == "gpt" {
			return r.Torch, ""
		}
		for _, o := range rows {
			if o.Config == r.Config && o.Model == "gpt" && o.Hook == r.Hook {
				return o.Torch, " (DDP)"
			}
		}
		return nil, ""
	}
	cell := func(rs []trainResult) string {
		if len(rs) == 0 {
			return "failed"
		}
		s := samples(rs)
		if s.N > 1 {
			return fmt.Sprintf("%.0f (%.0f-%.0f)", s.Median, s.Min, s.Max)
		}
		return fmt.Sprintf("%.0f", s.Median)
	}
	for _, r := range rows {
		ratio, eff, acc := "-", "-", "-"
		rt, note := torch(r)
		if len(r.Godist) > 0 && len(rt) > 0 {
			g, t := samples(r.Godist).Median, samples(rt).Median
			ratio = fmt.Sprintf("%.2f×", g/t)
			if isGPT(r.Model) {
				acc = fmt.Sprintf("%.3f / %.3f", valLoss(r.Godist).Median, valLoss(rt).Median)
			} else {
				acc = fmt.Sprintf("%.3f / %.3f", accuracy(r.Godist).Median, accuracy(rt).Median)
			}
			if r.Config.Hosts > 1 {
				effOf := func(v float64, ok bool, x float64) string {
					if !ok {
						return "-"
					}
					return fmt.Sprintf("%.0f%%", 100*x/(v*float64(r.CPUs)))
				}
				tm := r.Model
				if note != "" {
					tm = "gpt"
				}
				bg, okg := base(r, r.Model, false)
				bt, okt := base(r, tm, true)
				eff = effOf(bg, okg, g) + " / " + effOf(bt, okt, t)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Config, r.Model, r.Hook, cell(r.Godist), cell(rt)+note, ratio, eff, acc)
	}
	return b.String()
}

// runTrain runs the training comparison on every lab and prints its
// table; it reports whether everything ran.
func runTrain(ctx context.Context, labs []labConfig, models, hooks []string, tr trainRun, overlap bool, rounds int, t tools, timeout time.Duration) bool {
	var run []trainBench
	for _, b := range trainBenches {
		if b.Variant && !overlap {
			continue
		}
		about, missing := b.Probe(t)
		if missing != "" {
			fmt.Printf("- skipping %s: %s\n", b.Label, missing)
			continue
		}
		fmt.Printf("- %s: %s\n", b.Label, about)
		run = append(run, b)
	}
	mnist := slices.ContainsFunc(models, func(m string) bool { return !isGPT(m) })
	switch {
	case !mnist:
	case tr.TargetAcc > 0:
		fmt.Printf("- each run trains until rank 0's test accuracy, taken every %d steps, reaches %g (at most %d epochs), %d samples a rank per step, SGD lr 0.01 momentum 0.9, every host pinned to one CPU\n", tr.EvalEvery, tr.TargetAcc, tr.Epochs, 64)
	default:
		fmt.Printf("- %d steps of %d samples a rank per run, SGD lr 0.01 momentum 0.9, every host pinned to one CPU\n", tr.Steps, 64)
	}
	if anyGPT(models) {
		fmt.Printf("- the GPT: examples/tinygpt's default model (4 blocks of width 128, 128-byte context, 0.84 M parameters), %d steps of 16 sequences a rank (2,048 tokens), AdamW, every host pinned to one CPU;\n"+
			"  its rate is tokens/s over the steps' time (evaluation excluded); PyTorch's twin (gpt_twin.py) trains from the same weights on the same batches with DDP\n", tr.GPTSteps)
	}
	fmt.Printf("\nsamples/s is steps × batch × world over the time from a barrier before the first step to one after the last\n" +
		"(each side counts its own, the same way); the median of the rounds, with their range. Efficiency is samples/s over\n" +
		"the one-host row's × the CPUs the hosts have between them (100%%: the hosts add their CPUs' worth; hosts that share\n" +
		"CPUs add only those). Test accuracy is after the run's steps, on the 10,000 test images.\n\n")
	ok := true
	var rows []trainRow
	for _, cfg := range labs {
		if ctx.Err() != nil {
			return false
		}
		l, n, err := oneCPULab(ctx, cfg)
		if err != nil {
			fmt.Printf("- %s: cannot make the lab: %v\n", cfg, err)
			ok = false
			continue
		}
		for _, mh := range trainCells(cfg, models, hooks) {
			model, hook := mh[0], mh[1]
			row := trainRow{Config: cfg, CPUs: n, Model: model, Hook: hook}
			if model == "gpt" && slices.ContainsFunc(run, func(b trainBench) bool { return b.Name == "torch" }) {
				fmt.Fprintf(os.Stderr, "hostcmp: --train %s gpt: an untimed godist run writes the twin's dump\n", cfg)
				port := 29500 + l.runs%500
				l.runs++
				dir, err := gptDump(ctx, l, t, tr, port, t.Tmp, timeout)
				if err != nil {
					fmt.Printf("- %s gpt: %v\n", cfg, err)
					ok = false
					rows = append(rows, row)
					continue
				}
				tr.GPTDump = dir
			}
			for r := range rounds {
				for _, b := range rotate(run, r) {
					if ctx.Err() != nil {
						break
					}
					if b.Variant && (cfg.Hosts == 1 || hook != "allreduce" || tr.TargetAcc > 0) {
						continue
					}
					if b.Unsupported != nil && b.Unsupported(model, hook) != "" {
						if r == 0 && !b.Variant {
							fmt.Printf("- %s %s %s: %s does not run: %s\n", cfg, model, hook, b.Label, b.Unsupported(model, hook))
						}
						continue
					}
					fmt.Fprintf(os.Stderr, "hostcmp: --train %s %s %s, round %d: %s\n", cfg, model, hook, r+1, b.Label)
					port := 29500 + l.runs%500
					l.runs++
					out, err := l.run(ctx, b.Cmds(t, l, model, hook, tr, port, b.Extra), timeout)
					var res trainResult
					if err == nil {
						res, err = parseTrainResult(out)
					}
					if err != nil {
						ok = false
						fmt.Printf("- %s %s %s, round %d: %s failed: %v\n", cfg, model, hook, r+1, b.Label, err)
						continue
					}
					// Each run's result as it comes, so a run cut short keeps them.
					fmt.Fprintf(os.Stderr, "hostcmp: --train %s %s %s, round %d: %s %.0f samples/s, %.2f ms a step, test accuracy %.4f, target reached %v after %d steps, %.2f s\n",
						cfg, model, hook, r+1, b.Label, res.SamplesPerS, res.MsPerStep, res.TestAcc, res.Reached, res.TargetSteps, res.TargetS)
					if len(res.PhaseMs) > 0 {
						fmt.Fprintf(os.Stderr, "hostcmp: %s's step in ms: %s\n", b.Label, phaseString(res.PhaseMs))
					}
					if res.Buckets > 0 {
						fmt.Fprintf(os.Stderr, "hostcmp: %s's DDP ended with %d buckets (caps %d B, then %d B)\n", b.Label, res.Buckets, res.BucketCaps.First, res.BucketCaps.Rest)
						for _, tr := range res.BucketTrials {
							fmt.Fprintf(os.Stderr, "hostcmp:   tried caps %d B, then %d B: %v from the first gradient to the reduced last\n", tr.Caps.First, tr.Caps.Rest, tr.Median.Round(10*time.Microsecond))
						}
					}
					switch {
					case b.Variant:
						if row.Variants == nil {
							row.Variants = map[string][]trainResult{}
						}
						row.Variants[b.Name] = append(row.Variants[b.Name], res)
					case b.Name == "godist":
						row.Godist = append(row.Godist, res)
					default:
						row.Torch = append(row.Torch, res)
					}
				}
			}
			rows = append(rows, row)
		}
		if err := l.c.Close(); err != nil {
			fmt.Printf("- closing the lab %s: %v\n", cfg, err)
		}
	}
	fmt.Print(renderTrain(rows))
	if overlap {
		fmt.Printf("\nOverlap: ms a step (the rounds' median) of DDP, of godist's DDP reducing only after backward (--no-overlap), and of\n" +
			"unsynced replicas (compute alone: godist --unsynced, PyTorch without DDP). Communication alone is godist's step without\n" +
			"overlap less compute alone; exposed is DDP's step less compute alone; hidden is the share of godist's communication\n" +
			"that overlap took off the step, 1 - exposed / alone.\n\n")
		fmt.Print(renderOverlap(rows))
	}
	if tr.TargetAcc > 0 {
		fmt.Printf("\nTime to %g test accuracy (training time, evaluations excluded; the rounds' median, and the steps it took):\n\n", tr.TargetAcc)
		fmt.Print(renderTarget(rows))
	}
	return ok
}

// oneCPULab makes the lab of cfg with every host pinned to one CPU, and
// returns it with the number of distinct CPUs its hosts have between them.
func oneCPULab(ctx context.Context, cfg labConfig) (*lab, int, error) {
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := clustertest.New(mctx, clustertest.Config{Hosts: cfg.Hosts, Rate: cfg.Rate, CPUsPerHost: 1, ShareCPUs: true})
	if err != nil {
		return nil, 0, err
	}
	cpus := map[int]bool{}
	for _, h := range c.Hosts() {
		for _, x := range h.CPUs {
			cpus[x] = true
		}
	}
	n := len(cpus)
	if n == 0 {
		n = runtime.NumCPU()
	}
	return &lab{cfg: cfg, c: c}, n, nil
}

// renderTarget returns the table of the time each side took to reach the
// target accuracy, per lab, model and hook: the median over the rounds
// that reached it, their steps, and PyTorch's time over godist's.
func renderTarget(rows []trainRow) string {
	var b strings.Builder
	b.WriteString("| lab | model | hook | godist s (steps) | PyTorch s (steps) | PyTorch/godist |\n|---|---|---|---|---|---|\n")
	side := func(rs []trainResult) (string, float64) {
		var ts, ss []float64
		for _, r := range rs {
			if r.Reached {
				ts, ss = append(ts, r.TargetS), append(ss, float64(r.TargetSteps))
			}
		}
		if len(ts) == 0 {
			return fmt.Sprintf("not reached (%d runs)", len(rs)), 0
		}
		t := spreadOf(ts)
		s := fmt.Sprintf("%.2f (%.0f)", t.Median, spreadOf(ss).Median)
		if len(ts) < len(rs) {
			s += fmt.Sprintf(", %d of %d runs", len(ts), len(rs))
		}
		return s, t.Median
	}
	for _, r := range rows {
		g, gt := side(r.Godist)
		p, pt := side(r.Torch)
		ratio := "-"
		if gt > 0 && pt > 0 {
			ratio = fmt.Sprintf("%.2f×", pt/gt)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Config, r.Model, r.Hook, g, p, ratio)
	}
	return b.String()
}

// renderOverlap returns the overlap table of the rows that have the
// --overlap variants.
func renderOverlap(rows []trainRow) string {
	var b strings.Builder
	b.WriteString("| lab | model | godist ms: DDP / no overlap / compute alone | communication alone / exposed | hidden | PyTorch ms: DDP / compute alone | PyTorch exposed |\n|---|---|---|---|---|---|---|\n")
	ms := func(rs []trainResult) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = r.MsPerStep
		}
		return spreadOf(v).Median
	}
	for _, r := range rows {
		no, un, tun := r.Variants["godist-no-overlap"], r.Variants["godist-unsynced"], r.Variants["torch-unsynced"]
		if len(r.Godist) == 0 || len(no) == 0 || len(un) == 0 {
			continue
		}
		g, n, u := ms(r.Godist), ms(no), ms(un)
		alone, exposed := n-u, g-u
		hidden := "-"
		if alone > 0 {
			hidden = fmt.Sprintf("%.0f%%", 100*(1-exposed/alone))
		}
		pt, pexp := "-", "-"
		if len(r.Torch) > 0 && len(tun) > 0 {
			p, pu := ms(r.Torch), ms(tun)
			pt, pexp = fmt.Sprintf("%.2f / %.2f", p, pu), fmt.Sprintf("%.2f", p-pu)
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f / %.2f / %.2f | %.2f / %.2f | %s | %s | %s |\n", r.Config, r.Model, g, n, u, alone, exposed, hidden, pt, pexp)
	}
	return b.String()
}

// phaseString is a step's phases in tinygpt's order, "forward 12.3,
// backward ...", those it does not know after them by name.
func phaseString(ms map[string]float64) string {
	order := []string{"forward", "backward", "ddp_wait", "clip", "step"}
	for k := range ms {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	slices.Sort(order[5:])
	var parts []string
	for _, k := range order {
		if v, ok := ms[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, v))
		}
	}
	return strings.Join(parts, ", ")
}
