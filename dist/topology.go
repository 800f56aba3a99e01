package dist

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// The group's hosts and the cost model its calls choose algorithms with.
//
// A group learns where its members run from the transport (every rank's
// host label, Endpoint.Hosts): members with one label share a host. On one
// host the algorithms are chosen by the size thresholds of algo.Choose…,
// measured on this project's machines; across hosts by the time the
// world's cost model (Options.Model, else algo.DefaultModel) predicts for
// each candidate, the two-level all-reduce among them.

// topologyOf groups the members (global ranks) by host label.
func topologyOf(ep *transport.Endpoint, ranks []int) algo.Topology {
	labels := make([]string, len(ranks))
	for i, r := range ranks {
		labels[i] = ep.HostOf(r)
	}
	return algo.NewTopology(labels)
}

// spansHosts reports whether ranks are on more than one host: without
// the topology, which a group on one host never needs (and which, made
// by every rank of a job of W ranks, is W² in all).
func spansHosts(ep *transport.Endpoint, ranks []int) bool {
	for _, r := range ranks {
		if ep.HostOf(r) != ep.HostOf(ranks[0]) {
			return true
		}
	}
	return false
}

// Topology returns the group's members by host: Hosts[h] lists the group
// ranks on host h, hosts ordered by their first member.
func (g *Group) Topology() algo.Topology {
	out := algo.Topology{Hosts: make([][]int, len(g.topo().Hosts))}
	for h, rs := range g.topo().Hosts {
		out.Hosts[h] = append([]int(nil), rs...)
	}
	return out
}

// Model returns the cost model the group's calls across hosts choose
// their algorithms with.
func (g *Group) Model() algo.Model { return g.world.model }

// spansHosts reports whether the members are on more than one host.
func (g *Group) spansHosts() bool { return g.spans }

// planned is a call's plan and this rank's schedule of it.
type planned struct {
	plan  algo.Plan
	sched algo.Schedule
}

// The plans of the collectives. Across hosts they come from the cost
// model; on one host from the thresholds (without a prediction, which
// only Choice asks for).

func (g *Group) planAllReduce(count, es int) algo.Plan {
	if name := g.world.pins["all_reduce"]; name != "" {
		if p, ok := algo.PinAllReduce(g.topo(), g.world.model, name, count, es); ok {
			return p
		}
	}
	if g.spansHosts() {
		return algo.ChooseAllReduceOn(g.topo(), g.world.model, count, es)
	}
	return algo.ChooseAllReduce(g.Size(), count, es)
}

func (g *Group) planBroadcast(root, count, es int) algo.Plan {
	if name := g.world.pins["broadcast"]; name != "" {
		if p, ok := algo.PinBroadcast(g.topo(), g.world.model, name, root, count, es); ok {
			return p
		}
	}
	if g.spansHosts() {
		return algo.ChooseBroadcastOn(g.topo(), g.world.model, root, count, es)
	}
	return algo.ChooseBroadcast(g.Size(), root, count, es)
}

func (g *Group) planAllGather(counts []int, es int) algo.Plan {
	if name := g.world.pins["all_gather"]; name != "" {
		if p, ok := algo.PinAllGather(g.topo(), g.world.model, name, counts, es); ok {
			return p
		}
	}
	if g.spansHosts() {
		return algo.ChooseAllGatherOn(g.topo(), g.world.model, counts, es)
	}
	return algo.ChooseAllGather(g.Size(), counts, es)
}

func (g *Group) planReduceScatter(counts []int, es int) algo.Plan {
	if name := g.world.pins["reduce_scatter"]; name != "" {
		if p, ok := algo.PinReduceScatter(g.topo(), g.world.model, name, counts, es); ok {
			return p
		}
	}
	if g.spansHosts() {
		return algo.ChooseReduceScatterOn(g.topo(), g.world.model, counts, es)
	}
	return algo.ChooseReduceScatter(g.Size(), counts, es)
}

func (g *Group) planBarrier() algo.Plan {
	if name := g.world.pins["barrier"]; name != "" {
		if p, ok := algo.PinBarrier(g.topo(), g.world.model, name); ok {
			return p
		}
	}
	if g.spansHosts() {
		return algo.ChooseBarrierOn(g.topo(), g.world.model)
	}
	size := g.Size()
	return algo.Plan{Name: "dissemination", Segments: 1, Schedule: func(rank int) algo.Schedule { return algo.DisseminationBarrier(rank, size) }}
}

// cached returns the plan of key and this rank's schedule of it, built
// once: a training loop issues the same few calls over and over, and
// choosing and building allocate. Schedules are never modified after
// they are built.
func (g *Group) cached(key schedKey, choose func() algo.Plan) planned {
	g.mu.Lock()
	p, ok := g.mu.plans[key]
	g.mu.Unlock()
	if ok {
		return p
	}
	plan := choose()
	p = planned{plan, plan.Schedule(g.rank)}
	if (key.op == opAllGather || key.op == opReduceScatter) && g.Size() > maxCachedCounts {
		// Their plans hold a count per member: kept by every rank of
		// thousands of goroutine ranks, W² ints; made again per call,
		// O(W) like the call's own output.
		return p
	}
	g.mu.Lock()
	if len(g.mu.plans) >= 256 {
		clear(g.mu.plans) // a program with ever new sizes: start over
	}
	g.mu.plans[key] = p
	g.mu.Unlock()
	return p
}

// maxCachedCounts is the largest group whose all-gather and
// reduce-scatter plans are cached (cached).
const maxCachedCounts = 1024

