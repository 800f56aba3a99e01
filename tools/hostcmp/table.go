package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/godist/godist/tools/benchfmt"
)

// cell is the part of one (op, size) result that the tables need. godist
// bench's JSON lines, bench_gloo.py and bench_mpi.py share these keys;
// pred_us and pred_after_barrier_us (a cost model's predictions) are
// godist's alone, when it has them.
type cell struct {
	Op          string  `json:"op"`
	Size        int     `json:"size"`
	Bytes       int     `json:"bytes"`
	Supported   *bool   `json:"supported"`
	Error       string  `json:"error"`
	LatUsMedian float64 `json:"lat_us_median"`
	Algo        string  `json:"algo"`
	// PredUs is godist's cost model's time from a common start (what the
	// common start measures); PredAfterBarrierUs its time for what the
	// latency measures, each rank from its own exit of the barrier
	// before the call (absent in results of before 2026-11-30).
	PredUs             *float64 `json:"pred_us"`
	PredAfterBarrierUs *float64 `json:"pred_after_barrier_us"`
	Model              string   `json:"model"` // godist's cost model, across hosts
	// CommonUsMedian is godist's time from a common start (godist bench
	// --common-start), the quantity its cost model predicts.
	CommonUsMedian float64 `json:"common_us_median"`
}

// ok reports whether c holds a measured latency.
func (c cell) ok() bool {
	return (c.Supported == nil || *c.Supported) && c.Error == "" && c.LatUsMedian > 0
}

// parseCells reads a benchmark's JSON: a list of cells (the anchors'
// --out; a list that does not parse is read as lines), or one cell per line (godist bench --worker's rank 0, whose
// lines godist run prefixes with "[rank 0] "). Lines that are not JSON
// objects (a launcher's log) are skipped.
func parseCells(raw []byte) ([]cell, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' && json.Valid(raw) {
		var cs []cell
		if err := json.Unmarshal(raw, &cs); err != nil {
			return nil, fmt.Errorf("parsing a list of results: %w", err)
		}
		return cs, nil
	}
	var cs []cell
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if _, rest, ok := strings.Cut(l, "] "); ok && strings.HasPrefix(l, "[") {
			l = rest
		}
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var c cell
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			return nil, fmt.Errorf("parsing result line %q: %w", l, err)
		}
		cs = append(cs, c)
	}
	return cs, sc.Err()
}

// series is one benchmark's results on one lab: the cells of each round
// it completed.
type series struct {
	Label  string
	Rounds [][]cell
}

// find returns the cell of round r for op at size (barrier has one,
// whatever its size).
func find(cells []cell, op string, size int) (cell, bool) {
	for _, c := range cells {
		if c.Op == op && (c.Size == size || op == "barrier") {
			return c, true
		}
	}
	return cell{}, false
}

// spread is a statistic over rounds: the median of the rounds' values
// (the mean of the middle two for an even count, as Python's
// statistics.median) and their least and greatest.
type spread struct {
	Median, Min, Max float64
	N                int
}

func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{}
	}
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	med := v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return spread{Median: med, Min: v[0], Max: v[n-1], N: n}
}

// latency is s's spread of the rounds' median latencies (µs) for op at
// size, over the rounds that measured it.
func (s series) latency(op string, size int) (spread, bool) {
	var v []float64
	for _, cells := range s.Rounds {
		if c, ok := find(cells, op, size); ok && c.ok() {
			v = append(v, c.LatUsMedian)
		}
	}
	return spreadOf(v), len(v) > 0
}

// common is the median over rounds of godist's time from a common start
// for op at size.
func (s series) common(op string, size int) (float64, bool) {
	var v []float64
	for _, cells := range s.Rounds {
		if c, ok := find(cells, op, size); ok && c.ok() && c.CommonUsMedian > 0 {
			v = append(v, c.CommonUsMedian)
		}
	}
	return spreadOf(v).Median, len(v) > 0
}

// hasCommon reports whether any of s's cells carries a common start.
func (s series) hasCommon() bool {
	for _, cells := range s.Rounds {
		for _, c := range cells {
			if c.CommonUsMedian > 0 {
				return true
			}
		}
	}
	return false
}

