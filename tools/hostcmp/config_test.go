package main

import (
	"math"
	"slices"
	"testing"

	"github.com/godist/godist/tools/clustertest"
)

func TestParseConfigs(t *testing.T) {
	got, err := parseConfigs("2x2@1G, 4x1@1G,2x2@10G,3X1@100M,2x1@2.5gbit,2x4")
	if err != nil {
		t.Fatal(err)
	}
	want := []labConfig{
		{2, 2, clustertest.Gbit}, {4, 1, clustertest.Gbit}, {2, 2, 10 * clustertest.Gbit},
		{3, 1, 100 * clustertest.Mbit}, {2, 1, 2500 * clustertest.Mbit}, {2, 4, 0},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseConfigs = %v, want %v", got, want)
	}
	var text []string
	for _, c := range got {
		text = append(text, c.String())
	}
	if w := []string{"2x2@1G", "4x1@1G", "2x2@10G", "3x1@100M", "2x1@2.5G", "2x4"}; !slices.Equal(text, w) {
		t.Errorf("String = %q, want %q", text, w)
	}
	if got[0].World() != 4 || got[5].World() != 8 {
		t.Errorf("World: %d, %d", got[0].World(), got[5].World())
	}
	for _, bad := range []string{"", "2", "2x", "x2", "0x2@1G", "2x0@1G", "2x2@", "2x2@fast", "2x2@-1G", "2x2@10", "2x2@1Q"} {
		if _, err := parseConfigs(bad); err == nil {
			t.Errorf("parseConfigs(%q) succeeded", bad)
		}
	}
}

func TestFormatRate(t *testing.T) {
	for r, want := range map[clustertest.BitRate]string{
		0: "unshaped", clustertest.Gbit: "1 Gbit/s", 10 * clustertest.Gbit: "10 Gbit/s",
		2500 * clustertest.Mbit: "2.5 Gbit/s", 100 * clustertest.Mbit: "100 Mbit/s", 5000: "5 Kbit/s",
	} {
		if got := formatRate(r); got != want {
			t.Errorf("formatRate(%d) = %q, want %q", r, got, want)
		}
	}
}

func TestParseSizes(t *testing.T) {
	got, err := parseSizes("64MiB,8, 1KiB,64KiB,1MiB,16M,8B")
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20}; !slices.Equal(got, want) {
		t.Errorf("parseSizes = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "x", "1KB", "-8", "8 TiB", "3GiB"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) succeeded", bad)
		}
	}
}

func TestParseOps(t *testing.T) {
	got, err := parseOps("barrier,all_reduce,barrier")
	if err != nil || !slices.Equal(got, []string{"barrier", "all_reduce"}) {
		t.Errorf("parseOps = %v, %v", got, err)
	}
	if _, err := parseOps("reduce_scatter"); err == nil {
		t.Error("parseOps took an op that not every benchmark measures")
	}
}

func TestRotate(t *testing.T) {
	list := []string{"godist", "gloo", "mpi"}
	first := map[string]int{}
	for r := range 6 {
		o := rotate(list, r)
		if len(o) != 3 || !slices.Equal(slices.Sorted(slices.Values(o)), []string{"gloo", "godist", "mpi"}) {
			t.Fatalf("round %d: %v is not an order of %v", r, o, list)
		}
		first[o[0]]++
	}
	if first["godist"] != 2 || first["gloo"] != 2 || first["mpi"] != 2 {
		t.Errorf("in 6 rounds each should go first twice: %v", first)
	}
	if !slices.Equal(rotate(list, 1), []string{"gloo", "mpi", "godist"}) {
		t.Errorf("rotate(1) = %v", rotate(list, 1))
	}
	if list[0] != "godist" {
		t.Error("rotate changed its argument")
	}
}

func TestTwoLevelBound(t *testing.T) {
	// 1 Gbit/s: 125 MB/s, 95% of it payload; 2 hosts: the link carries the
	// whole vector each way; 4 hosts: 1.5 times it.
	for _, c := range []struct {
		rate  clustertest.BitRate
		hosts int
		want  float64
	}{
		{clustertest.Gbit, 2, 118.75e6},
		{clustertest.Gbit, 4, 118.75e6 / 1.5},
		{10 * clustertest.Gbit, 2, 1187.5e6},
		{clustertest.Gbit, 1, 0},
		{0, 2, 0},
	} {
		if got := twoLevelBound(c.rate, c.hosts); math.Abs(got-c.want) > 1 {
			t.Errorf("twoLevelBound(%v, %d) = %g, want %g", c.rate, c.hosts, got, c.want)
		}
	}
}

func TestCPULayout(t *testing.T) {
	layout, shared := cpuLayout([]string{"node0", "node1"}, [][]int{{0}, {1}})
	if layout != "node0 CPU 0; node1 CPU 1" || shared {
		t.Errorf("two hosts on two CPUs: %q, shared %v", layout, shared)
	}
	layout, shared = cpuLayout([]string{"a", "b", "c", "d"}, [][]int{{0}, {1}, {0}, {1}})
	if layout != "a CPU 0; b CPU 1; c CPU 0; d CPU 1" || !shared {
		t.Errorf("four hosts on two CPUs: %q, shared %v", layout, shared)
	}
	layout, shared = cpuLayout([]string{"a", "b"}, [][]int{{0, 1}, nil})
	if layout != "a CPU 0,1; b any CPU" || shared {
		t.Errorf("unpinned: %q, shared %v", layout, shared)
	}
}
