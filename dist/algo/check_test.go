package algo

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// The checkers below run one collective over every rank of a group with the
// simulator and compare each buffer that must hold a result with the
// result computed directly. They stop the test at the first failure,
// naming the case and the rank and printing the schedule.

// val is rank r's initial element i: small integers, so sums are exact,
// and mixed across ranks, so that MAX is not always won by one rank.
func val(r, i int) float64 { return float64((r*131 + i*71 + r*i*17) % 1000) }

func nanBuf(n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = math.NaN()
	}
	return b
}

func allKnown(size int) uint64 { return 1<<size - 1 }

// run validates every rank's schedule for a buffer of bufLen elements,
// checks that no round is empty, and simulates.
func run(t *testing.T, desc string, size, bufLen int, sched func(rank int) Schedule, bufs [][]float64, op simOp) ([]Schedule, simResult) {
	t.Helper()
	scheds := make([]Schedule, size)
	for r := range size {
		s := sched(r)
		if err := s.Validate(r, size, bufLen); err != nil {
			t.Fatalf("%s rank %d: %v\n%s", desc, r, err, s)
		}
		for i, rd := range s {
			if len(rd.Sends)+len(rd.Recvs) == 0 {
				t.Fatalf("%s rank %d: round %d is empty\n%s", desc, r, i, s)
			}
		}
		scheds[r] = s
	}
	res, err := simulate(scheds, bufs, op)
	if err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	return scheds, res
}

// expect compares buf[off:off+len(want)] with want.
func expect(t *testing.T, desc string, rank int, s Schedule, buf []float64, off int, want []float64) {
	t.Helper()
	for i, w := range want {
		if g := buf[off+i]; g != w && !(math.IsNaN(g) && math.IsNaN(w)) {
			t.Fatalf("%s rank %d: element %d is %v, want %v\nschedule of rank %d:\n%s", desc, rank, off+i, g, w, rank, s)
		}
	}
}

func reduced(size, off, n int, op simOp) []float64 {
	want := make([]float64, n)
	for i := range want {
		want[i] = val(0, off+i)
		for r := 1; r < size; r++ {
			want[i] = op.f(want[i], val(r, off+i))
		}
	}
	return want
}

func rankData(r, off, n int) []float64 {
	d := make([]float64, n)
	for i := range d {
		d[i] = val(r, off+i)
	}
	return d
}

func checkKnows(t *testing.T, desc string, rank int, res simResult, want uint64) {
	t.Helper()
	if res.know[rank]&want != want {
		t.Fatalf("%s rank %d: heard from ranks %b, must have heard from %b", desc, rank, res.know[rank], want)
	}
}

// checkAllReduce: every rank starts with its vector and ends with the
// reduction.
func checkAllReduce(t *testing.T, desc string, size, count int, op simOp, sched func(int) Schedule) ([]Schedule, simResult) {
	t.Helper()
	desc = fmt.Sprintf("%s op=%s", desc, op.name)
	bufs := make([][]float64, size)
	for r := range bufs {
		bufs[r] = rankData(r, 0, count)
	}
	scheds, res := run(t, desc, size, count, sched, bufs, op)
	want := reduced(size, 0, count, op)
	for r := range size {
		expect(t, desc, r, scheds[r], bufs[r], 0, want)
		if count > 0 {
			checkKnows(t, desc, r, res, allKnown(size))
		}
	}
	if op.name == opSum.name {
		checkAverage(t, desc, size, count, sched)
	}
	return scheds, res
}

// checkAverage runs an all-reduce schedule as an averaging all-reduce does:
// a sum, scaled by 1/size on the receives marked Final and nowhere else.
// Every rank must end with the average, so the Final marks complete every
// element's sum exactly once on the way to every rank.
func checkAverage(t *testing.T, desc string, size, count int, sched func(int) Schedule) {
	t.Helper()
	if size == 1 {
		return
	}
	scale := 1 / float64(size)
	avg := simOp{"avg", opSum.f, func(v float64) float64 { return v * scale }}
	desc = strings.Replace(desc, "op=sum", "op=avg", 1)
	bufs := make([][]float64, size)
	for r := range bufs {
		bufs[r] = rankData(r, 0, count)
	}
	scheds, _ := run(t, desc, size, count, sched, bufs, avg)
	want := reduced(size, 0, count, opSum)
	for i := range want {
		want[i] *= scale
	}
	for r := range size {
		expect(t, desc, r, scheds[r], bufs[r], 0, want)
	}
}

