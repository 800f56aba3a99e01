package dist

import (
	"context"
	"fmt"
	"slices"
	"unsafe"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/dist/internal/scratch"
	"github.com/godist/godist/tensor"
)

// InputError reports a call given arguments it cannot run with (a
// non-contiguous tensor, a wrong root or list length, mismatched dtypes).
// It is returned before anything is sent.
type InputError struct {
	Op     string
	Reason string
}

func (e *InputError) Error() string { return fmt.Sprintf("dist: %s: %s", e.Op, e.Reason) }

func (g *Group) checkTensor(op string, t *tensor.Tensor) error {
	if t == nil || !t.Sized() {
		return &InputError{op, "tensor is nil or unsized"}
	}
	if !t.IsContiguous() {
		return &InputError{op, fmt.Sprintf("tensor of shape %v is not contiguous; call Contiguous() and copy back", t.Shape())}
	}
	return nil
}

func (g *Group) checkRoot(op string, root int) error {
	if root < 0 || root >= g.Size() {
		return &InputError{op, fmt.Sprintf("root %d is not a rank of this group of %d", root, g.Size())}
	}
	return nil
}

func (g *Group) checkList(op, what string, ts []*tensor.Tensor, like *tensor.Tensor) error {
	if len(ts) != g.Size() {
		return &InputError{op, fmt.Sprintf("%d %s tensors for a group of %d", len(ts), what, g.Size())}
	}
	for i, t := range ts {
		if err := g.checkTensor(op, t); err != nil {
			return err
		}
		if t.DType() != like.DType() || t.Numel() != like.Numel() {
			return &InputError{op, fmt.Sprintf("%s[%d] is %v with %d elements, want %v with %d", what, i, t.DType(), t.Numel(), like.DType(), like.Numel())}
		}
	}
	return nil
}

// async numbers a call now, in the caller's order, and runs it in the
// background.
func (g *Group) async(c call, check error, fn func(ctx context.Context, seq uint64) error) *Work {
	if check != nil {
		return doneWork(check)
	}
	t, err := g.beginCollective(c)
	if err != nil {
		return doneWork(err)
	}
	if g.Size() == 1 {
		// Nothing to wait for: run it now rather than on a goroutine.
		return doneWork(g.runCall(context.Background(), t, fn))
	}
	return goWork(func() error { return g.runCall(context.Background(), t, fn) })
}

// AllReduce reduces t across the group in place: afterwards every member
// holds the reduction of all members' t.
func (g *Group) AllReduce(ctx context.Context, t *tensor.Tensor, op ReduceOp) error {
	c, err := g.allReduceCall(t, op)
	if err != nil {
		return err
	}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error { return g.allReduce(ctx, seq, c, t, op) })
}

// AllReduceAsync is AllReduce returning a Work; t must not be touched
// until it is done.
func (g *Group) AllReduceAsync(t *tensor.Tensor, op ReduceOp) *Work {
	c, err := g.allReduceCall(t, op)
	return g.async(c, err, func(ctx context.Context, seq uint64) error { return g.allReduce(ctx, seq, c, t, op) })
}

func (g *Group) allReduceCall(t *tensor.Tensor, op ReduceOp) (call, error) {
	if err := g.checkTensor("all_reduce", t); err != nil {
		return call{}, err
	}
	if err := checkReduce(op, t.DType()); err != nil {
		return call{}, &InputError{"all_reduce", err.Error()}
	}
	b := t.Bytes()
	return call{op: opAllReduce, dtype: t.DType(), count: t.Numel(), root: -1, rop: op, via: g.route(len(b), b)}, nil
}

