// Command costtable prints, as markdown, what godist's cost model
// predicts for groups of 1,024 to 16,384 ranks, from the closed forms of
// dist/algo (Model.Candidates, Model.Choose): the time of each all-reduce
// algorithm and of the policy's choice at sizes from 8 B to 256 MiB, the
// sizes at which the fastest algorithm changes (found by bisection), the
// all-gather and broadcast at 4,096 ranks, and the model beside what
// BENCHMARKS.md measured where the two overlap.
//
//	go run ./tools/costtable > table.md
//
// The topologies: one host of W ranks over shared memory (the model's
// local link), and W/8 hosts of 8 ranks over a 10 Gbit/s network
// (algo.DefaultModel) and over 1 Gbit/s (the same, the network's
// bandwidth the 0.119 GB/s of TCP payload the namespace lab's 1 Gbit/s
// links carried). Nothing is run: this is the model, not a measurement.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/godist/godist/dist/algo"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: costtable\n\nPrints the cost model's tables at 1,024-16,384 ranks (BENCHMARKS.md, \"A cost model at 1,024-16,384 ranks\").")
	}
	flag.Parse()
	write(os.Stdout)
}

// config is a topology with its model.
type config struct {
	label string
	m     algo.Model
	shape func(w int) algo.Shape
}

var (
	gbit = func() algo.Model {
		m := algo.DefaultModel
		m.Network.Bandwidth = 0.119e9
		return m
	}()
	configs = []config{
		{"1 host, shared memory", algo.DefaultModel, func(w int) algo.Shape { return algo.Shape{Hosts: 1, PerHost: w} }},
		{"W/8 × 8, 10 Gbit/s", algo.DefaultModel, func(w int) algo.Shape { return algo.Shape{Hosts: w / 8, PerHost: 8} }},
		{"W/8 × 8, 1 Gbit/s", gbit, func(w int) algo.Shape { return algo.Shape{Hosts: w / 8, PerHost: 8} }},
	}
	worlds  = []int{1024, 4096, 16384}
	sizes   = []int{8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20}
	agSizes = []int{8, 1 << 10, 64 << 10, 1 << 20}
	arAlgs  = []string{"recursive-doubling", "halving-doubling", "halving-doubling-near", "ring", "two-level", "leaders"}
)

const elemSize = 4 // float32

func write(w io.Writer) {
	fmt.Fprintf(w, "Models: shared memory %v; 10 Gbit/s %v; 1 Gbit/s the same with the network at %v. A CPU for each rank (Model.CPUs 0). Times are the closed forms' (dist/algo/estimate.go), float32 elements.\n\n",
		algo.DefaultModel.Local, algo.DefaultModel.Network, gbit.Network)
	for _, world := range worlds {
		allReduceTable(w, world)
	}
	fmt.Fprintf(w, "**Crossovers.** The size at which the fastest all-reduce changes (bisection on the closed forms, 8 B to 1 GiB; the policy across hosts picks the fastest, on one host it switches at 64 KiB and 1 MiB whatever W):\n\n")
	fmt.Fprintf(w, "| W | topology | fastest, and where it changes |\n|---|---|---|\n")
	for _, world := range worlds {
		for _, c := range configs {
			fmt.Fprintf(w, "| %s | %s | %s |\n", num(world), c.label, crossovers(c.m, c.shape(world), algo.OpAllReduce))
		}
	}
	fmt.Fprintln(w)
	world := 4096
	opTable(w, world, algo.OpBroadcast, sizes, "broadcast of the size")
	opTable(w, world, algo.OpAllGather, agSizes, "all_gather, each rank's chunk of the size (the output W times it)")
	fmt.Fprintf(w, "Broadcast crossovers at 4,096: ")
	var parts []string
	for _, c := range configs {
		parts = append(parts, c.label+": "+crossovers(c.m, c.shape(world), algo.OpBroadcast))
	}
	fmt.Fprintf(w, "%s.\n\n", strings.Join(parts, "; "))
	measured(w)
}

