package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestMain lets the test binary act as godist: the end-to-end test runs it
// with GODIST_TEST_AS_MAIN=1, and godist bench re-executes it (the
// environment is inherited) for each rank; and as a worker of a godist
// run, with GODIST_TEST_AS_WORKER set.
func TestMain(m *testing.M) {
	// A worker of a godist run above (the launcher, this binary too, has
	// the variable, and arguments).
	switch w := os.Getenv(workerEnv); {
	case w == "" || len(os.Args) > 1:
	case w == "hold-shm":
		os.Exit(holdShmWorker())
	case w == "stop-rank0":
		os.Exit(stopRank0Worker())
	case w == "loop":
		os.Exit(loopWorker())
	default:
		os.Exit(2)
	}
	if os.Getenv("GODIST_TEST_AS_MAIN") == "1" {
		os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestParseBytes(t *testing.T) {
	good := map[string]int{
		"0": 0, "8": 8, "8B": 8, "8 B": 8, "1KiB": 1024, "1K": 1024, "1k": 1024, "1KB": 1000,
		"64MiB": 64 << 20, "64M": 64 << 20, "2GiB": 2 << 30, "3MB": 3000000, " 16 MiB ": 16 << 20,
	}
	for s, want := range good {
		got, err := parseBytes(s)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "KiB", "-1", "1.5KiB", "1XB", "12 parsecs", "99999999999999999999GiB"} {
		if n, err := parseBytes(s); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", s, n)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for b, want := range map[int]string{
		0: "0 B", 8: "8 B", 16: "16 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB",
		64 << 10: "64 KiB", 1 << 20: "1 MiB", 64 << 20: "64 MiB",
	} {
		if got := formatSize(b); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestBenchSizes(t *testing.T) {
	cases := []struct {
		list          string
		min, max, fac int
		want          []int
	}{
		{"", 8, 64 << 20, 0, anchorSizes},
		{"", 8, 1 << 10, 0, []int{8, 1024}},
		{"", 1 << 10, 1 << 20, 0, []int{1024, 64 << 10, 1 << 20}},
		{"", 8, 2048, 4, []int{8, 32, 128, 512, 1024, 2048}},
		{"", 8, 64 << 20, 4, []int{8, 32, 128, 512, 1 << 10, 2 << 10, 8 << 10, 32 << 10, 64 << 10,
			128 << 10, 512 << 10, 1 << 20, 2 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20}},
		{"1KiB,8,8,64MiB", 0, 0, 0, []int{8, 1024, 64 << 20}},
	}
	for _, c := range cases {
		got, err := benchSizes(c.list, c.min, c.max, c.fac)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("benchSizes(%q, %d, %d, %d) = %v, %v; want %v", c.list, c.min, c.max, c.fac, got, err, c.want)
		}
	}
	// With a step factor the anchor sizes are always there.
	got, _ := benchSizes("", 8, 64<<20, 3)
	for _, a := range anchorSizes {
		if !slices.Contains(got, a) {
			t.Errorf("factor 3: %v lacks anchor size %d", got, a)
		}
	}
	for _, bad := range [][3]int{{16, 8, 0}, {2, 4, 0}} {
		if got, err := benchSizes("", bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("benchSizes(%v) = %v, want an error", bad, got)
		}
	}
	if _, err := benchSizes("8,lots", 0, 0, 0); err == nil {
		t.Error("benchSizes with a bad list: no error")
	}
}

func TestParseOps(t *testing.T) {
	got, err := parseOps("all")
	if err != nil || !slices.Equal(got, allOps) {
		t.Errorf("parseOps(all) = %v, %v", got, err)
	}
	got, err = parseOps("barrier, all_reduce,barrier")
	if err != nil || !slices.Equal(got, []string{"barrier", "all_reduce"}) {
		t.Errorf("parseOps = %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "allreduce", "all_reduce,scatter"} {
		if _, err := parseOps(bad); err == nil {
			t.Errorf("parseOps(%q): no error", bad)
		}
	}
}

func TestSummarize(t *testing.T) {
	// Odd count: the middle value; p10/p90 at int(q*(n-1)) as bench_gloo.py.
	l := summarize([]float64{9, 1, 8, 2, 7, 3, 6, 4, 5, 10, 11})
	if l != (latency{Min: 1, P10: 2, Median: 6, P90: 10, Max: 11}) {
		t.Errorf("summarize(1..11) = %+v", l)
	}
	// Even count: the mean of the two middle values (statistics.median).
	l = summarize([]float64{4, 1, 3, 2})
	if l != (latency{Min: 1, P10: 1, Median: 2.5, P90: 3, Max: 4}) {
		t.Errorf("summarize(1..4) = %+v", l)
	}
	ts := make([]float64, 1000)
	for i := range ts {
		ts[i] = float64(999 - i)
	}
	l = summarize(ts)
	if l != (latency{Min: 0, P10: 99, Median: 499.5, P90: 899, Max: 999}) {
		t.Errorf("summarize(0..999) = %+v", l)
	}
	if l := summarize([]float64{7}); l != (latency{7, 7, 7, 7, 7}) {
		t.Errorf("summarize(7) = %+v", l)
	}
	if l := summarize(nil); l != (latency{}) {
		t.Errorf("summarize(nil) = %+v", l)
	}
	in := []float64{3, 1, 2}
	summarize(in)
	if !slices.Equal(in, []float64{3, 1, 2}) {
		t.Errorf("summarize reordered its input: %v", in)
	}
}

func TestBusFactor(t *testing.T) {
	cases := []struct {
		op   string
		n    int
		want float64
	}{
		{"all_reduce", 2, 1}, {"all_reduce", 4, 1.5}, {"all_reduce", 1, 0},
		{"all_gather", 2, 0.5}, {"all_gather", 4, 0.75},
		{"reduce_scatter", 4, 0.75}, {"all_to_all", 8, 0.875},
		{"broadcast", 4, 1}, {"barrier", 4, 1},
	}
	for _, c := range cases {
		if got := busFactor(c.op, c.n); got != c.want {
			t.Errorf("busFactor(%s, %d) = %g, want %g", c.op, c.n, got, c.want)
		}
	}
}

func TestElemCountAndResult(t *testing.T) {
	cases := []struct {
		op                 string
		size, es, n        int
		wantPer, wantBytes int
	}{
		{"all_reduce", 8, 4, 2, 2, 8},
		{"all_reduce", 2, 4, 2, 1, 4}, // rounded up to one element
		{"broadcast", 1 << 20, 4, 4, 1 << 18, 1 << 20},
		{"all_gather", 8, 4, 2, 1, 8},
		{"all_gather", 8, 4, 4, 1, 16}, // bench_gloo.py's world-4 "16 B" row
		{"reduce_scatter", 1 << 20, 4, 4, 1 << 16, 1 << 20},
		{"all_to_all", 1024, 8, 2, 64, 1024},
		{"barrier", 0, 4, 2, 0, 0},
	}
	for _, c := range cases {
		per, b := elemCount(c.op, c.size, c.es, c.n)
		if per != c.wantPer || b != c.wantBytes {
			t.Errorf("elemCount(%s, %d, %d, %d) = %d, %d; want %d, %d", c.op, c.size, c.es, c.n, per, b, c.wantPer, c.wantBytes)
		}
	}
	// 1 MiB all_reduce over 4 ranks with a median of 1 ms.
	r := newResult("all_reduce", 1<<20, 1<<20, 4, []float64{0.002, 0.001, 0.0005})
	if r.LatUsMedian != 1000 || r.LatUsMin != 500 || r.LatUsMax != 2000 || r.Iters != 3 {
		t.Errorf("newResult latencies: %+v", r)
	}
	if math.Abs(r.AlgbwGBps-1.048576) > 1e-9 || math.Abs(r.BusbwGBps-1.048576*1.5) > 1e-9 {
		t.Errorf("newResult bandwidths: algbw %g busbw %g", r.AlgbwGBps, r.BusbwGBps)
	}
	row := tableRow(r)
	if want := "| all_reduce | 1 MiB | 1000.0 | 500.0..1000.0 | 500.0..2000 | 1.049 | 1.573 | 3 | - | - |\n"; row != want {
		t.Errorf("tableRow = %q\nwant       %q", row, want)
	}
	// With the algorithm and the cost model's prediction.
	r.Algo, r.PredUs = "two-level/4", 950.25
	if want := "| all_reduce | 1 MiB | 1000.0 | 500.0..1000.0 | 500.0..2000 | 1.049 | 1.573 | 3 | two-level/4 | 950.2 |\n"; tableRow(r) != want {
		t.Errorf("tableRow = %q\nwant       %q", tableRow(r), want)
	}
	b := newResult("barrier", 0, 0, 2, []float64{1e-4})
	if b.AlgbwGBps != 0 || !strings.HasPrefix(tableRow(b), "| barrier | - | 100.0 |") || !strings.Contains(tableRow(b), "| - | - | 1 |") {
		t.Errorf("barrier row %q", tableRow(b))
	}
}

func TestIterCount(t *testing.T) {
	cases := []struct {
		est, target float64
		lo, hi      int
		want        int
	}{
		{200e-6, 2, 10, 1000, 1000}, // 10000 wanted, capped
		{0.054, 2, 10, 1000, 37},    // bench_gloo.py's 64 MiB all_reduce
		{1, 2, 10, 1000, 10},        // at least min-iters
		{0, 2, 10, 1000, 1000},      // est clamped to 1e-7
		{1e-3, 0, 10, 20, 20},       // target 0: always the most
		{1e-6, 2, 10, 5, 5},         // most below fewest: the most wins
	}
	for _, c := range cases {
		if got := iterCount(c.est, c.target, c.lo, c.hi); got != c.want {
			t.Errorf("iterCount(%g, %g, %d, %d) = %d, want %d", c.est, c.target, c.lo, c.hi, got, c.want)
		}
	}
}

func TestDispatch(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := dispatch(nil, &out, &errb); rc != exitUsage || !strings.Contains(errb.String(), "bench") {
		t.Errorf("no arguments: rc %d, stderr %q", rc, errb.String())
	}
	out.Reset()
	if rc := dispatch([]string{"help"}, &out, &errb); rc != exitOK {
		t.Errorf("help: rc %d", rc)
	}
	for _, c := range []string{"bench", "store", "version"} {
		if !strings.Contains(out.String(), "\t"+c+" ") {
			t.Errorf("help does not list %s:\n%s", c, out.String())
		}
	}
	errb.Reset()
	if rc := dispatch([]string{"launch"}, &out, &errb); rc != exitUsage || !strings.Contains(errb.String(), `unknown command "launch"`) {
		t.Errorf("unknown command: rc %d, stderr %q", rc, errb.String())
	}
	if rc := dispatch([]string{"bench", "--nproc", "0"}, &out, &errb); rc != exitUsage {
		t.Errorf("bench --nproc 0: rc %d", rc)
	}
	if rc := dispatch([]string{"bench", "--ops", "gossip"}, &out, &errb); rc != exitUsage {
		t.Errorf("bench --ops gossip: rc %d", rc)
	}
	if rc := dispatch([]string{"bench", "--max-bytes", "1XB"}, &out, &errb); rc != exitUsage {
		t.Errorf("bench --max-bytes 1XB: rc %d", rc)
	}
}

func TestTokenFrom(t *testing.T) {
	if tokenFrom("") != nil || string(tokenFrom("0a0b")) != "\x0a\x0b" || string(tokenFrom("secret")) != "secret" {
		t.Error("tokenFrom does not read tokens as dist.Init does")
	}
}

// godist runs this test binary as the godist command.
func godist(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(self, args...)
	c.Env = append(os.Environ(), "GODIST_TEST_AS_MAIN=1")
	return c
}

func TestBenchEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := godist(t, "bench", "--nproc", "2", "--ops", "all_reduce,barrier", "--max-bytes", "1KiB", "--iters", "20", "--timeout", "60s")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("godist bench: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	t.Logf("\n%s", out)
	var rows [][]string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "| all_reduce ") || strings.HasPrefix(l, "| barrier ") {
			f := strings.Split(strings.Trim(l, "| "), " | ")
			if len(f) != 10 {
				t.Fatalf("row %q has %d columns, want 10", l, len(f))
			}
			rows = append(rows, f)
		}
	}
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want all_reduce at 8 B and 1 KiB and barrier:\n%s", len(rows), out)
	}
	for i, want := range [][2]string{{"all_reduce", "8 B"}, {"all_reduce", "1 KiB"}, {"barrier", "-"}} {
		f := rows[i]
		if f[0] != want[0] || f[1] != want[1] || f[7] != "20" {
			t.Errorf("row %d = %q, want op %s, size %s, 20 iterations", i, f, want[0], want[1])
		}
		var med, p10, p90, best, worst float64
		if _, err := sscan(f[2], &med); err != nil {
			t.Fatalf("median %q: %v", f[2], err)
		}
		sscan(strings.Replace(f[3], "..", " ", 1), &p10, &p90)
		sscan(strings.Replace(f[4], "..", " ", 1), &best, &worst)
		if !(best > 0 && best <= p10 && p10 <= med && med <= p90 && p90 <= worst+0.5 && med < 1e6) {
			t.Errorf("row %d: latencies out of order or absurd: best %g p10 %g median %g p90 %g worst %g", i, best, p10, med, p90, worst)
		}
	}
	// Two ranks on one host: 8 B goes through the same-host engine's
	// control block (Group.Choice says what the call runs; the label
	// used to name the schedule it would have run without it).
	if rows[0][8] != "control block" {
		t.Errorf("algo of all_reduce 8 B = %q, want control block", rows[0][8])
	}
}

func TestBenchJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := godist(t, "bench", "--nproc", "3", "--ops", "all_gather", "--sizes", "8,4KiB", "--iters", "10", "--warmup", "1", "--json", "--timeout", "60s")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("godist bench --json: %v\n%s", err, stderr.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if rep.World != 3 || len(rep.Results) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	// 8 B over 3 ranks: one float32 each, 12 B in all.
	if r := rep.Results[0]; r.Op != "all_gather" || r.Size != 8 || r.Bytes != 12 || r.Iters != 10 || r.BusbwGBps <= 0 {
		t.Errorf("first result %+v", r)
	}
}

// TestBenchWorkerUnderRun: godist bench --worker ranks started by godist
// run (this binary as both) join from the launcher's environment, and rank
// 0 prints one JSON result per line, which godist run tags with its rank,
// with the common start's times when asked.
func TestBenchWorkerUnderRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := godist(t, "run", "--standalone", "--nproc-per-node", "2", self,
		"bench", "--worker", "--ops", "all_reduce,barrier", "--sizes", "8,4KiB", "--iters", "10", "--warmup", "1",
		"--common-start", "5", "--timeout", "60s")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("godist run ... bench --worker: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		js, ok := strings.CutPrefix(l, "[rank 0] ")
		if !ok {
			t.Errorf("a line not from rank 0: %q", l)
			continue
		}
		var r result
		if err := json.Unmarshal([]byte(js), &r); err != nil {
			t.Fatalf("rank 0 printed %q: %v", js, err)
		}
		if r.World != 2 || r.Iters != 10 || r.LatUsMedian <= 0 {
			t.Errorf("result %+v", r)
		}
		// The common start: its iterations, a time from the instant that
		// is more than nothing and less than the call's 60 s bound, and
		// the last start after the instant no later than the last return
		// (each iteration's is; how late is the machine's load: up to 3
		// ms under the race detector in CI).
		if r.CommonIters != 5 || r.CommonUsMedian <= 0 || r.CommonUsMedian > 60e6 || r.CommonLateUsMedian < 0 || r.CommonLateUsMedian > r.CommonUsMedian {
			t.Errorf("common start of %s %d: %d iterations, %.1f µs, late %.1f µs", r.Op, r.Size, r.CommonIters, r.CommonUsMedian, r.CommonLateUsMedian)
		}
		got = append(got, fmt.Sprintf("%s %d", r.Op, r.Size))
	}
	if want := []string{"all_reduce 8", "all_reduce 4096", "barrier 0"}; !slices.Equal(got, want) {
		t.Errorf("results %q, want %q", got, want)
	}
}

