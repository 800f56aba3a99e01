package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// measure is one run's outcome.
type measure struct {
	SamplesPerS float64 `json:"samples_per_s"`
	TestAcc     float64 `json:"test_accuracy"`
}

// round is one run of each side.
type round struct{ godist, torch measure }

// parse finds the last JSON object among a run's output lines (godist
// run prefixes the master's with "[rank 0] ").
func parse(out string) (measure, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if j := strings.Index(l, "{"); j >= 0 && strings.HasSuffix(l, "}") {
			var m measure
			if err := json.Unmarshal([]byte(l[j:]), &m); err != nil {
				return measure{}, err
			}
			if m.SamplesPerS <= 0 {
				return measure{}, fmt.Errorf("no samples_per_s in %s", l[j:])
			}
			return m, nil
		}
	}
	return measure{}, errors.New("no JSON line in the output")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// table is the markdown table of the rounds and their summary.
func table(rs []round) string {
	var b strings.Builder
	b.WriteString("| round | godist samples/s | PyTorch samples/s | godist/PyTorch | godist test acc | PyTorch test acc |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|\n")
	var g, p, ratio, ga, pa []float64
	for i, r := range rs {
		q := r.godist.SamplesPerS / r.torch.SamplesPerS
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f× | %.2f%% | %.2f%% |\n", i+1, r.godist.SamplesPerS, r.torch.SamplesPerS, q,
			100*r.godist.TestAcc, 100*r.torch.TestAcc)
		g, p, ratio = append(g, r.godist.SamplesPerS), append(p, r.torch.SamplesPerS), append(ratio, q)
		ga, pa = append(ga, r.godist.TestAcc), append(pa, r.torch.TestAcc)
	}
	if len(rs) > 0 {
		fmt.Fprintf(&b, "| median (range) | %.0f (%.0f–%.0f) | %.0f (%.0f–%.0f) | **%.2f×** (%.2f–%.2f) | %.2f%% | %.2f%% |\n",
			median(g), slices.Min(g), slices.Max(g), median(p), slices.Min(p), slices.Max(p),
			median(ratio), slices.Min(ratio), slices.Max(ratio), 100*median(ga), 100*median(pa))
	}
	return b.String()
}
