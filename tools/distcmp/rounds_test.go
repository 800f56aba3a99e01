package main

import (
	"slices"
	"strings"
	"testing"
)

func TestMergeRounds(t *testing.T) {
	no := false
	rounds := [][]cell{
		{{Op: "all_reduce", Size: 8, LatUsMedian: 3, Iters: 10}, {Op: "barrier", LatUsMedian: 1}, {Op: "broadcast", Size: 8, LatUsMedian: 2}},
		{{Op: "all_reduce", Size: 8, LatUsMedian: 1, Iters: 10}, {Op: "barrier", LatUsMedian: 4}, {Op: "broadcast", Size: 8, Error: "boom"}},
		{{Op: "all_reduce", Size: 8, LatUsMedian: 2, Iters: 10, BusbwGBps: 7}, {Op: "barrier", LatUsMedian: 2}, {Op: "broadcast", Size: 8, LatUsMedian: 2}},
		{{Op: "all_reduce", Size: 8, LatUsMedian: 6, Iters: 10}, {Op: "barrier", LatUsMedian: 3}, {Op: "reduce_scatter", Size: 8, Supported: &no}},
	}
	got := mergeRounds(rounds)
	if len(got) != 4 {
		t.Fatalf("%d cells, want 4: %+v", len(got), got)
	}
	// all_reduce: medians 1, 2, 3, 6: the median 2.5, spread 6.
	if c := got[0]; c.Op != "all_reduce" || c.LatUsMedian != 2.5 || c.Spread != 6 || c.Rounds != 4 || c.BusbwGBps != 3.5 {
		t.Errorf("all_reduce: %+v", c)
	}
	if c := got[1]; c.Op != "barrier" || c.LatUsMedian != 2.5 || c.Spread != 4 {
		t.Errorf("barrier: %+v", c)
	}
	if c := got[2]; c.Op != "broadcast" || c.ok() || c.Error != "boom" {
		t.Errorf("broadcast that failed in a round: %+v, want the failure", c)
	}
	if c := got[3]; c.Op != "reduce_scatter" || c.ok() {
		t.Errorf("unsupported: %+v", c)
	}
	one := mergeRounds(rounds[:1])
	if c := one[0]; c.LatUsMedian != 3 || c.Rounds != 1 || c.Spread != 1 {
		t.Errorf("one round: %+v", c)
	}
	if s := latency(column{Cells: got}, "all_reduce", 8); s != "2.5 (6.00×)" {
		t.Errorf("latency with rounds: %q", s)
	}
	if s := latency(column{Cells: one}, "all_reduce", 8); s != "3.0" {
		t.Errorf("latency of one round: %q", s)
	}
}

func TestRoundOrder(t *testing.T) {
	first := map[int]int{}
	for r := range 6 {
		o := roundOrder(3, r)
		s := slices.Clone(o)
		slices.Sort(s)
		if !slices.Equal(s, []int{0, 1, 2}) {
			t.Fatalf("round %d: %v is not an order of 3", r, o)
		}
		first[o[0]]++
	}
	for i := range 3 {
		if first[i] != 2 {
			t.Errorf("in 6 rounds each should go first twice: %v", first)
		}
	}
}

func TestVerdict(t *testing.T) {
	base := column{Label: "godist", Cells: []cell{
		{Op: "all_reduce", Size: 8, LatUsMedian: 1, Rounds: 5, Spread: 1.2},
		{Op: "all_reduce", Size: 1 << 20, LatUsMedian: 100, Rounds: 5, Spread: 2.5},
		{Op: "barrier", LatUsMedian: 2, Rounds: 5, Spread: 1.1},
	}}
	peer := column{Label: "mpi-vader", Cells: []cell{
		{Op: "all_reduce", Size: 8, LatUsMedian: 2},
		{Op: "all_reduce", Size: 1 << 20, LatUsMedian: 50},
		{Op: "barrier", LatUsMedian: 1},
	}}
	got := verdict([]string{"all_reduce", "barrier"}, base, []column{peer})
	for _, want := range []string{
		"at or below mpi-vader's median in 1 of 3 cells",
		"behind: all_reduce 1 MiB 0.50×, barrier 0.50×",
		"worst 2.50× (all_reduce 1 MiB); over 1.5×: 1 cells (all_reduce 1 MiB 2.50×)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("verdict lacks %q:\n%s", want, got)
		}
	}
}

func TestPlacementNote(t *testing.T) {
	round := func(lat float64) []cell { return []cell{{Op: "broadcast", Size: 65536, LatUsMedian: lat}} }
	rounds := [][]cell{round(10), round(40), round(12), round(11)}
	places := []placement{{90, 100}, {480, 500}, {95, 110}, {100, 300}}
	got := placementNote(rounds, places)
	for _, want := range []string{
		"1 near (90/100 ns), 2 far (480/500 ns), 3 near (95/110 ns), 4 moved (100/300 ns)",
		"spread over its 2 rounds with the vCPUs near: worst 1.20× (broadcast 64 KiB); over 1.5×: 0 cells",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("placementNote lacks %q:\n%s", want, got)
		}
	}
	if got := placementNote(rounds[:2], places[:2]); strings.Contains(got, "spread") {
		t.Errorf("one near round gave a spread:\n%s", got)
	}
	if s := (placement{}).String(); s != "unknown" {
		t.Errorf("no measurement: %q", s)
	}
}
