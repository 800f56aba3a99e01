package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseTrainResult(t *testing.T) {
	out := []byte("data: full Fashion-MNIST\n" +
		`[rank 0] {"model":"mlp","samples_per_s":100,"ms_per_step":1.5,"test_acc":0.8}` + "\n" +
		`[default0]:{"backend": "gloo", "samples_per_s": 250.5, "ms_per_step": 2, "test_acc": 0.81, "last_loss": 0.4}` + "\n" +
		"godist run: done\n")
	r, err := parseTrainResult(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.SamplesPerS != 250.5 || r.TestAcc != 0.81 || r.LastLoss != 0.4 {
		t.Errorf("got %+v, want the last result line's", r)
	}
	for _, bad := range []string{"", "no result\n", `[rank 0] {"samples_per_s":0}`, `[rank 0] {"samples_per_s":}`} {
		if _, err := parseTrainResult([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestRenderTrain(t *testing.T) {
	res := func(sps ...float64) []trainResult {
		var rs []trainResult
		for _, v := range sps {
			rs = append(rs, trainResult{SamplesPerS: v, TestAcc: 0.8})
		}
		return rs
	}
	rows := []trainRow{
		{Config: labConfig{Hosts: 1, PerHost: 1}, CPUs: 1, Model: "mlp", Hook: "allreduce", Godist: res(1000, 1200), Torch: res(500)},
		{Config: labConfig{Hosts: 2, PerHost: 1, Rate: 1e9}, CPUs: 2, Model: "mlp", Hook: "allreduce", Godist: res(1500, 1700, 1600), Torch: res(400)},
		{Config: labConfig{Hosts: 4, PerHost: 1, Rate: 1e9}, CPUs: 2, Model: "lenet", Hook: "allreduce", Godist: res(10), Torch: nil},
	}
	got := renderTrain(rows)
	for _, want := range []string{
		"| 1x1 | mlp | allreduce | 1100 (1000-1200) | 500 | 2.20× | - | 0.800 / 0.800 |",
		// 1600 / (1100 × 2) = 73%; 400 / (500 × 2) = 40%
		"| 2x1@1G | mlp | allreduce | 1600 (1500-1700) | 400 | 4.00× | 73% / 40% | 0.800 / 0.800 |",
		// no one-host lenet row, and PyTorch failed
		"| 4x1@1G | lenet | allreduce | 10 | failed | - | - | - |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no row %q in\n%s", want, got)
		}
	}
}

func TestTrainCells(t *testing.T) {
	one := trainCells(labConfig{Hosts: 1, PerHost: 1}, []string{"mlp"}, []string{"allreduce", "fp16"})
	two := trainCells(labConfig{Hosts: 2, PerHost: 1}, []string{"mlp", "lenet"}, []string{"allreduce", "fp16"})
	if len(one) != 1 || one[0] != [2]string{"mlp", "allreduce"} {
		t.Errorf("one host: %v, want only mlp with allreduce", one)
	}
	if len(two) != 4 || two[3] != [2]string{"lenet", "fp16"} {
		t.Errorf("two hosts: %v, want every model with every hook", two)
	}
}

func TestRenderTarget(t *testing.T) {
	rows := []trainRow{{
		Config: labConfig{Hosts: 2, PerHost: 1, Rate: 1e9}, Model: "mlp", Hook: "fp16",
		Godist: []trainResult{{Reached: true, TargetS: 2, TargetSteps: 100}, {Reached: true, TargetS: 4, TargetSteps: 150}, {}},
		Torch:  []trainResult{{Reached: true, TargetS: 9, TargetSteps: 125}},
	}, {
		Config: labConfig{Hosts: 2, PerHost: 1, Rate: 1e9}, Model: "mlp", Hook: "powersgd:1",
		Godist: []trainResult{{}}, Torch: []trainResult{{Reached: true, TargetS: 1, TargetSteps: 50}},
	}}
	got := renderTarget(rows)
	for _, want := range []string{
		"| 2x1@1G | mlp | fp16 | 3.00 (125), 2 of 3 runs | 9.00 (125) | 3.00× |",
		"| 2x1@1G | mlp | powersgd:1 | not reached (1 runs) | 1.00 (50) | - |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no row %q in\n%s", want, got)
		}
	}
}

func TestTrainRunArgs(t *testing.T) {
	if got := strings.Join(trainRun{Steps: 300}.args(), " "); got != "--epochs 1 --max-steps 300" {
		t.Errorf("fixed steps: %q", got)
	}
	if got := strings.Join(trainRun{Steps: 300, Epochs: 3, EvalEvery: 25, TargetAcc: 0.85}.args(), " "); got != "--epochs 3 --target-acc 0.85 --eval-every 25" {
		t.Errorf("target accuracy: %q", got)
	}
}

func TestRenderOverlap(t *testing.T) {
	ms := func(v ...float64) []trainResult {
		var rs []trainResult
		for _, x := range v {
			rs = append(rs, trainResult{MsPerStep: x})
		}
		return rs
	}
	rows := []trainRow{{
		Config: labConfig{Hosts: 2, PerHost: 1, Rate: 1e9}, Model: "lenet", Hook: "allreduce",
		Godist: ms(5, 6, 7), Torch: ms(12),
		Variants: map[string][]trainResult{"godist-no-overlap": ms(8), "godist-unsynced": ms(4), "torch-unsynced": ms(9)},
	}, {
		// no variants: no row
		Config: labConfig{Hosts: 2, PerHost: 1, Rate: 1e9}, Model: "mlp", Hook: "allreduce", Godist: ms(5), Torch: ms(5),
	}}
	got := renderOverlap(rows)
	// alone 8-4 = 4, exposed 6-4 = 2: half hidden; PyTorch exposed 12-9 = 3
	want := "| 2x1@1G | lenet | 6.00 / 8.00 / 4.00 | 4.00 / 2.00 | 50% | 12.00 / 9.00 | 3.00 |"
	if !strings.Contains(got, want) || strings.Contains(got, "| mlp |") {
		t.Errorf("got\n%s\nwant the row %q and no mlp row", got, want)
	}
}

func TestParseGPTResult(t *testing.T) {
	out := []byte(`[rank 0] {"config":{"layers":4},"steps":40,"val_loss":3.5,"tokens_per_s":27776.5,"ms_per_step":73.7,"world":2}` + "\n")
	r, err := parseTrainResult(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.SamplesPerS != 27776.5 || r.ValLoss != 3.5 {
		t.Errorf("got %+v, want tokens/s as the rate and the validation loss", r)
	}
	if _, err := parseTrainResult([]byte(`[default0]:{"tokens_per_s": 0}`)); err == nil {
		t.Error("a GPT result with no tokens/s: no error")
	}
}

func TestRenderTrainGPT(t *testing.T) {
	res := func(v float64) []trainResult { return []trainResult{{SamplesPerS: v, ValLoss: 3.25}} }
	one, two := labConfig{Hosts: 1, PerHost: 1}, labConfig{Hosts: 2, PerHost: 1, Rate: 1e10}
	rows := []trainRow{
		{Config: one, CPUs: 1, Model: "gpt", Hook: "allreduce", Godist: res(20000), Torch: res(10000)},
		{Config: one, CPUs: 1, Model: "gpt-fsdp", Hook: "allreduce", Godist: res(16000)},
		{Config: two, CPUs: 2, Model: "gpt", Hook: "allreduce", Godist: res(38000), Torch: res(18000)},
		{Config: two, CPUs: 2, Model: "gpt-fsdp", Hook: "allreduce", Godist: res(30000)},
	}
	got := renderTrain(rows)
	for _, want := range []string{
		"| 1x1 | gpt | allreduce | 20000 | 10000 | 2.00× | - | 3.250 / 3.250 |",
		// 38000 / (20000 × 2) = 95%; 18000 / (10000 × 2) = 90%
		"| 2x1@10G | gpt | allreduce | 38000 | 18000 | 2.11× | 95% / 90% | 3.250 / 3.250 |",
		// FSDP against the twin's DDP in the same lab: 30000 / (16000 × 2) = 94%
		"| 2x1@10G | gpt-fsdp | allreduce | 30000 | 18000 (DDP) | 1.67× | 94% / 90% | 3.250 / 3.250 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no row %q in\n%s", want, got)
		}
	}
}

