package main

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// mergeRounds folds one benchmark's results from several rounds into
// one cell per (op, size): the median of the rounds' medians, and the
// rounds' spread (their largest median over their smallest). A cell
// that failed in any round keeps that round's failure; the bus
// bandwidth is the median round's.
func mergeRounds(rounds [][]cell) []cell {
	type key struct {
		op   string
		size int
	}
	var order []key
	by := map[key][]cell{}
	for _, r := range rounds {
		for _, c := range r {
			k := key{c.Op, c.Size}
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], c)
		}
	}
	var out []cell
	for _, k := range order {
		cs := by[k]
		var bad *cell
		for i := range cs {
			if !cs[i].ok() {
				bad = &cs[i]
				break
			}
		}
		if bad != nil {
			out = append(out, *bad)
			continue
		}
		slices.SortFunc(cs, func(a, b cell) int {
			switch {
			case a.LatUsMedian < b.LatUsMedian:
				return -1
			case a.LatUsMedian > b.LatUsMedian:
				return 1
			}
			return 0
		})
		m := cs[len(cs)/2]
		if len(cs)%2 == 0 {
			lo := cs[len(cs)/2-1]
			m.LatUsMedian = (lo.LatUsMedian + m.LatUsMedian) / 2
			m.BusbwGBps = (lo.BusbwGBps + m.BusbwGBps) / 2
		}
		m.Rounds = len(cs)
		m.Spread = cs[len(cs)-1].LatUsMedian / cs[0].LatUsMedian
		out = append(out, m)
	}
	return out
}

// roundOrder returns the order in which round r runs n benchmarks: it
// rotates, so that each goes first as often as any other (the machine
// drifts within a round).
func roundOrder(n, r int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = (i + r) % n
	}
	return o
}

// verdict sums up a world's rounds against the bar: in how many
// cells godist's median is at or below each peer's, and godist's worst
// spread.
func verdict(ops []string, base column, peers []column) string {
	var sb strings.Builder
	for _, p := range peers {
		var n, ahead int
		var behind []string
		for _, op := range ops {
			for _, size := range sizesOf(op, []column{base, p}) {
				b, bok := base.find(op, size)
				x, xok := p.find(op, size)
				if !bok || !xok || !b.ok() || !x.ok() {
					continue
				}
				n++
				if b.LatUsMedian <= x.LatUsMedian {
					ahead++
				} else {
					behind = append(behind, fmt.Sprintf("%s %.2f×", cellName(op, size), x.LatUsMedian/b.LatUsMedian))
				}
			}
		}
		fmt.Fprintf(&sb, "- godist at or below %s's median in %d of %d cells", p.Label, ahead, n)
		if len(behind) > 0 {
			fmt.Fprintf(&sb, "; behind: %s", strings.Join(behind, ", "))
		}
		sb.WriteString("\n")
	}
	worst, where := 0.0, ""
	var over []string
	for _, c := range base.Cells {
		if c.Rounds < 2 || !c.ok() {
			continue
		}
		if c.Spread > worst {
			worst, where = c.Spread, cellName(c.Op, c.Size)
		}
		if c.Spread > 1.5 {
			over = append(over, fmt.Sprintf("%s %.2f×", cellName(c.Op, c.Size), c.Spread))
		}
	}
	if where != "" {
		fmt.Fprintf(&sb, "- godist's spread (slowest round's median over the fastest's): worst %.2f× (%s); over 1.5×: %d cells", worst, where, len(over))
		if len(over) > 0 {
			fmt.Fprintf(&sb, " (%s)", strings.Join(over, ", "))
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// placement is where the host had put the VM's two vCPUs while a
// benchmark ran, from the cache-line round trip between them before and
// after it (tools/corelat): near (a cache in common), far, or moved
// between the two; unknown without corelat.
type placement struct {
	Before, After float64 // ns
}

// farFrom is the round trip from which two vCPUs are far apart: about
// 60-120 ns near, 300-500 far on these VMs.
const farFrom = 150

// near reports whether both looks found the vCPUs near each other.
func (p placement) near() bool {
	return p.Before > 0 && p.After > 0 && p.Before < farFrom && p.After < farFrom
}

func (p placement) String() string {
	switch {
	case p.Before <= 0 || p.After <= 0:
		return "unknown"
	case p.near():
		return fmt.Sprintf("near (%.0f/%.0f ns)", p.Before, p.After)
	case p.Before >= farFrom && p.After >= farFrom:
		return fmt.Sprintf("far (%.0f/%.0f ns)", p.Before, p.After)
	}
	return fmt.Sprintf("moved (%.0f/%.0f ns)", p.Before, p.After)
}

// placementNote lists where godist's rounds ran and, when at least two
// ran with the vCPUs near each other, its worst spread over those: how
// much of the spread the host's placement of the vCPUs explains.
func placementNote(rounds [][]cell, places []placement) string {
	var sb strings.Builder
	var near [][]cell
	sb.WriteString("- where godist's rounds ran:")
	for r, p := range places {
		if r > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, " %d %s", r+1, p)
		if p.near() {
			near = append(near, rounds[r])
		}
	}
	sb.WriteString("\n")
	if len(near) < 2 {
		return sb.String()
	}
	worst, where := 0.0, ""
	over := 0
	for _, c := range mergeRounds(near) {
		if !c.ok() {
			continue
		}
		if c.Spread > worst {
			worst, where = c.Spread, cellName(c.Op, c.Size)
		}
		if c.Spread > 1.5 {
			over++
		}
	}
	fmt.Fprintf(&sb, "- godist's spread over its %d rounds with the vCPUs near: worst %.2f× (%s); over 1.5×: %d cells\n", len(near), worst, where, over)
	return sb.String()
}

// roundTrip runs corelat (its path; "" for none) and returns its round
// trip in ns, or 0 when it could not be measured.
func roundTrip(corelat string) float64 {
	if corelat == "" {
		return 0
	}
	out, err := exec.Command(corelat).Output()
	if err != nil {
		return 0
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		return 0
	}
	return v
}
