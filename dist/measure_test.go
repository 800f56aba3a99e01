package dist

import (
	"context"
	"strings"
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
				errs[r] = g.measureModel(ctx, given)
				models[r] = g.Model()
			})
		}
		wg.Wait()
		return models, errs
	}
	// Two and three pairs of probers, each bulk round trip in step
	// (syncProbers): the followers take rank 0's sizes to the end. With
	// four hosts, hosts 2 and 3 probe too; with three, host 2 waits.
	var models []algo.Model
	var errs []error
	for _, labels := range [][]string{{"a", "b", "c", "d"}, {"a", "b", "b", "c"}, {"a", "a", "a", "b", "b", "b"}, {"a", "a", "b", "b"}} {
		models, errs = run(labels, algo.Model{})
		for r := range models {
			if errs[r] != nil {
				t.Fatalf("%v: rank %d: %v", labels, r, errs[r])
			}
			if models[r] != models[0] {
				t.Errorf("%v: rank %d holds %v, rank 0 %v", labels, r, models[r], models[0])
			}
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

// TestMeasureModelPeerDies: when the rank rank 0 measures against dies,
// every survivor's Init fails at once, naming it, rather than waiting
// for a model that will never come.
func TestMeasureModelPeerDies(t *testing.T) {
	m := transport.NewInProc(4, transport.Faults{})
	defer m.Close()
	m.SetHosts([]string{"a", "a", "b", "b"})
	st := store.NewMem()
	defer st.Close()
	gs := make([]*Group, 4)
	for r, ep := range m.Endpoints {
		gs[r] = FromEndpoint(ep, st, "inproc", time.Minute)
		defer gs[r].Destroy()
	}
	m.Kill(2)
	start := time.Now()
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for _, r := range []int{0, 1, 3} {
		wg.Go(func() { errs[r] = gs[r].measureModel(context.Background(), algo.Model{}) })
	}
	wg.Wait()
	for _, r := range []int{0, 1, 3} {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "rank 2") {
			t.Errorf("rank %d: %v, want an error naming rank 2", r, errs[r])
		} else if r == 0 {
			t.Logf("rank 0: %v", errs[r])
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the survivors took %v to fail", d)
	}
}

// TestStackRate: each CPU moved the duplex rate out and as much in; not
// measured, no bound.
func TestStackRate(t *testing.T) {
	for _, c := range []struct {
		duplex float64
		cpus   int
		want   float64
	}{
		{0.12e9, 1, 0.24e9}, // 1 Gbit/s, link-bound: never above the link's time
		{0.7e9, 1, 1.4e9},   // 10 Gbit/s, one CPU
		{0.7e9, 2, 0.7e9},   // two CPUs share the work
		{0, 1, 0},           // not measured
	} {
		if got := stackRate(c.duplex, c.cpus); got != c.want {
			t.Errorf("stackRate(%g, %d) = %g, want %g", c.duplex, c.cpus, got, c.want)
		}
	}
}