// status is what s's table entry says when no round measured op at size:
// "unsupported", "error" or "-".
func (s series) status(op string, size int) string {
	for _, cells := range s.Rounds {
		if c, ok := find(cells, op, size); ok {
			if c.Supported != nil && !*c.Supported {
				return "unsupported"
			}
			if c.Error != "" {
				return "error"
			}
		}
	}
	return "-"
}

// predicted is the median over rounds of godist's prediction for op at
// size: of the latency the table shows (pred_after_barrier_us, or pred_us
// where a result has no other), or with common of the common start's
// (pred_us).
func (s series) predicted(op string, size int, common bool) (float64, bool) {
	var v []float64
	for _, cells := range s.Rounds {
		c, ok := find(cells, op, size)
		if !ok {
			continue
		}
		p := c.PredUs
		if !common && c.PredAfterBarrierUs != nil {
			p = c.PredAfterBarrierUs
		}
		if p != nil && *p > 0 {
			v = append(v, *p)
		}
	}
	return spreadOf(v).Median, len(v) > 0
}

// hasPred reports whether any of s's cells carries pred_us.
func (s series) hasPred() bool {
	for _, cells := range s.Rounds {
		for _, c := range cells {
			if c.PredUs != nil {
				return true
			}
		}
	}
	return false
}

