package dist

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/godist/godist/dist/algo"
	"github.com/godist/godist/tensor"
	"github.com/godist/godist/transport"
)

// AnySource, as the source of Recv, accepts a message from any member.
const AnySource = transport.AnySource

// AllToAll sends ins[r] to member r and receives member r's ins[me] into
// outs[r], on every member. The tensors may differ in size between pairs;
// each outs[r] must match what member r sends.
func (g *Group) AllToAll(ctx context.Context, outs, ins []*tensor.Tensor) error {
	c, err := g.allToAllCall(outs, ins)
	if err != nil {
		return err
	}
	return g.run(ctx, c, func(ctx context.Context, seq uint64) error {
		return g.allToAll(ctx, seq, c, bytesOf(outs), bytesOf(ins))
	})
}

// AllToAllAsync is AllToAll returning a Work.
func (g *Group) AllToAllAsync(outs, ins []*tensor.Tensor) *Work {
	c, err := g.allToAllCall(outs, ins)
	return g.async(c, err, func(ctx context.Context, seq uint64) error {
		return g.allToAll(ctx, seq, c, bytesOf(outs), bytesOf(ins))
	})
}

func bytesOf(ts []*tensor.Tensor) [][]byte {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		out[i] = t.Bytes()
	}
	return out
}

func (g *Group) allToAllCall(outs, ins []*tensor.Tensor) (call, error) {
	const name = "all_to_all"
	if len(outs) != g.Size() || len(ins) != g.Size() {
		return call{}, &InputError{name, fmt.Sprintf("%d outputs and %d inputs for a group of %d", len(outs), len(ins), g.Size())}
	}
	for _, t := range append(slices.Clone(outs), ins...) {
		if err := g.checkTensor(name, t); err != nil {
			return call{}, err
		}
		if t.DType() != ins[0].DType() {
			return call{}, &InputError{name, fmt.Sprintf("mixed dtypes %v and %v", t.DType(), ins[0].DType())}
		}
	}
	if ins[g.rank].Numel() != outs[g.rank].Numel() {
		return call{}, &InputError{name, fmt.Sprintf("this rank's own input has %d elements, its output slot %d", ins[g.rank].Numel(), outs[g.rank].Numel())}
	}
	// Sizes may differ per pair, so the fingerprint carries no count; a
	// size disagreement shows up as a length error.
	return call{op: opAllToAll, dtype: ins[0].DType(), root: -1}, nil
}

