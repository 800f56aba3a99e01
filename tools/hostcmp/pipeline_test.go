package main

import (
	"strings"
	"testing"
)

func TestParsePipeResult(t *testing.T) {
	out := []byte("[rank 0] pipeline-gpt: 4 ranks = 2 stages' ranks × 2 replicas\n" +
		`[rank 0] {"config":{"pp":2},"tokens_per_s":9000,"ms_per_step":240,"median_ms_per_step":227.5,"pred_ms_per_step":210,"pred_transfer_ms":1.2,"val_loss":3.9,"losses":[5.5]}` + "\n")
	r, err := parsePipeResult(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.MedianMsPerStep != 227.5 || r.MsPerStep != 240 || r.PredMsPerStep != 210 || r.PredTransferMs != 1.2 || r.ValLoss != 3.9 || r.TokensPerS != 9000 {
		t.Errorf("got %+v", r)
	}
	for _, bad := range []string{"", `[rank 0] {"median_ms_per_step":1,"pred_ms_per_step":0}`, `[rank 0] {"pred_ms_per_step":}`} {
		if _, err := parsePipeResult([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestRenderPipeline(t *testing.T) {
	lab := labConfig{Hosts: 2, PerHost: 2, Rate: 1e9}
	rows := []pipeRow{
		{Config: lab, Layout: pipeLayouts[1].Name, Runs: []pipeResult{
			{MedianMsPerStep: 100, PredMsPerStep: 90, PredTransferMs: 1.1, TokensPerS: 20000, ValLoss: 4},
			{MedianMsPerStep: 120, PredMsPerStep: 96, PredTransferMs: 1.1, TokensPerS: 17000, ValLoss: 4},
			{MedianMsPerStep: 110, PredMsPerStep: 93, PredTransferMs: 1.1, TokensPerS: 18500, ValLoss: 4},
		}},
		{Config: lab, Layout: pipeLayouts[2].Name},
	}
	got := renderPipeline(rows)
	for _, want := range []string{
		"| 2x2@1G | stages across hosts (pp 2, dp inner) | 110.0 (100.0-120.0) | 93.0 | 0.85 | 1.10 | 18500 | 4.000 |",
		"| 2x2@1G | stages inside hosts (pp 2, pp inner) | failed |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no row %q in\n%s", want, got)
		}
	}
}

func TestPipelineArgs(t *testing.T) {
	got := strings.Join(pipelineArgs(tools{PipelineGPT: "/b/pipeline-gpt", Corpus: "/go/src"}, 30, pipeLayouts[2]), " ")
	want := "/b/pipeline-gpt --schedule 1f1b --steps 30 --warmup 3 --eval-every 30 --eval-batches 2 --log-every 30 --data /go/src --pp 2 --inner pp"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
