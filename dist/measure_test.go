package dist

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/store"
	"github.com/godist/godist/transport"
)

// TestMeasureModel: in a job over two hosts, rank 0 measures the links
// and every rank ends with the same model, measured (not the default);
// a model given in the options is taken as it is, and a bad one refused;
// a job on one host keeps the default without measuring.
func TestMeasureModel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(labels []string, given algo.Model) ([]algo.Model, []error) {
		m := transport.NewInProc(len(labels), transport.Faults{})
		defer m.Close()
		m.SetHosts(labels)
		st := store.NewMem()
		defer st.Close()
		models, errs := make([]algo.Model, len(labels)), make([]error, len(labels))
		var wg sync.WaitGroup
		for r, ep := range m.Endpoints {
			g := FromEndpoint(ep, st, "inproc", time.Minute)
			defer g.Destroy()
			wg.Go(func() {
				errs[r] = g.world.measureModel(ctx, given)
				models[r] = g.Model()
			})
		}
		wg.Wait()
		return models, errs
	}
	models, errs := run([]string{"a", "a", "b", "b"}, algo.Model{})
	for r := range models {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if models[r] != models[0] {
			t.Errorf("rank %d holds %v, rank 0 %v", r, models[r], models[0])
		}
	}
	m := models[0]
	if m == algo.DefaultModel || m.Check() != nil || m.Network.Latency <= 0 || m.Local.Latency <= 0 {
		t.Errorf("measured model %v: want positive latencies and bandwidths, not the default", m)
	}
	t.Logf("measured in memory: %v", m)

	given := algo.Model{Local: algo.Link{Latency: time.Microsecond, Bandwidth: 1e9}, Network: algo.Link{Latency: time.Millisecond, Bandwidth: 1e8}, Reduce: 1e9}
	models, errs = run([]string{"a", "b"}, given)
	for r := range models {
		if errs[r] != nil || models[r] != given {
			t.Errorf("given model: rank %d holds %v (%v), want %v", r, models[r], errs[r], given)
		}
	}
	bad := given
	bad.Network.Bandwidth = 0
	if _, errs = run([]string{"a", "b"}, bad); errs[0] == nil {
		t.Errorf("a model with no network bandwidth was accepted")
	}
	models, errs = run([]string{"a", "a"}, algo.Model{})
	if errs[0] != nil || models[0] != algo.DefaultModel {
		t.Errorf("one host: %v (%v), want the default", models[0], errs[0])
	}
}
