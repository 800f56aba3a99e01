package dist_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

var p2pWorlds = []int{2, 3, 5, 8}

// TestSendRecvPairs: every pair exchanges messages both ways with several
// tags; the lower rank sends first, the higher receives first.
func TestSendRecvPairs(t *testing.T) {
	for _, world := range p2pWorlds {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				me := g.Rank()
				for peer := range world {
					if peer == me {
						continue
					}
					for _, tag := range []int{0, 7, 1 << 20} {
						msg := func(from, to int) *tensor.Tensor {
							return iota32(float32(1000*from+10*to+tag%97), 5+from)
						}
						send := func() error { return g.Send(ctx, msg(me, peer), peer, tag) }
						recv := func() error {
							got := tensor.New(tensor.Float32, 5+peer)
							src, err := g.Recv(ctx, got, peer, tag)
							if err != nil {
								return fmt.Errorf("recv from %d tag %d: %w", peer, tag, err)
							}
							if src != peer {
								return fmt.Errorf("recv from %d returned source %d", peer, src)
							}
							return sameBytes(fmt.Sprintf("message %d->%d tag %d", peer, me, tag), got.Bytes(), msg(peer, me).Bytes())
						}
						first, second := send, recv
						if me > peer {
							first, second = recv, send
						}
						if err := first(); err != nil {
							return err
						}
						if err := second(); err != nil {
							return err
						}
					}
				}
				return nil
			})
		})
	}
}

// TestSendRecvOrderSameTag: several messages with one tag are received in
// the order sent, also when the receives are posted in a batch before any
// send, and messages with other tags in between do not disturb the order.
func TestSendRecvOrderSameTag(t *testing.T) {
	const n = 20
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		if g.Rank() == 0 {
			for i := range n {
				if err := g.Send(ctx, tensor.FromInt64([]int64{int64(i)}), 1, 3); err != nil {
					return err
				}
				if err := g.Send(ctx, tensor.FromInt64([]int64{int64(100 + i)}), 1, 4); err != nil {
					return err
				}
			}
			// Second batch: the receiver posts first.
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			for i := range n {
				if err := g.Send(ctx, tensor.FromInt64([]int64{int64(200 + i)}), 1, 3); err != nil {
					return err
				}
			}
			return nil
		}
		// Tag 4 first: the tag 3 messages wait, in order.
		for i := range n {
			x := tensor.New(tensor.Int64, 1)
			if _, err := g.Recv(ctx, x, 0, 4); err != nil {
				return err
			}
			if x.Int64s()[0] != int64(100+i) {
				return fmt.Errorf("tag 4 message %d is %d", i, x.Int64s()[0])
			}
		}
		for i := range n {
			x := tensor.New(tensor.Int64, 1)
			if _, err := g.Recv(ctx, x, 0, 3); err != nil {
				return err
			}
			if x.Int64s()[0] != int64(i) {
				return fmt.Errorf("tag 3 message %d is %d", i, x.Int64s()[0])
			}
		}
		var ws []*dist.Work
		var xs []*tensor.Tensor
		for range n {
			x := tensor.New(tensor.Int64, 1)
			xs = append(xs, x)
			ws = append(ws, g.IRecv(x, 0, 3))
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		for i, w := range ws {
			if err := w.Wait(ctx); err != nil {
				return err
			}
			if w.Source() != 0 {
				return fmt.Errorf("irecv %d: source %d", i, w.Source())
			}
			if xs[i].Int64s()[0] != int64(200+i) {
				return fmt.Errorf("posted receive %d got message %d", i, xs[i].Int64s()[0])
			}
		}
		return nil
	})
}

// TestIRecvBeforeAndAfterISend posts the receive before the send is
// issued and after the message has arrived.
func TestIRecvBeforeAndAfterISend(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		ctx := context.Background()
		me := g.Rank()
		switch me {
		case 0:
			if err := g.Barrier(ctx); err != nil { // rank 1's receive is posted
				return err
			}
			w := g.ISend(iota32(1, 1000), 1, 1)
			if err := w.Wait(ctx); err != nil {
				return err
			}
			w = g.ISend(iota32(2, 1000), 2, 1)
			if err := w.Wait(ctx); err != nil {
				return err
			}
			return g.Barrier(ctx)
		case 1:
			x := tensor.New(tensor.Float32, 1000)
			w := g.IRecv(x, 0, 1)
			if w.Source() != -1 {
				return fmt.Errorf("source %d before completion", w.Source())
			}
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			if err := w.Wait(ctx); err != nil {
				return err
			}
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			return sameBytes("irecv posted first", x.Bytes(), iota32(1, 1000).Bytes())
		default:
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			if err := g.Barrier(ctx); err != nil { // the message has been sent
				return err
			}
			x := tensor.New(tensor.Float32, 1000)
			w := g.IRecv(x, 0, 1)
			if err := w.Wait(ctx); err != nil {
				return err
			}
			if w.Source() != 0 || w.Err() != nil {
				return fmt.Errorf("source %d err %v", w.Source(), w.Err())
			}
			return sameBytes("irecv posted late", x.Bytes(), iota32(2, 1000).Bytes())
		}
	})
}

