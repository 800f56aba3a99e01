package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The pipeline across hosts (--pipeline): examples/pipeline-gpt under
// godist run on every host, in three layouts of the same job: data
// parallelism alone (--pp 1), two pipeline stages on different hosts with
// the replicas inside each host (--pp 2 --inner dp), and two stages inside
// each host with the replicas across hosts (--pp 2 --inner pp). Each run
// reports its measured step time and the one the schedule simulator
// predicts from the stages' measured costs, the link's cost (the group's
// cost model) and the hosts' CPUs; the table puts them side by side.

// pipelineConfigs are --pipeline's labs by default.
const pipelineConfigs = "2x2@1G,2x2@10G"

// pipeLayout is one layout of the job: pipeline-gpt's flags.
type pipeLayout struct {
	Name  string
	Flags []string
}

var pipeLayouts = []pipeLayout{
	{"data parallel (pp 1)", []string{"--pp", "1"}},
	{"stages across hosts (pp 2, dp inner)", []string{"--pp", "2", "--inner", "dp"}},
	{"stages inside hosts (pp 2, pp inner)", []string{"--pp", "2", "--inner", "pp"}},
}

// pipeResult is pipeline-gpt's JSON line.
type pipeResult struct {
	TokensPerS float64 `json:"tokens_per_s"`
	MsPerStep  float64 `json:"ms_per_step"`
	// MedianMsPerStep is the run's median step (its first steps, touching
	// fresh memory, are slower): what the prediction is for.
	MedianMsPerStep float64 `json:"median_ms_per_step"`
	PredMsPerStep   float64 `json:"pred_ms_per_step"`
	PredTransferMs  float64 `json:"pred_transfer_ms"`
	ValLoss         float64 `json:"val_loss"`
}

// parsePipeResult reads the last pipeline-gpt result in out.
func parsePipeResult(out []byte) (pipeResult, error) {
	var r pipeResult
	l, ok := lastJSON(out, `"pred_ms_per_step"`)
	if !ok {
		return r, errors.New("no pipeline-gpt result in its output")
	}
	if err := json.Unmarshal(l, &r); err != nil {
		return r, fmt.Errorf("reading %q: %w", l, err)
	}
	if r.MedianMsPerStep <= 0 || r.PredMsPerStep <= 0 {
		return r, fmt.Errorf("a result without a measured or predicted step: %q", l)
	}
	return r, nil
}

// pipeRow is one (lab, layout) row over the rounds.
type pipeRow struct {
	Config labConfig
	Layout string
	Runs   []pipeResult
}

// renderPipeline returns the table of the rows: the rounds' median of
// each run's median step time (with their range), the predicted one and
// their ratio, the predicted transfer between stages, tokens/s over the
// whole run and the validation loss.
func renderPipeline(rows []pipeRow) string {
	var b strings.Builder
	b.WriteString("| lab | layout | median ms a step (range) | predicted ms | predicted/measured | transfer ms | tokens/s | validation loss |\n|---|---|---|---|---|---|---|---|\n")
	of := func(rs []pipeResult, f func(pipeResult) float64) spread {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return spreadOf(v)
	}
	for _, r := range rows {
		if len(r.Runs) == 0 {
			fmt.Fprintf(&b, "| %s | %s | failed | - | - | - | - | - |\n", r.Config, r.Layout)
			continue
		}
		m := of(r.Runs, func(x pipeResult) float64 { return x.MedianMsPerStep })
		p := of(r.Runs, func(x pipeResult) float64 { return x.PredMsPerStep }).Median
		fmt.Fprintf(&b, "| %s | %s | %.1f (%.1f-%.1f) | %.1f | %.2f | %.2f | %.0f | %.3f |\n", r.Config, r.Layout, m.Median, m.Min, m.Max, p, p/m.Median,
			of(r.Runs, func(x pipeResult) float64 { return x.PredTransferMs }).Median,
			of(r.Runs, func(x pipeResult) float64 { return x.TokensPerS }).Median,
			of(r.Runs, func(x pipeResult) float64 { return x.ValLoss }).Median)
	}
	return b.String()
}