func (g *Group) allReduce(ctx context.Context, seq uint64, c call, t *tensor.Tensor, op ReduceOp) error {
	es, b := t.DType().Size(), t.Bytes()
	switch c.via {
	case byBlock:
		return g.host.Block().AllReduce(ctx, hostCall(seq, c), b, g.reduction(op, t.DType()))
	case byShared:
		return g.sharedError(c, g.host.Tensors.AllReduce(ctx, hostCall(seq, c), b, es, g.reduction(op, t.DType())))
	}
	final := avgFinal(op, t.DType(), g.Size())
	sched := g.cached(schedKey{opAllReduce, t.Numel(), es, -1}, func() algo.Plan {
		return g.planAllReduce(t.Numel(), es)
	}).sched
	if err := g.execute(ctx, seq, c, sched, flat{b, es}, es, reduceFunc(op, t.DType()), final); err != nil {
		return explainShared(err, false)
	}
	if op == Avg && g.Size() > 1 && final == nil {
		finishAvg(b, t.DType(), g.Size())
	}
	return nil
}

// Broadcast copies root's t into every member's t.
func (g *Group) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	c, err := g.broadcastCall(t, root)
	if err != nil {
		return err
	}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error { return g.broadcast(ctx, seq, c, t.Bytes(), root) })
}

// BroadcastAsync is Broadcast returning a Work.
func (g *Group) BroadcastAsync(t *tensor.Tensor, root int) *Work {
	c, err := g.broadcastCall(t, root)
	return g.async(c, err, func(ctx context.Context, seq uint64) error { return g.broadcast(ctx, seq, c, t.Bytes(), root) })
}

func (g *Group) broadcastCall(t *tensor.Tensor, root int) (call, error) {
	if err := g.checkTensor("broadcast", t); err != nil {
		return call{}, err
	}
	if err := g.checkRoot("broadcast", root); err != nil {
		return call{}, err
	}
	b := t.Bytes()
	return call{op: opBroadcast, dtype: t.DType(), count: t.Numel(), root: root, via: g.route(len(b), b)}, nil
}

// broadcast sends bytes (elements of one byte for the schedule: the
// choice depends on the byte count, which all ranks share).
func (g *Group) broadcast(ctx context.Context, seq uint64, c call, b []byte, root int) error {
	switch c.via {
	case byBlock:
		return g.host.Block().Broadcast(ctx, hostCall(seq, c), b, root)
	case byShared:
		return g.sharedError(c, g.host.Tensors.Broadcast(ctx, hostCall(seq, c), b, root))
	}
	sched := g.cached(schedKey{opBroadcast, len(b), 1, root}, func() algo.Plan {
		return g.planBroadcast(root, len(b), 1)
	}).sched
	return explainShared(g.execute(ctx, seq, c, sched, flat{b, 1}, 1, nil, nil), false)
}

// Reduce reduces t across the group into root's t. The other members' t
// are left unchanged.
func (g *Group) Reduce(ctx context.Context, t *tensor.Tensor, root int, op ReduceOp) error {
	c, err := g.reduceCall(t, root, op)
	if err != nil {
		return err
	}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error { return g.reduce(ctx, seq, c, t, root, op) })
}

// ReduceAsync is Reduce returning a Work.
func (g *Group) ReduceAsync(t *tensor.Tensor, root int, op ReduceOp) *Work {
	c, err := g.reduceCall(t, root, op)
	return g.async(c, err, func(ctx context.Context, seq uint64) error { return g.reduce(ctx, seq, c, t, root, op) })
}

func (g *Group) reduceCall(t *tensor.Tensor, root int, op ReduceOp) (call, error) {
	if err := g.checkTensor("reduce", t); err != nil {
		return call{}, err
	}
	if err := g.checkRoot("reduce", root); err != nil {
		return call{}, err
	}
	if err := checkReduce(op, t.DType()); err != nil {
		return call{}, &InputError{"reduce", err.Error()}
	}
	return call{op: opReduce, dtype: t.DType(), count: t.Numel(), root: root, rop: op}, nil
}

