package main

import (
	"strings"
	"testing"
)

// Canned results, trimmed from real runs.
const (
	godistJSON = `{"backend": "godist", "world": 2, "transport": "tcp (loopback)", "results": [
 {"op": "rpc_sync add(2 floats)", "size": 0, "bytes": 0, "lat_us_median": 10},
 {"op": "rpc_sync echo 16777216 B", "bytes": 16777216, "lat_us_median": 16000, "algbw_GBps": 1.05},
 {"op": "rpc_async echo 1 MiB x64 in flight", "bytes": 1048576, "lat_us_median": 50000, "algbw_GBps": 1.34, "calls_per_s": 1280},
 {"op": "rpc_async add x256 in flight", "lat_us_median": 2000, "calls_per_s": 128000}]}`
	torchJSON = `{"backend": "pytorch-rpc-tensorpipe", "torch": "1.13.0a0", "results": [
 {"case": "rpc_sync add(2 floats)", "iters": 2000, "lat_us_median": 800, "lat_us_p10": 700, "lat_us_p90": 900},
 {"case": "rpc_sync echo 16777216 B", "bytes": 16777216, "iters": 20, "lat_us_median": 56000, "GBps_each_way": 0.3},
 {"case": "rpc_async echo 1 MiB x64 in flight", "iters": 20, "ms_median": 48, "calls_per_s": 1333, "GBps_each_way": 1.4},
 {"case": "rpc_async add x256 in flight", "calls_per_s": 2200}]}`
)

func mustParse(t *testing.T, raw string) run {
	t.Helper()
	r, err := parseRun([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseRun(t *testing.T) {
	g, p := mustParse(t, godistJSON), mustParse(t, torchJSON)
	want := map[string][2]float64{
		"rpc_sync add(2 floats)":             {10, 800},
		"rpc_sync echo 16777216 B":           {16000, 56000},
		"rpc_async echo 1 MiB x64 in flight": {1.34, 1.4},
		"rpc_async add x256 in flight":       {128000, 2200},
	}
	for c, w := range want {
		if g.Values[c] != w[0] || p.Values[c] != w[1] {
			t.Errorf("%s: godist %g, PyTorch %g; want %g, %g", c, g.Values[c], p.Values[c], w[0], w[1])
		}
	}
	if strings.Join(g.Order, ";") != strings.Join(p.Order, ";") {
		t.Errorf("orders differ:\n%q\n%q", g.Order, p.Order)
	}
	for _, bad := range []string{`{"results": []}`, `{"results": [{"case": "rpc_async add x256 in flight"}]}`, `[`} {
		if _, err := parseRun([]byte(bad)); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

func TestUnitOf(t *testing.T) {
	for c, want := range map[string]unit{
		"rpc_sync add(2 floats)":             micros,
		"remote(make 2 floats).to_here()":    micros,
		"rpc_sync echo 1024 B":               micros,
		"rpc_async echo 1 MiB x64 in flight": gbps,
		"rpc_async add x256 in flight":       callsPer,
	} {
		if got := unitOf(c); got != want {
			t.Errorf("unitOf(%q) = %v, want %v", c, got, want)
		}
	}
}

func TestRenderTable(t *testing.T) {
	g1, p1 := mustParse(t, godistJSON), mustParse(t, torchJSON)
	// A second and third round: godist twice as slow in round 2, PyTorch
	// missing in round 3 (it failed).
	g2 := mustParse(t, godistJSON)
	for c := range g2.Values {
		if unitOf(c) == micros {
			g2.Values[c] *= 2
		} else {
			g2.Values[c] /= 2
		}
	}
	g3, p2 := mustParse(t, godistJSON), mustParse(t, torchJSON)
	got := renderTable(caseOrder([]run{g1, g2, g3}, []run{p1, p2, {}}), []run{g1, g2, g3}, []run{p1, p2, {}}, "PyTorch")
	want := `| case | unit | godist | PyTorch | godist's advantage |
|---|---|---|---|---|
| rpc_sync add(2 floats) | µs | 10.0 (10.0..20.0) | 800 (800..800) | 80.00× (40.00×..80.00×) |
| rpc_sync echo 16777216 B | µs | 16000 (16000..32000) | 56000 (56000..56000) | 3.50× (1.75×..3.50×) |
| rpc_async echo 1 MiB x64 in flight | GB/s | 1.34 (0.67..1.34) | 1.40 (1.40..1.40) | 0.96× (0.48×..0.96×) |
| rpc_async add x256 in flight | calls/s | 128000 (64000..128000) | 2200 (2200..2200) | 58.18× (29.09×..58.18×) |
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Without PyTorch's runs the table has godist's column alone.
func TestRenderTableWithoutPeer(t *testing.T) {
	g := mustParse(t, godistJSON)
	got := renderTable(caseOrder([]run{g}), []run{g}, nil, "PyTorch")
	if !strings.Contains(got, "| rpc_sync add(2 floats) | µs | 10.0 | - | - |") {
		t.Errorf("got\n%s", got)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		vs   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.vs); got != tc.want {
			t.Errorf("median(%v) = %g, want %g", tc.vs, got, tc.want)
		}
	}
}
