package wire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/godist/godist/tensor"
)

type inner struct {
	Name  string
	Score float64
	Tags  map[string]int
}

type rich struct {
	B      bool
	I      int
	I8     int8
	U16    uint16
	F32    float32
	F64    float64
	S      string
	Bytes  []byte
	Floats []float32
	Ints   []int
	Arr    [3]int16
	Inner  inner
	Ptr    *inner
	Nil    *inner
	Many   []inner
	T      *tensor.Tensor
	Ts     []*tensor.Tensor
	NoT    *tensor.Tensor
	When   time.Time
	M      map[int][]string
	NilMap map[string]int
	hidden int
}

// body joins parts into one 8-byte aligned buffer, as the transport
// delivers a message.
func body(parts [][]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	w := make([]uint64, (n+7)/8+1)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
	off := 0
	for _, p := range parts {
		off += copy(b[off:], p)
	}
	return b
}

func roundTrip[T any](t *testing.T, v T) (T, []byte) {
	t.Helper()
	var e Encoder
	if err := e.Encode(v); err != nil {
		t.Fatalf("encode %T: %v", v, err)
	}
	b := body(e.Parts())
	if len(b)%8 != 0 {
		t.Fatalf("body of %d bytes is not padded to 8", len(b))
	}
	d, err := NewDecoder(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := d.Decode(&out); err != nil {
		t.Fatalf("decode %T: %v", v, err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	return out, b
}

func TestRoundTrip(t *testing.T) {
	tt := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	odd := tensor.FromUint8([]uint8{1, 2, 3}, 3)
	in := rich{
		B: true, I: -1 << 40, I8: -7, U16: 65535, F32: float32(math.Pi), F64: math.Inf(-1),
		S: "héllo", Bytes: []byte{0, 1, 2}, Floats: []float32{1.5, -2}, Ints: []int{3, -4},
		Arr:   [3]int16{1, -2, 3},
		Inner: inner{"a", 1.25, map[string]int{"x": 1}},
		Ptr:   &inner{Name: "p"},
		Many:  []inner{{Name: "m1"}, {Name: "m2", Tags: map[string]int{}}},
		T:     tt, Ts: []*tensor.Tensor{odd, tensor.FromFloat64([]float64{7}, 1)},
		When:   time.Date(2026, 11, 25, 13, 0, 0, 5, time.UTC),
		M:      map[int][]string{1: {"a"}, 2: nil},
		hidden: 9,
	}
	out, b := roundTrip(t, in)
	if out.hidden != 0 {
		t.Errorf("unexported field travelled: %d", out.hidden)
	}
	in.hidden = 0
	if !reflect.DeepEqual(out.Inner, in.Inner) || !reflect.DeepEqual(out.Many, in.Many) || !reflect.DeepEqual(out.M, in.M) || out.NilMap != nil || out.Nil != nil || out.NoT != nil {
		t.Errorf("containers differ:\n got %+v\nwant %+v", out, in)
	}
	if out.B != in.B || out.I != in.I || out.I8 != in.I8 || out.U16 != in.U16 || out.F32 != in.F32 || out.F64 != in.F64 || out.S != in.S || !bytes.Equal(out.Bytes, in.Bytes) || !reflect.DeepEqual(out.Floats, in.Floats) || !reflect.DeepEqual(out.Ints, in.Ints) || out.Arr != in.Arr || !reflect.DeepEqual(*out.Ptr, *in.Ptr) || !out.When.Equal(in.When) {
		t.Errorf("scalars differ:\n got %+v\nwant %+v", out, in)
	}
	if out.Many[0].Tags != nil || out.Many[1].Tags == nil {
		t.Errorf("nil and empty maps not told apart: %v %v", out.Many[0].Tags, out.Many[1].Tags)
	}
	if !reflect.DeepEqual(out.T.Shape(), []int{2, 3}) || !reflect.DeepEqual(out.T.Float32s(), tt.Float32s()) {
		t.Errorf("tensor: got %v %v", out.T.Shape(), out.T.Float32s())
	}
	// The tensor's elements are used where they arrived.
	data := out.T.Bytes()
	start := uintptr(unsafe.Pointer(&b[0]))
	if p := uintptr(unsafe.Pointer(&data[0])); p < start || p >= start+uintptr(len(b)) {
		t.Errorf("received tensor was copied out of the message")
	}
	if out.Ts[0].DType() != tensor.Uint8 || !bytes.Equal(out.Ts[0].Bytes(), []byte{1, 2, 3}) || out.Ts[1].Float64s()[0] != 7 {
		t.Errorf("tensor list: %v", out.Ts)
	}
}

func TestSendsTensorMemory(t *testing.T) {
	tt := tensor.FromFloat32(make([]float32, 1000), 1000)
	var e Encoder
	if err := e.Encode(struct{ T *tensor.Tensor }{tt}); err != nil {
		t.Fatal(err)
	}
	parts := e.Parts()
	if len(parts) != 2 || &parts[1][0] != &tt.Bytes()[0] {
		t.Fatalf("the tensor's memory is not a part of its own (%d parts)", len(parts))
	}
}

type point struct{ X, Y float64 }
type other struct{ X, Y float64 }
type renamed struct{ A, Y float64 }

func TestFingerprint(t *testing.T) {
	fp := func(v any) uint64 {
		f, err := Fingerprint(reflect.TypeOf(v))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if fp(point{}) != fp(other{}) {
		t.Error("types of the same structure have different fingerprints")
	}
	if fp(point{}) == fp(renamed{}) {
		t.Error("a renamed field kept the fingerprint")
	}
	if fp(int64(0)) != fp(0) || fp(int32(0)) == fp(int64(0)) || fp([]float32{}) == fp([]float64{}) {
		t.Error("integer or slice fingerprints do not follow their sizes")
	}
}

type node struct {
	V    int
	Next *node
}

func TestRecursive(t *testing.T) {
	in := &node{1, &node{2, &node{3, nil}}}
	out, _ := roundTrip(t, in)
	if out.Next.Next.V != 3 || out.Next.Next.Next != nil {
		t.Fatalf("list: %+v", out)
	}
	// Deeper than MaxDepth is refused, not followed.
	deep := &node{}
	for range MaxDepth + 5 {
		deep = &node{Next: deep}
	}
	var e Encoder
	if err := e.Encode(deep); err != nil {
		t.Fatal(err)
	}
	d, _ := NewDecoder(body(e.Parts()), nil)
	var got *node
	if err := d.Decode(&got); !errors.Is(err, ErrMalformed) {
		t.Fatalf("decoding a list %d deep: %v", MaxDepth+5, err)
	}
}

func TestNotEncodable(t *testing.T) {
	for _, v := range []any{
		struct{ F func() }{},
		struct{ C chan int }{},
		struct{ I any }{},
		[]error{},
		struct{ M sync.Mutex }{}, // only unexported fields: it would travel empty
	} {
		if err := Check(reflect.TypeOf(v)); err == nil {
			t.Errorf("%T: no error", v)
		}
	}
}

func TestHostileLengths(t *testing.T) {
	cases := map[string][]byte{
		"short":         {1, 0},
		"meta too long": {200, 0, 0, 0, 1},
		// a []inner claiming 2^62 elements
		"huge slice": append([]byte{10, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f, 0),
	}
	for name, b := range cases {
		d, err := NewDecoder(b, nil)
		if err != nil {
			continue
		}
		var v []inner
		if err := d.Decode(&v); err == nil {
			t.Errorf("%s: decoded %d elements", name, len(v))
		}
	}
	// A tensor claiming more elements than the data holds.
	var e Encoder
	e.Encode(struct{ T *tensor.Tensor }{tensor.FromFloat32([]float32{1, 2}, 2)})
	b := body(e.Parts())
	b[4+2] = 100 // its one dimension
	d, _ := NewDecoder(b, nil)
	var v struct{ T *tensor.Tensor }
	if err := d.Decode(&v); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversized tensor: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	var e Encoder
	e.Encode(rich{S: "x", Floats: []float32{1}, T: tensor.FromFloat32([]float32{1, 2}, 2), Ts: []*tensor.Tensor{tensor.FromInt64([]int64{3}, 1)}, M: map[int][]string{1: {"a"}}})
	f.Add(body(e.Parts()))
	e.Reset()
	e.Encode(&node{1, &node{2, nil}})
	f.Add(body(e.Parts()))
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		b = body([][]byte{b})
		if d, err := NewDecoder(b, nil); err == nil {
			var v rich
			_ = d.Decode(&v)
		}
		if d, err := NewDecoder(b, nil); err == nil {
			var v *node
			_ = d.Decode(&v)
		}
		if d, err := NewDecoder(b, nil); err == nil {
			var v map[string][]*tensor.Tensor
			_ = d.Decode(&v)
		}
	})
}

// TestTightContainers: a slice or map whose elements fill the rest of the
// body exactly decodes (the room check once counted the nil marker as an
// element).
func TestTightContainers(t *testing.T) {
	if out, _ := roundTrip(t, []int{0, 2}); !reflect.DeepEqual(out, []int{0, 2}) {
		t.Errorf("[]int: %v", out)
	}
	if out, _ := roundTrip(t, []bool{true, false, true}); !reflect.DeepEqual(out, []bool{true, false, true}) {
		t.Errorf("[]bool: %v", out)
	}
	if out, _ := roundTrip(t, map[int8]bool{1: true}); !reflect.DeepEqual(out, map[int8]bool{1: true}) {
		t.Errorf("map: %v", out)
	}
}