// pipelineArgs is pipeline-gpt's command line for a run of steps in
// layout.
func pipelineArgs(t tools, steps int, layout pipeLayout) []string {
	n := strconv.Itoa(steps)
	args := []string{t.PipelineGPT, "--schedule", "1f1b", "--steps", n, "--warmup", strconv.Itoa(max(1, steps/10)),
		"--eval-every", n, "--eval-batches", "2", "--log-every", n, "--data", t.Corpus}
	return append(args, layout.Flags...)
}

// runPipeline runs every layout on every lab, rounds times in an order
// that rotates, and prints the table; it reports whether everything ran.
func runPipeline(ctx context.Context, labs []labConfig, steps, rounds int, t tools, timeout time.Duration) bool {
	fmt.Printf("- examples/pipeline-gpt under godist run on each host (static rendezvous at node0), every host pinned to one CPU:\n" +
		"  the tiny GPT (4 blocks of width 128, 64-byte context), 32 sequences a step split among the replicas, 4 micro-batches, 1F1B\n" +
		"- ms a step is each run's median step (its first steps touch fresh memory and are slower), tokens/s over all its steps\n" +
		"- the prediction: the schedule simulator given the stages' costs (profiled alone on rank 0 after the run), one\n" +
		"  activation's transfer over the link between adjacent stages (the group's cost model: latency + bytes / bandwidth)\n" +
		"  and the CPUs each stage gets (a host's CPUs shared by its ranks), plus the gradient all-reduce among the replicas and\n" +
		"  the small all-reduces as the cost model predicts them, plus the optimizer's step as the run measured it\n\n")
	ok := true
	var rows []pipeRow
	for _, cfg := range labs {
		if ctx.Err() != nil {
			return false
		}
		if (cfg.Hosts*cfg.PerHost)%2 != 0 {
			fmt.Printf("- %s: the layouts need an even world\n", cfg)
			continue
		}
		l, _, err := oneCPULab(ctx, cfg)
		if err != nil {
			fmt.Printf("- %s: cannot make the lab: %v\n", cfg, err)
			ok = false
			continue
		}
		first := len(rows)
		for _, lay := range pipeLayouts {
			rows = append(rows, pipeRow{Config: cfg, Layout: lay.Name})
		}
		for r := range rounds {
			for _, lay := range rotate(pipeLayouts, r) {
				if ctx.Err() != nil {
					break
				}
				row := &rows[first+slices.IndexFunc(pipeLayouts, func(x pipeLayout) bool { return x.Name == lay.Name })]
				port := 29500 + l.runs%500
				l.runs++
				fmt.Fprintf(os.Stderr, "hostcmp: --pipeline %s, round %d: %s\n", cfg, r+1, lay.Name)
				out, err := l.run(ctx, godistOnHosts(t, l, port, pipelineArgs(t, steps, lay)...), timeout)
				var res pipeResult
				if err == nil {
					res, err = parsePipeResult(out)
				}
				if err != nil {
					ok = false
					fmt.Printf("- %s %s, round %d: %v\n", cfg, lay.Name, r+1, err)
					continue
				}
				fmt.Fprintf(os.Stderr, "hostcmp: --pipeline %s, round %d: %s: %.1f ms a step (median; mean %.1f), predicted %.1f\n", cfg, r+1, lay.Name, res.MedianMsPerStep, res.MsPerStep, res.PredMsPerStep)
				row.Runs = append(row.Runs, res)
			}
		}
		if err := l.c.Close(); err != nil {
			fmt.Printf("- closing the lab %s: %v\n", cfg, err)
		}
	}
	fmt.Print(renderPipeline(rows))
	return ok
}
