package pipeline_test

import (
	"context"
	"sync"
	"testing"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/parallel/pipeline"
	"github.com/godist/godist/parallel/pipeline/schedule"
)

// runStats runs one step of the named schedule on the tiny GPT and
// returns every rank's Stats.
func runStats(t *testing.T, name string, ranks, micros int) []pipeline.Stats {
	stats := make([]pipeline.Stats, ranks)
	var mu sync.Mutex
	disttest.Spawn(t, ranks, func(g *dist.Group) error {
		sched, err := schedule.ByName(name, ranks, 1, micros)
		if err != nil {
			return err
		}
		_, layers := gptLayers(t, ranks, true)
		// One block per stage; the embeddings join the first, the head
		// the last.
		points := make([]int, ranks-1)
		for i := range points {
			points[i] = i + 2
		}
		parts, err := pipeline.Split(layers, points)
		if err != nil {
			return err
		}
		p, err := pipeline.New(g, sched, []pipeline.Stage{{Index: g.Rank(), Module: parts[g.Rank()]}}, pipeline.Options{Loss: gptLoss})
		if err != nil {
			return err
		}
		xs, ys := microBatches(3, micros, 2, 8, 32)
		if err := p.Step(context.Background(), xs, ys); err != nil {
			return err
		}
		mu.Lock()
		stats[g.Rank()] = p.Stats()
		mu.Unlock()
		return nil
	})
	return stats
}

// TestPeakActivations: with 4 stages and 8 micro-batches, the number of
// micro-batch graphs each rank held at once is what the simulator
// predicts for its schedule, and so are the bytes (that number times one
// micro-batch's graph); 1F1B holds fewer bytes than GPipe on every rank
// (4-r micro-batches on rank r against 8), and ZB-H1 no more
// micro-batches on any rank than 1F1B's largest.
func TestPeakActivations(t *testing.T) {
	const ranks, micros = 4, 8
	got := map[string][]pipeline.Stats{}
	for _, name := range []string{"gpipe", "1f1b", "zbh1"} {
		sched, err := schedule.ByName(name, ranks, 1, micros)
		if err != nil {
			t.Fatal(err)
		}
		sim, err := schedule.Simulate(sched, schedule.Costs{Forward: 1, Backward: 2, BackwardInput: 1, BackwardWeight: 1})
		if err != nil {
			t.Fatal(err)
		}
		got[name] = runStats(t, name, ranks, micros)
		for r, s := range got[name] {
			if s.PeakLive != sim.PeakActivations[r] {
				t.Errorf("%s rank %d: %d micro-batches live at once, the simulator says %d", name, r, s.PeakLive, sim.PeakActivations[r])
			}
			per := got["gpipe"][r].PeakActivationBytes / micros
			if s.PeakActivationBytes != int64(s.PeakLive)*per {
				t.Errorf("%s rank %d: peak %d bytes, want %d micro-batches × %d", name, r, s.PeakActivationBytes, s.PeakLive, per)
			}
		}
	}
	for r := range ranks {
		g, o := got["gpipe"][r].PeakActivationBytes, got["1f1b"][r].PeakActivationBytes
		if o >= g {
			t.Errorf("rank %d: 1F1B held %d bytes at its peak, GPipe %d", r, o, g)
		}
		t.Logf("rank %d: peak activation bytes GPipe %d, 1F1B %d, ZB-H1 %d", r, g, o, got["zbh1"][r].PeakActivationBytes)
	}
	// ZB-H1 delays weight passes, so every rank holds as many
	// micro-batches as 1F1B's first rank does (the paper's bound: no
	// rank above 1F1B's peak, counted in micro-batches).
	largest := 0
	for _, s := range got["1f1b"] {
		largest = max(largest, s.PeakLive)
	}
	for r, s := range got["zbh1"] {
		if s.PeakLive > largest {
			t.Errorf("ZB-H1 rank %d held %d micro-batches, more than 1F1B's largest %d", r, s.PeakLive, largest)
		}
	}
}
