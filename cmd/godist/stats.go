package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// This file is the pure part of godist bench: sizes, statistics and the
// table. Nothing here starts a process or touches the network.

// anchorSizes are the message sizes of shared/anchors/bench_gloo.py, so
// that a default godist bench table lines up row by row with gloo's.
var anchorSizes = []int{8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20}

// allOps are the collectives godist bench knows, in the order it runs
// them (bench_gloo.py's order, with all_to_all added before barrier).
var allOps = []string{"all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "barrier"}

// parseBytes reads a byte count such as "8", "8B", "1KiB", "64MiB", "1G".
// K, M and G (with or without "iB") are powers of 1024, as in nccl-tests;
// KB, MB and GB are powers of 1000.
func parseBytes(s string) (int, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := map[string]int{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1000,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1000 * 1000,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1000 * 1000 * 1000,
	}[unit]
	if !ok {
		return 0, fmt.Errorf("byte count %q: unknown unit %q (want B, KiB, MiB, GiB, KB, MB or GB)", s, t[i:])
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("byte count %q: want a non-negative whole number with an optional unit, such as 8, 1KiB or 64MiB", s)
	}
	if n > math.MaxInt/mult {
		return 0, fmt.Errorf("byte count %q is too large", s)
	}
	return n * mult, nil
}

// byteSize is a flag.Value holding a byte count written with parseBytes's
// suffixes.
type byteSize int

func (b *byteSize) String() string { return formatSize(int(*b)) }
func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// benchSizes returns the message sizes to run, ascending and without
// repeats. An explicit list wins. Otherwise, with factor < 2, the sizes are
// bench_gloo.py's (anchorSizes) that lie in [min, max]; with factor >= 2
// they are min, min·factor, min·factor², ... up to max, plus the anchor
// sizes in [min, max], so the rows that compare with gloo are always there.
func benchSizes(list string, min, max, factor int) ([]int, error) {
	if list != "" {
		var out []int
		for _, f := range strings.Split(list, ",") {
			n, err := parseBytes(f)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
		}
		slices.Sort(out)
		return slices.Compact(out), nil
	}
	if min < 0 || max < min {
		return nil, fmt.Errorf("want 0 <= --min-bytes <= --max-bytes, got %s and %s", formatSize(min), formatSize(max))
	}
	var out []int
	for _, s := range anchorSizes {
		if s >= min && s <= max {
			out = append(out, s)
		}
	}
	if factor >= 2 {
		s := min
		if s == 0 {
			s = 1
		}
		for s <= max {
			out = append(out, s)
			if s > max/factor {
				break
			}
			s *= factor
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no message sizes between %s and %s (give --step-factor or --sizes)", formatSize(min), formatSize(max))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// formatSize writes a byte count as the anchors' report does: "8 B",
// "1 KiB", "1.5 KiB", "64 MiB".
func formatSize(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.6g MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.6g KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// parseOps reads a comma-separated list of collectives ("all" for every
// one) and returns them in the order given, without repeats.
func parseOps(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			continue
		case f == "all":
			out = append(out, allOps...)
		case slices.Contains(allOps, f):
			out = append(out, f)
		default:
			return nil, fmt.Errorf("unknown op %q (want %s or all)", f, strings.Join(allOps, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no ops given")
	}
	var uniq []string
	for _, o := range out {
		if !slices.Contains(uniq, o) {
			uniq = append(uniq, o)
		}
	}
	return uniq, nil
}

// busFactor is nccl-tests' ratio of bus bandwidth to algorithm bandwidth
// for op over n ranks.
func busFactor(op string, n int) float64 {
	switch op {
	case "all_reduce":
		return 2 * float64(n-1) / float64(n)
	case "all_gather", "reduce_scatter", "all_to_all":
		return float64(n-1) / float64(n)
	}
	return 1
}

// elemCount is how many elements each rank's buffer of op holds for a
// message of size bytes, as bench_gloo.py sizes them: all_reduce and
// broadcast move a tensor of size bytes; for all_gather, reduce_scatter
// and all_to_all, size is the total over ranks (all_gather's output,
// reduce_scatter's input, all_to_all's send buffer) and per is one rank's
// share. Each is rounded down to whole elements and up to at least one;
// bytes is the byte count actually moved, which the table reports.
func elemCount(op string, size, elemSize, n int) (per, bytes int) {
	switch op {
	case "barrier":
		return 0, 0
	case "all_reduce", "broadcast":
		per = max(1, size/elemSize)
		return per, per * elemSize
	}
	per = max(1, size/elemSize/n)
	return per, per * elemSize * n
}

// latency is the summary of one cell's per-iteration latencies (seconds),
// computed as bench_gloo.py does: median as Python's statistics.median
// (the mean of the two middle values for an even count), p10 and p90 as
// the sorted values at index int(q·(len-1)).
type latency struct {
	Min, P10, Median, P90, Max float64
}

func summarize(ts []float64) latency {
	if len(ts) == 0 {
		return latency{}
	}
	v := slices.Clone(ts)
	slices.Sort(v)
	n := len(v)
	med := v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return latency{
		Min:    v[0],
		P10:    v[int(0.1*float64(n-1))],
		Median: med,
		P90:    v[int(0.9*float64(n-1))],
		Max:    v[n-1],
	}
}

// median is summarize(ts).Median.
func median(ts []float64) float64 { return summarize(ts).Median }

// iterCount is bench_gloo.py's policy: enough iterations that a cell takes
// about target seconds, given the estimated latency est (seconds), clamped
// to [minIters, maxIters]; maxIters wins when the two cross. target <= 0
// means always maxIters.
func iterCount(est, target float64, minIters, maxIters int) int {
	if target <= 0 {
		return maxIters
	}
	n := target / math.Max(est, 1e-7)
	n = math.Min(float64(maxIters), math.Max(float64(minIters), n))
	return int(n)
}

// result is one cell of the benchmark: one op at one size. The JSON keys
// are bench_gloo.py's, so both outputs can be read by one program.
type result struct {
	Backend string  `json:"backend"`
	World   int     `json:"world"`
	Op      string  `json:"op"`
	Size    int     `json:"size"`
	Bytes   int     `json:"bytes"`
	DType   string  `json:"dtype"`
	Algo    string  `json:"algo,omitempty"`
	PredUs  float64 `json:"pred_us,omitempty"` // the cost model's prediction from a common start (dist.Choice.Predicted)
	// PredAfterBarrierUs is its prediction of what the cell measures:
	// each rank's time from its own exit of the barrier before the call
	// (dist.Choice.AfterBarrier).
	PredAfterBarrierUs float64 `json:"pred_after_barrier_us,omitempty"`
	Model              string  `json:"model,omitempty"` // the cost model, for a group across hosts (dist.Group.Model)
	Supported          bool    `json:"supported"`
	Iters              int     `json:"iters"`
	LatUsMin           float64 `json:"lat_us_min"`
	LatUsP10           float64 `json:"lat_us_p10"`
	LatUsMedian        float64 `json:"lat_us_median"`
	LatUsP90           float64 `json:"lat_us_p90"`
	LatUsMax           float64 `json:"lat_us_max"`
	AlgbwGBps          float64 `json:"algbw_GBps,omitempty"`
	BusbwGBps          float64 `json:"busbw_GBps,omitempty"`
	CallsPerS          float64 `json:"calls_per_s,omitempty"`
	// The common start (--common-start): the median over its iterations
	// of the time from the instant to the last rank's return, and of the
	// last rank's start after the instant.
	CommonIters        int     `json:"common_iters,omitempty"`
	CommonUsMedian     float64 `json:"common_us_median,omitempty"`
	CommonLateUsMedian float64 `json:"common_late_us_median,omitempty"`
	TStart             float64 `json:"t_start,omitempty"`
	TEnd               float64 `json:"t_end,omitempty"`
}

// newResult fills a result from the per-iteration latencies (seconds,
// already the maximum over ranks).
func newResult(op string, size, bytes, world int, ts []float64) result {
	l := summarize(ts)
	r := result{
		Backend: "godist", World: world, Op: op, Size: size, Bytes: bytes, Supported: true, Iters: len(ts),
		LatUsMin: l.Min * 1e6, LatUsP10: l.P10 * 1e6, LatUsMedian: l.Median * 1e6,
		LatUsP90: l.P90 * 1e6, LatUsMax: l.Max * 1e6,
	}
	if bytes > 0 && l.Median > 0 {
		r.AlgbwGBps = float64(bytes) / l.Median / 1e9
		r.BusbwGBps = r.AlgbwGBps * busFactor(op, world)
	}
	return r
}

// tableHeader is the anchors' collective table (shared/anchors/
// measured-*.md) for one run, plus the algorithm dist chose and the time
// its cost model predicted.
const tableHeader = "| op | size | median us | p10..p90 us | best..worst iter us | algbw GB/s | busbw GB/s | iters | algo | predicted us |\n" +
	"|---|---|---|---|---|---|---|---|---|---|\n"

// tableRow formats r as a row of tableHeader, with the anchors' number
// formats.
func tableRow(r result) string {
	size, alg, bus := "-", "-", "-"
	if r.Op != "barrier" {
		size = formatSize(r.Bytes)
		alg, bus = fmt.Sprintf("%.3f", r.AlgbwGBps), fmt.Sprintf("%.3f", r.BusbwGBps)
	}
	algo := r.Algo
	if algo == "" {
		algo = "-"
	}
	pred := "-" // the cost model's time for what the cell measures, where it has one
	if p := cmp.Or(r.PredAfterBarrierUs, r.PredUs); p > 0 {
		pred = fmt.Sprintf("%.1f", p)
	}
	return fmt.Sprintf("| %s | %s | %.1f | %.1f..%.1f | %.1f..%.0f | %s | %s | %d | %s | %s |\n",
		r.Op, size, r.LatUsMedian, r.LatUsP10, r.LatUsP90, r.LatUsMin, r.LatUsMax, alg, bus, r.Iters, algo, pred)
}