// checkReduceScatter: every rank starts with size chunks laid out by counts
// and ends with chunk rank reduced.
func checkReduceScatter(t *testing.T, desc string, size int, counts []int, op simOp, sched func(int) Schedule) ([]Schedule, simResult) {
	t.Helper()
	desc = fmt.Sprintf("%s op=%s", desc, op.name)
	offs := Offsets(counts)
	bufs := make([][]float64, size)
	for r := range bufs {
		bufs[r] = rankData(r, 0, offs[size])
	}
	scheds, res := run(t, desc, size, offs[size], sched, bufs, op)
	for r := range size {
		expect(t, desc, r, scheds[r], bufs[r], offs[r], reduced(size, offs[r], counts[r], op))
	}
	return scheds, res
}

// checkAllGather: rank r holds only chunk r (the rest is NaN) and ends with
// every chunk.
func checkAllGather(t *testing.T, desc string, size int, counts []int, sched func(int) Schedule) ([]Schedule, simResult) {
	t.Helper()
	offs := Offsets(counts)
	bufs := make([][]float64, size)
	for r := range bufs {
		bufs[r] = nanBuf(offs[size])
		copy(bufs[r][offs[r]:], rankData(r, offs[r], counts[r]))
	}
	scheds, res := run(t, desc, size, offs[size], sched, bufs, opSum)
	for r := range size {
		for q := range size {
			expect(t, desc, r, scheds[r], bufs[r], offs[q], rankData(q, offs[q], counts[q]))
		}
	}
	return scheds, res
}

// checkBroadcast: root holds the data, the others NaN; all end with root's
// data.
func checkBroadcast(t *testing.T, desc string, size, root, count int, sched func(int) Schedule) ([]Schedule, simResult) {
	t.Helper()
	bufs := make([][]float64, size)
	for r := range bufs {
		bufs[r] = nanBuf(count)
	}
	bufs[root] = rankData(root, 0, count)
	scheds, res := run(t, desc, size, count, sched, bufs, opSum)
	want := rankData(root, 0, count)
	for r := range size {
		expect(t, desc, r, scheds[r], bufs[r], 0, want)
		if count > 0 {
			checkKnows(t, desc, r, res, 1<<root)
		}
	}
	return scheds, res
}

// checkReduce: every rank holds its vector; root ends with the reduction.
func checkReduce(t *testing.T, desc string, size, root, count int, op simOp, sched func(int) Schedule) ([]Schedule, simResult) {
	t.Helper()
	desc = fmt.Sprintf("%s op=%s", desc, op.name)
	bufs := make([][]float64, size)
	for r := range bufs {
		bufs[r] = rankData(r, 0, count)
	}
	scheds, res := run(t, desc, size, count, sched, bufs, op)
	expect(t, desc, root, scheds[root], bufs[root], 0, reduced(size, 0, count, op))
	return scheds, res
}

// checkGather: rank r holds only chunk r (the rest NaN); root ends with all
// chunks.
func checkGather(t *testing.T, desc string, size, root int, counts []int, sched func(int) Schedule) ([]Schedule, simResult) {
	t.Helper()
	offs := Offsets(counts)
	bufs := make([][]float64, size)
	for r := range bufs {
		bufs[r] = nanBuf(offs[size])
		copy(bufs[r][offs[r]:], rankData(r, offs[r], counts[r]))
	}
	scheds, res := run(t, desc, size, offs[size], sched, bufs, opSum)
	for q := range size {
		expect(t, desc, root, scheds[root], bufs[root], offs[q], rankData(q, offs[q], counts[q]))
	}
	return scheds, res
}

// checkScatter: root holds all chunks, the others NaN; rank r ends with
// root's chunk r and the rest of its buffer untouched.
func checkScatter(t *testing.T, desc string, size, root int, counts []int, sched func(int) Schedule) ([]Schedule, simResult) {
	t.Helper()
	offs := Offsets(counts)
	bufs := make([][]float64, size)
	for r := range bufs {
		bufs[r] = nanBuf(offs[size])
	}
	bufs[root] = rankData(root, 0, offs[size])
	scheds, res := run(t, desc, size, offs[size], sched, bufs, opSum)
	for r := range size {
		want := nanBuf(offs[size])
		if r == root {
			want = rankData(root, 0, offs[size])
		}
		copy(want[offs[r]:], rankData(root, offs[r], counts[r]))
		expect(t, desc, r, scheds[r], bufs[r], 0, want)
	}
	return scheds, res
}
