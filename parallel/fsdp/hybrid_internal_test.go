package fsdp

import "testing"

// TestHybridGroups: the colours of each rank's shard and replica groups,
// from a ShardSize or from the hosts.
func TestHybridGroups(t *testing.T) {
	type sr struct{ shard, replica int }
	for _, c := range []struct {
		name      string
		hosts     [][]int
		world, sz int
		want      []sr // by rank
	}{
		{"consecutive runs", [][]int{{0, 1, 2, 3}}, 4, 2, []sr{{0, 0}, {0, 1}, {1, 0}, {1, 1}}},
		{"hosts in order", [][]int{{0, 1}, {2, 3}}, 4, 0, []sr{{0, 0}, {0, 1}, {1, 0}, {1, 1}}},
		// Interleaved: rank 1 is host 1's first, so it replicates rank 0.
		{"hosts interleaved", [][]int{{0, 2}, {1, 3}}, 4, 0, []sr{{0, 0}, {1, 0}, {0, 1}, {1, 1}}},
		{"unsorted host lists", [][]int{{2, 0}, {3, 1}}, 4, 0, []sr{{0, 0}, {1, 0}, {0, 1}, {1, 1}}},
		{"one host", [][]int{{0, 1, 2}}, 3, 0, []sr{{0, 0}, {0, 1}, {0, 2}}},
		{"one rank a host", [][]int{{0}, {1}, {2}}, 3, 0, []sr{{0, 0}, {1, 0}, {2, 0}}},
	} {
		for r, w := range c.want {
			s, rep, err := hybridGroups(c.hosts, c.world, r, c.sz)
			if err != nil || s != w.shard || rep != w.replica {
				t.Errorf("%s: rank %d: shard %d replica %d (%v), want %d %d", c.name, r, s, rep, err, w.shard, w.replica)
			}
		}
	}
	for _, c := range []struct {
		hosts     [][]int
		world, sz int
	}{
		{[][]int{{0, 1}, {2}}, 3, 0}, // unequal hosts
		{[][]int{{0, 1, 2}}, 3, 2},   // does not divide
		{[][]int{{0, 1, 2}}, 3, -1},
	} {
		if _, _, err := hybridGroups(c.hosts, c.world, 0, c.sz); err == nil {
			t.Errorf("hosts %v, ShardSize %d: no error", c.hosts, c.sz)
		}
	}
}
