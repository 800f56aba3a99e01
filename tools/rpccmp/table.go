package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/godist/godist/tools/benchfmt"
)

// unit is what a case is compared by.
type unit int

const (
	micros   unit = iota // median latency of one call or burst, µs; lower is better
	gbps                 // payload bytes each way per second, GB/s; higher is better
	callsPer             // calls completed per second; higher is better
)

func (u unit) String() string {
	return [...]string{"µs", "GB/s", "calls/s"}[u]
}

// unitOf is the unit a case is compared in, from its name, which godist
// bench --rpc and bench_rpc.py share: the bursts of calls in flight by
// their throughput (GB/s when they carry a payload, calls/s when not),
// every other case by its median latency.
func unitOf(name string) unit {
	switch {
	case !strings.Contains(name, "in flight"):
		return micros
	case strings.Contains(name, "echo"):
		return gbps
	}
	return callsPer
}

// entry is one case's result: godist bench --rpc --json names it op and
// its bandwidth algbw_GBps; bench_rpc.py names them case and
// GBps_each_way.
type entry struct {
	Op          string  `json:"op"`
	Case        string  `json:"case"`
	LatUsMedian float64 `json:"lat_us_median"`
	AlgbwGBps   float64 `json:"algbw_GBps"`
	GBpsEachWay float64 `json:"GBps_each_way"`
	CallsPerS   float64 `json:"calls_per_s"`
}

// run is one benchmark run's results: each case's value in its unit, and
// the cases in the order it ran them.
type run struct {
	Values map[string]float64
	Order  []string
}

// parseRun reads godist bench --rpc --json's report or bench_rpc.py's
// output (both an object whose "results" holds the cases).
func parseRun(raw []byte) (run, error) {
	var doc struct {
		Results []entry `json:"results"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return run{}, err
	}
	r := run{Values: map[string]float64{}}
	for _, e := range doc.Results {
		name := e.Case
		if name == "" {
			name = e.Op
		}
		v := e.LatUsMedian
		switch unitOf(name) {
		case gbps:
			v = max(e.AlgbwGBps, e.GBpsEachWay)
		case callsPer:
			v = e.CallsPerS
		}
		if v <= 0 {
			return run{}, fmt.Errorf("case %q has no value in %s", name, unitOf(name))
		}
		r.Values[name] = v
		r.Order = append(r.Order, name)
	}
	if len(r.Order) == 0 {
		return run{}, fmt.Errorf("no results")
	}
	return r, nil
}

// favour is how many times better godist's value g is than the peer's p
// in unit u: above 1, godist is faster.
func favour(u unit, g, p float64) float64 {
	if u == micros {
		return p / g
	}
	return g / p
}

// renderTable returns the markdown table of cases: each side's median over
// its rounds with the range of the rounds, and godist's advantage (the
// ratio of the medians, with the range of the rounds' paired ratios).
// cases are the rows; a round in which a side did not run is nil.
func renderTable(cases []string, godist, peer []run, peerLabel string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| case | unit | godist | %s | godist's advantage |\n|---|---|---|---|---|\n", peerLabel)
	for _, c := range cases {
		u := unitOf(c)
		g, p := valuesOf(godist, c), valuesOf(peer, c)
		adv := "-"
		if len(g) > 0 && len(p) > 0 {
			adv = benchfmt.Ratio(favour(u, median(g), median(p)))
			var paired []float64
			for i := range min(len(godist), len(peer)) {
				gv, gok := lookup(godist[i], c)
				pv, pok := lookup(peer[i], c)
				if gok && pok {
					paired = append(paired, favour(u, gv, pv))
				}
			}
			if len(paired) > 1 {
				adv += fmt.Sprintf(" (%s..%s)", benchfmt.Ratio(slices.Min(paired)), benchfmt.Ratio(slices.Max(paired)))
			}
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s |\n", c, u, summary(g), summary(p), adv)
	}
	return sb.String()
}

// caseOrder is the table's rows: the cases of the runs, in the order they
// ran, godist's first.
func caseOrder(runs ...[]run) []string {
	var out []string
	for _, rs := range runs {
		for _, r := range rs {
			for _, c := range r.Order {
				if !slices.Contains(out, c) {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

func lookup(r run, c string) (float64, bool) {
	v, ok := r.Values[c]
	return v, ok
}

// valuesOf returns case c's value in each run that has it.
func valuesOf(rs []run, c string) []float64 {
	var vs []float64
	for _, r := range rs {
		if v, ok := lookup(r, c); ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// summary is "median (min..max)" of vs, or the one value.
func summary(vs []float64) string {
	switch len(vs) {
	case 0:
		return "-"
	case 1:
		return formatValue(vs[0])
	}
	return fmt.Sprintf("%s (%s..%s)", formatValue(median(vs)), formatValue(slices.Min(vs)), formatValue(slices.Max(vs)))
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	sort.Float64s(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// formatValue keeps about three significant digits.
func formatValue(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