func (g *Group) reduce(ctx context.Context, seq uint64, c call, t *tensor.Tensor, root int, op ReduceOp) error {
	es, b := t.DType().Size(), t.Bytes()
	if g.rank != root {
		b = slices.Clone(b) // the tree uses non-root buffers as scratch
	}
	s := algo.BinomialReduce(g.rank, g.Size(), root, t.Numel())
	if err := g.execute(ctx, seq, c, s, flat{b, es}, es, reduceFunc(op, t.DType()), nil); err != nil {
		return err
	}
	if op == Avg && g.rank == root {
		finishAvg(b, t.DType(), g.Size())
	}
	return nil
}

// AllGather gathers every member's in into outs (one tensor per member, in
// group rank order) on every member.
func (g *Group) AllGather(ctx context.Context, outs []*tensor.Tensor, in *tensor.Tensor) error {
	c, err := g.allGatherCall(outs, in)
	if err != nil {
		return err
	}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error { return g.allGatherList(ctx, seq, c, outs, in) })
}

// AllGatherAsync is AllGather returning a Work.
func (g *Group) AllGatherAsync(outs []*tensor.Tensor, in *tensor.Tensor) *Work {
	c, err := g.allGatherCall(outs, in)
	return g.async(c, err, func(ctx context.Context, seq uint64) error { return g.allGatherList(ctx, seq, c, outs, in) })
}

func (g *Group) allGatherCall(outs []*tensor.Tensor, in *tensor.Tensor) (call, error) {
	if err := g.checkTensor("all_gather", in); err != nil {
		return call{}, err
	}
	if err := g.checkList("all_gather", "output", outs, in); err != nil {
		return call{}, err
	}
	return call{op: opAllGather, dtype: in.DType(), count: in.Numel(), root: -1}, nil
}

func (g *Group) allGatherList(ctx context.Context, seq uint64, c call, outs []*tensor.Tensor, in *tensor.Tensor) error {
	n := len(in.Bytes())
	buf := make([]byte, n*g.Size())
	copy(buf[g.rank*n:], in.Bytes())
	if err := g.allGatherBytes(ctx, seq, c, buf, equalCounts(g.Size(), n)); err != nil {
		return err
	}
	for i, o := range outs {
		copy(o.Bytes(), buf[i*n:(i+1)*n])
	}
	return nil
}

// allGatherBytes runs an all-gather over buf laid out by counts (bytes);
// this rank's chunk must already be in place.
func (g *Group) allGatherBytes(ctx context.Context, seq uint64, c call, buf []byte, counts []int) error {
	var sched algo.Schedule
	if n := counts[0]; slices.Equal(counts, equalCounts(len(counts), n)) {
		sched = g.cached(schedKey{opAllGather, n, 1, -1}, func() algo.Plan { return g.planAllGather(counts, 1) }).sched
	} else {
		sched = g.planAllGather(counts, 1).Schedule(g.rank)
	}
	return g.execute(ctx, seq, c, sched, flat{buf, 1}, 1, nil, nil)
}

func equalCounts(size, n int) []int {
	cs := make([]int, size)
	for i := range cs {
		cs[i] = n
	}
	return cs
}

// AllGatherIntoTensor gathers every member's in into out, which holds
// Size() times in's elements: member r's in lands at r·in.Numel().
func (g *Group) AllGatherIntoTensor(ctx context.Context, out, in *tensor.Tensor) error {
	c, err := g.allGatherIntoCall(out, in)
	if err != nil {
		return err
	}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error { return g.allGatherInto(ctx, seq, c, out, in) })
}

// AllGatherIntoTensorAsync is AllGatherIntoTensor returning a Work.
func (g *Group) AllGatherIntoTensorAsync(out, in *tensor.Tensor) *Work {
	c, err := g.allGatherIntoCall(out, in)
	return g.async(c, err, func(ctx context.Context, seq uint64) error { return g.allGatherInto(ctx, seq, c, out, in) })
}

