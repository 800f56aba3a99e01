package launch

import (
	"slices"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	cases := []struct {
		name      string
		base, set []string
		drop      []string
		want      []string
	}{
		{"empty", nil, nil, nil, []string{}},
		{"settings pass, order kept", []string{"PATH=/bin", "GODIST_HOST=10.0.0.7", "GODIST_SHM=0", "SLURM_PROCID=3", "HOME=/h"}, nil, nil,
			[]string{"PATH=/bin", "GODIST_HOST=10.0.0.7", "GODIST_SHM=0", "SLURM_PROCID=3", "HOME=/h"}},
		{"identity never inherited", []string{"RANK=3", "PATH=/bin", "LOCAL_RANK=1", "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=4", "GROUP_RANK=1",
			"GROUP_WORLD_SIZE=2", "ROLE_NAME=r", "ROLE_RANK=3", "ROLE_WORLD_SIZE=8", "MASTER_ADDR=h", "MASTER_PORT=1",
			"TORCHELASTIC_RUN_ID=x", "TORCHELASTIC_RESTART_COUNT=1", "TORCHELASTIC_MAX_RESTARTS=2", "TORCHELASTIC_ERROR_FILE=/e",
			"GODIST_RUN_ID=x", "GODIST_TOKEN=ab", "GODIST_RESTART_COUNT=1", "GODIST_MAX_RESTARTS=2", "GODIST_ERROR_FILE=/e",
			"GODIST_SPAWN_RANK=3"}, nil, nil, []string{"PATH=/bin"}},
		{"set replaces, wherever it was", []string{"A=1", "RANK=9", "B=2", "OMP_NUM_THREADS=8"}, []string{"RANK=0", "OMP_NUM_THREADS=1"}, nil,
			[]string{"A=1", "B=2", "RANK=0", "OMP_NUM_THREADS=1"}},
		{"drop", []string{"GODIST_HOST=h", "A=1", "GODIST_BENCH_CONFIG={}"}, []string{"GODIST_BENCH_CONFIG={\"ops\":[]}"}, []string{"GODIST_HOST"},
			[]string{"A=1", "GODIST_BENCH_CONFIG={\"ops\":[]}"}},
		{"a name that only starts like one", []string{"RANKING=1", "RANK_=2", "=odd", "NOVALUE"}, nil, nil,
			[]string{"RANKING=1", "RANK_=2", "=odd", "NOVALUE"}},
	}
	for _, c := range cases {
		base := slices.Clone(c.base)
		got := Env(c.base, c.set, c.drop...)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: Env = %q, want %q", c.name, got, c.want)
		}
		if !slices.Equal(base, c.base) {
			t.Errorf("%s: Env changed base", c.name)
		}
	}
}

func TestRankVars(t *testing.T) {
	cases := []struct {
		r    Rank
		want string
	}{
		{Rank{Rank: 5, LocalRank: 1, WorldSize: 8, LocalWorldSize: 4, MasterAddr: "10.0.0.1", MasterPort: 29500, RunID: "job"},
			"RANK=5 LOCAL_RANK=1 WORLD_SIZE=8 LOCAL_WORLD_SIZE=4 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 GODIST_RUN_ID=job"},
		{Rank{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 1, RunID: "r", Token: "00ff", ErrorFile: "/t/0/error.json"},
			"RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 GODIST_RUN_ID=r GODIST_TOKEN=00ff " +
				"GODIST_ERROR_FILE=/t/0/error.json TORCHELASTIC_ERROR_FILE=/t/0/error.json"},
	}
	for _, c := range cases {
		vars := c.r.Vars()
		if got := strings.Join(vars, " "); got != c.want {
			t.Errorf("%+v: Vars = %s\nwant %s", c.r, got, c.want)
		}
		// Every variable a launcher sets is one no worker inherits.
		for _, kv := range vars {
			k, _, _ := strings.Cut(kv, "=")
			if !slices.Contains(Identity, k) {
				t.Errorf("%s is set but not in Identity", k)
			}
		}
	}
}

func TestLookup(t *testing.T) {
	env := []string{"A=1", "B=", "A=2"}
	for _, c := range []struct {
		key, val string
		ok       bool
	}{{"A", "2", true}, {"B", "", true}, {"C", "", false}} {
		if v, ok := Lookup(env, c.key); v != c.val || ok != c.ok {
			t.Errorf("Lookup(%s) = %q, %v", c.key, v, ok)
		}
	}
}

func TestTokenAndPort(t *testing.T) {
	a, b := NewToken(), NewToken()
	if len(a) != 32 || a == b || strings.Trim(a, "0123456789abcdef") != "" {
		t.Errorf("tokens %q, %q", a, b)
	}
	p, err := FreePort("127.0.0.1")
	if err != nil || p <= 0 || p > 65535 {
		t.Errorf("FreePort = %d, %v", p, err)
	}
}
