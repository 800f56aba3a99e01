package main

import (
	"slices"
	"strings"
	"testing"
)

// Canned results of two rounds on 2 hosts × 2 ranks: godist's as godist
// run prints them (rank 0's lines tagged, a launcher line between), the
// peers' as the anchors' lists.
const (
	godistRound1 = `[rank 0] {"backend":"godist","world":4,"op":"all_reduce","size":8,"bytes":8,"algo":"recursive-doubling","supported":true,"iters":300,"lat_us_median":400}
godist run: a line of the launcher's
[rank 0] {"backend":"godist","world":4,"op":"all_reduce","size":1048576,"bytes":1048576,"algo":"halving-doubling","supported":true,"iters":20,"lat_us_median":10000}
[rank 0] {"backend":"godist","world":4,"op":"barrier","size":0,"bytes":0,"algo":"dissemination","supported":true,"iters":300,"lat_us_median":300}
`
	godistRound2 = `[rank 0] {"op":"all_reduce","size":8,"bytes":8,"algo":"recursive-doubling","supported":true,"lat_us_median":200}
[rank 0] {"op":"all_reduce","size":1048576,"bytes":1048576,"algo":"ring","supported":true,"lat_us_median":12000}
[rank 0] {"op":"barrier","size":0,"bytes":0,"algo":"dissemination","supported":true,"lat_us_median":500}
`
	glooRound1 = `[
 {"backend": "gloo", "world": 4, "op": "all_reduce", "size": 8, "bytes": 8, "supported": true, "iters": 300, "lat_us_median": 900},
 {"backend": "gloo", "world": 4, "op": "all_reduce", "size": 1048576, "bytes": 1048576, "supported": true, "iters": 20, "lat_us_median": 22000},
 {"backend": "gloo", "world": 4, "op": "barrier", "size": 0, "bytes": 0, "supported": true, "iters": 300, "lat_us_median": 600}]`
	mpiRound2 = `[
 {"backend": "mpi-tcp", "world": 4, "op": "all_reduce", "size": 8, "bytes": 8, "supported": true, "iters": 300, "lat_us_median": 100},
 {"backend": "mpi-tcp", "world": 4, "op": "barrier", "size": 0, "bytes": 0, "supported": true, "iters": 300, "lat_us_median": 90}]`
)