func (g *Group) allGatherIntoCall(out, in *tensor.Tensor) (call, error) {
	const op = "all_gather_into_tensor"
	for _, t := range []*tensor.Tensor{out, in} {
		if err := g.checkTensor(op, t); err != nil {
			return call{}, err
		}
	}
	if out.DType() != in.DType() || out.Numel() != in.Numel()*g.Size() {
		return call{}, &InputError{op, fmt.Sprintf("output %v with %d elements for input %v with %d in a group of %d", out.DType(), out.Numel(), in.DType(), in.Numel(), g.Size())}
	}
	b := in.Bytes()
	return call{op: opAllGather, dtype: in.DType(), count: in.Numel(), root: -1, via: g.route(len(b), b)}, nil
}

func (g *Group) allGatherInto(ctx context.Context, seq uint64, c call, out, in *tensor.Tensor) error {
	n := len(in.Bytes())
	buf := out.Bytes()
	switch c.via {
	case byBlock:
		return g.host.Block().AllGather(ctx, hostCall(seq, c), buf, in.Bytes())
	case byShared:
		return g.sharedError(c, g.host.Tensors.AllGather(ctx, hostCall(seq, c), buf, in.Bytes()))
	}
	mine := buf[g.rank*n : (g.rank+1)*n]
	counts := equalCounts(g.Size(), n)
	if p := g.cached(schedKey{opAllGather, n, 1, -1}, func() algo.Plan { return g.planAllGather(counts, 1) }); p.plan.Name == "ring" && n >= 1<<20 && !overlapMem(mine, in.Bytes()) {
		// The ring sends this rank's chunk straight from in, while a
		// goroutine copies it into out in the time the exchange waits
		// (a copy of a large chunk costs as much as its whole exchange).
		parts := parts{bufs: make([][]byte, g.Size()), offs: make([]int, g.Size()), es: 1}
		for q := range parts.bufs {
			parts.bufs[q], parts.offs[q] = buf[q*n:(q+1)*n], q*n
		}
		parts.bufs[g.rank] = in.Bytes()
		copied := make(chan struct{})
		go func() {
			copy(mine, in.Bytes())
			close(copied)
		}()
		err := g.execute(ctx, seq, c, p.sched, parts, 1, nil, nil)
		<-copied
		return explainShared(err, false)
	}
	copy(mine, in.Bytes())
	return explainShared(g.allGatherBytes(ctx, seq, c, buf, equalCounts(g.Size(), n)), false)
}

// Gather collects every member's in into root's outs (one per member);
// outs is ignored (may be nil) on the other members.
func (g *Group) Gather(ctx context.Context, in *tensor.Tensor, outs []*tensor.Tensor, root int) error {
	c, err := g.gatherCall(in, outs, root)
	if err != nil {
		return err
	}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error { return g.gather(ctx, seq, c, in, outs, root) })
}

// GatherAsync is Gather returning a Work.
func (g *Group) GatherAsync(in *tensor.Tensor, outs []*tensor.Tensor, root int) *Work {
	c, err := g.gatherCall(in, outs, root)
	return g.async(c, err, func(ctx context.Context, seq uint64) error { return g.gather(ctx, seq, c, in, outs, root) })
}

func (g *Group) gatherCall(in *tensor.Tensor, outs []*tensor.Tensor, root int) (call, error) {
	if err := g.checkTensor("gather", in); err != nil {
		return call{}, err
	}
	if err := g.checkRoot("gather", root); err != nil {
		return call{}, err
	}
	if g.rank == root {
		if err := g.checkList("gather", "output", outs, in); err != nil {
			return call{}, err
		}
	}
	return call{op: opGather, dtype: in.DType(), count: in.Numel(), root: root}, nil
}

func (g *Group) gather(ctx context.Context, seq uint64, c call, in *tensor.Tensor, outs []*tensor.Tensor, root int) error {
	n := len(in.Bytes())
	counts := equalCounts(g.Size(), n)
	sp := parts{bufs: make([][]byte, g.Size()), offs: algo.Offsets(counts)[:g.Size()], es: 1}
	if g.rank == root {
		for i, o := range outs {
			sp.bufs[i] = o.Bytes()
		}
		copy(sp.bufs[root], in.Bytes())
	} else {
		sp.bufs[g.rank] = in.Bytes()
	}
	return g.execute(ctx, seq, c, algo.LinearGather(g.rank, g.Size(), root, counts), sp, 1, nil, nil)
}