// Choice is what a collective call of a group runs: the algorithm, and
// the time the cost model predicts for it.
type Choice struct {
	// Algo names the algorithm ("ring/4", "two-level/2", "shared
	// memory", "control block"), as godist bench prints it.
	Algo string
	// Predicted is the model's time for the call, from the first
	// member's start to the last one's end; 0 for the same-host engine
	// (control block, shared tensors), which the model does not cover.
	Predicted time.Duration

	// The plan and its element size, for AfterBarrier (g nil: no plan).
	g    *Group
	plan algo.Plan
	pes  int
}

// AfterBarrier is the model's time for the call on its slowest member
// when each member calls as it leaves a barrier made just before: they
// leave it apart (a host's leader before the members it releases), and a
// benchmark that times "barrier; t0; call; t1" on every member measures
// this, not Predicted. It is Predicted where the group's barrier goes
// through the same-host engine, 0 where Predicted is. It simulates the
// barrier and the call, so Choice leaves it to be asked for.
func (c Choice) AfterBarrier() time.Duration {
	if c.g == nil || c.g.route(0, nil) == byBlock {
		return c.Predicted
	}
	return c.g.afterBarrier(c.plan, c.pes)
}

// Choice returns what a call of op ("all_reduce", "broadcast" from
// member 0, "all_gather", "reduce_scatter", "all_to_all" with equal
// splits or "barrier") on count elements of dtype each member contributes
// (all_gather: count per member; reduce_scatter: count out per member;
// all_to_all: count to each member) would run on g, with its
// predicted time; ok is false for an op it does not know. Tensors from
// NewSharedTensor may take the shared-memory path instead
// (SharedAllReduceApplies).
func (g *Group) Choice(op string, count int, dtype tensor.DType) (c Choice, ok bool) {
	es := dtype.Size()
	ctlBytes := count * es // what the call's route looks at
	switch op {
	case "reduce_scatter":
		ctlBytes *= g.Size()
	case "barrier":
		ctlBytes = 0
	case "all_to_all":
		// The model has no all-to-all: the size alone chooses.
		return Choice{Algo: g.allToAllAlgo(count * es)}, true
	}
	if g.route(ctlBytes, nil) == byBlock {
		return Choice{Algo: "control block"}, true
	}
	// The plan the call would run (the same functions), with the time
	// the model predicts for it.
	var plan algo.Plan
	pes := es // the element size the plan counts in
	switch op {
	case "all_reduce":
		plan = g.planAllReduce(count, es)
	case "broadcast":
		plan, pes = g.planBroadcast(0, count*es, 1), 1 // dist chooses on bytes
	case "all_gather":
		plan, pes = g.planAllGather(equalCounts(g.Size(), count*es), 1), 1
	case "reduce_scatter":
		plan = g.planReduceScatter(equalCounts(g.Size(), count), es)
	case "barrier":
		plan, pes = g.planBarrier(), 1
	default:
		return Choice{}, false
	}
	if plan.Predicted == 0 {
		plan = plan.WithPrediction(g.topo(), g.world.model, pes)
	}
	return Choice{Algo: plan.String(), Predicted: plan.Predicted, g: g, plan: plan, pes: pes}, true
}

// afterBarrier is the model's time for plan's call (elements of es bytes)
// on its slowest member, each member calling as it leaves a barrier
// (g's) that all began together (Choice.AfterBarrier).
func (g *Group) afterBarrier(plan algo.Plan, es int) time.Duration {
	t, m, n := g.topo(), g.world.model, g.Size()
	left := m.PredictFrom(t, g.planBarrier().Schedules(n), 1, nil)
	start := make([]float64, n)
	for r, d := range left {
		start[r] = d.Seconds()
	}
	var most time.Duration
	for _, d := range m.PredictFrom(t, plan.Schedules(n), es, start) {
		most = max(most, d)
	}
	return most
}

// allToAllAlgo is the all-to-all of equal blocks of b bytes: the pinned
// one (Options.Algorithms), or algo.ChooseAllToAll's.
func (g *Group) allToAllAlgo(b int) string {
	if name := g.world.pins["all_to_all"]; name != "" {
		return name
	}
	return algo.ChooseAllToAll(g.Size(), b)
}

// agreePins fails Init unless this rank pinned the same algorithms as
// rank 0 (Options.Algorithms): ranks whose schedules differ would wait
// on each other's frames until the timeout, or mix their data.
func (w *world) agreePins(ctx context.Context, pins map[string]string) error {
	mine := pinString(pins)
	if w.rank == 0 {
		if err := w.store.Set(ctx, pinsKey, []byte(mine)); err != nil {
			return fmt.Errorf("dist: rank 0: publishing its pinned algorithms: %w", err)
		}
	} else {
		b, err := w.store.Get(ctx, pinsKey)
		if err != nil {
			return fmt.Errorf("dist: rank %d: reading rank 0's pinned algorithms: %w", w.rank, err)
		}
		if string(b) != mine {
			return fmt.Errorf("dist: rank %d pins the algorithms %q and rank 0 %q (Options.Algorithms, GODIST_ALGO): every rank must pin the same", w.rank, mine, string(b))
		}
	}
	if len(pins) > 0 {
		w.pins = pins
	}
	return nil
}

const pinsKey = "dist/pins"

// pinString is pins in a canonical form, "op=algorithm" sorted by op,
// comma-separated ("" for none).
func pinString(pins map[string]string) string {
	var fs []string
	for op, name := range pins {
		fs = append(fs, op+"="+name)
	}
	slices.Sort(fs)
	return strings.Join(fs, ",")
}