// TestBenchRankFailure checks that a rank that cannot start is reported
// with its rank and output, and that the run fails.
func TestBenchRankFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := godist(t, "bench", "--nproc", "2", "--ops", "barrier", "--iters", "5", "--timeout", "30s")
	c.Env = append(c.Env, "GODIST_CPUPROFILE="+t.TempDir()+"/no/such/dir/prof")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	err := c.Run()
	if err == nil {
		t.Fatal("godist bench with unwritable profiles succeeded")
	}
	if s := stderr.String(); !strings.Contains(s, "[rank ") || !strings.Contains(s, "godist bench: rank ") {
		t.Errorf("stderr does not name the failed rank:\n%s", s)
	}
}

func sscan(s string, v ...any) (int, error) { return fmt.Sscan(s, v...) }

func TestBenchTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := godist(t, "bench", "--nproc", "2", "--ops", "all_reduce", "--sizes", "64MiB", "--timeout", "300ms")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err == nil {
		t.Fatal("godist bench finished 64 MiB all_reduces within 300 ms; the timeout did not fire")
	}
	if !strings.Contains(stderr.String(), "took longer than --timeout 300ms") {
		t.Errorf("stderr does not name the timeout:\n%s", stderr.String())
	}
}

// TestStoreListenAddr (issue 19, item 2): godist store without a token
// listens on loopback only; it listened on every interface.
func TestStoreListenAddr(t *testing.T) {
	for _, c := range []struct {
		addr            string
		token, insecure bool
		want, err       string
	}{
		{":29500", false, false, "127.0.0.1:29500", ""},
		{"127.0.0.1:7", false, false, "127.0.0.1:7", ""},
		{"localhost:7", false, false, "localhost:7", ""},
		{"10.1.2.3:7", false, false, "", "refusing to listen on 10.1.2.3:7"},
		{"0.0.0.0:7", false, false, "", "refusing"},
		{":29500", true, false, ":29500", ""},
		{"10.1.2.3:7", false, true, "10.1.2.3:7", ""},
		{"nonsense", false, false, "", "--addr"},
	} {
		got, _, err := storeListenAddr(c.addr, c.token, c.insecure, "GODIST_TOKEN")
		if got != c.want || (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("storeListenAddr(%q, token %v, insecure %v) = %q, %v; want %q, error %q", c.addr, c.token, c.insecure, got, err, c.want, c.err)
		}
	}
}