// allToAll exchanges with every peer in algo.PairwiseAllToAll's order.
func (g *Group) allToAll(ctx context.Context, seq uint64, c call, outs, ins [][]byte) error {
	copy(outs[g.rank], ins[g.rank])
	ep, fp := g.world.ep, c.fingerprint()
	for _, pr := range algo.PairwiseAllToAll(g.rank, g.Size()) {
		to, from := pr[0], pr[1]
		key := transport.Key{Group: g.id, Seq: seq, Tag: 0}
		r := ep.Post(g.ranks[from], transport.ExactMatch(g.ranks[from], key), fp, outs[from])
		if err := ep.Send(ctx, g.ranks[to], key, fp, ins[to]); err != nil {
			withdraw([]*transport.Receive{r}, func(r *transport.Receive) *transport.Receive { return r })
			return err
		}
		if _, err := r.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// AllToAllSingle splits in along dimension 0 into Size() parts of
// inSplits[r] rows (equal parts when nil), sends part r to member r, and
// concatenates the parts received, outSplits[r] rows from member r, into
// out, as torch.distributed.all_to_all_single.
func (g *Group) AllToAllSingle(ctx context.Context, out, in *tensor.Tensor, outSplits, inSplits []int) error {
	c, outs, ins, err := g.allToAllSingleArgs(out, in, outSplits, inSplits)
	if err != nil {
		return err
	}
	return g.run(ctx, c, g.allToAllSingle(c, out, in, outs, ins))
}

// AllToAllSingleAsync is AllToAllSingle returning a Work.
func (g *Group) AllToAllSingleAsync(out, in *tensor.Tensor, outSplits, inSplits []int) *Work {
	c, outs, ins, err := g.allToAllSingleArgs(out, in, outSplits, inSplits)
	return g.async(c, err, g.allToAllSingle(c, out, in, outs, ins))
}

// allToAllSingle is the body of an all_to_all_single: with equal splits
// (no split sizes on either side) the algorithm algo.ChooseAllToAll picks
// for the block, else the pairwise exchange.
func (g *Group) allToAllSingle(c call, out, in *tensor.Tensor, outs, ins [][]byte) func(ctx context.Context, seq uint64) error {
	if c.op == opAllToAllEqual && g.allToAllAlgo(len(ins[0])) == algo.AllToAllBruck {
		return func(ctx context.Context, seq uint64) error {
			return g.bruckAllToAll(ctx, seq, c, out.Bytes(), in.Bytes(), len(ins[0]))
		}
	}
	return func(ctx context.Context, seq uint64) error { return g.allToAll(ctx, seq, c, outs, ins) }
}

// bruckAllToAll runs algo.BruckAllToAll's rounds on blocks of b bytes:
// the blocks start in their slots of out (algo.BruckSource), and each
// round packs the travelling ones into one message and writes the one
// received straight into the same slots, runs of consecutive slots at
// once (the receive is posted after the pack, so its sink never
// overwrites a block before it is packed).
func (g *Group) bruckAllToAll(ctx context.Context, seq uint64, c call, out, in []byte, b int) error {
	size := g.Size()
	if b == 0 {
		return nil
	}
	for j := range size {
		src := algo.BruckSource(g.rank, size, j)
		copy(out[j*b:(j+1)*b], in[src*b:(src+1)*b])
	}
	ep, fp := g.world.ep, c.fingerprint()
	var pack []byte
	for k, rd := range algo.BruckAllToAll(g.rank, size) {
		n := rd.Blocks(size) * b
		if cap(pack) < n {
			pack = make([]byte, n)
		}
		pack = pack[:0]
		for lo, hi := range rd.Spans(g.rank, size) {
			pack = append(pack, out[lo*b:hi*b]...)
		}
		sink := func(off int, p []byte) {
			for len(p) > 0 {
				slot, run := rd.Slot(g.rank, size, off/b)
				at := slot*b + off%b
				m := copy(out[at:min(at+run*b-off%b, len(out))], p)
				off, p = off+m, p[m:]
			}
		}
		key := transport.Key{Group: g.id, Seq: seq, Tag: uint32(k)}
		r := ep.PostSinkKey(g.ranks[rd.From], key, fp, n, sink)
		if err := ep.Send(ctx, g.ranks[rd.To], key, fp, pack); err != nil {
			withdraw([]*transport.Receive{r}, func(r *transport.Receive) *transport.Receive { return r })
			return err
		}
		if _, err := r.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (g *Group) allToAllSingleArgs(out, in *tensor.Tensor, outSplits, inSplits []int) (call, [][]byte, [][]byte, error) {
	const name = "all_to_all_single"
	for _, t := range []*tensor.Tensor{out, in} {
		if err := g.checkTensor(name, t); err != nil {
			return call{}, nil, nil, err
		}
	}
	if out.DType() != in.DType() {
		return call{}, nil, nil, &InputError{name, fmt.Sprintf("output %v, input %v", out.DType(), in.DType())}
	}
	split := func(t *tensor.Tensor, splits []int, what string) ([][]byte, error) {
		rows := 1
		if t.Dim() > 0 {
			rows = t.Size(0)
		}
		if splits == nil {
			if rows%g.Size() != 0 {
				return nil, &InputError{name, fmt.Sprintf("%s has %d rows, not divisible by the group size %d; give split sizes", what, rows, g.Size())}
			}
			splits = equalCounts(g.Size(), rows/g.Size())
		}
		if len(splits) != g.Size() {
			return nil, &InputError{name, fmt.Sprintf("%d %s splits for a group of %d", len(splits), what, g.Size())}
		}
		total := 0
		for _, s := range splits {
			if s < 0 {
				return nil, &InputError{name, fmt.Sprintf("negative %s split %v", what, splits)}
			}
			total += s
		}
		if total != rows {
			return nil, &InputError{name, fmt.Sprintf("%s splits %v add up to %d rows, the tensor has %d", what, splits, total, rows)}
		}
		rowBytes := 0
		if rows > 0 {
			rowBytes = len(t.Bytes()) / rows
		}
		b, out, at := t.Bytes(), make([][]byte, g.Size()), 0
		for i, s := range splits {
			out[i] = b[at : at+s*rowBytes]
			at += s * rowBytes
		}
		return out, nil
	}
	outs, err := split(out, outSplits, "output")
	if err != nil {
		return call{}, nil, nil, err
	}
	ins, err := split(in, inSplits, "input")
	if err != nil {
		return call{}, nil, nil, err
	}
	if len(outs[g.rank]) != len(ins[g.rank]) {
		return call{}, nil, nil, &InputError{name, fmt.Sprintf("this rank keeps %d bytes of its input but expects %d in its output", len(ins[g.rank]), len(outs[g.rank]))}
	}
	if outSplits == nil && inSplits == nil {
		// Every member sends each the same block: the block is in the
		// fingerprint, so all choose alike (and a member that passed
		// split sizes is told it is out of step, as gloo requires one
		// kind of call from every member too).
		count := 0
		if es := in.DType().Size(); es > 0 {
			count = len(ins[0]) / es
		}
		return call{op: opAllToAllEqual, dtype: in.DType(), count: count, root: -1}, outs, ins, nil
	}
	return call{op: opAllToAll, dtype: in.DType(), root: -1}, outs, ins, nil
}

// MissingRanksError is the error of a MonitoredBarrier that some members
// did not reach in time.
type MissingRanksError struct {
	Ranks   []int // group ranks that did not arrive
	Timeout time.Duration
}

func (e *MissingRanksError) Error() string {
	return fmt.Sprintf("dist: monitored_barrier: ranks %v did not reach the barrier within %v (they are stuck, slow or dead: look at their logs)", e.Ranks, e.Timeout)
}

// MonitoredBarrier is a barrier that names the members that did not reach
// it within timeout: member 0 waits for every other member's arrival and
// then releases them, telling all of them which ranks were missing. With
// waitAll false it reports the first missing rank only. Missing ranks do
// not fail the group (the members that arrived can go on and report).
func (g *Group) MonitoredBarrier(ctx context.Context, timeout time.Duration, waitAll bool) error {
	c := call{op: opMonitoredBarrier, root: 0}
	t, err := g.beginCollective(c)
	if err != nil {
		return err
	}
	if g.Size() == 1 {
		g.end(t)
		return nil
	}
	seq := t.seq
	// Missing ranks do not fail the group: the call ends here whatever
	// happens, and only a transport failure goes through callError.
	ended := false
	defer func() {
		if !ended {
			g.end(t)
		}
	}()
	classify := func(user context.Context, err error) error {
		ended = true
		return g.callError(user, t, err)
	}
	ep, fp := g.world.ep, c.fingerprint()
	key := func(tag uint32) transport.Key { return transport.Key{Group: g.id, Seq: seq, Tag: tag} }
	const arrive, release, list = 0, 1, 2
	if g.rank != 0 {
		root := g.ranks[0]
		if err := ep.Send(ctx, root, key(arrive), fp, nil); err != nil {
			return classify(ctx, err)
		}
		// The release holds the number of missing ranks; a second frame
		// lists them.
		wctx, cancel := context.WithTimeout(ctx, 2*timeout)
		defer cancel()
		var n [4]byte
		if _, err := ep.Recv(wctx, root, transport.ExactMatch(root, key(release)), fp, n[:]); err != nil {
			return classify(wctx, err)
		}
		missing := make([]byte, 4*binary.LittleEndian.Uint32(n[:]))
		if len(missing) == 0 {
			return nil
		}
		if _, err := ep.Recv(wctx, root, transport.ExactMatch(root, key(list)), fp, missing); err != nil {
			return classify(wctx, err)
		}
		return &MissingRanksError{Ranks: decodeRanks(missing), Timeout: timeout}
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	recvs := make([]*transport.Receive, g.Size())
	for r := 1; r < g.Size(); r++ {
		recvs[r] = ep.Post(g.ranks[r], transport.ExactMatch(g.ranks[r], key(arrive)), fp, nil)
	}
	var missing []int
	for r := 1; r < g.Size(); r++ {
		if _, err := recvs[r].Wait(wctx); err != nil {
			missing = append(missing, r)
		}
	}
	if len(missing) > 1 && !waitAll {
		missing = missing[:1]
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(missing)))
	msg := encodeRanks(missing)
	for r := 1; r < g.Size(); r++ {
		if slices.Contains(missing, r) {
			continue
		}
		if err := ep.Send(ctx, g.ranks[r], key(release), fp, n[:]); err != nil {
			return classify(ctx, err)
		}
		if len(missing) > 0 {
			if err := ep.Send(ctx, g.ranks[r], key(list), fp, msg); err != nil {
				return classify(ctx, err)
			}
		}
	}
	if len(missing) > 0 {
		return &MissingRanksError{Ranks: missing, Timeout: timeout}
	}
	return nil
}

func encodeRanks(rs []int) []byte {
	b := make([]byte, 4*len(rs))
	for i, r := range rs {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(r))
	}
	return b
}

func decodeRanks(b []byte) []int {
	rs := make([]int, len(b)/4)
	for i := range rs {
		rs[i] = int(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return rs
}
