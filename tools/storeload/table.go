package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/godist/godist/tools/benchfmt"
)

// metric is one row of the table: how to read it from a result and
// whether more is better.
type metric struct {
	name   string
	get    func(result) float64
	format string
	higher bool
}

var metrics = []metric{
	{"operations/s", func(r result) float64 { return r.OpsPerS }, "%.0f", true},
	{"p50 latency, ms", func(r result) float64 { return r.P50Ms }, "%.2f", false},
	{"p99 latency, ms", func(r result) float64 { return r.P99Ms }, "%.2f", false},
	{"barrier p50, ms", func(r result) float64 { return r.BarrierP50Ms }, "%.1f", false},
	{"barrier p99, ms", func(r result) float64 { return r.BarrierP99Ms }, "%.1f", false},
	{"connect all, s", func(r result) float64 { return r.ConnectS }, "%.2f", false},
	{"server RSS, MiB", func(r result) float64 { return r.ServerRSSMB }, "%.1f", false},
	{"server RSS a client, KiB", func(r result) float64 { return r.RSSPerClientK }, "%.2f", false},
	{"server descriptors", func(r result) float64 { return float64(r.ServerFDs) }, "%.0f", false},
	{"server CPU an operation, µs", func(r result) float64 { return r.ServerCPUUs }, "%.1f", false},
}

// table is the markdown comparison: each metric's median over the runs
// with its range, and godist's advantage (above 1, godist is better).
func table(clients, rounds int, gd, pt []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d clients, %d rounds a run, %d runs of godist and %d of PyTorch\n\n", clients, rounds, len(gd), len(pt))
	b.WriteString(benchfmt.Row([]string{"", "godist store", "PyTorch TCPStore", "godist's advantage"}))
	b.WriteString(benchfmt.Row([]string{"---", "---", "---", "---"}))
	for _, m := range metrics {
		g, p := spread(gd, m), spread(pt, m)
		adv := ""
		if len(gd) > 0 && len(pt) > 0 && median(gd, m) > 0 && median(pt, m) > 0 {
			r := median(gd, m) / median(pt, m)
			if !m.higher {
				r = 1 / r
			}
			adv = benchfmt.Ratio(r)
		}
		b.WriteString(benchfmt.Row([]string{m.name, g, p, adv}))
	}
	return b.String()
}

func values(rs []result, m metric) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = m.get(r)
	}
	slices.Sort(v)
	return v
}

func median(rs []result, m metric) float64 {
	v := values(rs, m)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// spread is "median (min-max)", or the one value, or nothing.
func spread(rs []result, m metric) string {
	v := values(rs, m)
	switch len(v) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(m.format, v[0])
	}
	return fmt.Sprintf(m.format+" ("+m.format+"-"+m.format+")", median(rs, m), v[0], v[len(v)-1])
}
