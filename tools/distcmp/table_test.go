package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/tools/benchfmt"
)

// Canned results, trimmed from real runs at world 2.
const (
	godistJSON = `{"backend": "godist", "world": 2, "results": [
 {"op": "all_reduce", "size": 8, "bytes": 8, "supported": true, "iters": 300, "lat_us_median": 5, "algo": "ring-shm"},
 {"op": "all_reduce", "size": 1048576, "bytes": 1048576, "supported": true, "iters": 300, "lat_us_median": 200, "busbw_GBps": 5.24288, "algo": "ring"},
 {"op": "reduce_scatter", "size": 1024, "bytes": 1024, "supported": true, "iters": 300, "lat_us_median": 10, "algo": "ring"},
 {"op": "barrier", "size": 0, "bytes": 0, "supported": true, "iters": 300, "lat_us_median": 4, "algo": "dissemination"}]}`
	vaderJSON = `[
 {"backend": "mpi-vader", "world": 2, "op": "all_reduce", "size": 8, "bytes": 8, "supported": true, "iters": 300, "lat_us_median": 1.5},
 {"backend": "mpi-vader", "world": 2, "op": "all_reduce", "size": 1048576, "bytes": 1048576, "supported": true, "iters": 300, "lat_us_median": 400, "busbw_GBps": 2.62144},
 {"backend": "mpi-vader", "world": 2, "op": "barrier", "size": 0, "bytes": 0, "supported": true, "iters": 300, "lat_us_median": 0.6}]`
	glooJSON = `[
 {"backend": "gloo", "world": 2, "op": "all_reduce", "size": 8, "bytes": 8, "supported": true, "iters": 300, "lat_us_median": 2000},
 {"op": "reduce_scatter", "size": 1024, "bytes": 1024, "supported": false, "error": "ProcessGroupGloo does not support reduce_scatter"}]`
)

func cannedColumns(t *testing.T) (column, []column) {
	t.Helper()
	parse := func(label, raw string) column {
		cs, err := parseCells([]byte(raw))
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		return column{Label: label, Cells: cs}
	}
	return parse("godist", godistJSON), []column{parse("mpi-vader", vaderJSON), parse("gloo", glooJSON)}
}

func TestParseCells(t *testing.T) {
	base, peers := cannedColumns(t)
	if len(base.Cells) != 4 || len(peers[0].Cells) != 3 || len(peers[1].Cells) != 2 {
		t.Fatalf("parsed %d, %d, %d cells; want 4, 3, 2", len(base.Cells), len(peers[0].Cells), len(peers[1].Cells))
	}
	if c := peers[1].Cells[1]; c.ok() || c.Supported == nil || *c.Supported {
		t.Errorf("gloo's reduce_scatter: %+v, want unsupported", c)
	}
	if _, err := parseCells([]byte("[{")); err == nil {
		t.Error("a truncated list parsed")
	}
}

func TestRows(t *testing.T) {
	base, peers := cannedColumns(t)
	for _, tc := range []struct {
		op   string
		size int
		want []string
	}{
		// size, godist, mpi-vader, gloo, the two ratios, busbw, algo
		{"all_reduce", 8, []string{"8 B", "5.0", "1.5", "2000", "0.30×", "400.00×", "-", "ring-shm"}},
		{"all_reduce", 1 << 20, []string{"1 MiB", "200.0", "400.0", "-", "2.00×", "-", "5.24 / 2.62 / -", "ring"}},
		{"reduce_scatter", 1024, []string{"1 KiB", "10.0", "-", "unsupported", "-", "-", "-", "ring"}},
		{"barrier", 0, []string{"-", "4.0", "0.6", "-", "0.15×", "-", "dissemination"}},
		{"all_reduce", 1 << 30, []string{"1024 MiB", "-", "-", "-", "-", "-", "- / - / -", "-"}},
	} {
		if got := tableRow(tc.op, tc.size, base, peers); !slices.Equal(got, tc.want) {
			t.Errorf("%s %d:\n got %q\nwant %q", tc.op, tc.size, got, tc.want)
		}
	}
}