// Scatter sends root's ins[r] to member r's out; ins is ignored (may be
// nil) on the other members.
func (g *Group) Scatter(ctx context.Context, out *tensor.Tensor, ins []*tensor.Tensor, root int) error {
	c, err := g.scatterCall(out, ins, root)
	if err != nil {
		return err
	}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error { return g.scatter(ctx, seq, c, out, ins, root) })
}

// ScatterAsync is Scatter returning a Work.
func (g *Group) ScatterAsync(out *tensor.Tensor, ins []*tensor.Tensor, root int) *Work {
	c, err := g.scatterCall(out, ins, root)
	return g.async(c, err, func(ctx context.Context, seq uint64) error { return g.scatter(ctx, seq, c, out, ins, root) })
}

func (g *Group) scatterCall(out *tensor.Tensor, ins []*tensor.Tensor, root int) (call, error) {
	if err := g.checkTensor("scatter", out); err != nil {
		return call{}, err
	}
	if err := g.checkRoot("scatter", root); err != nil {
		return call{}, err
	}
	if g.rank == root {
		if err := g.checkList("scatter", "input", ins, out); err != nil {
			return call{}, err
		}
	}
	return call{op: opScatter, dtype: out.DType(), count: out.Numel(), root: root}, nil
}

func (g *Group) scatter(ctx context.Context, seq uint64, c call, out *tensor.Tensor, ins []*tensor.Tensor, root int) error {
	n := len(out.Bytes())
	counts := equalCounts(g.Size(), n)
	sp := parts{bufs: make([][]byte, g.Size()), offs: algo.Offsets(counts)[:g.Size()], es: 1}
	if g.rank == root {
		for i, t := range ins {
			sp.bufs[i] = t.Bytes()
		}
		copy(out.Bytes(), ins[root].Bytes())
	} else {
		sp.bufs[g.rank] = out.Bytes()
	}
	return g.execute(ctx, seq, c, algo.LinearScatter(g.rank, g.Size(), root, counts), sp, 1, nil, nil)
}

// ReduceScatter reduces ins (one tensor per member) across the group and
// leaves in member r's out the reduction of everyone's ins[r]. ins are not
// modified; after an error, out holds unspecified values.
func (g *Group) ReduceScatter(ctx context.Context, out *tensor.Tensor, ins []*tensor.Tensor, op ReduceOp) error {
	c, err := g.reduceScatterCall(out, ins, op)
	if err != nil {
		return err
	}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error {
		return g.reduceScatter(ctx, seq, c, out, bytesOf(ins), op)
	})
}

// ReduceScatterAsync is ReduceScatter returning a Work.
func (g *Group) ReduceScatterAsync(out *tensor.Tensor, ins []*tensor.Tensor, op ReduceOp) *Work {
	c, err := g.reduceScatterCall(out, ins, op)
	return g.async(c, err, func(ctx context.Context, seq uint64) error {
		return g.reduceScatter(ctx, seq, c, out, bytesOf(ins), op)
	})
}

// split cuts b into n equal parts.
func split(b []byte, n int) [][]byte {
	bs := make([][]byte, n)
	k := len(b) / n
	for i := range bs {
		bs[i] = b[i*k : (i+1)*k : (i+1)*k]
	}
	return bs
}

func (g *Group) reduceScatterCall(out *tensor.Tensor, ins []*tensor.Tensor, op ReduceOp) (call, error) {
	if err := g.checkTensor("reduce_scatter", out); err != nil {
		return call{}, err
	}
	if err := g.checkList("reduce_scatter", "input", ins, out); err != nil {
		return call{}, err
	}
	if err := checkReduce(op, out.DType()); err != nil {
		return call{}, &InputError{"reduce_scatter", err.Error()}
	}
	return call{op: opReduceScatter, dtype: out.DType(), count: out.Numel(), root: -1, rop: op}, nil
}