func TestGPTCellsAndArgs(t *testing.T) {
	cells := trainCells(labConfig{Hosts: 2, PerHost: 1}, []string{"gpt", "mlp"}, []string{"allreduce", "fp16"})
	if fmt.Sprint(cells) != "[[gpt allreduce] [mlp allreduce] [mlp fp16]]" {
		t.Errorf("cells %v: want the GPT with the plain all-reduce only", cells)
	}
	if err := checkModels([]string{"mlp", "gpt-hybrid"}); err != nil {
		t.Error(err)
	}
	if err := checkModels([]string{"gpt2"}); err == nil {
		t.Error("gpt2: no error")
	}
	tl := tools{TinyGPT: "/b/tinygpt", Corpus: "/go/src", Scripts: "/s"}
	run := trainRun{GPTSteps: 40, GPTDump: "/d"}
	g := strings.Join(gptArgs(tl, "gpt-hybrid", run), " ")
	if !strings.HasPrefix(g, "/b/tinygpt --steps 40 --warmup 4 --eval-every 40 ") || !strings.HasSuffix(g, "--strategy hybrid --data /go/src") {
		t.Errorf("godist's GPT program: %q", g)
	}
	if p := strings.Join(twinArgs(tl, run), " "); p != "/s/gpt_twin.py /d --steps 40 --eval-every 40" {
		t.Errorf("the twin: %q", p)
	}
	run.BucketMB = 0.5
	if g := strings.Join(gptArgs(tl, "gpt", run), " "); !strings.HasSuffix(g, "--bucket-cap-mb 0.5 --first-bucket-mb 0.5") {
		t.Errorf("godist's DDP with buckets of 0.5 MiB: %q", g)
	}
	if g := strings.Join(gptArgs(tl, "gpt-fsdp", run), " "); strings.Contains(g, "bucket") {
		t.Errorf("FSDP has no buckets: %q", g)
	}
	if p := strings.Join(twinArgs(tl, run), " "); !strings.HasSuffix(p, "--bucket-cap-mb 0.5") {
		t.Errorf("the twin with buckets of 0.5 MiB: %q", p)
	}
	for _, b := range trainBenches {
		if b.Name == "torch" && b.Unsupported("gpt-fsdp", "allreduce") == "" {
			t.Error("PyTorch's side would run gpt-fsdp: the twin has only DDP")
		}
		if b.Variant && b.Unsupported("gpt", "allreduce") == "" {
			t.Errorf("%s would run the GPT, which has no %v", b.Name, b.Extra)
		}
	}
}

func TestPhaseString(t *testing.T) {
	got := phaseString(map[string]float64{"step": 4, "zz": 1, "forward": 1.25, "ddp_wait": 3, "aa": 2})
	if want := "forward 1.2, ddp_wait 3.0, step 4.0, aa 2.0, zz 1.0"; got != want {
		t.Errorf("phaseString = %q, want %q", got, want)
	}
}