func allReduceTable(w io.Writer, world int) {
	fmt.Fprintf(w, "all_reduce at W = %s:\n\n", num(world))
	fmt.Fprintf(w, "| topology | size | %s | policy's choice |\n|---|---|%s---|\n", strings.Join(arAlgs, " | "), strings.Repeat("---|", len(arAlgs)))
	for _, c := range configs {
		s := c.shape(world)
		for _, n := range sizes {
			cands := c.m.Candidates(s, algo.OpAllReduce, n/elemSize, elemSize)
			choice := c.m.Choose(s, algo.OpAllReduce, n/elemSize, elemSize)
			best := algo.Best(cands)
			row := []string{c.label, size(n)}
			for _, a := range arAlgs {
				i := slices.IndexFunc(cands, func(e algo.Estimate) bool { return e.Name == a })
				if i < 0 {
					row = append(row, "–")
					continue
				}
				cell := dur(cands[i].Time)
				if cands[i].Segments > 1 {
					cell += fmt.Sprintf(" (/%d)", cands[i].Segments)
				}
				if cands[i].Name == best.Name {
					cell = "**" + cell + "**"
				}
				row = append(row, cell)
			}
			ch := fmt.Sprintf("%v %s", choice, dur(choice.Time))
			if choice.Name != best.Name {
				ch += fmt.Sprintf(" (%.2f× the fastest)", choice.Time.Seconds()/best.Time.Seconds())
			}
			row = append(row, ch)
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
	fmt.Fprintln(w)
}

func opTable(w io.Writer, world int, op algo.Op, sz []int, what string) {
	fmt.Fprintf(w, "%s at W = %s, %s:\n\n", op, num(world), what)
	fmt.Fprintf(w, "| topology | size | candidates | policy's choice |\n|---|---|---|---|\n")
	for _, c := range configs {
		s := c.shape(world)
		for _, n := range sz {
			cands := c.m.Candidates(s, op, n/elemSize, elemSize)
			// One column per algorithm: its best segment count.
			byName := map[string]algo.Estimate{}
			var names []string
			for _, e := range cands {
				if b, ok := byName[e.Name]; !ok || e.Time < b.Time {
					if !ok {
						names = append(names, e.Name)
					}
					byName[e.Name] = e
				}
			}
			var cells []string
			for _, name := range names {
				cells = append(cells, fmt.Sprintf("%v %s", byName[name], dur(byName[name].Time)))
			}
			choice := c.m.Choose(s, op, n/elemSize, elemSize)
			fmt.Fprintf(w, "| %s | %s | %s | %v %s |\n", c.label, size(n), strings.Join(cells, ", "), choice, dur(choice.Time))
		}
	}
	fmt.Fprintln(w)
}

// crossovers lists the fastest algorithm from 8 B up and each size at
// which another becomes fastest, bisected to the element.
func crossovers(m algo.Model, s algo.Shape, op algo.Op) string {
	fastest := func(count int) string { return algo.Best(m.Candidates(s, op, count, elemSize)).Name }
	var out []string
	lo := 2 // 8 B
	cur := fastest(lo)
	out = append(out, cur)
	for bytes := 16; bytes <= 1<<30; bytes *= 2 {
		hi := bytes / elemSize
		next := fastest(hi)
		if next == cur {
			lo = hi
			continue
		}
		a, b := lo, hi // fastest(a) == cur, fastest(b) == next
		for b-a > 1 {
			mid := a + (b-a)/2
			if fastest(mid) == cur {
				a = mid
			} else {
				b = mid
			}
		}
		nb := fastest(b)
		out = append(out, fmt.Sprintf("→ %s from %s", nb, size(b*elemSize)))
		cur, lo = nb, b
		if nb != next {
			// Two changes between grid points: pick up the second.
			bytes /= 2
		}
	}
	return strings.Join(out, " ")
}

// measured puts the model beside BENCHMARKS.md's measurements.
func measured(w io.Writer) {
	// The lab at 1 Gbit/s: cost_test.go's model of it, one CPU a host.
	lab := algo.Model{
		Local:   algo.Link{Latency: 5 * time.Microsecond, Bandwidth: 3e9},
		Network: algo.Link{Latency: 60 * time.Microsecond, Bandwidth: 0.119e9},
		Reduce:  3e9,
		Call:    10 * time.Microsecond,
		CPUs:    1,
	}
	lab10 := lab
	lab10.Network.Bandwidth = 1.15e9
	type point struct {
		what     string
		m        algo.Model
		s        algo.Shape
		op       algo.Op
		alg      string
		seg      int
		count    int
		es       int
		measured time.Duration
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	us := func(f float64) time.Duration { return time.Duration(f * float64(time.Microsecond)) }
	pts := []point{
		{"2×2 at 1 Gbit/s, 8 B (after --warmup-job)", lab, algo.Shape{Hosts: 2, PerHost: 2}, algo.OpAllReduce, "leaders", 1, 2, 4, us(127)},
		{"2×2 at 1 Gbit/s, 64 KiB", lab, algo.Shape{Hosts: 2, PerHost: 2}, algo.OpAllReduce, "leaders", 1, 16 << 10, 4, us(466)},
		{"2×2 at 1 Gbit/s, 1 MiB", lab, algo.Shape{Hosts: 2, PerHost: 2}, algo.OpAllReduce, "two-level", 4, 256 << 10, 4, ms(8.7)},
		{"2×2 at 1 Gbit/s, 16 MiB", lab, algo.Shape{Hosts: 2, PerHost: 2}, algo.OpAllReduce, "two-level", 16, 4 << 20, 4, ms(152)},
		{"2×2 at 1 Gbit/s, 64 MiB", lab, algo.Shape{Hosts: 2, PerHost: 2}, algo.OpAllReduce, "two-level", 16, 16 << 20, 4, ms(596)},
		{"4×1 at 1 Gbit/s, 8 B (after --warmup-job)", lab, algo.Shape{Hosts: 4, PerHost: 1}, algo.OpAllReduce, "recursive-doubling", 1, 2, 4, us(756)},
		{"2×2 at 10 Gbit/s, 8 B (after --warmup-job)", lab10, algo.Shape{Hosts: 2, PerHost: 2}, algo.OpAllReduce, "leaders", 1, 2, 4, us(134)},
		{"2×2 at 10 Gbit/s, 64 KiB (after --warmup-job)", lab10, algo.Shape{Hosts: 2, PerHost: 2}, algo.OpAllReduce, "leaders", 1, 16 << 10, 4, us(225)},
		{"2×2 at 10 Gbit/s, 1 MiB (after --warmup-job)", lab10, algo.Shape{Hosts: 2, PerHost: 2}, algo.OpAllReduce, "two-level", 1, 256 << 10, 4, ms(1.8)},
		{"2×2 at 10 Gbit/s, 16 MiB", lab10, algo.Shape{Hosts: 2, PerHost: 2}, algo.OpAllReduce, "two-level", 16, 4 << 20, 4, ms(37)},
		{"2×2 at 10 Gbit/s, 64 MiB", lab10, algo.Shape{Hosts: 2, PerHost: 2}, algo.OpAllReduce, "two-level", 16, 16 << 20, 4, ms(206)},
	}
	fmt.Fprintf(w, "Across hosts (the namespace lab, \"Across hosts\" above): the model of cost_test.go's lab (%v) with one CPU a host, and at 10 Gbit/s the same with the network at 1.15 GB/s; the algorithm each run used, its closed form and Predict's simulation of its schedules:\n\n", lab)
	fmt.Fprintf(w, "| all_reduce | algorithm | closed form | Predict | measured | closed form / measured |\n|---|---|---|---|---|---|\n")
	for _, p := range pts {
		est := p.m.EstimateAlgorithm(p.s, p.op, p.alg, p.seg, p.count, p.es)
		pred := p.m.Predict(p.s.Topology(), schedules(p.s, p.alg, p.seg, p.count), p.es)
		fmt.Fprintf(w, "| %s | %v | %s | %s | %s | %.2f |\n", p.what, algo.Estimate{Name: p.alg, Segments: p.seg}, dur(est), dur(pred), dur(p.measured), est.Seconds()/p.measured.Seconds())
	}
	fmt.Fprintln(w)

	// Goroutine ranks in one process on 2 CPUs (TestScale).
	inproc := algo.DefaultModel
	inproc.CPUs = 2
	type scale struct {
		what     string
		op       algo.Op
		alg      string
		count    int
		es       int
		measured [2]time.Duration // 4,096 and 16,384
	}
	sc := []scale{
		{"all_reduce 8 float64, recursive doubling (the policy's; the first all-reduce)", algo.OpAllReduce, "recursive-doubling", 8, 8, [2]time.Duration{ms(740), ms(5300)}},
		{"all_reduce 8 float64, halving-doubling", algo.OpAllReduce, "halving-doubling", 8, 8, [2]time.Duration{ms(163), ms(1400)}},
		{"broadcast 8 float64, binomial", algo.OpBroadcast, "binomial", 8, 8, [2]time.Duration{ms(79), ms(540)}},
		{"all_gather_into_tensor, 1 float32 a rank (Bruck)", algo.OpAllGather, "recursive-doubling", 1, 4, [2]time.Duration{ms(1400), ms(20000)}},
		{"reduce_scatter_tensor, 1 float32 a rank (halving-doubling of the W)", algo.OpReduceScatter, "halving-doubling", 1, 4, [2]time.Duration{ms(1300), ms(24000)}},
	}
	fmt.Fprintf(w, "Thousands of goroutine ranks in one process (\"Thousands of ranks in one process\" above): one host of W ranks, the model's shared memory (%v) and its CPU term with 2 CPUs for all of them; \"per message\" is the measured time over the messages each CPU handles on the critical path (the model's latency is its 3 µs):\n\n", algo.DefaultModel.Local)
	fmt.Fprintf(w, "| call | W | model | measured | model / measured | measured per message |\n|---|---|---|---|---|---|\n")
	for _, c := range sc {
		for i, world := range []int{4096, 16384} {
			s := algo.Shape{Hosts: 1, PerHost: world}
			est := inproc.EstimateAlgorithm(s, c.op, c.alg, 1, c.count, c.es)
			lat := inproc.Local.Latency.Seconds()
			turns := (est - inproc.Call).Seconds() / lat // latencies' worth of the critical path
			fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f | %.1f µs |\n", c.what, num(world), dur(est), dur(c.measured[i]), est.Seconds()/c.measured[i].Seconds(), c.measured[i].Seconds()/turns*1e6)
		}
	}
	fmt.Fprintln(w)
}

// schedules builds every rank's schedule of an all-reduce for Predict.
func schedules(s algo.Shape, name string, seg, count int) []algo.Schedule {
	size, topo := s.Size(), s.Topology()
	out := make([]algo.Schedule, size)
	for r := range size {
		switch name {
		case "leaders":
			out[r] = algo.LeaderAllReduce(r, topo, count)
		case "two-level":
			out[r] = algo.TwoLevelAllReduce(r, topo, count, seg)
		case "recursive-doubling":
			out[r] = algo.RecursiveDoublingAllReduce(r, size, count)
		default:
			panic("costtable: no schedule " + name)
		}
	}
	return out
}

func dur(d time.Duration) string {
	s := d.Seconds()
	switch {
	case s >= 1:
		return fmt.Sprintf("%.3g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3g ms", s*1e3)
	}
	return fmt.Sprintf("%.3g µs", s*1e6)
}

func size(b int) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", b>>10)
	case b >= 1000<<10:
		return fmt.Sprintf("%.3g MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.3g KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func num(n int) string {
	s := fmt.Sprint(n)
	if n >= 1000 {
		s = s[:len(s)-3] + "," + s[len(s)-3:]
	}
	return s
}
