package dist

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/gob"
	"fmt"

	"github.com/godist/godist/tensor"
)

// Object collectives move Go values between members. Values are encoded
// with encoding/gob into their declared type T: only data crosses the
// wire, never code (unlike torch.distributed's pickle-based object
// collectives, which run whatever the bytes say).

// MaxObjectBytes bounds one encoded object.
const MaxObjectBytes = 1 << 30

func encodeObject[T any](v T) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(&v); err != nil {
		return nil, fmt.Errorf("dist: encode %T: %w", v, err)
	}
	if b.Len() > MaxObjectBytes {
		return nil, fmt.Errorf("dist: encoded %T is %d bytes, over the %d limit", v, b.Len(), MaxObjectBytes)
	}
	return b.Bytes(), nil
}

func decodeObject[T any](b []byte, from int) (T, error) {
	var v T
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&v); err != nil {
		return v, fmt.Errorf("dist: decode %T from rank %d: %w (do all ranks run the same program?)", v, from, err)
	}
	return v, nil
}

func lengths(n int) *tensor.Tensor { return tensor.New(tensor.Int64, n) }

// BroadcastObject sets *v on every member to root's *v.
func BroadcastObject[T any](ctx context.Context, g *Group, v *T, root int) error {
	var payload []byte
	n := lengths(1)
	if g.Rank() == root {
		b, err := encodeObject(*v)
		if err != nil {
			return err
		}
		payload = b
		n.Int64s()[0] = int64(len(b))
	}
	if err := g.Broadcast(ctx, n, root); err != nil {
		return err
	}
	size := n.Int64s()[0]
	if size < 0 || size > MaxObjectBytes {
		return fmt.Errorf("dist: broadcast_object: root announced %d bytes", size)
	}
	if g.Rank() != root {
		payload = make([]byte, size)
	}
	if err := g.Broadcast(ctx, tensor.FromUint8(payload), root); err != nil {
		return err
	}
	if g.Rank() != root {
		got, err := decodeObject[T](payload, g.GlobalRank(root))
		if err != nil {
			return err
		}
		*v = got
	}
	return nil
}

// AllGatherObject returns every member's v, in group rank order.
func AllGatherObject[T any](ctx context.Context, g *Group, v T) ([]T, error) {
	b, err := encodeObject(v)
	if err != nil {
		return nil, err
	}
	counts, err := gatherLengths(ctx, g, len(b))
	if err != nil {
		return nil, err
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	buf := make([]byte, total)
	off := 0
	for r := range g.Rank() {
		off += counts[r]
	}
	copy(buf[off:], b)
	c := call{op: opObject, dtype: tensor.Uint8, root: -1}
	err = g.run(ctx, c, func(ctx context.Context, seq uint64) error {
		return g.allGatherBytes(ctx, seq, c, buf, counts)
	})
	if err != nil {
		return nil, err
	}
	out := make([]T, g.Size())
	off = 0
	for r, n := range counts {
		if out[r], err = decodeObject[T](buf[off:off+n], g.GlobalRank(r)); err != nil {
			return nil, err
		}
		off += n
	}
	return out, nil
}

// gatherLengths all-gathers one length per member.
func gatherLengths(ctx context.Context, g *Group, n int) ([]int, error) {
	all := lengths(g.Size())
	mine := lengths(1)
	mine.Int64s()[0] = int64(n)
	if err := g.AllGatherIntoTensor(ctx, all, mine); err != nil {
		return nil, err
	}
	out := make([]int, g.Size())
	for i, v := range all.Int64s() {
		if v < 0 || v > MaxObjectBytes {
			return nil, fmt.Errorf("dist: rank %d announced an object of %d bytes", g.GlobalRank(i), v)
		}
		out[i] = int(v)
	}
	return out, nil
}

// GatherObject returns, on root, every member's v in group rank order; on
// the other members it returns nil.
func GatherObject[T any](ctx context.Context, g *Group, v T, root int) ([]T, error) {
	all, err := AllGatherObject(ctx, g, v) // small objects: one all-gather is simplest and as fast
	if err != nil || g.Rank() != root {
		return nil, err
	}
	return all, nil
}

// ScatterObject gives member r root's vs[r]; vs is ignored elsewhere.
func ScatterObject[T any](ctx context.Context, g *Group, vs []T, root int) (T, error) {
	var zero T
	if g.Rank() == root && len(vs) != g.Size() {
		return zero, &InputError{"scatter_object", fmt.Sprintf("%d objects for a group of %d", len(vs), g.Size())}
	}
	sizes := lengths(g.Size())
	var enc [][]byte
	if g.Rank() == root {
		for i, v := range vs {
			b, err := encodeObject(v)
			if err != nil {
				return zero, err
			}
			enc = append(enc, b)
			sizes.Int64s()[i] = int64(len(b))
		}
	}
	if err := g.Broadcast(ctx, sizes, root); err != nil {
		return zero, err
	}
	mySize := sizes.Int64s()[g.Rank()]
	// Every slot padded to the largest, so Scatter's equal sizes hold:
	// every announced size is checked before the largest is allocated.
	var most int64
	for r, s := range sizes.Int64s() {
		if s < 0 || s > MaxObjectBytes {
			return zero, fmt.Errorf("dist: scatter_object: root (rank %d) announced %d bytes for member %d, over the %d limit", g.GlobalRank(root), s, r, MaxObjectBytes)
		}
		most = max(most, s)
	}
	out := tensor.New(tensor.Uint8, int(most))
	var ins []*tensor.Tensor
	if g.Rank() == root {
		for _, b := range enc {
			p := make([]byte, most)
			copy(p, b)
			ins = append(ins, tensor.FromUint8(p))
		}
	}
	if err := g.Scatter(ctx, out, ins, root); err != nil {
		return zero, err
	}
	return decodeObject[T](out.Uint8s()[:mySize], g.GlobalRank(root))
}

var _ = binary.LittleEndian