func cannedTables(t *testing.T) tables {
	t.Helper()
	parse := func(raw string) []cell {
		cs, err := parseCells([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	return tables{
		Ops: []string{"all_reduce", "broadcast", "barrier"}, World: 4, Bound: 118.75e6,
		Godist: series{Label: "godist", Rounds: [][]cell{parse(godistRound1), parse(godistRound2)}},
		Peers: []series{
			{Label: "gloo", Rounds: [][]cell{parse(glooRound1)}}, // its second round failed
			{Label: "mpi-tcp", Rounds: [][]cell{parse(mpiRound2)}},
		},
	}
}

func TestParseCells(t *testing.T) {
	cs, err := parseCells([]byte(godistRound1))
	if err != nil || len(cs) != 3 || cs[1].Size != 1<<20 || cs[1].Algo != "halving-doubling" || cs[1].LatUsMedian != 10000 {
		t.Fatalf("godist's lines: %+v, %v", cs, err)
	}
	if cs, err := parseCells([]byte(glooRound1)); err != nil || len(cs) != 3 || cs[2].Op != "barrier" {
		t.Fatalf("gloo's list: %+v, %v", cs, err)
	}
	if _, err := parseCells([]byte("[rank 0] {\"op\": ")); err == nil {
		t.Error("a truncated line parsed")
	}
	un, err := parseCells([]byte(`[{"op": "all_gather", "size": 8, "supported": false, "error": "no"}]`))
	if err != nil || len(un) != 1 || un[0].ok() {
		t.Errorf("an unsupported cell: %+v, %v", un, err)
	}
}

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want spread
	}{
		{nil, spread{}},
		{[]float64{5}, spread{5, 5, 5, 1}},
		{[]float64{300, 100}, spread{200, 100, 300, 2}},
		{[]float64{3, 1, 2}, spread{2, 1, 3, 3}},
	} {
		if got := spreadOf(c.in); got != c.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if formatSpread(spread{200, 100, 300, 2}) != "200.0 (100.0–300.0)" || formatSpread(spread{5, 5, 5, 1}) != "5.0" ||
		formatSpread(spread{11000, 10000, 12000, 2}) != "11000 (10000–12000)" {
		t.Errorf("formatSpread: %q, %q", formatSpread(spread{200, 100, 300, 2}), formatSpread(spread{5, 5, 5, 1}))
	}
}

// rows returns the data rows of the table of op in a rendered output.
func rows(out, op string) [][]string {
	_, after, ok := strings.Cut(out, "#### "+op+"\n")
	if !ok {
		return nil
	}
	var rs [][]string
	for i, l := range strings.Split(strings.TrimSpace(after), "\n") {
		if !strings.HasPrefix(l, "|") {
			break
		}
		if i >= 2 { // the header and its rule
			rs = append(rs, strings.Split(strings.Trim(l, "| "), " | "))
		}
	}
	return rs
}

func TestRenderTables(t *testing.T) {
	out := renderTables(cannedTables(t))
	t.Logf("\n%s", out)
	if strings.Contains(out, "#### broadcast") {
		t.Error("a table for an op nobody measured")
	}
	if strings.Contains(out, "pred/measured") {
		t.Error("a pred/measured column without pred_us")
	}
	head := "| size | godist µs (range) | gloo µs (range) | mpi-tcp µs (range) | gloo/godist | mpi-tcp/godist | busbw GB/s (godist / gloo / mpi-tcp) | two-level bound GB/s | godist % of bound | godist algo |"
	if !strings.Contains(out, head+"\n") {
		t.Errorf("all_reduce's header is not %s", head)
	}
	want := [][]string{
		// godist's two rounds 400 and 200: median 300; gloo/godist 900/300;
		// mpi/godist 100/300.
		{"8 B", "300.0 (200.0–400.0)", "900.0", "100.0", "3.00×", "0.33×", "-", "-", "-", "recursive-doubling"},
		// 1 MiB in 11 ms: algbw 0.0953 GB/s, busbw ×1.5; 80% of 0.119.
		{"1 MiB", "11000 (10000–12000)", "22000", "-", "2.00×", "-", "0.143 / 0.071 / -", "0.119", "80%", "halving-doubling, ring"},
	}
	if got := rows(out, "all_reduce"); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("all_reduce rows:\n got %q\nwant %q", got, want)
	}
	wantBarrier := [][]string{{"-", "400.0 (300.0–500.0)", "600.0", "90.0", "1.50×", "0.23×", "dissemination"}}
	if got := rows(out, "barrier"); !slices.EqualFunc(got, wantBarrier, slices.Equal) {
		t.Errorf("barrier rows:\n got %q\nwant %q", got, wantBarrier)
	}
}

func TestRenderTablesPredAndStatus(t *testing.T) {
	tb := cannedTables(t)
	p := 330.0
	tb.Godist.Rounds[0][0].PredUs = &p
	tb.Godist.Rounds[0][1].Model = "local 9µs + 1/(17.2 GB/s)"
	no := false
	tb.Peers[1].Rounds[0] = append(tb.Peers[1].Rounds[0], cell{Op: "all_reduce", Size: 1 << 20, Supported: &no})
	tb.Bound = 0 // an unshaped lab: no bound
	out := renderTables(tb)
	t.Logf("\n%s", out)
	if !strings.Contains(out, "cost model, round 1: local 9µs + 1/(17.2 GB/s)") || strings.Contains(out, "round 2: ") {
		t.Errorf("the cost model line: want round 1's model alone:\n%s", out)
	}
	want := [][]string{
		{"8 B", "300.0 (200.0–400.0)", "900.0", "100.0", "3.00×", "0.33×", "1.10", "-", "recursive-doubling"},
		{"1 MiB", "11000 (10000–12000)", "22000", "unsupported", "2.00×", "-", "-", "0.143 / 0.071 / -", "halving-doubling, ring"},
	}
	if got := rows(out, "all_reduce"); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("all_reduce rows:\n got %q\nwant %q", got, want)
	}
	if !strings.Contains(out, "| mpi-tcp/godist | pred/measured | busbw") {
		t.Error("no pred/measured column")
	}
}

// TestRenderTablesCommonStart: godist's times from a common start get a
// column and the prediction over them, from the median over rounds.
func TestRenderTablesCommonStart(t *testing.T) {
	tb := cannedTables(t)
	p := 330.0
	for r := range tb.Godist.Rounds {
		tb.Godist.Rounds[r][0].PredUs = &p
	}
	tb.Godist.Rounds[0][0].CommonUsMedian = 200
	tb.Godist.Rounds[1][0].CommonUsMedian = 400
	tb.Bound = 0
	out := renderTables(tb)
	t.Logf("\n%s", out)
	if !strings.Contains(out, "| pred/measured | common start µs | pred/common | busbw") {
		t.Fatal("no common start columns")
	}
	// The median of 200 and 400 is 300: 330/300.
	if got := rows(out, "all_reduce")[0]; !slices.Equal(got[6:9], []string{"1.10", "300.0", "1.10"}) {
		t.Errorf("8 B row %q: want pred/measured 1.10, common 300.0, pred/common 1.10", got)
	}
	if got := rows(out, "all_reduce")[1]; !slices.Equal(got[6:9], []string{"-", "-", "-"}) {
		t.Errorf("1 MiB row %q: no prediction, no common start", got)
	}
}