// algos lists the algorithms s's cells name for op at size, in the order
// of the rounds and without repeats, joined by ", " (godist's names hold
// slashes: chain/16); "-" if none.
func (s series) algos(op string, size int) string {
	var out []string
	for _, cells := range s.Rounds {
		if c, ok := find(cells, op, size); ok && c.Algo != "" && !slices.Contains(out, c.Algo) {
			out = append(out, c.Algo)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// bytesOf is the byte count s's cells report for op at size (what the
// op moved after rounding to whole elements), or size if none does.
func (s series) bytesOf(op string, size int) int {
	for _, cells := range s.Rounds {
		if c, ok := find(cells, op, size); ok && c.Bytes > 0 {
			return c.Bytes
		}
	}
	return size
}

// sizesOf returns the sizes at which any series measured op, ascending.
func sizesOf(op string, all []series) []int {
	var sizes []int
	for _, s := range all {
		for _, cells := range s.Rounds {
			for _, c := range cells {
				if c.Op != op {
					continue
				}
				size := c.Size
				if op == "barrier" {
					size = 0
				}
				if !slices.Contains(sizes, size) {
					sizes = append(sizes, size)
				}
			}
		}
	}
	slices.Sort(sizes)
	return sizes
}

// busFactor is nccl-tests' ratio of bus bandwidth to algorithm bandwidth
// for op over n ranks.
func busFactor(op string, n int) float64 {
	switch op {
	case "all_reduce":
		return 2 * float64(n-1) / float64(n)
	case "all_gather":
		return float64(n-1) / float64(n)
	}
	return 1
}

// busbwFrom is the smallest size whose bandwidths the tables show: below
// it the latency says everything.
const busbwFrom = 1 << 20

// tables is what renderTables needs for one lab.
type tables struct {
	Ops   []string
	World int
	// Bound is the all-reduce's two-level bound, algorithm bytes per
	// second (twoLevelBound); 0: none.
	Bound  float64
	Godist series
	Peers  []series
}

// renderTables returns one markdown table per op that any series
// measured. A row per size gives each benchmark's median latency over
// the rounds with the rounds' range, each peer's over godist's (above 1,
// godist is faster), godist's predicted over measured latency when its
// results carry a prediction, from busbwFrom up the bus bandwidths (and
// for all_reduce the two-level bound and godist's share of it), and
// godist's algorithm.
func renderTables(t tables) string {
	var sb strings.Builder
	all := append([]series{t.Godist}, t.Peers...)
	pred, common := t.Godist.hasPred(), t.Godist.hasCommon()
	sb.WriteString(modelLines(t.Godist))
	for _, op := range t.Ops {
		sizes := sizesOf(op, all)
		if len(sizes) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "\n#### %s\n\n", op)
		head := []string{"size"}
		for _, s := range all {
			head = append(head, s.Label+" µs (range)")
		}
		for _, p := range t.Peers {
			head = append(head, p.Label+"/"+t.Godist.Label)
		}
		if pred {
			head = append(head, "pred/measured")
			if common {
				head = append(head, "common start µs", "pred/common")
			}
		}
		if op != "barrier" {
			labels := make([]string, len(all))
			for i, s := range all {
				labels[i] = s.Label
			}
			head = append(head, "busbw GB/s ("+strings.Join(labels, " / ")+")")
		}
		if op == "all_reduce" && t.Bound > 0 {
			head = append(head, "two-level bound GB/s", t.Godist.Label+" % of bound")
		}
		head = append(head, t.Godist.Label+" algo")
		sb.WriteString(benchfmt.Row(head))
		sb.WriteString(strings.Repeat("|---", len(head)) + "|\n")
		for _, size := range sizes {
			sb.WriteString(benchfmt.Row(tableRow(t, op, size, pred, common)))
		}
	}
	return sb.String()
}

// modelLines says which cost model godist's calls chose by in each
// round (the one its ranks measured at Init), so that the pred/measured
// column can be read against it; "" when its results carry none.
func modelLines(s series) string {
	var sb strings.Builder
	for r, cells := range s.Rounds {
		for _, c := range cells {
			if c.Model != "" {
				fmt.Fprintf(&sb, "\n%s's cost model, round %d: %s\n", s.Label, r+1, c.Model)
				break
			}
		}
	}
	return sb.String()
}

// tableRow is renderTables' row for op at size.
func tableRow(t tables, op string, size int, pred, common bool) []string {
	row := []string{"-"}
	if op != "barrier" {
		row[0] = benchfmt.Size(size)
	}
	all := append([]series{t.Godist}, t.Peers...)
	for _, s := range all {
		l, ok := s.latency(op, size)
		if !ok {
			row = append(row, s.status(op, size))
			continue
		}
		row = append(row, formatSpread(l))
	}
	g, gok := t.Godist.latency(op, size)
	for _, p := range t.Peers {
		ratio := "-"
		if x, ok := p.latency(op, size); ok && gok {
			ratio = benchfmt.Ratio(x.Median / g.Median)
		}
		row = append(row, ratio)
	}
	if pred {
		pu, pok := t.Godist.predicted(op, size, false)
		v := "-"
		if pok && gok {
			v = fmt.Sprintf("%.2f", pu/g.Median)
		}
		row = append(row, v)
		if common {
			c, cok := t.Godist.common(op, size)
			pc, pcok := t.Godist.predicted(op, size, true)
			cv, v := "-", "-"
			if cok {
				cv = formatLatency(c)
				if pcok {
					v = fmt.Sprintf("%.2f", pc/c)
				}
			}
			row = append(row, cv, v)
		}
	}
	big := size >= busbwFrom
	if op != "barrier" {
		bus := "-"
		if big {
			vals := make([]string, len(all))
			for i, s := range all {
				vals[i] = "-"
				if l, ok := s.latency(op, size); ok {
					bw := float64(s.bytesOf(op, size)) / (l.Median * 1e-6) / 1e9
					vals[i] = fmt.Sprintf("%.3f", bw*busFactor(op, t.World))
				}
			}
			bus = strings.Join(vals, " / ")
		}
		row = append(row, bus)
	}
	if op == "all_reduce" && t.Bound > 0 {
		bound, pct := "-", "-"
		if big {
			bound = fmt.Sprintf("%.3f", t.Bound/1e9)
			if gok {
				algbw := float64(t.Godist.bytesOf(op, size)) / (g.Median * 1e-6)
				pct = fmt.Sprintf("%.0f%%", 100*algbw/t.Bound)
			}
		}
		row = append(row, bound, pct)
	}
	return append(row, t.Godist.algos(op, size))
}

// formatSpread writes a median with the rounds' range: "212 (205–230)",
// the range left out when one round measured it.
func formatSpread(s spread) string {
	if s.N < 2 {
		return formatLatency(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", formatLatency(s.Median), formatLatency(s.Min), formatLatency(s.Max))
}

// formatLatency writes µs: one decimal below 1000, none from there.
func formatLatency(us float64) string {
	if us >= 1000 {
		return fmt.Sprintf("%.0f", us)
	}
	return fmt.Sprintf("%.1f", us)
}
