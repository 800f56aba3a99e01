package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	godist := "godist run: starting 3 worker(s)\n[rank 0] master: ...\n[rank 0] {\"samples_per_s\":6000.5,\"test_accuracy\":0.81}\n"
	torch := "{\"impl\": \"pytorch\", \"samples_per_s\": 1500, \"test_accuracy\": 0.8}\nI2026 shutting down\n"
	for _, tc := range []struct {
		out  string
		want measure
	}{{godist, measure{6000.5, 0.81}}, {torch, measure{1500, 0.8}}} {
		m, err := parse(tc.out)
		if err != nil || m != tc.want {
			t.Errorf("parse(%q) = %+v, %v; want %+v", tc.out, m, err, tc.want)
		}
	}
	for _, bad := range []string{"", "no json\n", "[rank 0] {\"test_accuracy\":0.8}"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q): no error", bad)
		}
	}
}

func TestTable(t *testing.T) {
	rs := []round{
		{measure{6000, 0.80}, measure{1500, 0.79}},
		{measure{4000, 0.81}, measure{2000, 0.80}},
		{measure{5000, 0.82}, measure{1000, 0.81}},
	}
	got := table(rs)
	for _, want := range []string{
		"| 1 | 6000 | 1500 | 4.00× | 80.00% | 79.00% |",
		"| 2 | 4000 | 2000 | 2.00× |",
		"| 3 | 5000 | 1000 | 5.00× |",
		"| median (range) | 5000 (4000–6000) | 1500 (1000–2000) | **4.00×** (2.00–5.00) | 81.00% | 80.00% |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if median([]float64{1, 3, 2, 4}) != 2.5 {
		t.Errorf("median of 1..4: %v", median([]float64{1, 3, 2, 4}))
	}
}
