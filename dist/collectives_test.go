package dist_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

var worlds = []int{1, 2, 3, 5, 8}

func counts(world int) []int {
	return []int{0, 1, 7, 3*world + 1}
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// value is rank r's input element i: small integers, so every reduction is
// exact in every dtype.
func value(op dist.ReduceOp, r, i int) float64 {
	if op == dist.Product {
		return float64((r+i)%2 + 1)
	}
	return float64((r+1)*(i%7+1)%11 + 1)
}

func input(d tensor.DType, op dist.ReduceOp, r, n int) *tensor.Tensor {
	t := tensor.New(d, n)
	for i := range n {
		t.Set(value(op, r, i), i)
	}
	return t
}

func reduceRef(op dist.ReduceOp, world, i int) float64 {
	acc := value(op, 0, i)
	for r := 1; r < world; r++ {
		v := value(op, r, i)
		switch op {
		case dist.Sum, dist.Avg:
			acc += v
		case dist.Product:
			acc *= v
		case dist.Min:
			acc = math.Min(acc, v)
		case dist.Max:
			acc = math.Max(acc, v)
		case dist.BAnd:
			acc = float64(int64(acc) & int64(v))
		case dist.BOr:
			acc = float64(int64(acc) | int64(v))
		case dist.BXor:
			acc = float64(int64(acc) ^ int64(v))
		}
	}
	if op == dist.Avg {
		acc /= float64(world)
	}
	return acc
}

func expect(t *tensor.Tensor, want func(i int) float64, what string) error {
	for i, v := range t.Values() {
		w := want(i)
		if t.DType().IsFloat() && t.DType() != tensor.Float32 && t.DType() != tensor.Float64 {
			if math.Abs(v-w) > 0.01*math.Abs(w) {
				return fmt.Errorf("%s: element %d = %v, want %v", what, i, v, w)
			}
			continue
		}
		if t.DType() == tensor.Int64 || t.DType() == tensor.Int32 || t.DType() == tensor.Uint8 {
			w = math.Trunc(w)
		}
		if math.Abs(v-w) > 1e-6*math.Abs(w) {
			return fmt.Errorf("%s: element %d = %v, want %v", what, i, v, w)
		}
	}
	return nil
}

var allOps = []dist.ReduceOp{dist.Sum, dist.Avg, dist.Product, dist.Min, dist.Max, dist.BAnd, dist.BOr, dist.BXor}
var dtypes = []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int64, tensor.Int32, tensor.Uint8, tensor.BFloat16, tensor.Float16}

func TestAllReduceEveryOpAndDType(t *testing.T) {
	for _, world := range worlds {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			spawnBoth(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				for _, d := range dtypes {
					for _, op := range allOps {
						if op.String() != "SUM" && (op == dist.BAnd || op == dist.BOr || op == dist.BXor) && d.IsFloat() {
							continue
						}
						if d == tensor.Uint8 && op == dist.Sum && world == 8 {
							// sums stay below 256: 8·12 = 96
						}
						for _, n := range counts(world) {
							x := input(d, op, g.Rank(), n)
							if err := g.AllReduce(ctx, x, op); err != nil {
								return fmt.Errorf("%v %v n=%d: %w", d, op, n, err)
							}
							if err := expect(x, func(i int) float64 { return reduceRef(op, world, i) }, fmt.Sprintf("all_reduce %v %v n=%d", d, op, n)); err != nil {
								return err
							}
						}
					}
				}
				return nil
			})
		})
	}
}

func TestBitwiseOnFloatIsRefused(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		err := g.AllReduce(context.Background(), tensor.Zeros(3), dist.BXor)
		var ie *dist.InputError
		if !errors.As(err, &ie) {
			return fmt.Errorf("BXOR on float32: %v", err)
		}
		return nil
	})
}

// TestLargeMessages runs the ring (segmented) and chain paths.
func TestLargeMessages(t *testing.T) {
	for _, world := range []int{2, 3, 5} {
		spawnBoth(t, world, func(g *dist.Group) error {
			ctx := context.Background()
			n := 1<<19 + 3 // 2 MiB of float32
			x := input(tensor.Float32, dist.Sum, g.Rank(), n)
			if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
				return err
			}
			if err := expect(x, func(i int) float64 { return reduceRef(dist.Sum, world, i) }, "large all_reduce"); err != nil {
				return err
			}
			b := input(tensor.Float32, dist.Sum, g.Rank(), n)
			if err := g.Broadcast(ctx, b, world-1); err != nil {
				return err
			}
			if err := expect(b, func(i int) float64 { return value(dist.Sum, world-1, i) }, "large broadcast"); err != nil {
				return err
			}
			out := tensor.Zeros(n * world)
			if err := g.AllGatherIntoTensor(ctx, out, input(tensor.Float32, dist.Sum, g.Rank(), n)); err != nil {
				return err
			}
			return expect(out, func(i int) float64 { return value(dist.Sum, i/n, i%n) }, "large all_gather")
		})
	}
}

