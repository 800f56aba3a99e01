package elastic

import (
	"slices"
	"strconv"
	"testing"
)

// TestWorkerEnvInitMethod: with Spec.InitMethod the workers of a round get
// its GODIST_INIT_METHOD; without it an inherited one is removed, so that
// a worker never joins another job's store.
func TestWorkerEnvInitMethod(t *testing.T) {
	base := []string{"PATH=/bin", "GODIST_INIT_METHOD=etcd://stale:2379/old/"}
	rd := Round{Round: 3, WorldSize: 2, NumNodes: 1, MasterAddr: "127.0.0.1", MasterPort: 1}
	sp := Spec{NProc: 2, RunID: "job", InitMethod: func(r int) string { return "etcd://e:2379/godist/job/round" + strconv.Itoa(r) + "/" }}
	env := WorkerEnv(base, sp, rd, 1, 0)
	if !slices.Contains(env, "GODIST_INIT_METHOD=etcd://e:2379/godist/job/round3/") || slices.Contains(env, base[1]) {
		t.Fatalf("with InitMethod: %q", env)
	}
	sp.InitMethod = nil
	for _, kv := range WorkerEnv(base, sp, rd, 1, 0) {
		if len(kv) > 19 && kv[:19] == "GODIST_INIT_METHOD=" {
			t.Fatalf("without InitMethod the worker inherits %q", kv)
		}
	}
}