// TestRecvAnySource: rank 0 receives one message from every other rank
// with AnySource; the returned source says who sent which.
func TestRecvAnySource(t *testing.T) {
	for _, world := range p2pWorlds {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				if g.Rank() != 0 {
					if err := g.Send(ctx, tensor.FromInt64([]int64{int64(g.Rank()), 7}), 0, 5); err != nil {
						return err
					}
					// The work variant, the other way.
					return g.Send(ctx, tensor.FromInt64([]int64{int64(10 * g.Rank()), 8}), 0, 5)
				}
				seen := map[int]int{}
				for i := range 2 * (world - 1) {
					x := tensor.New(tensor.Int64, 2)
					var src int
					var err error
					if i%2 == 0 {
						src, err = g.Recv(ctx, x, dist.AnySource, 5)
					} else {
						w := g.IRecv(x, dist.AnySource, 5)
						err = w.Wait(ctx)
						src = w.Source()
					}
					if err != nil {
						return err
					}
					if src < 1 || src >= world {
						return fmt.Errorf("any-source receive %d: source %d", i, src)
					}
					want := int64(src)
					if seen[src] == 1 {
						want = int64(10 * src)
					}
					if v := x.Int64s(); v[0] != want {
						return fmt.Errorf("any-source receive from %d: got %v, want %d (message %d from it)", src, v, want, seen[src])
					}
					seen[src]++
				}
				for r := 1; r < world; r++ {
					if seen[r] != 2 {
						return fmt.Errorf("got %d messages from rank %d, want 2", seen[r], r)
					}
				}
				return nil
			})
		})
	}
}