// reduceScatterPlan is the plan of a reduce-scatter into out, and this
// rank's schedule of it.
func (g *Group) reduceScatterPlan(out *tensor.Tensor) planned {
	es, n := out.DType().Size(), out.Numel()
	return g.cached(schedKey{opReduceScatter, n, es, -1}, func() algo.Plan {
		return g.planReduceScatter(equalCounts(g.Size(), n), es)
	})
}

// reduceScatter runs the reduce-scatter of the members' chunks ins (ins[r]
// is chunk r) into out, on the plan's engine.
func (g *Group) reduceScatter(ctx context.Context, seq uint64, c call, out *tensor.Tensor, ins [][]byte, op ReduceOp) error {
	p := g.reduceScatterPlan(out)
	if p.plan.Name != "ring" {
		return g.reduceScatterWhole(ctx, seq, c, p.sched, out, ins, op)
	}
	return g.reduceScatterRing(ctx, seq, c, p.sched, out, ins, op)
}

// reduceScatterRing runs the ring over a buffer made of the inputs' chunks
// (ins[r] is chunk r) without copying them all: the chunk the ring only
// sends (ChooseReduceScatter's schedules never receive into chunk rank-1)
// is read where it is, this rank's chunk is reduced in out, and the others
// are reduced in scratch copies. The inputs are not modified.
func (g *Group) reduceScatterRing(ctx context.Context, seq uint64, c call, s algo.Schedule, out *tensor.Tensor, ins [][]byte, op ReduceOp) error {
	size, es, n := g.Size(), out.DType().Size(), out.Numel()
	ob := out.Bytes()
	aliased := false
	for _, in := range ins {
		aliased = aliased || overlapMem(ob, in)
	}
	sendOnly := (g.rank + size - 1) % size // the ring's (ChooseReduceScatter)
	buf := parts{bufs: make([][]byte, size), offs: make([]int, size), es: es}
	var copies [][]byte
	for r, in := range ins {
		buf.offs[r] = r * n
		switch {
		case r == g.rank && !aliased:
			copy(ob, in)
			buf.bufs[r] = ob
		case r == sendOnly && r != g.rank && !aliased:
			buf.bufs[r] = in
		default:
			// A scratch buffer: a fresh allocation of tens of megabytes
			// costs more in page faults than the collective's transfers.
			buf.bufs[r] = scratch.Copy(in)
			copies = append(copies, buf.bufs[r])
		}
	}
	if err := g.execute(ctx, seq, c, s, buf, es, reduceFunc(op, out.DType()), nil); err != nil {
		return err
	}
	if aliased {
		copy(ob, buf.bufs[g.rank])
	}
	if op == Avg {
		finishAvg(ob, out.DType(), size)
	}
	for _, b := range copies {
		scratch.Put(b)
	}
	return nil
}

// overlapMem reports whether a and b share memory.
func overlapMem(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// ReduceScatterTensor is ReduceScatter with the inputs concatenated in one
// tensor of Size() times out's elements. in is not modified.
func (g *Group) ReduceScatterTensor(ctx context.Context, out, in *tensor.Tensor, op ReduceOp) error {
	c, err := g.reduceScatterTensorCall(out, in, op)
	if err != nil {
		return err
	}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error {
		return g.reduceScatterTensor(ctx, seq, c, out, in, op)
	})
}

// ReduceScatterTensorAsync is ReduceScatterTensor returning a Work.
func (g *Group) ReduceScatterTensorAsync(out, in *tensor.Tensor, op ReduceOp) *Work {
	c, err := g.reduceScatterTensorCall(out, in, op)
	return g.async(c, err, func(ctx context.Context, seq uint64) error {
		return g.reduceScatterTensor(ctx, seq, c, out, in, op)
	})
}

