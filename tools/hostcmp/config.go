package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/godist/godist/tools/clustertest"
)

// This file and table.go are hostcmp's pure parts: the flags' syntax, the
// order of the runs, the statistics and the tables. Nothing here starts a
// process or makes a host.

// labConfig is one lab: Hosts hosts of PerHost ranks each, every link
// shaped to Rate (0: unshaped).
type labConfig struct {
	Hosts, PerHost int
	Rate           clustertest.BitRate
}

// World is the number of ranks.
func (c labConfig) World() int { return c.Hosts * c.PerHost }

// String writes c as --configs reads it: 2x2@1G.
func (c labConfig) String() string {
	s := fmt.Sprintf("%dx%d", c.Hosts, c.PerHost)
	if c.Rate > 0 {
		s += "@" + formatRateShort(c.Rate)
	}
	return s
}

// parseConfigs reads --configs: comma-separated HxR@RATE, H hosts of R
// ranks each on links of RATE bits per second (a number with K, M, G or
// T, powers of 1000, and an optional "bit": 1G, 100M, 2.5G, 1gbit); HxR
// alone leaves the links unshaped.
func parseConfigs(s string) ([]labConfig, error) {
	var out []labConfig
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		shape, rate, shaped := strings.Cut(f, "@")
		hs, rs, ok := strings.Cut(strings.ToLower(shape), "x")
		h, herr := strconv.Atoi(hs)
		r, rerr := strconv.Atoi(rs)
		if !ok || herr != nil || rerr != nil || h < 1 || r < 1 {
			return nil, fmt.Errorf("configuration %q: want HOSTSxRANKS@RATE, such as 2x2@1G (2 hosts of 2 ranks on 1 Gbit/s links)", f)
		}
		c := labConfig{Hosts: h, PerHost: r}
		if shaped {
			var err error
			if c.Rate, err = parseRate(rate); err != nil {
				return nil, fmt.Errorf("configuration %q: %w", f, err)
			}
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no configurations in %q", s)
	}
	return out, nil
}

// parseRate reads a link rate in bits per second: 1G, 10G, 100M, 2.5G,
// 1gbit, 1000000 (powers of 1000, as tc counts). "0" is unshaped.
func parseRate(s string) (clustertest.BitRate, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "/s"), "bit")
	mult := 1.0
	if n := len(t); n > 0 {
		if i := strings.IndexByte("kmgt", t[n-1]); i >= 0 {
			mult, t = math.Pow(1000, float64(i+1)), t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	bits := v * mult
	if err != nil || bits < 0 || bits > 1e15 || math.IsNaN(bits) || (bits > 0 && bits < 1000) {
		return 0, fmt.Errorf("rate %q: want bits per second such as 1G, 100M or 2.5G (at least 1K; 0 for unshaped)", s)
	}
	return clustertest.BitRate(math.Round(bits)), nil
}

// formatRateShort writes a rate as --configs does: 1G, 2.5G, 100M.
func formatRateShort(r clustertest.BitRate) string {
	for _, u := range []struct {
		suffix string
		unit   float64
	}{{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"K", 1e3}} {
		if float64(r) >= u.unit {
			return strconv.FormatFloat(float64(r)/u.unit, 'g', 6, 64) + u.suffix
		}
	}
	return strconv.FormatInt(int64(r), 10)
}

// formatRate writes a rate for people: "1 Gbit/s", "unshaped".
func formatRate(r clustertest.BitRate) string {
	if r == 0 {
		return "unshaped"
	}
	s := formatRateShort(r)
	if n := len(s); strings.ContainsRune("TGMK", rune(s[n-1])) {
		return s[:n-1] + " " + s[n-1:] + "bit/s"
	}
	return s + " bit/s"
}

// parseSizes reads --sizes: comma-separated byte counts with an optional
// unit (B; KiB, MiB, GiB or K, M, G: powers of 1024), ascending and
// without repeats in the result.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		i := len(f)
		for i > 0 && (f[i-1] < '0' || f[i-1] > '9') {
			i--
		}
		num, unit := f[:i], strings.ToLower(strings.TrimSpace(f[i:]))
		mult, ok := map[string]int{"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}[unit]
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 0 || n > math.MaxInt32/mult {
			return nil, fmt.Errorf("size %q: want a byte count such as 8, 1KiB, 64KiB or 1MiB", f)
		}
		out = append(out, n*mult)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no sizes in %q", s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// knownOps are the ops every benchmark of hostcmp measures.
var knownOps = []string{"all_reduce", "broadcast", "all_gather", "barrier"}

// parseOps reads --ops: comma-separated ops of knownOps, in the order
// given, without repeats.
func parseOps(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" || slices.Contains(out, f) {
			continue
		}
		if !slices.Contains(knownOps, f) {
			return nil, fmt.Errorf("op %q: want some of %s", f, strings.Join(knownOps, ","))
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no ops in %q", s)
	}
	return out, nil
}

// rotate returns the order of the benchmarks in round r (from 0): list
// turned left by r, so that each goes first in turn.
func rotate[T any](list []T, r int) []T {
	if len(list) == 0 {
		return nil
	}
	k := r % len(list)
	return append(slices.Clone(list[k:]), list[:k]...)
}

// payloadShare is the share of a shaped link's rate that a TCP transfer's
// payload gets: tbf counts whole Ethernet frames, and a full frame of
// 1514 bytes carries 1448 bytes of payload (20 B IP, 20 B TCP and 12 B of
// timestamps, 14 B Ethernet): 95.6%, taken as 95%.
const payloadShare = 0.95

// twoLevelBound is the fastest an all-reduce across hosts can be, as
// algorithm bandwidth (bytes of the vector per second), on hosts links
// of rate: the two-level schedule (reduce-scatter on each host, rings
// across hosts, all-gather on each host) sends 2(h-1)/h of the vector
// out of each host's link and receives as much, the least any schedule
// can, so it takes at least that over the link's payload rate. It is 0
// for one host or an unshaped link (no bound).
func twoLevelBound(rate clustertest.BitRate, hosts int) float64 {
	if hosts < 2 || rate <= 0 {
		return 0
	}
	h := float64(hosts)
	return float64(rate) / 8 * payloadShare * h / (2 * (h - 1))
}

// cpuLayout describes which CPUs each host runs on, and whether hosts
// share them: "node0 0, node1 1" or, with no pinning, "not pinned".
func cpuLayout(names []string, cpus [][]int) (layout string, shared bool) {
	seen := map[int]bool{}
	parts := make([]string, len(names))
	for i, name := range names {
		if len(cpus[i]) == 0 {
			parts[i] = name + " any CPU"
			continue
		}
		cs := make([]string, len(cpus[i]))
		for k, c := range cpus[i] {
			cs[k] = strconv.Itoa(c)
			if seen[c] {
				shared = true
			}
		}
		for _, c := range cpus[i] {
			seen[c] = true
		}
		parts[i] = name + " CPU " + strings.Join(cs, ",")
	}
	return strings.Join(parts, "; "), shared
}