// TestBatchISendIRecvRing: each rank sends to rank+1 and receives from
// rank-1, in one batch, several rounds.
func TestBatchISendIRecvRing(t *testing.T) {
	for _, world := range p2pWorlds {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			disttest.Spawn(t, world, func(g *dist.Group) error {
				ctx := context.Background()
				me := g.Rank()
				next, prev := (me+1)%world, (me+world-1)%world
				for round := range 3 {
					n := []int{1, 1000, 70000}[round]
					out := iota32(float32(1e4*me+round), n)
					in := tensor.New(tensor.Float32, n)
					ops := []dist.P2POp{{Send: true, Tensor: out, Peer: next, Tag: round}, {Tensor: in, Peer: prev, Tag: round}}
					if round == 1 { // receive listed first
						ops[0], ops[1] = ops[1], ops[0]
					}
					ws := g.BatchISendIRecv(ops)
					if len(ws) != 2 {
						return fmt.Errorf("%d works for 2 ops", len(ws))
					}
					for _, w := range ws {
						if err := w.Wait(ctx); err != nil {
							return fmt.Errorf("round %d: %w", round, err)
						}
					}
					if err := sameBytes(fmt.Sprintf("ring round %d from %d", round, prev), in.Bytes(), iota32(float32(1e4*prev+round), n).Bytes()); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// TestSendRecvMismatch: a receive whose element count or dtype differs
// from the send fails (on the receiver at once, and the group fails on
// the sender too), instead of hanging or reading garbage.
func TestSendRecvMismatch(t *testing.T) {
	cases := []struct {
		name       string
		send, recv *tensor.Tensor
	}{
		{"count", tensor.New(tensor.Float32, 10), tensor.New(tensor.Float32, 12)},
		{"dtype same bytes", tensor.New(tensor.Float32, 4), tensor.New(tensor.Int32, 4)},
		{"dtype and size", tensor.New(tensor.Float64, 4), tensor.New(tensor.Float32, 4)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			disttest.SpawnWith(t, 2, disttest.Options{Timeout: 5 * time.Second}, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				if g.Rank() == 0 {
					if err := g.Send(ctx, c.send.Clone(), 1, 0); err != nil {
						return fmt.Errorf("send: %w", err)
					}
					deadline := time.Now().Add(2 * time.Second)
					for g.Err() == nil {
						if time.Now().After(deadline) {
							return errors.New("the sender's group did not fail within 2s of a mismatched receive")
						}
						time.Sleep(5 * time.Millisecond)
					}
					return nil
				}
				return within(2*time.Second, "mismatched recv", func() error {
					_, err := g.Recv(ctx, c.recv.Clone(), 0, 0)
					if err == nil {
						return errors.New("mismatched receive succeeded")
					}
					var de *dist.DesyncError
					if !errors.As(err, &de) {
						return fmt.Errorf("mismatched receive: %v, want a *dist.DesyncError", err)
					}
					return nil
				})
			})
		})
	}
}

// TestSendRecvBadPeer: sends and receives to self, to a negative rank or
// past the group, and with a negative tag are refused before anything is
// sent, and leave the group usable.
func TestSendRecvBadPeer(t *testing.T) {
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		ctx := context.Background()
		x := tensor.New(tensor.Float32, 3)
		me := g.Rank()
		for _, peer := range []int{me, -2, 3, 100} {
			var ie *dist.InputError
			if err := g.Send(ctx, x, peer, 0); !errors.As(err, &ie) {
				return fmt.Errorf("send to %d: %v, want *dist.InputError", peer, err)
			}
			if err := g.ISend(x, peer, 0).Wait(ctx); !errors.As(err, &ie) {
				return fmt.Errorf("isend to %d: %v, want *dist.InputError", peer, err)
			}
			if _, err := g.Recv(ctx, x, peer, 0); !errors.As(err, &ie) {
				return fmt.Errorf("recv from %d: %v, want *dist.InputError", peer, err)
			}
		}
		var ie *dist.InputError
		if err := g.Send(ctx, x, (me+1)%3, -1); !errors.As(err, &ie) {
			return fmt.Errorf("send with tag -1: %v, want *dist.InputError", err)
		}
		if err := g.Send(ctx, nil, (me+1)%3, 0); !errors.As(err, &ie) {
			return fmt.Errorf("send of nil: %v, want *dist.InputError", err)
		}
		if err := g.Send(ctx, tensor.New(tensor.Float32, 2, 3).T(), (me+1)%3, 0); !errors.As(err, &ie) {
			return fmt.Errorf("send of non-contiguous: %v, want *dist.InputError", err)
		}
		ws := g.BatchISendIRecv([]dist.P2POp{{Send: true, Tensor: x, Peer: me}})
		if err := ws[0].Wait(ctx); !errors.As(err, &ie) {
			return fmt.Errorf("batch send to self: %v, want *dist.InputError", err)
		}
		if g.Err() != nil {
			return fmt.Errorf("bad input failed the group: %v", g.Err())
		}
		y := tensor.Full(tensor.Float32, 1, 4)
		if err := g.AllReduce(ctx, y, dist.Sum); err != nil {
			return err
		}
		return expect(y, func(int) float64 { return 3 }, "all_reduce after bad p2p input")
	})
}

// TestSendRecvSingleRank: in a group of one there is no peer.
func TestSendRecvSingleRank(t *testing.T) {
	disttest.Spawn(t, 1, func(g *dist.Group) error {
		var ie *dist.InputError
		if err := g.Send(context.Background(), tensor.New(tensor.Float32, 1), 0, 0); !errors.As(err, &ie) {
			return fmt.Errorf("send to self in a group of 1: %v", err)
		}
		return nil
	})
}

// TestAllToAllSizeMismatch: when a rank expects a different size from a
// peer than the peer sends (all_to_all's fingerprint carries no count),
// every rank fails within 2s, in the call or in the next one, instead of
// the others waiting for the group timeout.
func TestAllToAllSizeMismatch(t *testing.T) {
	for _, world := range []int{2, 3, 5} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			t.Parallel()
			disttest.SpawnWith(t, world, disttest.Options{Timeout: 2500 * time.Millisecond}, func(_ *disttest.Job, g *dist.Group) error {
				ctx := context.Background()
				me := g.Rank()
				ins, outs := make([]*tensor.Tensor, world), make([]*tensor.Tensor, world)
				for d := range world {
					ins[d] = tensor.New(tensor.Float32, 4)
					n := 4
					if me == 0 && d == 1 {
						n = 5 // rank 1 sends 4
					}
					outs[d] = tensor.New(tensor.Float32, n)
				}
				return within(2*time.Second, "all_to_all with a size mismatch", func() error {
					err := g.AllToAll(ctx, outs, ins)
					if err == nil {
						for range 3 {
							if err = g.Barrier(ctx); err != nil {
								break
							}
						}
					}
					if err == nil {
						return errors.New("no error from an all_to_all with mismatched sizes nor from the barriers after it")
					}
					if errors.As(err, new(*dist.TimeoutError)) {
						return fmt.Errorf("only the group timeout caught the mismatch: %v", err)
					}
					return nil
				})
			})
		})
	}
}
