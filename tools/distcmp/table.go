package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/godist/godist/tools/benchfmt"
)

// cell is the part of one (op, size) result that the comparison needs.
// godist bench --json, bench_gloo.py and bench_mpi.py share these keys.
type cell struct {
	Op          string  `json:"op"`
	Size        int     `json:"size"`
	Bytes       int     `json:"bytes"`
	Supported   *bool   `json:"supported"`
	Error       string  `json:"error"`
	Iters       int     `json:"iters"`
	LatUsMedian float64 `json:"lat_us_median"`
	BusbwGBps   float64 `json:"busbw_GBps"`
	Algo        string  `json:"algo"`

	// Set by mergeRounds: how many rounds measured the cell, and their
	// largest median over their smallest.
	Rounds int     `json:"-"`
	Spread float64 `json:"-"`
}

// ok reports whether c holds a measured latency.
func (c cell) ok() bool {
	return (c.Supported == nil || *c.Supported) && c.Error == "" && c.LatUsMedian > 0
}

// parseCells reads one benchmark's JSON: godist bench's report (an object
// whose "results" holds the cells) or the anchors' list of cells.
func parseCells(raw []byte) ([]cell, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var cs []cell
		if err := json.Unmarshal(raw, &cs); err != nil {
			return nil, fmt.Errorf("parsing a list of results: %w", err)
		}
		return cs, nil
	}
	var rep struct {
		Results []cell `json:"results"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		return nil, fmt.Errorf("parsing a report: %w", err)
	}
	return rep.Results, nil
}

// column is one benchmark's results at one world size.
type column struct {
	Label string // the table's heading for it: godist, mpi-vader, mpi-tcp, gloo
	Cells []cell
}

// find returns c's result for op at size (barrier has one, whatever its
// size).
func (c column) find(op string, size int) (cell, bool) {
	for _, x := range c.Cells {
		if x.Op == op && (x.Size == size || op == "barrier") {
			return x, true
		}
	}
	return cell{}, false
}

// busbwFrom is the smallest size whose bus bandwidth the tables show:
// below it the latency says everything.
const busbwFrom = 1 << 20

// renderTables returns one markdown table per op of ops that any column
// measured: a row per size with each column's median latency, each peer's
// median over godist's (above 1, godist is faster), the bus bandwidths
// from busbwFrom up and godist's algorithm. base is godist's column; with
// no cells in it the ratios are "-".
func renderTables(ops []string, base column, peers []column) string {
	var sb strings.Builder
	all := append([]column{base}, peers...)
	for _, op := range ops {
		sizes := sizesOf(op, all)
		if len(sizes) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "\n#### %s\n\n", op)
		head := []string{"size"}
		for _, c := range all {
			head = append(head, c.Label+" µs")
		}
		for _, p := range peers {
			head = append(head, p.Label+"/"+base.Label)
		}
		if op != "barrier" {
			labels := make([]string, len(all))
			for i, c := range all {
				labels[i] = c.Label
			}
			head = append(head, "busbw GB/s ("+strings.Join(labels, " / ")+")")
		}
		head = append(head, base.Label+" algo")
		sb.WriteString(benchfmt.Row(head))
		sb.WriteString(strings.Repeat("|---", len(head)) + "|\n")
		for _, size := range sizes {
			sb.WriteString(benchfmt.Row(tableRow(op, size, base, peers)))
		}
	}
	return sb.String()
}

// tableRow is renderTables' row for op at size.
func tableRow(op string, size int, base column, peers []column) []string {
	row := []string{"-"}
	if op != "barrier" {
		row[0] = benchfmt.Size(size)
	}
	b, bok := base.find(op, size)
	all := append([]column{base}, peers...)
	for _, c := range all {
		row = append(row, latency(c, op, size))
	}
	for _, p := range peers {
		ratio := "-"
		if x, ok := p.find(op, size); ok && bok && x.ok() && b.ok() {
			ratio = benchfmt.Ratio(x.LatUsMedian / b.LatUsMedian)
		}
		row = append(row, ratio)
	}
	if op != "barrier" {
		bus := "-"
		if size >= busbwFrom {
			vals := make([]string, len(all))
			for i, c := range all {
				vals[i] = "-"
				if x, ok := c.find(op, size); ok && x.ok() && x.BusbwGBps > 0 {
					vals[i] = fmt.Sprintf("%.2f", x.BusbwGBps)
				}
			}
			bus = strings.Join(vals, " / ")
		}
		row = append(row, bus)
	}
	algo := "-"
	if bok && b.Algo != "" {
		algo = b.Algo
	}
	return append(row, algo)
}

// latency is c's median at (op, size) as a table entry, with the
// rounds' spread when several rounds measured it.
func latency(c column, op string, size int) string {
	x, ok := c.find(op, size)
	switch {
	case !ok:
		return "-"
	case x.Supported != nil && !*x.Supported:
		return "unsupported"
	case x.Error != "":
		return "error"
	}
	s := fmt.Sprintf("%.1f", x.LatUsMedian)
	if x.LatUsMedian >= 1000 {
		s = fmt.Sprintf("%.0f", x.LatUsMedian)
	}
	if x.Rounds > 1 {
		s += fmt.Sprintf(" (%.2f×)", x.Spread)
	}
	return s
}

// cellName names op at size (a barrier has no size).
func cellName(op string, size int) string {
	if op == "barrier" {
		return op
	}
	return op + " " + benchfmt.Size(size)
}

// sizesOf returns the sizes at which any column measured op, ascending.
func sizesOf(op string, cols []column) []int {
	var sizes []int
	for _, c := range cols {
		for _, x := range c.Cells {
			if x.Op != op {
				continue
			}
			s := x.Size
			if op == "barrier" {
				s = 0
			}
			if !slices.Contains(sizes, s) {
				sizes = append(sizes, s)
			}
		}
	}
	slices.Sort(sizes)
	return sizes
}