func TestBroadcastReduceEveryRoot(t *testing.T) {
	for _, world := range worlds {
		spawnBoth(t, world, func(g *dist.Group) error {
			ctx := context.Background()
			for root := range world {
				for _, n := range counts(world) {
					x := input(tensor.Float32, dist.Sum, g.Rank(), n)
					if err := g.Broadcast(ctx, x, root); err != nil {
						return err
					}
					if err := expect(x, func(i int) float64 { return value(dist.Sum, root, i) }, fmt.Sprintf("broadcast root %d n %d", root, n)); err != nil {
						return err
					}
					for _, op := range []dist.ReduceOp{dist.Sum, dist.Max, dist.Avg} {
						y := input(tensor.Float64, op, g.Rank(), n)
						if err := g.Reduce(ctx, y, root, op); err != nil {
							return err
						}
						want := func(i int) float64 { return reduceRef(op, world, i) }
						if g.Rank() != root {
							want = func(i int) float64 { return value(op, g.Rank(), i) } // unchanged
						}
						if err := expect(y, want, fmt.Sprintf("reduce %v root %d n %d", op, root, n)); err != nil {
							return err
						}
					}
				}
			}
			return nil
		})
	}
}

func TestGatherFamily(t *testing.T) {
	for _, world := range worlds {
		spawnBoth(t, world, func(g *dist.Group) error {
			ctx := context.Background()
			me := g.Rank()
			for _, n := range counts(world) {
				in := input(tensor.Int64, dist.Sum, me, n)
				outs := make([]*tensor.Tensor, world)
				for i := range outs {
					outs[i] = tensor.New(tensor.Int64, n)
				}
				if err := g.AllGather(ctx, outs, in); err != nil {
					return err
				}
				for r, o := range outs {
					if err := expect(o, func(i int) float64 { return value(dist.Sum, r, i) }, fmt.Sprintf("all_gather from %d n %d", r, n)); err != nil {
						return err
					}
				}
				for root := range world {
					gout := make([]*tensor.Tensor, world)
					for i := range gout {
						gout[i] = tensor.New(tensor.Int64, n)
					}
					if me != root {
						gout = nil
					}
					if err := g.Gather(ctx, in, gout, root); err != nil {
						return err
					}
					for r, o := range gout {
						if err := expect(o, func(i int) float64 { return value(dist.Sum, r, i) }, fmt.Sprintf("gather root %d from %d", root, r)); err != nil {
							return err
						}
					}
					var ins []*tensor.Tensor
					if me == root {
						for r := range world {
							ins = append(ins, input(tensor.Int64, dist.Sum, 100+r, n))
						}
					}
					out := tensor.New(tensor.Int64, n)
					if err := g.Scatter(ctx, out, ins, root); err != nil {
						return err
					}
					if err := expect(out, func(i int) float64 { return value(dist.Sum, 100+me, i) }, fmt.Sprintf("scatter root %d", root)); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
}

func TestReduceScatter(t *testing.T) {
	for _, world := range worlds {
		spawnBoth(t, world, func(g *dist.Group) error {
			ctx := context.Background()
			for _, n := range counts(world) {
				for _, op := range []dist.ReduceOp{dist.Sum, dist.Avg, dist.Max} {
					// Member r's input chunk c is value(r, c·n+i).
					in := input(tensor.Float32, op, g.Rank(), n*world)
					before := in.Clone()
					out := tensor.Zeros(n)
					if err := g.ReduceScatterTensor(ctx, out, in, op); err != nil {
						return err
					}
					me := g.Rank()
					if err := expect(out, func(i int) float64 { return reduceRef(op, world, me*n+i) }, fmt.Sprintf("reduce_scatter_tensor %v n %d", op, n)); err != nil {
						return err
					}
					if !tensor.Equal(in, before) {
						return errors.New("reduce_scatter_tensor changed its input")
					}
					ins := in.Split(0, max(n, 1))
					if n == 0 {
						ins = make([]*tensor.Tensor, world)
						for i := range ins {
							ins[i] = tensor.Zeros(0)
						}
					}
					for i := range ins {
						ins[i] = ins[i].Contiguous()
					}
					out2 := tensor.Zeros(n)
					if err := g.ReduceScatter(ctx, out2, ins, op); err != nil {
						return err
					}
					if !tensor.Equal(out, out2) {
						return fmt.Errorf("reduce_scatter %v differs from reduce_scatter_tensor", op)
					}
					// out may be a view of the input (its own chunk, or another).
					for _, c := range []int{me, (me + 1) % world} {
						in2 := before.Clone()
						view := in2.Narrow(0, c*n, n)
						if err := g.ReduceScatterTensor(ctx, view, in2, op); err != nil {
							return err
						}
						if !tensor.Equal(view, out) {
							return fmt.Errorf("reduce_scatter_tensor %v n %d into a view of input chunk %d differs", op, n, c)
						}
					}
				}
			}
			return nil
		})
	}
}

// TestAllToAllEqual: all_to_all_single with equal splits, whose blocks
// of at most 256 bytes on 8 or more members go by Bruck's algorithm
// (worlds 8 and 13 here; 13 is not a power of two), larger ones and
// smaller worlds by the pairwise exchange.
func TestAllToAllEqual(t *testing.T) {
	for _, world := range []int{1, 3, 8, 13} {
		spawnBoth(t, world, func(g *dist.Group) error {
			ctx := context.Background()
			me := g.Rank()
			for _, c := range []struct {
				dt   tensor.DType
				rows int // rows of 2 a block
			}{{tensor.Float32, 0}, {tensor.Float32, 1}, {tensor.Float32, 32}, {tensor.Float32, 33}, {tensor.Uint8, 1}, {tensor.Float64, 3}} {
				// Element e of the block from s to d holds 1000s+10d+e mod 97
				// (uint8 holds it).
				v := func(s, d, e int) float64 { return float64((1000*s + 10*d + e) % 97) }
				n := 2 * c.rows
				in, out := tensor.New(c.dt, world*c.rows, 2), tensor.New(c.dt, world*c.rows, 2)
				flat := in.Reshape(world * n)
				for d := range world {
					for e := range n {
						flat.Set(v(me, d, e), d*n+e)
					}
				}
				if err := g.AllToAllSingle(ctx, out, in, nil, nil); err != nil {
					return err
				}
				if err := expect(out, func(i int) float64 { return v(i/max(n, 1), me, i%max(n, 1)) }, fmt.Sprintf("all_to_all_single %v blocks of %d", c.dt, n)); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

func TestAllToAll(t *testing.T) {
	for _, world := range worlds {
		spawnBoth(t, world, func(g *dist.Group) error {
			ctx := context.Background()
			me := g.Rank()
			// Member s sends (s+d+1) rows of 3 to member d, each holding 100s+d.
			rows := func(s, d int) int { return (s + d + 1) % 4 }
			var inSplits, outSplits []int
			var inVals []float32
			for d := range world {
				inSplits = append(inSplits, rows(me, d))
				for range rows(me, d) * 3 {
					inVals = append(inVals, float32(100*me+d))
				}
			}
			total := 0
			for s := range world {
				outSplits = append(outSplits, rows(s, me))
				total += rows(s, me)
			}
			in := tensor.FromFloat32(inVals, len(inVals)/3, 3)
			if len(inVals) == 0 {
				in = tensor.Zeros(0, 3)
			}
			out := tensor.Zeros(total, 3)
			if err := g.AllToAllSingle(ctx, out, in, outSplits, inSplits); err != nil {
				return err
			}
			var want []float64
			for s := range world {
				for range rows(s, me) * 3 {
					want = append(want, float64(100*s+me))
				}
			}
			if err := expect(out, func(i int) float64 { return want[i] }, "all_to_all_single"); err != nil {
				return err
			}
			ins, outs := make([]*tensor.Tensor, world), make([]*tensor.Tensor, world)
			for d := range world {
				ins[d] = tensor.Full(tensor.Int32, float64(10*me+d), d+1)
				outs[d] = tensor.New(tensor.Int32, me+1)
			}
			if err := g.AllToAll(ctx, outs, ins); err != nil {
				return err
			}
			for s, o := range outs {
				if err := expect(o, func(int) float64 { return float64(10*s + me) }, fmt.Sprintf("all_to_all from %d", s)); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

func TestBarrierAndAsync(t *testing.T) {
	for _, world := range worlds {
		spawnBoth(t, world, func(g *dist.Group) error {
			ctx := context.Background()
			for range 5 {
				if err := g.Barrier(ctx); err != nil {
					return err
				}
			}
			// Several async calls in flight at once complete in any order.
			var ws []*dist.Work
			var xs []*tensor.Tensor
			for k := range 6 {
				x := tensor.Full(tensor.Float32, float64(k+g.Rank()), 1000)
				xs = append(xs, x)
				ws = append(ws, g.AllReduceAsync(x, dist.Sum))
			}
			ws = append(ws, g.BarrierAsync())
			for i := len(ws) - 1; i >= 0; i-- {
				if err := ws[i].Wait(ctx); err != nil {
					return err
				}
				<-ws[i].Done()
				if ws[i].Err() != nil {
					return ws[i].Err()
				}
			}
			for k, x := range xs {
				want := float64(k*world + world*(world-1)/2)
				if err := expect(x, func(int) float64 { return want }, "async all_reduce"); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

func TestMonitoredBarrier(t *testing.T) {
	disttest.Spawn(t, 4, func(g *dist.Group) error {
		ctx := context.Background()
		if err := g.MonitoredBarrier(ctx, 5*time.Second, true); err != nil {
			return err
		}
		if g.Rank() == 2 || g.Rank() == 3 {
			time.Sleep(400 * time.Millisecond) // late: rank 0 gives up on them
			return nil
		}
		err := g.MonitoredBarrier(ctx, 100*time.Millisecond, true)
		var me *dist.MissingRanksError
		if !errors.As(err, &me) || !slices.Equal(me.Ranks, []int{2, 3}) {
			return fmt.Errorf("monitored barrier with 2 and 3 missing: %v", err)
		}
		return nil
	})
}

// spawnBoth runs fn on world ranks over each backend in turn: the
// in-process transport and loopback TCP. The collectives are the same code
// over both (STYLE.md: one suite every backend runs).
func spawnBoth(t *testing.T, world int, fn func(g *dist.Group) error) {
	t.Helper()
	for _, opt := range []disttest.Options{{}, {TCP: true}, {TCP: true, SharedMemory: true, ShmRing: true},
		{TCP: true, SharedMemory: true, ShmRing: true, SmallCollectives: true},
		{TCP: true, SharedMemory: true, ShmRing: true, OnDemand: true}} {
		disttest.SpawnWith(t, world, opt, func(_ *disttest.Job, g *dist.Group) error {
			if err := fn(g); err != nil {
				return fmt.Errorf("over %s (%+v): %w", g.Backend(), opt, err)
			}
			return nil
		})
	}
}

// TestAvgIsSumScaled: a float32 AVG all-reduce, which scales in the pass
// that completes each sum (algo.Xfer.Final), gives bit for bit the SUM
// all-reduce's result times 1/world, for every algorithm ChooseAllReduce
// picks (recursive doubling, halving-doubling, the segmented ring), world
// sizes powers of two or not, and shared-memory pieces.
func TestAvgIsSumScaled(t *testing.T) {
	for _, world := range []int{2, 3, 4, 5} {
		spawnBoth(t, world, func(g *dist.Group) error {
			ctx := context.Background()
			for _, n := range []int{1, 33, 10_000, 200_000, 1<<19 + 3} {
				x := tensor.New(tensor.Float32, n)
				v := x.Float32s()
				for i := range v {
					// Values whose sums round: the fused kernel must round
					// the sum before scaling, as SUM then a scale does.
					v[i] = float32(math.Sin(float64(i*7+g.Rank()*131))) * 1e3 / float32(i%97+1)
				}
				y := x.Clone()
				if err := g.AllReduce(ctx, x, dist.Avg); err != nil {
					return err
				}
				if err := g.AllReduce(ctx, y, dist.Sum); err != nil {
					return err
				}
				s := 1 / float32(world)
				for i, w := range y.Float32s() {
					if got, want := math.Float32bits(v[i]), math.Float32bits(w*s); got != want {
						return fmt.Errorf("world %d n %d element %d: AVG %v, SUM/world %v", world, n, i, v[i], w*s)
					}
				}
			}
			return nil
		})
	}
}

// TestLargeAllGatherInto: all-gathers of chunks of a megabyte or more
// (the ring sends this rank's chunk straight from the input while a
// goroutine copies it into the output), separate and in place, and the
// input left as it was.
func TestLargeAllGatherInto(t *testing.T) {
	for _, world := range []int{2, 3} {
		spawnBoth(t, world, func(g *dist.Group) error {
			ctx := context.Background()
			const n = 300_000 // 1.2 MB a rank
			r, size := g.Rank(), g.Size()
			want := tensor.New(tensor.Float32, size*n)
			for q := range size {
				want.Narrow(0, q*n, n).Copy(randFloat32(uint64(40+q), n))
			}
			in := randFloat32(uint64(40+r), n)
			out := tensor.New(tensor.Float32, size*n)
			for range 2 {
				if err := g.AllGatherIntoTensor(ctx, out, in); err != nil {
					return err
				}
				if !slices.Equal(out.Float32s(), want.Float32s()) {
					return fmt.Errorf("rank %d: all_gather of %d-element chunks differs", r, n)
				}
				if !slices.Equal(in.Float32s(), randFloat32(uint64(40+r), n).Float32s()) {
					return fmt.Errorf("rank %d: all_gather changed its input", r)
				}
				out.Zero()
			}
			out.Narrow(0, r*n, n).Copy(in)
			if err := g.AllGatherIntoTensor(ctx, out, out.Narrow(0, r*n, n)); err != nil {
				return err
			}
			if !slices.Equal(out.Float32s(), want.Float32s()) {
				return fmt.Errorf("rank %d: in-place all_gather differs", r)
			}
			return nil
		})
	}
}