// reduceScatterTensor reduce-scatters in straight out of the others'
// memory when in is a piece of a shared tensor, else with the ring.
// reduceScatterWhole runs a reduce-scatter whose schedule reduces the
// whole buffer on every rank (ChooseReduceScatter's plan for small ones):
// over one contiguous copy of the inputs (ins, concatenated), of which it
// keeps its own chunk.
func (g *Group) reduceScatterWhole(ctx context.Context, seq uint64, c call, s algo.Schedule, out *tensor.Tensor, ins [][]byte, op ReduceOp) error {
	es, ob := out.DType().Size(), out.Bytes()
	whole := scratch.Get(len(ob) * g.Size())
	defer scratch.Put(whole)
	off := 0
	for _, in := range ins { // one per member, or the whole input
		off += copy(whole[off:], in)
	}
	if err := g.execute(ctx, seq, c, s, flat{whole, es}, es, reduceFunc(op, out.DType()), nil); err != nil {
		return err
	}
	copy(ob, whole[g.rank*len(ob):])
	if op == Avg {
		finishAvg(ob, out.DType(), g.Size())
	}
	return nil
}

func (g *Group) reduceScatterTensor(ctx context.Context, seq uint64, c call, out, in *tensor.Tensor, op ReduceOp) error {
	switch c.via {
	case byBlock:
		return g.host.Block().ReduceScatter(ctx, hostCall(seq, c), out.Bytes(), in.Bytes(), g.reduction(op, out.DType()))
	case byShared:
		return g.sharedError(c, g.host.Tensors.ReduceScatter(ctx, hostCall(seq, c), out.Bytes(), in.Bytes(), g.reduction(op, out.DType())))
	}
	p := g.reduceScatterPlan(out)
	if p.plan.Name != "ring" {
		// Without cutting in into a slice per member (W² in all).
		return explainShared(g.reduceScatterWhole(ctx, seq, c, p.sched, out, [][]byte{in.Bytes()}, op), false)
	}
	return explainShared(g.reduceScatterRing(ctx, seq, c, p.sched, out, split(in.Bytes(), g.Size()), op), false)
}

func (g *Group) reduceScatterTensorCall(out, in *tensor.Tensor, op ReduceOp) (call, error) {
	const name = "reduce_scatter_tensor"
	for _, t := range []*tensor.Tensor{out, in} {
		if err := g.checkTensor(name, t); err != nil {
			return call{}, err
		}
	}
	if out.DType() != in.DType() || in.Numel() != out.Numel()*g.Size() {
		return call{}, &InputError{name, fmt.Sprintf("input %v with %d elements for output %v with %d in a group of %d", in.DType(), in.Numel(), out.DType(), out.Numel(), g.Size())}
	}
	if err := checkReduce(op, out.DType()); err != nil {
		return call{}, &InputError{name, err.Error()}
	}
	b := in.Bytes()
	return call{op: opReduceScatter, dtype: out.DType(), count: out.Numel(), root: -1, rop: op, via: g.route(len(b), b)}, nil
}

// Barrier returns once every member has entered it.
func (g *Group) Barrier(ctx context.Context) error {
	c := call{op: opBarrier, root: -1, via: g.route(0, nil)}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error { return g.barrier(ctx, seq, c) })
}

// BarrierAsync is Barrier returning a Work.
func (g *Group) BarrierAsync() *Work {
	c := call{op: opBarrier, root: -1, via: g.route(0, nil)}
	return g.async(c, nil, func(ctx context.Context, seq uint64) error { return g.barrier(ctx, seq, c) })
}

func (g *Group) barrier(ctx context.Context, seq uint64, c call) error {
	if c.via == byBlock {
		return g.host.Block().Barrier(ctx, hostCall(seq, c))
	}
	sched := g.cached(schedKey{opBarrier, 0, 0, -1}, g.planBarrier).sched
	return g.execute(ctx, seq, c, sched, flat{nil, 1}, 1, nil, nil)
}

// schedKey names a schedule of this rank in this group.
type schedKey struct {
	op              opKind
	count, es, root int
}