func TestRenderTables(t *testing.T) {
	base, peers := cannedColumns(t)
	got := renderTables([]string{"all_reduce", "broadcast", "barrier"}, base, peers)
	want := `
#### all_reduce

| size | godist µs | mpi-vader µs | gloo µs | mpi-vader/godist | gloo/godist | busbw GB/s (godist / mpi-vader / gloo) | godist algo |
|---|---|---|---|---|---|---|---|
| 8 B | 5.0 | 1.5 | 2000 | 0.30× | 400.00× | - | ring-shm |
| 1 MiB | 200.0 | 400.0 | - | 2.00× | - | 5.24 / 2.62 / - | ring |

#### barrier

| size | godist µs | mpi-vader µs | gloo µs | mpi-vader/godist | gloo/godist | godist algo |
|---|---|---|---|---|---|---|
| - | 4.0 | 0.6 | - | 0.15× | - | dissemination |
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Without godist's results the peers' latencies are still shown, without
// ratios.
func TestRenderTablesWithoutGodist(t *testing.T) {
	_, peers := cannedColumns(t)
	got := renderTables([]string{"all_reduce"}, column{Label: "godist"}, peers)
	if !strings.Contains(got, "| 8 B | - | 1.5 | 2000 | - | - | - | - |") {
		t.Errorf("got\n%s", got)
	}
}

func TestPeerCommands(t *testing.T) {
	s := spec{Sizes: "8,1024", Target: 300 * time.Millisecond, MinIters: 10, MaxIters: 300, Warmup: 5,
		Godist: "godist", Python: "/usr/bin/python3", Mpirun: "/usr/bin/mpirun", Anchors: "/a"}
	sel, err := selectPeers("gloo,mpitcp,godist,vader")
	if err != nil {
		t.Fatal(err)
	}
	cmds := map[string]string{}
	for _, p := range sel {
		cmds[p.Name] = strings.Join(p.Argv(s, 4, opsFor(p, []string{"all_reduce", "all_to_all"}), "/o.json"), " ")
	}
	want := map[string]string{
		"godist": "godist bench --json --nproc 4 --ops all_reduce,all_to_all --sizes 8,1024 --target 300ms --iters 300 --min-iters 10 --warmup 5",
		"vader": "/usr/bin/mpirun --allow-run-as-root --oversubscribe --bind-to none -n 4 --mca pml ob1 --mca btl self,vader " +
			"/usr/bin/python3 /a/bench_mpi.py --tag vader --ops all_reduce --sizes 8,1024 --target 0.3 --max-iters 300 --min-iters 10 --warmup 5 --out /o.json",
		"mpitcp": "/usr/bin/mpirun --allow-run-as-root --oversubscribe --bind-to none -n 4 --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo " +
			"/usr/bin/python3 /a/bench_mpi.py --tag tcp --ops all_reduce --sizes 8,1024 --target 0.3 --max-iters 300 --min-iters 10 --warmup 5 --out /o.json",
		"gloo": "/usr/bin/python3 /a/bench_gloo.py --world 4 --ops all_reduce --sizes 8,1024 --target 0.3 --max-iters 300 --min-iters 10 --warmup 5 --out /o.json",
	}
	for name, w := range want {
		if cmds[name] != w {
			t.Errorf("%s:\n got %s\nwant %s", name, cmds[name], w)
		}
	}
	if names := []string{sel[0].Name, sel[1].Name, sel[2].Name, sel[3].Name}; !slices.Equal(names, []string{"godist", "vader", "mpitcp", "gloo"}) {
		t.Errorf("peers in order %v", names)
	}
	if _, err := selectPeers("godist,nccl"); err == nil {
		t.Error("an unknown peer was accepted")
	}
}

func TestFormatRatio(t *testing.T) {
	for r, want := range map[float64]string{0.00049: "0.00049×", 0.1: "0.10×", 1: "1.00×", 72.654: "72.65×"} {
		if got := benchfmt.Ratio(r); got != want {
			t.Errorf("benchfmt.Ratio(%g) = %q, want %q", r, got, want)
		}
	}
}
