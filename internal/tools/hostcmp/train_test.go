package main

import (
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
		{Config: labConfig{Hosts: 1, PerHost: 1}, CPUs: 1, Model: "mlp", Godist: res(1000, 1200), Torch: res(500)},
		{Config: labConfig{Hosts: 2, PerHost: 1, Rate: 1e9}, CPUs: 2, Model: "mlp", Godist: res(1500, 1700, 1600), Torch: res(400)},
		{Config: labConfig{Hosts: 4, PerHost: 1, Rate: 1e9}, CPUs: 2, Model: "lenet", Godist: res(10), Torch: nil},
	}
	got := renderTrain(rows)
	for _, want := range []string{
		"| 1x1 | mlp | 1100 (1000-1200) | 500 | 2.20× | - | 0.800 / 0.800 |",
		// 1600 / (1100 × 2) = 73%; 400 / (500 × 2) = 40%
		"| 2x1@1G | mlp | 1600 (1500-1700) | 400 | 4.00× | 73% / 40% | 0.800 / 0.800 |",
		// no one-host lenet row, and PyTorch failed
		"| 4x1@1G | lenet | 10 | failed | - | - | - |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no row %q in\n%s", want, got)
		}
	}
}
